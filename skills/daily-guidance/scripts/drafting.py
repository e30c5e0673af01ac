"""Drafting a day plan from the agent's profile: deterministic per agent and date."""

from __future__ import annotations

import hashlib
import random
from datetime import date
from typing import Any

from .common import DAY_END, favourites, hm, home, hours, is_meal

_VERB = {
    "park": "walk",
    "gym": "workout",
    "shop": "shopping",
    "cafe": "coffee",
    "restaurant": "dinner out",
}
# Interests that point at a kind of place; anything else falls back to a substring match on
# the category names ("cafes" -> cafe) and then to a random favourite.
_INTEREST_PLACES = {
    word: cat
    for cat, words in (
        ("park", "running jogging walking hiking nature dogs cycling"),
        ("gym", "fitness sport sports yoga swimming"),
        ("cafe", "coffee reading books chess art music"),
        ("shop", "shopping fashion cooking"),
        ("restaurant", "food dining friends wine"),
    )
    for word in words.split()
}


class _Day:
    """Builds contiguous segments from midnight; a segment that would end before the cursor
    is dropped, so that odd profiles (late work, early bedtime) still give a valid plan."""

    def __init__(self) -> None:
        self.t = 0
        self.segments: list[dict[str, str]] = []

    def add(self, end: int, activity: str, place: str) -> None:
        end = min(end, DAY_END)
        if end > self.t:
            seg = {"start": hm(self.t), "end": hm(end), "activity": activity, "place": place}
            self.segments.append(seg)
            self.t = end


def _rng(agent_id: str, day: date) -> random.Random:
    # A stable hash (never hash()): the same agent drafts the same day in every run.
    digest = hashlib.sha256(f"{agent_id}|{day.isoformat()}|".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _outing(
    profile: dict[str, Any], rng: random.Random, prefer: tuple[str, ...]
) -> tuple[str, str]:
    """A (category, place) among the agent's favourites, by interest first; ("", "") if none."""
    fav = favourites(profile)
    liked: list[str] = []
    interests = profile.get("interests")
    for interest in interests if isinstance(interests, list) else []:
        word = str(interest).lower()
        cat = _INTEREST_PLACES.get(word) or next((c for c in fav if c in word), "")
        if cat in fav and cat not in liked:
            liked.append(cat)
    pool = liked or [c for c in prefer if c in fav] or sorted(fav)
    if not pool:
        return "", ""
    cat = rng.choice(pool)
    return cat, fav[cat]


def draft(profile: dict[str, Any], agent_id: str, day: date) -> dict[str, Any]:
    """A plan covering the whole day: sleep, meals, work or school, an outing, bed."""
    rng = _rng(agent_id, day)
    at_home = home(profile)
    occupation = str(profile.get("occupation", "")).lower()
    weekend = day.weekday() >= 5
    wake = hours(profile.get("wake_hour"), 7.0) + rng.choice((-15, 0, 0, 15))
    wake = min(max(wake, 4 * 60), 11 * 60) + (60 if weekend else 0)
    bed = rng.choice((22 * 60, 22 * 60 + 30, 23 * 60))
    student = occupation in {"student", "pupil"}
    site = (profile.get("school") if student else None) or profile.get("work")
    d = _Day()
    d.add(wake, "sleep", at_home)
    if isinstance(site, str) and site and occupation != "retiree" and not weekend:
        _working_day(d, profile, rng, site, student=student, occupation=occupation)
    else:
        _free_day(d, profile, rng)
    # No dinner out in the evening: eat at home.
    if not any(is_meal(s["activity"]) for s in d.segments if s["start"] >= "16:00"):
        d.add(max(d.t + 30, 18 * 60 + 30), "free time", at_home)
        d.add(d.t + 60, "dinner", at_home)
    d.add(bed, "relax", at_home)
    d.add(DAY_END, "sleep", at_home)
    return {"date": day.isoformat(), "segments": d.segments}


def _working_day(
    d: _Day,
    profile: dict[str, Any],
    rng: random.Random,
    site: str,
    *,
    student: bool,
    occupation: str,
) -> None:
    start = hours(profile.get("work_start"), 8.0 if student else 9.0)
    end = hours(profile.get("work_end"), 15.0 if student else 17.0)
    job = "school" if student else "work"
    commute = rng.choice((20, 30, 30, 45))
    d.add(start - commute, "breakfast", home(profile))
    d.add(start, "commute", site)
    if end - start >= 5 * 60:
        lunch = min(max(12 * 60 + rng.choice((-30, 0, 30)), d.t + 60), end - 90)
        d.add(lunch, job, site)
        fav = favourites(profile)
        out = [fav[c] for c in ("cafe", "restaurant") if c in fav]
        where = rng.choice(out) if out and not student and rng.random() < 0.5 else site
        d.add(d.t + rng.choice((45, 60)), "lunch", where)
    d.add(end, job, site)
    prefer = ("shop", "park") if occupation == "parent" else ("gym", "park", "cafe")
    if rng.random() < 0.75:
        cat, place = _outing(profile, rng, prefer)
        if place:
            d.add(d.t + rng.choice((60, 90, 120)), _VERB.get(cat, cat), place)


def _free_day(d: _Day, profile: dict[str, Any], rng: random.Random) -> None:
    at_home = home(profile)
    d.add(d.t + 60, "breakfast", at_home)
    cat, place = _outing(profile, rng, ("park", "cafe", "shop"))
    if place:
        d.add(d.t + rng.choice((90, 120)), _VERB.get(cat, cat), place)
    d.add(12 * 60, "chores", at_home)
    restaurant = favourites(profile).get("restaurant")
    d.add(d.t + 60, "lunch", restaurant if restaurant and rng.random() < 0.3 else at_home)
    d.add(max(d.t + 60, 15 * 60), "rest", at_home)
    if rng.random() < 0.5:
        cat, place = _outing(profile, rng, ("shop", "park", "cafe"))
        if place:
            d.add(d.t + rng.choice((60, 90)), _VERB.get(cat, cat), place)
