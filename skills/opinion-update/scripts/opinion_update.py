"""opinion-update: a bounded-confidence opinion update from the posts of a social feed.

The agent's opinion (a number in [-1, 1]) moves toward the mean stance of the posts whose
stance lies within ``bound`` of it, by ``rate`` of the gap (Deffuant / Hegselmann-Krause
style): close views persuade, distant ones are ignored. State lives in
``<workspace>/state/opinion_update/opinion.json``; it starts from profile.json's ``opinion``.

Retrying a call within the same tick gives the same answer (the skill declares
``idempotent: true``): the update of a tick always starts from the opinion held before it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

_STATE = "opinion_update"
DEFAULT_BOUND = 0.6
DEFAULT_RATE = 0.3
DEFAULT_TOPIC = "the new city park"
# Post templates by stance bucket: strongly against .. strongly for. {topic} is filled in.
_TEMPLATES = (
    ("I really think {topic} is a mistake.", "Honestly, {topic} worries me more every day."),
    ("I'm not convinced about {topic}.", "I have my doubts about {topic}."),
    ("Still making up my mind about {topic}.", "{topic}: I can see both sides."),
    ("{topic} is growing on me.", "I'm starting to like the idea of {topic}."),
    ("{topic} is great news for all of us!", "I'm all for {topic}, it's a good thing."),
)


class _Ctx(Protocol):
    @property
    def workspace_root(self) -> Path: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def tick(self) -> int: ...
    @property
    def time(self) -> datetime: ...


def _flag(argv: list[str], name: str, default: float, low: float, high: float) -> float:
    if name not in argv:
        return default
    i = argv.index(name)
    try:
        value = float(argv[i + 1])
    except (IndexError, ValueError):
        value = math.nan
    if not low <= value <= high:
        raise ValueError(
            f"opinion-update: {name} needs a number in [{low}, {high}]; got "
            f"{argv[i + 1] if i + 1 < len(argv) else 'nothing'!r}"
        )
    return value


def _posts(argv: list[str]) -> tuple[list[dict[str, Any]], str]:
    """The posts and topic of the feed passed after ``--json`` (or as the first JSON arg)."""
    text = argv[argv.index("--json") + 1] if "--json" in argv[:-1] else None
    if text is None:
        text = next((a for a in argv if a[:1] in "{["), None)
    if text is None:
        raise ValueError(
            "opinion-update: missing the feed; pass --json '<the result of ask_env social feed>'"
        )
    try:
        feed = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"opinion-update: the feed is not valid JSON ({exc})") from None
    topic = ""
    if isinstance(feed, dict):
        topic = str(feed.get("topic", ""))
        feed = feed.get("feed", feed)
        if isinstance(feed, dict):
            topic = topic or str(feed.get("topic", ""))
            feed = feed.get("posts")
    if not isinstance(feed, list) or not all(isinstance(p, dict) for p in feed):
        raise ValueError(
            'opinion-update: the feed must be {"posts": [{"author", "text", "stance"?}, ...]} '
            '(or {"feed": {"posts": [...]}}); got no posts list'
        )
    return feed, topic


def _stance(post: dict[str, Any]) -> float | None:
    value = post.get("stance")
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return min(max(float(value), -1.0), 1.0)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return value if isinstance(value, dict) else {}


def _initial(ctx: _Ctx) -> float:
    value = _read_json(ctx.workspace_root / "profile.json").get("opinion", 0.0)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return min(max(float(value), -1.0), 1.0) if ok else 0.0


def _digest(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big")


def _post_text(value: float, topic: str, agent_id: str, tick: int) -> str:
    bucket = min(int((value + 1.0) / 2.0 * len(_TEMPLATES)), len(_TEMPLATES) - 1)
    options = _TEMPLATES[bucket]
    text = options[_digest(agent_id, tick, "text") % len(options)].format(topic=topic)
    return text[0].upper() + text[1:]


def entrypoint(argv: list[str], ctx: _Ctx) -> str:
    """argv: ``--json FEED [--bound B] [--rate R]``; returns the update and suggestions."""
    argv = list(argv)
    bound = _flag(argv, "--bound", DEFAULT_BOUND, 0.0, 2.0)
    rate = _flag(argv, "--rate", DEFAULT_RATE, 0.0, 1.0)
    posts, topic = _posts(argv)
    path = ctx.workspace_root / "state" / _STATE / "opinion.json"
    state = _read_json(path)
    if not state:
        old = _initial(ctx)
    elif state.get("tick") == ctx.tick:
        old = float(state["base"])  # a retry in the same tick: start from the same opinion
    else:
        old = float(state["value"])
    near = [
        s
        for p in posts
        if str(p.get("author", "")) != ctx.agent_id
        and (s := _stance(p)) is not None
        and abs(s - old) <= bound
    ]
    new = old + rate * (sum(near) / len(near) - old) if near else old
    new = round(min(max(new, -1.0), 1.0), 4)
    updates = int(state.get("updates", 0)) + (0 if state.get("tick") == ctx.tick else 1)
    record = {"value": new, "base": old, "tick": ctx.tick, "updates": updates}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".opinion.json.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)
    lines = [json.dumps({"old": old, "new": new, "considered": len(near)})]
    if new != old:
        args = {"module": "social", "action": "set_opinion", "args": {"value": new}}
        lines.append(f"SUGGESTED: ask_env {json.dumps(args)}")
    # About every third step, deterministically per agent and tick, share the view.
    if _digest(ctx.agent_id, ctx.tick) % 3 == 0:
        text = _post_text(new, topic or DEFAULT_TOPIC, ctx.agent_id, ctx.tick)
        args = {"module": "social", "action": "post", "args": {"text": text, "stance": new}}
        lines.append(f"SUGGESTED: ask_env {json.dumps(args)}")
    return "\n".join(lines)
