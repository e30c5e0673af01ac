"""SimClock and parse_duration."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from agentsim.env import SimClock, parse_duration
from agentsim.errors import ConfigError, EnvError

START = datetime(2026, 3, 2, 6, 0)  # a Monday


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15m", 900),
        ("1h", 3600),
        ("90s", 90),
        ("1h30m", 5400),
        ("1d", 86400),
        ("2h0m5s", 7205),
        (" 15M ", 900),
        ("600", 600),
        (45, 45),
        (timedelta(minutes=5), 300),
    ],
    ids=str,
)
def test_parse_duration_accepts(text: str | int | timedelta, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "cannot read '' as a duration"),
        ("15 minutes", "cannot read '15 minutes' as a duration"),
        ("30m1h", "cannot read '30m1h' as a duration"),
        ("1.5h", "cannot read '1.5h' as a duration"),
        ("0m", "duration '0m' is not positive"),
        ("0", "duration '0' is not positive"),
        (0, "duration 0 seconds is not positive"),
        (-5, "duration -5 seconds is not positive"),
        (timedelta(0), "duration 0:00:00 is not positive"),
        (True, "duration True is a bool, not text"),
        (1.5, "duration 1.5 is a float, not text"),
    ],
    ids=repr,
)
def test_parse_duration_rejects(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_duration(value, field="clock.tick")  # type: ignore[arg-type]
    assert info.value.field == "clock.tick"
    assert '"1h30m"' in str(info.value)  # the fix shows accepted forms


def test_clock_starts_at_tick_zero_and_advances() -> None:
    clock = SimClock(START, timedelta(minutes=15))
    assert (clock.tick, clock.now, clock.start) == (0, START, START)
    assert clock.tick_length == timedelta(minutes=15)
    assert clock.minute_of_day == 6 * 60
    assert clock.weekday == "Monday"
    assert clock.advance() == 1
    assert clock.advance(3) == 4
    assert clock.now == datetime(2026, 3, 2, 7, 0)
    assert clock.minute_of_day == 7 * 60


def test_time_at_crosses_midnight_and_days() -> None:
    clock = SimClock(START, timedelta(hours=1))
    assert clock.time_at(18) == datetime(2026, 3, 3, 0, 0)
    clock.advance(18)
    assert clock.weekday == "Tuesday"
    assert clock.minute_of_day == 0
    assert "tick=18" in repr(clock)


@pytest.mark.parametrize("bad", [-1, 1.5, True], ids=repr)
def test_time_at_rejects_bad_ticks(bad: object) -> None:
    clock = SimClock(START, timedelta(minutes=15))
    with pytest.raises(EnvError, match="is not a whole number >= 0"):
        clock.time_at(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -2, 1.0, False], ids=repr)
def test_advance_rejects_bad_steps(bad: object) -> None:
    clock = SimClock(START, timedelta(minutes=15))
    with pytest.raises(EnvError, match="cannot advance the clock by"):
        clock.advance(bad)  # type: ignore[arg-type]
    assert clock.tick == 0


def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(EnvError, match="clock start '2026-03-02' is not a datetime"):
        SimClock("2026-03-02", timedelta(minutes=1))  # type: ignore[arg-type]
    with pytest.raises(EnvError, match="is not a positive timedelta"):
        SimClock(START, timedelta(0))
    with pytest.raises(EnvError, match="is not a positive timedelta"):
        SimClock(START, 900)  # type: ignore[arg-type]


def test_state_round_trips_through_json() -> None:
    clock = SimClock(START, timedelta(minutes=15, microseconds=7))
    clock.advance(5)
    state = json.loads(json.dumps(clock.get_state()))
    other = SimClock(datetime(2000, 1, 1), timedelta(hours=1))
    other.set_state(state)
    assert other.get_state() == clock.get_state()
    assert (other.tick, other.now, other.tick_length) == (5, clock.now, clock.tick_length)


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({}, "clock state {} is malformed"),
        ({"start": "yesterday", "tick_length_s": 60, "tick": 0}, "is malformed"),
        ({"start": "2026-03-02T06:00:00", "tick_length_s": 60, "tick": -1}, "has tick -1"),
        ({"start": "2026-03-02T06:00:00", "tick_length_s": 0, "tick": 1}, "tick length 0:00:00"),
    ],
    ids=["empty", "bad-start", "negative-tick", "zero-length"],
)
def test_set_state_rejects_bad_state(state: dict[str, object], message: str) -> None:
    clock = SimClock(START, timedelta(minutes=15))
    with pytest.raises(EnvError, match=message):
        clock.set_state(state)
    assert clock.tick == 0


def test_an_event_from_the_clock_has_its_tick_and_time() -> None:
    clock = SimClock(START, timedelta(minutes=15))
    clock.advance(2)
    assert clock.event("place_closed", place="cafe-1") == {
        "tick": 2,
        "time": "2026-03-02T06:30:00",
        "type": "place_closed",
        "agent_id": None,
        "place": "cafe-1",
    }
    # Another moment than the tick's start (an arrival), and a field named like a keyword.
    moved = clock.event("move", agent_id="a0", time="2026-03-02T06:40:00", **{"from": "home-1"})
    assert moved == {
        "tick": 2,
        "time": "2026-03-02T06:40:00",
        "type": "move",
        "agent_id": "a0",
        "from": "home-1",
    }
