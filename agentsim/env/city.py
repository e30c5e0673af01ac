"""The ``city`` module: places with opening hours, walking between them, who is where.

Coordinates are kilometres on a flat grid and people walk along streets, so travel uses the
Manhattan distance. A move asked for at tick ``t`` that takes ``k`` ticks (at least one) puts
the agent in transit; it is at its destination in the view of tick ``t + k``.
"""

from __future__ import annotations

import copy
import difflib
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentsim._seeding import agent_rng
from agentsim.env.base import (
    ALL,
    ActionSpec,
    AgentInfo,
    AgentSet,
    ArgReader,
    EnvAnswer,
    EnvModule,
    EnvView,
    Intent,
    InterventionArgs,
    ViewLayout,
    parse_options,
    sorted_intents,
)
from agentsim.env.clock import WEEKDAYS, SimClock
from agentsim.env.places import Place, generate_town, load_places, travel_minutes
from agentsim.errors import ConfigError, EnvError

__all__ = ["CityModule", "CityOptions", "CityView", "Place", "PlaceArgs", "travel_minutes"]


# Where an agent works or studies, from words in its occupation / template / group.
_WORKPLACE: tuple[tuple[tuple[str, ...], str | None], ...] = (
    (("retire", "unemployed", "homemaker", "stay-at-home"), None),
    (("student", "pupil", "teacher", "school"), "school"),
    (("barista", "waiter", "waitress", "cafe"), "cafe"),
    (("cook", "chef", "restaurant"), "restaurant"),
    (("cashier", "shop", "retail", "sales"), "shop"),
    (("trainer", "coach", "gym"), "gym"),
    (("gardener", "ranger", "park"), "park"),
)


class CityOptions(BaseModel):
    """Options of the ``city`` module in the experiment's ``environment`` list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    places: str | None = None
    """CSV (id,name,category,x,y,open,close) relative to the experiment; None: a default town."""
    walk_speed_kmh: float = Field(default=5.0, gt=0, le=100)
    capacity: int | None = Field(default=None, ge=1)
    """Most people a place that is not a home can hold (counting those on their way)."""
    nearby: int = Field(default=3, ge=0, le=10)
    """How many open places the observation lists."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CityView(EnvView):
    """The city at the start of one tick. ``places`` and ``assigned`` are shared, never
    mutated; the per-agent parts are compact dicts of strings and ints."""

    ACTIONS: ClassVar[tuple[ActionSpec, ...]] = (
        ActionSpec(name="where_am_i", doc="where you are, or where you are walking to"),
        ActionSpec(
            name="list_places",
            doc="places near you, nearest first, with hours and walking minutes",
            params=("category", "open_now", "limit"),
        ),
        ActionSpec(
            name="place_info", doc="details of one place", params=("place",), reads_all=True
        ),
        ActionSpec(
            name="travel_time",
            doc="walking minutes to a place (from where you are, or from `from`)",
            params=("place", "from"),
        ),
        ActionSpec(name="my_places", doc="your home and your work or school"),
        ActionSpec(
            name="move_to",
            doc="walk to a place; it must be open when you arrive",
            params=("place",),
            writes=True,
        ),
    )

    places: Mapping[str, Place]
    positions: Mapping[str, str]
    transit: Mapping[str, tuple[str, int]]
    assigned: Mapping[str, tuple[str, str | None]]
    closed: frozenset[str]
    present: Mapping[str, int]
    incoming: Mapping[str, int]
    walk_speed_kmh: float
    capacity: int | None
    nearby: int
    # Per place, the same for everyone there this tick: the "open nearby" text (key: the
    # place id) and the whole observation of an agent at the place (key: "@" + place id).
    _near: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def _check_agent(self, agent_id: str) -> None:
        if agent_id not in self.assigned:
            raise EnvError(
                f"agent {agent_id!r} is not in the city (it has {len(self.assigned)} agents); "
                "only agents given to CityModule.setup can use it"
            )

    def _origin(self, agent_id: str) -> Place:
        """Where the agent is, or where it will be once its walk ends."""
        here = self.positions.get(agent_id)
        if here is None:
            here = self.transit[agent_id][0]
        return self.places[here]

    def _place(self, args: ArgReader, name: str = "place") -> Place:
        place_id = args.text(name, max_len=200)
        place = self.places.get(place_id or "")
        if place is None:
            raise EnvError(
                f"city: there is no place {place_id!r}; call list_places to see the place ids"
            )
        return place

    def _ticks(self, minutes: int) -> int:
        return max(1, math.ceil(minutes * 60 / self.tick_length.total_seconds()))

    def _open(self, place: Place, tick: int) -> bool:
        at = self.time_at(tick)
        return place.id not in self.closed and place.is_open(at.hour * 60 + at.minute)

    def _visible(self, agent_id: str, place: Place) -> bool:
        # Other people's homes are private: they are not listed.
        return place.category != "home" or place.id == self.assigned[agent_id][0]

    def _summary(self, place: Place, origin: Place) -> dict[str, Any]:
        return {
            **place.to_dict(),
            "open_now": self._open(place, self.tick),
            "minutes": travel_minutes(origin, place, speed_kmh=self.walk_speed_kmh),
        }

    def _do_where_am_i(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        result: dict[str, Any] = {"time": self.now.isoformat(), "in_transit": False}
        if agent_id in self.transit:
            dest, arrival = self.transit[agent_id]
            result.update(
                in_transit=True,
                destination=self.places[dest].to_dict(),
                arrives_at=self.time_at(arrival).isoformat(),
            )
        else:
            result["place"] = self.places[self.positions[agent_id]].to_dict()
        return EnvAnswer(result=result)

    def _do_list_places(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        categories = {p.category for p in self.places.values()}
        category = args.choice("category", categories, required=False)
        open_now = args.flag("open_now", default=False)
        limit = args.integer("limit", lo=1, hi=100, default=20)
        origin = self._origin(agent_id)
        rows = [
            self._summary(p, origin)
            for p in self.places.values()
            if self._visible(agent_id, p)
            and (category is None or p.category == category)
            and (not open_now or self._open(p, self.tick))
        ]
        rows.sort(key=lambda r: (r["minutes"], r["id"]))
        return EnvAnswer(result={"places": rows[:limit], "total": len(rows)})

    def _do_place_info(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        place = self._place(args)
        result = self._summary(place, self._origin(agent_id))
        result.update(
            x=place.x,
            y=place.y,
            closed_by_order=place.id in self.closed,
            people_here=self.present.get(place.id, 0),
        )
        return EnvAnswer(result=result)

    def _do_travel_time(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        dest = self._place(args)
        start = self._place(args, "from") if args.text("from", required=False) else None
        origin = start or self._origin(agent_id)
        minutes = travel_minutes(origin, dest, speed_kmh=self.walk_speed_kmh)
        result = {"from": origin.id, "to": dest.id, "minutes": minutes, "ticks": 0}
        if minutes:
            result["ticks"] = self._ticks(minutes)
        return EnvAnswer(result=result)

    def _do_my_places(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        return EnvAnswer(result=dict(self.agent_facts(agent_id)))

    def agent_facts(self, agent_id: str) -> Mapping[str, Any]:
        """The agent's ``home`` and ``work`` (None for agents without a workplace)."""
        assigned = self.assigned.get(agent_id)
        if assigned is None:
            return {}
        home, work = assigned
        return {
            "home": self.places[home].to_dict(),
            "work": self.places[work].to_dict() if work else None,
        }

    def _do_move_to(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        dest = self._place(args)
        if agent_id in self.transit:
            going, arrival = self.transit[agent_id]
            raise EnvError(
                f"city.move_to: you are already walking to {going!r} and arrive at "
                f"{self.time_at(arrival):%H:%M}; wait until you arrive"
            )
        origin = self.places[self.positions[agent_id]]
        if origin.id == dest.id:
            raise EnvError(f"city.move_to: you are already at {dest.id!r}; pick another place")
        if dest.id in self.closed:
            raise EnvError(
                f"city.move_to: {dest.id!r} ({dest.name}) is closed by order; "
                "call list_places with open_now=true for another place"
            )
        minutes = travel_minutes(origin, dest, speed_kmh=self.walk_speed_kmh)
        arrival = self.tick + self._ticks(minutes)
        if not self._open(dest, arrival):
            raise EnvError(
                f"city.move_to: {dest.id!r} ({dest.name}) is closed when you would arrive at "
                f"{self.time_at(arrival):%H:%M} (open {dest.hours}); choose another place"
            )
        if self.capacity is not None and dest.category != "home":
            used = self.present.get(dest.id, 0) + self.incoming.get(dest.id, 0)
            if used >= self.capacity:
                raise EnvError(
                    f"city.move_to: {dest.id!r} ({dest.name}) is full ({used} of "
                    f"{self.capacity} people); choose another place"
                )
        result = {
            "accepted": True,
            "to": dest.id,
            "minutes": minutes,
            "arrives_at": self.time_at(arrival).isoformat(),
            "note": "you leave at the end of this tick",
        }
        return EnvAnswer(
            result=result, intent=self._intent(agent_id, "move_to", {"place": dest.id}, seq)
        )

    def observe(self, agent_id: str) -> str:
        self._check_agent(agent_id)
        pid = self.positions.get(agent_id)
        text = None if agent_id in self.transit else self._near.get(f"@{pid}")
        if text is not None:
            return text
        clock = f"It is {WEEKDAYS[self.now.weekday()]} {self.now:%H:%M}."
        if agent_id in self.transit:
            dest, arrival = self.transit[agent_id]
            place = self.places[dest]
            return (
                f"{clock} You are walking to {place.name} ({place.category}) and arrive at "
                f"{self.time_at(arrival):%H:%M}.\nposition: in transit to {dest}"
            )
        here = self.places[self.positions[agent_id]]
        text = f"{clock} You are at {here.name} ({here.category}).{self._nearby(here)}" + (
            f"\nposition: {here.id}"
        )
        self._near[f"@{here.id}"] = text
        return text

    def _nearby(self, here: Place) -> str:
        hit = self._near.get(here.id)
        if hit is not None:
            return hit
        near = sorted(
            (travel_minutes(here, p, speed_kmh=self.walk_speed_kmh), p.id)
            for p in self.places.values()
            if p.category != "home" and p.id != here.id and self._open(p, self.tick)
        )[: self.nearby]
        text = ""
        if near:
            listed = ", ".join(
                f"{self.places[pid].name} ({self.places[pid].category}, {m} min)" for m, pid in near
            )
            text = f" Open nearby: {listed}."
        self._near[here.id] = text
        return text


def _workplace_category(info: AgentInfo) -> str | None:
    words = " ".join(
        str(v).lower()
        for v in (info.profile.get("occupation"), info.profile.get("template"), info.group)
        if v
    )
    for keys, category in _WORKPLACE:
        if any(k in words for k in keys):
            return category
    return "office"


class PlaceArgs(InterventionArgs):
    """The arguments of ``close_place`` and ``open_place``."""

    place: str = Field(min_length=1, max_length=200)


class CityModule(EnvModule):
    """Places, positions and walks. See the module docstring for the timing rules."""

    name: ClassVar[str] = "city"
    INTERVENTIONS: ClassVar[tuple[str, ...]] = ("close_place", "open_place")
    INTERVENTION_ARGS: ClassVar[Mapping[str, type[InterventionArgs]]] = {
        "close_place": PlaceArgs,
        "open_place": PlaceArgs,
    }

    def __init__(
        self,
        options: Mapping[str, Any],
        *,
        seed: int,
        base_dir: Path,
        config_path: str = "",
    ) -> None:
        super().__init__(options, seed=seed, base_dir=base_dir, config_path=config_path)
        self.config = parse_options(CityOptions, self.options, path=self.config_path)
        if self.config.places is None:
            self.places: Mapping[str, Place] = generate_town(seed)
        else:
            self.places = load_places(self.base_dir / self.config.places, self.field("places"))
        self._by_category: dict[str, list[str]] = {}
        for place in self.places.values():
            self._by_category.setdefault(place.category, []).append(place.id)
        self._positions: dict[str, str] = {}
        self._transit: dict[str, tuple[str, int, str, int]] = {}
        self._assigned: dict[str, tuple[str, str | None]] = {}
        self._closed: set[str] = set()

    def skills_dir(self) -> Path | None:
        return Path(__file__).parent / "skills" / self.name

    def setup(self, agents: Sequence[AgentInfo]) -> None:
        assigned: dict[str, tuple[str, str | None]] = {}
        for info in self._by_id(agents):
            rng = agent_rng(self.seed, info.agent_id, stream="env:city")
            home = rng.choice(self._by_category["home"])
            category = _workplace_category(info)
            if category is not None and category not in self._by_category:
                category = "office" if "office" in self._by_category else None
            work = rng.choice(self._by_category[category]) if category else None
            assigned[info.agent_id] = (home, work)
        self._assigned = assigned
        self._positions = {a: home for a, (home, _) in assigned.items()}
        self._transit = {}

    def depends_on(self, agent_id: str) -> AgentSet:
        """Only the agent itself: its observation and reads see its own position and walk,
        the places and the clock (``place_info``'s head count reads everyone: it waits).
        With a ``capacity`` whether a move is accepted depends on everyone's moves: ALL."""
        return ALL if self.config.capacity is not None else frozenset((agent_id,))

    def fork(self) -> CityModule:
        new = copy.copy(self)  # places and assignments are replaced, never mutated
        new._positions = dict(self._positions)
        new._transit = dict(self._transit)
        new._closed = set(self._closed)
        return new

    def view_layout(self) -> ViewLayout:
        return ViewLayout(
            places={p.id: (p.x, p.y) for p in self.places.values()},
            categories={p.id: p.category for p in self.places.values()},
            start={a: home for a, (home, _) in self._assigned.items()},
            arrive={"arrive": "place"},
            leave=("move",),
        )

    def view(self, clock: SimClock) -> CityView:
        present = Counter(self._positions.values())
        incoming = Counter(dest for dest, *_ in self._transit.values())
        return CityView(
            module=self.name,
            tick=clock.tick,
            now=clock.now,
            tick_length=clock.tick_length,
            places=self.places,
            positions=dict(self._positions),
            transit={a: (t[0], t[1]) for a, t in self._transit.items()},
            assigned=self._assigned,  # replaced, never mutated, after setup
            closed=frozenset(self._closed),
            present=dict(present),
            incoming=dict(incoming),
            walk_speed_kmh=self.config.walk_speed_kmh,
            capacity=self.config.capacity,
            nearby=self.config.nearby,
        )

    def _start_walk(
        self, agent_id: str, origin: str, dest: str, clock: SimClock, reason: str
    ) -> dict[str, Any]:
        minutes = travel_minutes(
            self.places[origin], self.places[dest], speed_kmh=self.config.walk_speed_kmh
        )
        ticks = max(1, math.ceil(minutes * 60 / clock.tick_length.total_seconds()))
        arrival = clock.tick + ticks
        self._positions.pop(agent_id, None)
        self._transit[agent_id] = (dest, arrival, origin, clock.tick)
        return clock.event(
            "move",
            agent_id=agent_id,
            **{"from": origin},
            to=dest,
            depart=clock.now.isoformat(),
            arrive=clock.time_at(arrival).isoformat(),
            minutes=minutes,
            reason=reason,
        )

    def apply(self, intents: Sequence[Intent], clock: SimClock) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        used = Counter(self._positions.values()) + Counter(d for d, *_ in self._transit.values())
        for intent in sorted_intents(intents, self.name):
            if intent.action != "move_to":
                raise EnvError(
                    f"city.apply: {intent.action!r} is not a write of the city (known: move_to)"
                )
            agent, dest = intent.agent_id, str(intent.args.get("place"))
            reason = self._refusal(agent, dest, used)
            if reason:
                events.append(clock.event("move_refused", agent_id=agent, to=dest, reason=reason))
                continue
            used[dest] += 1
            events.append(self._start_walk(agent, self._positions[agent], dest, clock, "agent"))
        return events

    def _refusal(self, agent: str, dest: str, used: Counter[str]) -> str:
        """Why a move can no longer happen at the tick end ("" if it can)."""
        if agent not in self._assigned:
            return "unknown agent"
        if dest not in self.places:
            return "unknown place"
        if agent in self._transit:
            return "already walking"
        if dest in self._closed:
            return "closed by order"
        if self._positions[agent] == dest:
            return "already there"
        cap = self.config.capacity
        if cap is not None and self.places[dest].category != "home" and used[dest] >= cap:
            return "full"
        return ""

    def check_intervention(self, action: str, args: Mapping[str, Any], *, field: str) -> None:
        super().check_intervention(action, args, field=field)
        place_id = str(args["place"])
        if place_id not in self.places:
            raise ConfigError(f"{field}.args.place", *self._no_place(place_id))

    def _no_place(self, place_id: str) -> tuple[str, str]:
        """(problem, fix) for a place id the module does not have."""
        ids = sorted(self.places)
        close = difflib.get_close_matches(place_id, ids, n=3)
        shown = ", ".join(close or ids[:5]) + ("" if close or len(ids) <= 5 else ", ...")
        what = "close matches" if close else f"{len(ids)} places, e.g."
        return (
            f"there is no place {place_id!r} ({what}: {shown})",
            "use one of the ids in the places table",
        )

    def intervene(
        self, action: str, args: Mapping[str, Any], clock: SimClock
    ) -> list[dict[str, Any]]:
        place_id = self._intervention_args(action, args).place
        place = self.places.get(place_id)
        if place is None:
            problem, fix = self._no_place(place_id)
            raise EnvError(f"city.{action}: {problem}; {fix}")
        if action == "open_place":
            if place.id not in self._closed:
                raise EnvError(f"city.open_place: {place.id!r} is not closed; nothing to open")
            self._closed.discard(place.id)
            return [clock.event("place_opened", place=place.id)]
        if place.id in self._closed:
            raise EnvError(f"city.close_place: {place.id!r} is already closed")
        self._closed.add(place.id)
        events = [clock.event("place_closed", place=place.id)]
        # Everyone inside, or on the way there, goes home instead.
        for agent in sorted(self._assigned):
            home = self._assigned[agent][0]
            if home == place.id:
                continue
            if self._positions.get(agent) == place.id:
                events.append(self._start_walk(agent, place.id, home, clock, "place_closed"))
            elif agent in self._transit and self._transit[agent][0] == place.id:
                origin = self._transit[agent][2]
                events.append(self._start_walk(agent, origin, home, clock, "place_closed"))
        return events

    def tick_events(self, clock: SimClock) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for agent in sorted(a for a, t in self._transit.items() if t[1] <= clock.tick + 1):
            dest, arrival, _, _ = self._transit.pop(agent)
            self._positions[agent] = dest
            # Stamped with when the walk ends (this tick's end), not when the tick starts.
            when = clock.time_at(arrival).isoformat()
            events.append(clock.event("arrive", agent_id=agent, time=when, place=dest))
        occupancy = Counter(self._positions.values())
        events.append(
            clock.event(
                "city_occupancy",
                occupancy={p: occupancy[p] for p in sorted(occupancy)},
                in_transit=len(self._transit),
            )
        )
        return events

    def get_state(self) -> dict[str, Any]:
        return {
            "positions": {a: self._positions[a] for a in sorted(self._positions)},
            "transit": {a: list(self._transit[a]) for a in sorted(self._transit)},
            "assigned": {a: list(self._assigned[a]) for a in sorted(self._assigned)},
            "closed": sorted(self._closed),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        try:
            positions = {str(a): str(p) for a, p in state["positions"].items()}
            transit = {
                str(a): (str(d), int(t), str(o), int(s))
                for a, (d, t, o, s) in state["transit"].items()
            }
            assigned = {str(a): (str(h), w and str(w)) for a, (h, w) in state["assigned"].items()}
            closed = {str(p) for p in state["closed"]}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._malformed_state(exc) from None
        named = [*positions.values(), *(t[0] for t in transit.values()), *closed]
        named += [p for pair in assigned.values() for p in pair if p]
        unknown = sorted({p for p in named if p not in self.places})
        if unknown:
            raise EnvError(
                f"city state names unknown place(s) {', '.join(unknown)}; "
                "restore it with the same places table and seed"
            )
        self._positions, self._transit = positions, transit
        self._assigned, self._closed = assigned, closed
