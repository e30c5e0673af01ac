"""diary: a first-person diary, one Markdown file per simulated day.

Files: ``<workspace>/state/diary/<YYYY-MM-DD>.md``. Entries are appended with the simulated
time and tick; nothing is ever rewritten, so a diary is also a trustworthy log for
interviews and reports.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from typing import Protocol

_MAX_TEXT = 1000


class _Ctx(Protocol):
    @property
    def workspace_root(self) -> Path: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def tick(self) -> int: ...
    @property
    def time(self) -> datetime: ...


def _dir(ctx: _Ctx) -> Path:
    return ctx.workspace_root / "state" / "diary"


def _write(argv: list[str], ctx: _Ctx) -> str:
    if "--json" in argv[:-1]:
        raw = argv[argv.index("--json") + 1]
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"diary write: --json is not valid JSON ({exc})") from None
        text = obj.get("text") if isinstance(obj, dict) else None
    else:
        text = " ".join(argv)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(
            "diary write: nothing to write; pass the entry as words or --json '{\"text\": ...}'"
        )
    text = " ".join(text.split())
    if len(text) > _MAX_TEXT:
        raise ValueError(
            f"diary write: the entry has {len(text)} characters; keep it under {_MAX_TEXT}"
        )
    path = _dir(ctx) / f"{ctx.time.date().isoformat()}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", encoding="utf-8") as f:
        if new:
            f.write(f"# Diary of {ctx.agent_id}, {ctx.time.date().isoformat()}\n\n")
        f.write(f"- {ctx.time.strftime('%H:%M')} (tick {ctx.tick}): {text}\n")
    return f"Diary entry saved for {ctx.time.date().isoformat()} {ctx.time.strftime('%H:%M')}."


def _read(argv: list[str], ctx: _Ctx) -> str:
    day = ctx.time.date()
    if "--date" in argv:
        i = argv.index("--date")
        value = argv[i + 1] if i + 1 < len(argv) else ""
        try:
            day = date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"diary read: --date needs YYYY-MM-DD; got {value!r}") from None
    path = _dir(ctx) / f"{day.isoformat()}.md"
    if not path.exists():
        days = sorted(p.stem for p in _dir(ctx).glob("*.md"))
        known = f"; days with entries: {', '.join(days)}" if days else ""
        return f"No diary entries for {day.isoformat()}{known}."
    return path.read_text(encoding="utf-8").rstrip("\n")


def entrypoint(argv: list[str], ctx: _Ctx) -> str:
    """Commands: ``write TEXT...`` | ``write --json '{"text": ...}'`` | ``read [--date D]``."""
    command, rest = (argv[0], list(argv[1:])) if argv else ("", [])
    if command == "write":
        return _write(rest, ctx)
    if command == "read":
        return _read(rest, ctx)
    raise ValueError(f"diary: unknown command {command!r}; use write or read")
