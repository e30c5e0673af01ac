"""Checking a plan and keeping it on disk (``state/<namespace>/<name>/<date>/story.yaml``)."""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from .common import Ctx, hm, minutes

SEGMENT_KEYS = ("start", "end", "activity", "place")
# libyaml's loader and emitter when PyYAML has them: hooks read the plan every step of
# every agent, and the pure-Python emitter costs about 1 ms per saved plan. Both produce the
# same documents as ``yaml.safe_load`` / ``yaml.safe_dump``.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def check_segment(seg: object, label: str, problems: list[str]) -> dict[str, str] | None:
    """The segment with its strings stripped, or None with ``problems`` extended."""
    if not isinstance(seg, dict):
        problems.append(f"{label}: must be an object with keys {', '.join(SEGMENT_KEYS)}")
        return None
    extra = sorted(set(seg) - set(SEGMENT_KEYS))
    if extra:
        problems.append(f"{label}: unknown keys {extra}; allowed: {', '.join(SEGMENT_KEYS)}")
    start, end = minutes(seg.get("start")), minutes(seg.get("end"))
    ok = True
    for key, value in (("start", start), ("end", end)):
        if value is None:
            problems.append(f"{label}: {key} {seg.get(key)!r} is not a time HH:MM in 00:00..24:00")
            ok = False
    if start is not None and end is not None and end <= start:
        problems.append(f"{label}: end {hm(end)} must be after start {hm(start)}")
        ok = False
    for key in ("activity", "place"):
        value = seg.get(key)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"{label}: {key} must be a non-empty string")
            ok = False
    if not ok or extra:
        return None
    return {k: str(seg[k]).strip() for k in SEGMENT_KEYS}


def _is_date(text: object) -> bool:
    if not (isinstance(text, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", text)):
        return False
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def check_plan(obj: object) -> tuple[dict[str, Any], list[str]]:
    """The checked plan and every problem found (empty when it is valid)."""
    if not isinstance(obj, dict):
        return {}, ["the plan must be a JSON object with keys date and segments"]
    problems: list[str] = []
    day = obj.get("date")
    if not _is_date(day):
        problems.append(f"date {day!r} is not a date YYYY-MM-DD")
    raw = obj.get("segments")
    if not isinstance(raw, list) or not raw:
        problems.append("segments must be a non-empty list of {start, end, activity, place}")
        raw = []
    segments = []
    for i, seg in enumerate(raw):
        checked = check_segment(seg, f"segment {i + 1}", problems)
        if checked is not None:
            segments.append(checked)
    for prev, seg in itertools.pairwise(segments):
        if seg["start"] < prev["end"]:
            problems.append(
                f"segment {seg['start']}-{seg['end']} starts before the previous one "
                f"({prev['start']}-{prev['end']}) ends; segments must be sorted and not overlap"
            )
    return {"date": day, "segments": segments}, problems


def rejected(what: str, problems: list[str]) -> ValueError:
    return ValueError(
        f"{what} rejected: {'; '.join(problems)}. Fix the plan and submit it again "
        "(`draft` prints a valid one)"
    )


def json_arg(argv: list[str], command: str, shape: str) -> Any:
    """The JSON value after ``--json`` in ``argv``."""
    if "--json" not in argv or argv.index("--json") + 1 >= len(argv):
        raise ValueError(f"daily-guidance {command}: missing --json '{shape}'; pass it as one arg")
    text = argv[argv.index("--json") + 1]
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"daily-guidance {command}: --json is not valid JSON ({exc})") from None


def story_path(ctx: Ctx, day: date) -> Path:
    """Under the skill's own id (``state/built-in/daily-guidance/...``): a skill of the same
    name in another namespace keeps its files apart."""
    namespace, _, name = ctx.skill_id.rpartition("@")
    folder = ctx.workspace_root / "state" / namespace.replace(":", "-") / name
    return folder / day.isoformat() / "story.yaml"


# Hooks read the story at every step of every agent, and parsing YAML (~200 us even with
# the C loader) would dominate their cost; JSON parses ~30x faster. So each story read is
# kept as JSON text, keyed by the file's path and stamp (inode, mtime, size: a saved story
# is a new file, so a new key). ``functools.lru_cache`` bounds it (a long run of many agents
# cannot grow it forever) and is safe to call from the host's worker threads, where hooks
# of different agents run at once. Every caller gets a fresh copy it may change.


def load_story(ctx: Ctx, day: date) -> dict[str, Any] | None:
    """The saved story of ``day``; None when there is none (or it is unreadable: the agent
    is then asked for a new plan, which replaces it)."""
    path = str(story_path(ctx, day))
    try:
        st = os.stat(path)
    except OSError:
        return None
    story = json.loads(_story_json(path, st.st_ino, st.st_mtime_ns, st.st_size))
    return story if isinstance(story, dict) and story.get("segments") else None


@functools.lru_cache(maxsize=65_536)
def _story_json(path: str, ino: int, mtime_ns: int, size: int) -> str:
    """The story at ``path`` as JSON text, ``null`` when it cannot be read (the stamp is
    only the cache's key)."""
    try:
        with open(path, encoding="utf-8") as f:
            story = yaml.load(f.read(), Loader=_Loader)
    except (OSError, ValueError, yaml.YAMLError):
        story = None
    return json.dumps(story, default=str)


def save_story(ctx: Ctx, story: dict[str, Any]) -> None:
    """Write the story atomically: a reader (or a crash) never sees half a file."""
    path = story_path(ctx, date.fromisoformat(story["date"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.dump(story, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".story-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
