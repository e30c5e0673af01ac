"""reflect: summarise the agent's recent memory into ``state/reflect/summary.md``.

Called through ``entrypoint(argv, ctx)`` in-process (a plain script would cost a process
per call); run as ``__main__`` it works as a plain script too, and then asks
``agentsim.skills.context.current_context()`` which agent's workspace it serves.

Usage: ``reflect.py [--last N]`` (default 50 entries of ``memory.jsonl``).

Memory lines are JSON objects; the fields read are all optional, so older or richer formats
still summarise: ``kind`` (or ``type``), ``tick``, ``time``, ``text``, ``place``, ``action``,
``tool``, ``args``, ``opinion``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from agentsim.skills.context import current_context

DEFAULT_LAST = 50
_POSITION_RE = re.compile(r"position: (?!in transit)([\w.-]+)")


def parse_last(argv: list[str]) -> int:
    if "--last" not in argv:
        return DEFAULT_LAST
    i = argv.index("--last")
    value = argv[i + 1] if i + 1 < len(argv) else ""
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"reflect: --last needs a positive whole number; got {value!r}")
    return int(value)


def read_memory(path: Path, last: int) -> list[dict[str, Any]]:
    """The last ``last`` readable entries, oldest first."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    entries: list[dict[str, Any]] = []
    for line in reversed(lines):
        if len(entries) == last:
            break
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a torn last line (crash mid-write) must not stop the reflection
        if isinstance(entry, dict):
            entries.append(entry)
    return entries[::-1]


def _places(entry: dict[str, Any]) -> list[str]:
    found = []
    if isinstance(entry.get("place"), str):
        found.append(entry["place"])
    args = entry.get("args")
    if entry.get("action") == "move_to" and isinstance(args, dict):
        place = args.get("place")
        if isinstance(place, str):
            found.append(place)
    found += _POSITION_RE.findall(str(entry.get("text", "")))
    return found


def _opinion(entry: dict[str, Any]) -> float | None:
    value = entry.get("opinion")
    args = entry.get("args")
    if value is None and entry.get("action") == "set_opinion" and isinstance(args, dict):
        value = args.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def summarise(entries: list[dict[str, Any]], agent_id: str) -> str:
    kinds = Counter(str(e.get("kind", e.get("type", "note"))) for e in entries)
    visits: list[str] = []
    for e in entries:
        for place in _places(e):
            if not visits or visits[-1] != place:
                visits.append(place)
    posts = [
        e
        for e in entries
        if e.get("kind") == "post" or (e.get("action") == "post" and e.get("module") != "city")
    ]
    opinions = [v for e in entries if (v := _opinion(e)) is not None]
    ticks = [e["tick"] for e in entries if isinstance(e.get("tick"), int)]
    span = f"ticks {min(ticks)}-{max(ticks)}" if ticks else "no ticks recorded"
    lines = [f"# Reflection of {agent_id}", "", f"Last {len(entries)} memory entries ({span})."]
    if not entries:
        lines.append("Nothing remembered yet.")
        return "\n".join(lines)
    lines.append("Kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    lines.append("Places visited: " + (" -> ".join(visits) if visits else "none"))
    lines.append(f"Posts made: {len(posts)}")
    if len(opinions) >= 2:
        delta = opinions[-1] - opinions[0]
        trend = "rising" if delta > 0.01 else "falling" if delta < -0.01 else "steady"
        lines.append(f"Opinion: {opinions[0]:+.2f} -> {opinions[-1]:+.2f} ({trend})")
    elif opinions:
        lines.append(f"Opinion: {opinions[0]:+.2f} (one reading)")
    else:
        lines.append("Opinion: no readings")
    return "\n".join(lines)


def entrypoint(argv: list[str], ctx: Any) -> str:
    return main(argv, ctx)


def main(argv: list[str], ctx: Any = None) -> str:
    ctx = ctx if ctx is not None else current_context()
    entries = read_memory(ctx.workspace_root / "memory.jsonl", parse_last(argv))
    text = summarise(entries, ctx.agent_id)
    out = ctx.workspace_root / "state" / "reflect" / "summary.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".summary.md.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, out)
    return text


if __name__ == "__main__":
    print(main(sys.argv[1:]))
