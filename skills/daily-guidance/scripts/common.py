"""Clock times, the agent's profile and its places: helpers every part of the skill uses."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

DAY_END = 24 * 60
MEALS = frozenset({"breakfast", "brunch", "lunch", "dinner", "meal", "snack"})
_TIME_RE = re.compile(r"^([01]\d|2[0-4]):([0-5]\d)$")


class Ctx(Protocol):
    """The part of ``SkillScriptContext`` this skill uses (tests may pass their own)."""

    @property
    def workspace_root(self) -> Path: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def skill_id(self) -> str: ...
    @property
    def time(self) -> datetime: ...


def hm(minutes: int) -> str:
    """Minutes since midnight as ``HH:MM``."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def minutes(text: object) -> int | None:
    """``HH:MM`` (00:00..24:00) as minutes since midnight; None if it is not one."""
    m = _TIME_RE.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    value = int(m.group(1)) * 60 + int(m.group(2))
    return value if value <= DAY_END else None


def minute_of(now: datetime) -> int:
    return now.hour * 60 + now.minute


def hours(value: object, default: float) -> int:
    """A profile's hour field (e.g. ``wake_hour: 6.5``) in minutes, or ``default`` hours."""
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else default
    return round(float(number) * 60)


def load_profile(ctx: Ctx) -> dict[str, Any]:
    """The agent's ``profile.json``; an empty profile when it is missing or not an object."""
    try:
        value = json.loads((ctx.workspace_root / "profile.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def home(profile: dict[str, Any]) -> str:
    place = profile.get("home")
    return place if isinstance(place, str) and place else "home"


def favourites(profile: dict[str, Any]) -> dict[str, str]:
    """Place category -> the agent's favourite place of it (``{"cafe": "cafe-1"}``)."""
    fav = profile.get("favourites")
    if not isinstance(fav, dict):
        return {}
    return {k: v for k, v in fav.items() if isinstance(v, str) and v}


def category(place: str, profile: dict[str, Any]) -> str:
    """``home``, a favourite's category, or the place id's letters (``cafe-3`` -> cafe)."""
    if place == home(profile):
        return "home"
    for cat, fav in favourites(profile).items():
        if fav == place:
            return cat
    m = re.match(r"[a-z]+", place.lower())
    return m.group(0) if m else ""


def is_meal(activity: str) -> bool:
    return any(w in MEALS for w in activity.lower().replace("-", " ").split())


def suggest(tool: str, args: dict[str, Any]) -> str:
    """A ``SUGGESTED:`` line: a complete tool call the model can make as it is."""
    return f"SUGGESTED: {tool} {json.dumps(args)}"


def move_to(place: str) -> str:
    return suggest("ask_env", {"module": "city", "action": "move_to", "args": {"place": place}})
