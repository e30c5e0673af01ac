"""Simulation time: a tick counter mapped onto calendar time, and duration parsing.

Simulation time is the only time that reaches the event log, so a seed's events never
depend on how fast the machine is.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from agentsim.errors import ConfigError, EnvError
from agentsim.events import event

__all__ = ["WEEKDAYS", "SimClock", "parse_duration"]

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
"""English day names, independent of the process locale (strftime's %A is not)."""

_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_DURATION_FIX = 'write a duration such as "15m", "1h", "90s", "1h30m" or a number of seconds'
# Longer is a typo, and beyond ~2.7 million years timedelta itself overflows.
_MAX_DURATION_SECONDS = 100 * 366 * 86400


def parse_duration(value: str | int | timedelta, *, field: str = "") -> timedelta:
    """Parse ``"15m"``, ``"1h"``, ``"90s"``, ``"1h30m"``, ``"1d"`` or an int of seconds.

    Units must come in the order d, h, m, s. The result must be positive. ``field`` is the
    config path named in the ``ConfigError`` raised for bad input (e.g. ``"clock.tick"``).
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        if seconds <= 0:
            raise ConfigError(field, f"duration {value} is not positive", _DURATION_FIX)
        return value
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(
            field, f"duration {value!r} is a {type(value).__name__}, not text", _DURATION_FIX
        )
    if isinstance(value, int):
        total, shown = value, f"{value} seconds"
    else:
        total, shown = _duration_seconds(value, field), repr(value)
    if total <= 0:
        raise ConfigError(field, f"duration {shown} is not positive", _DURATION_FIX)
    if total > _MAX_DURATION_SECONDS:
        raise ConfigError(
            field, f"duration {shown} is longer than 100 years", "give a shorter duration"
        )
    return timedelta(seconds=total)


def _duration_seconds(value: str, field: str) -> int:
    text = value.strip().lower().replace(" ", "")
    # Length first: int() of thousands of digits is slow, and past 4300 digits an error.
    match = _DURATION.fullmatch(text) if len(text) <= 32 else None
    if text.isdigit() and len(text) <= 32:
        return int(text)
    if not text or match is None:
        raise ConfigError(field, f"cannot read {value!r} as a duration", _DURATION_FIX)
    return sum(
        int(part) * _UNIT_SECONDS[unit]
        for part, unit in zip(match.groups(), "dhms", strict=True)
        if part is not None
    )


class SimClock:
    """Tick ``n`` is the time ``start + n * tick_length``; tick 0 is the start."""

    __slots__ = ("_start", "_tick", "_tick_length")

    def __init__(self, start: datetime, tick_length: timedelta) -> None:
        if not isinstance(start, datetime):
            raise EnvError(f"clock start {start!r} is not a datetime; pass datetime(2026, 3, 2, 6)")
        if not isinstance(tick_length, timedelta) or tick_length <= timedelta(0):
            raise EnvError(
                f"clock tick length {tick_length!r} is not a positive timedelta; "
                'use parse_duration("15m") to build one'
            )
        self._start = start
        self._tick_length = tick_length
        self._tick = 0

    @property
    def start(self) -> datetime:
        return self._start

    @property
    def tick_length(self) -> timedelta:
        return self._tick_length

    @property
    def tick(self) -> int:
        return self._tick

    @property
    def now(self) -> datetime:
        return self.time_at(self._tick)

    @property
    def minute_of_day(self) -> int:
        now = self.now
        return now.hour * 60 + now.minute

    @property
    def weekday(self) -> str:
        return WEEKDAYS[self.now.weekday()]

    def time_at(self, tick: int) -> datetime:
        """Calendar time of ``tick`` (which may lie in the future or the past of the clock)."""
        if isinstance(tick, bool) or not isinstance(tick, int) or tick < 0:
            raise EnvError(f"tick {tick!r} is not a whole number >= 0; ticks count from 0")
        return self._start + tick * self._tick_length

    def event(
        self, kind: str, *, agent_id: str | None = None, time: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """An event of type ``kind`` at this clock's tick, complete (``agentsim.events.event``):
        how environment modules build what ``apply``, ``intervene`` and ``tick_events``
        return. ``time`` (ISO 8601) is for an event that happens at another moment than the
        tick's start, e.g. the city's ``arrive`` at the end of a walk. A field whose name is
        a Python keyword goes in a dict: ``clock.event("move", **{"from": here}, to=there)``."""
        when = self.now.isoformat() if time is None else time
        return event(kind, tick=self._tick, time=when, agent_id=agent_id, **fields)

    def advance(self, n: int = 1) -> int:
        """Move the clock ``n`` ticks forward and return the new tick."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise EnvError(f"cannot advance the clock by {n!r} ticks; give a whole number >= 1")
        self._tick += n
        return self._tick

    def get_state(self) -> dict[str, Any]:
        return {
            "start": self._start.isoformat(),
            "tick_length_s": self._tick_length.total_seconds(),
            "tick": self._tick,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        try:
            start = datetime.fromisoformat(state["start"])
            tick_length = timedelta(seconds=state["tick_length_s"])
            tick = state["tick"]
        except (KeyError, TypeError, ValueError) as exc:
            raise EnvError(
                f"clock state {state!r} is malformed ({exc}); "
                "pass a dict made by SimClock.get_state()"
            ) from None
        if isinstance(tick, bool) or not isinstance(tick, int) or tick < 0:
            raise EnvError(f"clock state has tick {tick!r}; it must be a whole number >= 0")
        if tick_length <= timedelta(0):
            raise EnvError(f"clock state has tick length {tick_length}; it must be positive")
        self._start, self._tick_length, self._tick = start, tick_length, tick

    def __repr__(self) -> str:
        return f"SimClock(tick={self._tick}, now={self.now.isoformat()}, every={self._tick_length})"
