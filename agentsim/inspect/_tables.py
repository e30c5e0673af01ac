"""Events as typed pyarrow tables: the shared columns, and one event type's own fields.

Events are JSON objects whose fields depend on their type, so the table of all events keeps
the type-specific part as JSON text (``data``), while the table of one type spreads those
fields into columns whose types pyarrow infers from the values. ``time`` is a timestamp in
both: the simulated clock's ISO text, parsed once per distinct value (a run has few: one
per tick, plus the arrival times of moves).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentsim.errors import RunError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["BASE_COLUMNS", "EVENT_COLUMNS", "events_table", "fields_table", "time_array"]

BASE_COLUMNS = ("tick", "time", "type", "agent_id")
EVENT_COLUMNS = (*BASE_COLUMNS, "data")
"""Columns of ``Run.events()``: ``data`` is the rest of the event as JSON text."""


def _offset(dt: datetime) -> str:
    """An Arrow time zone for the fixed UTC offset of ``dt`` ("+01:00")."""
    off = dt.utcoffset() or timedelta(0)
    sign = "-" if off < timedelta(0) else "+"
    minutes = abs(int(off.total_seconds())) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def time_array(values: Sequence[str | None]) -> pa.Array:
    """ISO times as a timestamp array (microseconds).

    A clock started without a UTC offset (the usual case) gives naive timestamps, shown as
    written; one started with an offset gives timestamps in that offset."""
    import pyarrow as pa

    parsed: dict[str, datetime] = {}
    for v in set(values):
        if v is None or v in parsed:
            continue
        try:
            parsed[v] = datetime.fromisoformat(v)
        except (TypeError, ValueError):
            raise RunError(
                f"event time {v!r} is not an ISO date-time; the event log may be damaged "
                "(read the raw events with run.iter_events())"
            ) from None
    aware = [d for d in parsed.values() if d.tzinfo is not None]
    if aware and len(aware) != len(parsed):
        raise RunError(
            "the event log mixes times with and without a UTC offset; it was written by "
            "different clocks (read the raw events with run.iter_events())"
        )
    unit = pa.timestamp("us", tz=_offset(aware[0])) if aware else pa.timestamp("us")
    return pa.array([None if v is None else parsed[v] for v in values], unit)


def events_table(events: Iterable[Mapping[str, Any]]) -> pa.Table:
    """A pyarrow Table with ``EVENT_COLUMNS`` from event dicts (all types mixed)."""
    import pyarrow as pa

    cols: dict[str, list[Any]] = {c: [] for c in EVENT_COLUMNS}
    for ev in events:
        rest = dict(ev)
        for c in BASE_COLUMNS:
            cols[c].append(rest.pop(c, None))
        cols["data"].append(json.dumps(rest, sort_keys=True, ensure_ascii=False))
    return pa.table(
        {
            "tick": pa.array(cols["tick"], pa.int64()),
            "time": time_array(cols["time"]),
            "type": pa.array(cols["type"], pa.string()),
            "agent_id": pa.array(cols["agent_id"], pa.string()),
            "data": pa.array(cols["data"], pa.string()),
        }
    )


def _column(values: list[Any]) -> pa.Array:
    """One field's values, typed by pyarrow; JSON text when they share no type (a field
    that is a number in one event and text in another)."""
    import pyarrow as pa

    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(
            [None if v is None else json.dumps(v, sort_keys=True) for v in values], pa.string()
        )


def fields_table(events: Iterable[Mapping[str, Any]]) -> pa.Table:
    """Events of one type: ``BASE_COLUMNS`` then every field of the events as its own
    column (sorted by name; ``null`` where an event lacks the field)."""
    import pyarrow as pa

    rows = list(events)
    names = sorted({k for ev in rows for k in ev} - set(BASE_COLUMNS))
    table = {
        "tick": pa.array([ev.get("tick") for ev in rows], pa.int64()),
        "time": time_array([ev.get("time") for ev in rows]),
        "type": pa.array([ev.get("type") for ev in rows], pa.string()),
        "agent_id": pa.array([ev.get("agent_id") for ev in rows], pa.string()),
    }
    for name in names:
        table[name] = _column([ev.get(name) for ev in rows])
    return pa.table(table)
