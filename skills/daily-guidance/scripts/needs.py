"""Energy, hunger and social needs: a pure function of the day's plan and the clock.

Nothing is stored: needs are integrated from the wake hour over the plan's segments, so a
resumed run and an uninterrupted one agree and a hook call writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from .common import DAY_END, category, home, hours, is_meal, minute_of, minutes

_SOCIAL_PLACES = frozenset({"cafe", "restaurant", "park", "gym", "bar"})
_MORNING = {"energy": 0.9, "hunger": 0.3, "social": 0.6}
Rates = tuple[float, float, float]
Stretch = tuple[int, int, Rates]


def rates(activity: str, place_category: str) -> Rates:
    """Per-hour change of (energy, hunger, social) while doing ``activity`` at a place of
    ``place_category``: everything decays while awake and matching activities restore it."""
    act = activity.lower()
    if act == "sleep":
        return 0.15, 0.02, 0.0
    energy, hunger, social = -0.06, 0.1, -0.04
    if is_meal(act):
        hunger = -1.5
    if place_category == "home":
        energy += 0.04
    if place_category in _SOCIAL_PLACES:
        social = 0.25
    elif act in {"work", "school"}:
        social = 0.03
    return energy, hunger, social


def _stretches(story: dict[str, Any] | None, profile: dict[str, Any]) -> Iterator[Stretch]:
    """The plan as (start, end, rates) in minutes, gaps filled with free time at home.
    Lazily: ``needs_at`` stops at the current time, usually well before the day ends."""
    free = rates("free time", "home")
    categories: dict[str, str] = {}  # a plan names few places, most of them several times
    t = 0
    for seg in story["segments"] if story else ():
        start, end = minutes(seg["start"]), minutes(seg["end"])
        if start is None or end is None or end <= t:
            continue
        if start > t:
            yield t, start, free
        place = seg["place"]
        if place not in categories:
            categories[place] = category(place, profile)
        yield max(t, start), end, rates(seg["activity"], categories[place])
        t = end
    if t < DAY_END:
        yield t, DAY_END, rates("free time", category(home(profile), profile))


def needs_at(
    story: dict[str, Any] | None, now: datetime, profile: dict[str, Any]
) -> dict[str, float]:
    """Needs at ``now``: the morning values at the wake hour, then each planned segment's
    rates, clamped to [0, 1] after every stretch."""
    e, h, s = _MORNING["energy"], _MORNING["hunger"], _MORNING["social"]
    minute = minute_of(now)
    wake = min(hours(profile.get("wake_hour"), 7.0), DAY_END)
    for start, end, (re_, rh, rs) in _stretches(story, profile):
        lo, hi = max(start, wake), min(end, minute)
        if hi <= lo:
            if start >= minute:
                break
            continue
        span = (hi - lo) / 60
        e = min(max(e + re_ * span, 0.0), 1.0)
        h = min(max(h + rh * span, 0.0), 1.0)
        s = min(max(s + rs * span, 0.0), 1.0)
    return {"energy": round(e, 3), "hunger": round(h, 3), "social": round(s, 3)}


def needs_line(needs: dict[str, float]) -> str:
    return ", ".join(f"{k} {float(needs[k]):.2f}" for k in ("energy", "hunger", "social"))
