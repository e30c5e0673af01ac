"""The city's places: opening hours, walking times, the default town and CSV place tables.

Coordinates are kilometres on a flat grid and people walk along streets, so travel uses the
Manhattan distance.
"""

from __future__ import annotations

import csv
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsim._seeding import derive_seed
from agentsim.errors import ConfigError

__all__ = ["Place", "generate_town", "load_places", "travel_minutes"]

_DAY = 24 * 60
_HHMM = re.compile(r"(\d{1,2}):(\d{2})")
_COLUMNS = ("id", "name", "category", "x", "y", "open", "close")

# The default town: (category, count, possible opening times, possible closing times).
_TOWN: tuple[tuple[str, int, tuple[str, ...], tuple[str, ...]], ...] = (
    ("home", 12, ("00:00",), ("24:00",)),
    ("office", 6, ("07:30", "08:00", "08:30"), ("17:30", "18:00", "19:00")),
    ("school", 3, ("07:30", "08:00"), ("15:30", "16:00", "16:30")),
    ("cafe", 5, ("06:30", "07:00", "07:30"), ("18:00", "19:00", "20:00")),
    ("park", 3, ("06:00",), ("21:00", "22:00")),
    ("shop", 5, ("08:00", "09:00"), ("19:00", "20:00")),
    ("restaurant", 4, ("11:00", "11:30", "12:00"), ("22:00", "23:00")),
    ("gym", 2, ("06:00", "06:30"), ("21:00", "22:00")),
)
_TOWN_KM = 4.0


def _minutes(text: str) -> int | None:
    match = _HHMM.fullmatch(text.strip())
    if match is None:
        return None
    hours, minutes = int(match[1]), int(match[2])
    if minutes > 59 or hours > 24 or (hours == 24 and minutes):
        return None
    return hours * 60 + minutes


def _hhmm(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Place:
    """A place; ``opens`` / ``closes`` are minutes of the day (``closes`` may be 1440, or
    earlier than ``opens`` for places open past midnight; equal means always open)."""

    id: str
    name: str
    category: str
    x: float
    y: float
    opens: int
    closes: int

    def is_open(self, minute_of_day: int) -> bool:
        m = minute_of_day % _DAY
        if self.opens == self.closes % _DAY or (self.opens == 0 and self.closes == _DAY):
            return True
        if self.opens < self.closes:
            return self.opens <= m < self.closes
        return m >= self.opens or m < self.closes

    @property
    def hours(self) -> str:
        return f"{_hhmm(self.opens)}-{_hhmm(self.closes)}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "category": self.category, "hours": self.hours}


def travel_minutes(a: Place, b: Place, *, speed_kmh: float) -> int:
    """Walking minutes from ``a`` to ``b`` along the street grid (at least 1 between two
    different places)."""
    if a.id == b.id:
        return 0
    km = abs(a.x - b.x) + abs(a.y - b.y)
    return max(1, math.ceil(km / speed_kmh * 60))


def generate_town(seed: int) -> dict[str, Place]:
    rng = random.Random(derive_seed(seed, "env:city", "town"))
    places: dict[str, Place] = {}
    for category, count, opens, closes in _TOWN:
        for n in range(1, count + 1):
            if category == "office":  # offices cluster downtown, the rest spreads out
                x, y = (min(_TOWN_KM, max(0.0, rng.gauss(_TOWN_KM / 2, 0.5))) for _ in "xy")
            else:
                x, y = rng.uniform(0, _TOWN_KM), rng.uniform(0, _TOWN_KM)
            place = Place(
                id=f"{category}-{n}",
                name=f"{category.capitalize()} {n}",
                category=category,
                x=round(x, 2),
                y=round(y, 2),
                opens=_minutes(rng.choice(opens)) or 0,
                closes=_minutes(rng.choice(closes)) or 0,
            )
            places[place.id] = place
    return places


def load_places(path: Path, field: str) -> dict[str, Place]:
    fix = f"give a CSV with the columns {','.join(_COLUMNS)} (hours as HH:MM)"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(field, f"cannot read places file {path}: {exc.strerror}", fix) from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in _COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise ConfigError(field, f"{path}: missing column(s) {', '.join(missing)}", fix)
    places: dict[str, Place] = {}
    for line, row in enumerate(reader, start=2):
        where = f"{path}:{line}"
        values = {c: (row.get(c) or "").strip() for c in _COLUMNS}
        empty = [c for c in ("id", "name", "category") if not values[c]]
        if empty:
            raise ConfigError(field, f"{where}: column {empty[0]!r} is empty", fix)
        if values["id"] in places:
            raise ConfigError(field, f"{where}: place id {values['id']!r} is repeated", fix)
        try:
            x, y = float(values["x"]), float(values["y"])
        except ValueError:
            raise ConfigError(
                field,
                f"{where}: x and y must be numbers (km), got {values['x']!r}, {values['y']!r}",
                fix,
            ) from None
        hours = {c: _minutes(values[c]) for c in ("open", "close")}
        for column, minute in hours.items():
            if minute is None:
                raise ConfigError(
                    field, f"{where}: column {column!r} must be HH:MM, got {values[column]!r}", fix
                )
        places[values["id"]] = Place(
            id=values["id"],
            name=values["name"],
            category=values["category"].lower(),
            x=x,
            y=y,
            opens=hours["open"] or 0,
            closes=hours["close"] or 0,
        )
    if not any(p.category == "home" for p in places.values()):
        raise ConfigError(field, f"{path}: no place has the category 'home'", fix)
    return places
