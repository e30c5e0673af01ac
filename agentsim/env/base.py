"""The environment seam: ``EnvModule`` (state, lives with the engine) and ``EnvView`` (a
read-only, picklable snapshot that agents query during a tick).

Agents may be stepped in other processes, so during a tick they only read a view built once
per tick; their writes come back as ``Intent`` values that the engine applies at the tick end
in ``(agent_id, seq)`` order. A seed therefore gives the same events whatever the order in
which agents finish or the number of hosts.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from agentsim.env.clock import SimClock
from agentsim.errors import ConfigError, EnvError
from agentsim.events import EventType

__all__ = [
    "ALL",
    "ActionSpec",
    "AgentInfo",
    "AgentSet",
    "ArgReader",
    "EnvAnswer",
    "EnvModule",
    "EnvView",
    "Intent",
    "InterventionArgs",
    "ViewLayout",
    "module_events",
    "parse_intervention_args",
    "parse_options",
    "profile_extras",
    "sorted_intents",
    "unknown_intervention",
]

_Model = TypeVar("_Model", bound=BaseModel)


class _AllAgents:
    """The type of ``ALL``: every agent of the run (one instance, compared by identity)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ALL"

    def __reduce__(self) -> str:
        return "ALL"  # unpickles to the module's one instance


ALL = _AllAgents()
"""What ``EnvModule.depends_on`` returns when an agent may read what any agent wrote."""

AgentSet = frozenset[str] | _AllAgents


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentInfo:
    """What an environment module learns about an agent at setup."""

    agent_id: str
    group: str
    profile: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Intent:
    """A write asked for during a tick, applied by ``EnvModule.apply`` at the tick end.

    ``seq`` numbers one agent's environment calls within a tick, so that sorting by
    ``(agent_id, seq)`` restores the order in which that agent made them.
    """

    agent_id: str
    module: str
    action: str
    args: dict[str, Any]
    seq: int

    @property
    def sort_key(self) -> tuple[str, int]:
        return (self.agent_id, self.seq)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvAnswer:
    """The answer to one ``ask_env`` call: a JSON-serialisable ``result`` for the agent and,
    for writes only, the intent to apply at the tick end (reads never return one)."""

    result: dict[str, Any]
    intent: Intent | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionSpec:
    """One action of a view: its arguments and a one-line doc for the model."""

    name: str
    doc: str
    params: tuple[str, ...] = ()
    writes: bool = False
    # Reads what other agents wrote (counts of people at a place, say) beyond what
    # ``EnvModule.depends_on`` names: under ``executor.schedule: dependencies`` the call
    # waits until every agent's previous tick is applied, so its answer is the barrier's.
    reads_all: bool = False

    def describe(self) -> str:
        args = ", ".join(self.params)
        mark = " [write: applied at the end of the tick]" if self.writes else ""
        return f"{self.name}({args}): {self.doc}{mark}"


class ArgReader:
    """Validates the arguments of one action; every error names the action and the argument."""

    __slots__ = ("_action", "_args")

    def __init__(self, action: str, args: object, allowed: Collection[str]) -> None:
        self._action = action
        if not isinstance(args, Mapping):
            raise EnvError(
                f"{action}: arguments must be an object of name -> value, got {type(args).__name__}"
            )
        unknown = sorted(str(k) for k in args if k not in allowed)
        if unknown:
            known = ", ".join(sorted(allowed)) if allowed else "none: pass {}"
            raise EnvError(f"{action}: unknown argument {unknown[0]!r} (allowed: {known})")
        self._args: Mapping[str, object] = args

    def _fail(self, name: str, what: str, value: object) -> EnvError:
        return EnvError(f"{self._action}: argument {name!r} must be {what}; got {value!r}")

    def _get(self, name: str, what: str, required: bool) -> object:
        value = self._args.get(name)
        if value is None and required:
            raise EnvError(f"{self._action}: argument {name!r} is required ({what})")
        return value

    def text(self, name: str, *, max_len: int = 280, required: bool = True) -> str | None:
        what = f"a non-empty text of at most {max_len} characters"
        value = self._get(name, what, required)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip() or len(value) > max_len:
            shown = value if not isinstance(value, str) else f"{len(value)} characters"
            raise self._fail(name, what, shown)
        return value

    def choice(self, name: str, choices: Collection[str], *, required: bool = True) -> str | None:
        listed = sorted(choices)
        if len(listed) > 12:
            listed = [*listed[:12], "..."]
        what = f"one of {', '.join(listed)}"
        value = self._get(name, what, required)
        if value is None:
            return None
        if not isinstance(value, str) or value not in choices:
            raise self._fail(name, what, value)
        return value

    def number(self, name: str, *, lo: float, hi: float, required: bool = True) -> float | None:
        what = f"a number from {lo:g} to {hi:g}"
        value = self._get(name, what, required)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not lo <= value <= hi
        ):
            raise self._fail(name, what, value)
        return float(value)

    def integer(self, name: str, *, lo: int, hi: int, default: int) -> int:
        value = self._args.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise self._fail(name, f"a whole number from {lo} to {hi}", value)
        return value

    def flag(self, name: str, *, default: bool) -> bool:
        value = self._args.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(name, "true or false", value)
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvView:
    """A read-only snapshot of one module for one tick. Subclasses list their actions in
    ``ACTIONS`` and implement each as ``_do_<action>(agent_id, args, seq) -> EnvAnswer``.

    The base view has no actions; it is what modules without agent-facing actions return.
    """

    ACTIONS: ClassVar[tuple[ActionSpec, ...]] = ()

    module: str
    tick: int
    now: datetime
    tick_length: timedelta

    def query(self, agent_id: str, action: str, args: Mapping[str, Any], *, seq: int) -> EnvAnswer:
        spec = next((a for a in self.ACTIONS if a.name == action), None)
        if spec is None:
            known = ", ".join(a.name for a in self.ACTIONS) or "none"
            raise EnvError(
                f"module {self.module!r} has no action {action!r} (known: {known}); "
                "call one of the known actions"
            )
        self._check_agent(agent_id)
        reader = ArgReader(f"{self.module}.{action}", args, spec.params)
        handler = getattr(self, f"_do_{action}")
        answer: EnvAnswer = handler(agent_id, reader, seq)
        return answer

    def observe(self, agent_id: str) -> str:
        """One or a few short lines for the agent's prompt ("" when there is nothing)."""
        return ""

    def agent_facts(self, agent_id: str) -> Mapping[str, Any]:
        """What the agent knows of itself from this module, for its ``AGENT.json`` (e.g. the
        city's ``home`` and ``work``); empty by default."""
        return {}

    def actions(self) -> Mapping[str, str]:
        """Action name -> one-line doc; writes are marked ``[write ...]``."""
        return {a.name: a.describe() for a in self.ACTIONS}

    def time_at(self, tick: int) -> datetime:
        return self.now + (tick - self.tick) * self.tick_length

    def _check_agent(self, agent_id: str) -> None:
        """Raise ``EnvError`` when the module does not know ``agent_id`` (override)."""

    def _intent(self, agent_id: str, action: str, args: dict[str, Any], seq: int) -> Intent:
        return Intent(agent_id=agent_id, module=self.module, action=action, args=args, seq=seq)


def sorted_intents(intents: Sequence[Intent], module: str) -> list[Intent]:
    """The intents in ``(agent_id, seq)`` order, whatever order the caller used."""
    for intent in intents:
        if intent.module != module:
            raise EnvError(
                f"intent {intent.action!r} of agent {intent.agent_id!r} is for module "
                f"{intent.module!r}, not {module!r}; pass each module only its own intents"
            )
    return sorted(intents, key=lambda i: (i.agent_id, i.seq))


def unknown_intervention(module: str, action: str, known: Sequence[str]) -> str:
    """The message for an intervention a module does not have (at load time and at run time)."""
    return (
        f"module {module!r} has no intervention {action!r} "
        f"(known: {', '.join(known) or 'none'}); fix the workflow's intervene step"
    )


def parse_options(model: type[_Model], options: Mapping[str, Any], *, path: str) -> _Model:
    """Validate a module's options with its pydantic model; errors become ``ConfigError``
    naming the field path (``environment.0.places``) and what is allowed."""
    try:
        return model.model_validate(dict(options))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(part) for part in err["loc"])
        where = ".".join(part for part in (path, loc) if part)
        allowed = ", ".join(sorted(model.model_fields))
        if err["type"] == "extra_forbidden":
            problem = f"unknown option {loc!r} (allowed: {allowed})"
            fix = "remove it or fix its spelling"
        else:
            problem = f"{err['msg']}, got {err.get('input')!r}"
            fix = f"see the module's options: {allowed}"
        raise ConfigError(where, problem, fix) from None


class InterventionArgs(BaseModel):
    """The base of the model that declares one intervention's arguments (see
    ``EnvModule.INTERVENTION_ARGS``): unknown arguments fail, values are not coerced (a
    text is a text, ``2`` is not ``"2"``) and numbers are finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def parse_intervention_args(model: type[_Model], args: Mapping[str, Any], *, field: str) -> _Model:
    """``args`` validated by ``model``; a problem is a ``ConfigError`` at ``field.<argument>``
    (``workflow.3.intervene.args.text``) listing the known arguments."""
    known = ", ".join(sorted(model.model_fields)) or "none: pass {}"
    if not isinstance(args, Mapping):
        raise ConfigError(
            field,
            f"arguments must be a mapping of name -> value, got {type(args).__name__}",
            f"write args: {{...}} with: {known}",
        )
    try:
        return model.model_validate(dict(args))
    except ValidationError as exc:
        # A misspelt argument is also a missing one: name the spelling, the cause.
        err = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        loc = ".".join(str(part) for part in err["loc"])
        where = ".".join(part for part in (field, loc) if part)
        if err["type"] == "extra_forbidden":
            problem = f"unknown argument {loc!r} (known: {known})"
            fix = "remove it or fix its spelling"
        elif err["type"] == "missing":
            problem = f"argument {loc!r} is required (known: {known})"
            fix = "add it"
        else:
            problem = f"argument {loc!r}: {err['msg'].lower()}, got {err.get('input')!r}"
            fix = f"fix the value (known arguments: {known})"
        raise ConfigError(where, problem, fix) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewLayout:
    """How ``agentsim view`` draws a module (docs/inspection.md, "Viewer").

    ``places`` are points on a plane (id -> (x, y), any unit) with a ``category`` each (the
    colour); ``start`` puts agents at a place before the first tick; then the events named in
    ``arrive`` (event type -> the field naming the place) put their ``agent_id`` at a place,
    and those in ``leave`` put it in transit. ``edges`` are links between agents (who follows
    whom). Every part is optional: a module without places draws no map."""

    places: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    categories: Mapping[str, str] = field(default_factory=dict)
    start: Mapping[str, str] = field(default_factory=dict)
    arrive: Mapping[str, str] = field(default_factory=dict)
    leave: tuple[str, ...] = ()
    edges: Sequence[tuple[str, str]] = ()


class EnvModule:
    """Base class of environment modules; every hook is a no-op by default.

    Subclasses set ``name``, validate their options in ``__init__`` with ``parse_options``
    and override what they need. ``config_path`` is where the options came from in the
    experiment (e.g. ``environment.0``); it prefixes the field of every ``ConfigError``.
    Left empty, fields are relative to the options (``places``) for the caller to prefix.

    ``apply``, ``intervene`` and ``tick_events`` return events built with the clock they
    are given: ``clock.event("market_sale", agent_id=aid, good=good, price=price)`` stamps
    the clock's tick and time (pass ``time=`` for an event that happens at another moment).
    A dict that leaves out ``tick``, ``time`` or ``agent_id`` (modules written before
    ``clock.event``) still works: the engine fills them in (``module_events``).
    """

    name: ClassVar[str] = "base"
    INTERVENTIONS: ClassVar[tuple[str, ...]] = ()
    """The actions a workflow's ``intervene`` step may name; checked when the config loads."""
    INTERVENTION_ARGS: ClassVar[Mapping[str, type[InterventionArgs]]] = {}
    """The arguments of each intervention (action -> an ``InterventionArgs`` model), checked
    when the experiment loads. An action left out accepts any arguments, which
    ``intervene`` then checks when the step runs."""
    EVENTS: ClassVar[tuple[EventType, ...]] = ()
    """The module's own event types (those not in ``agentsim.events``), for the log check."""

    def __init__(
        self,
        options: Mapping[str, Any],
        *,
        seed: int,
        base_dir: Path,
        config_path: str = "",
    ) -> None:
        self.seed = seed
        self.base_dir = Path(base_dir)
        self.config_path = config_path
        # The experiment's list item may still carry its `module:` key; it is not an option.
        opts = dict(options)
        if opts.get("module") == self.name:
            del opts["module"]
        self.options: Mapping[str, Any] = opts

    def field(self, option: str) -> str:
        """The config path of one option, for ``ConfigError``."""
        return f"{self.config_path}.{option}" if self.config_path else option

    def skills_dir(self) -> Path | None:
        """The folder of this module's env skills (namespace ``env:<name>``), if any: by
        default the ``skills/`` folder beside the file that defines the class."""
        here = Path(inspect.getfile(type(self))).parent / "skills"
        return here if here.is_dir() else None

    def setup(self, agents: Sequence[AgentInfo]) -> None:
        """Called once before the first tick with every agent of the run."""

    def view(self, clock: SimClock) -> EnvView:
        return EnvView(
            module=self.name, tick=clock.tick, now=clock.now, tick_length=clock.tick_length
        )

    def apply(self, intents: Sequence[Intent], clock: SimClock) -> list[dict[str, Any]]:
        """Apply the tick's writes; returns their events (``clock.event``)."""
        return []

    def intervene(
        self, action: str, args: Mapping[str, Any], clock: SimClock
    ) -> list[dict[str, Any]]:
        """Change the module's state from a workflow step; ``action`` is one of
        ``INTERVENTIONS``. Returns events (``clock.event``), like ``apply``."""
        self._check_intervention(action)
        return []

    def _check_intervention(self, action: str) -> None:
        if action not in self.INTERVENTIONS:
            raise EnvError(unknown_intervention(self.name, action, self.INTERVENTIONS))

    @classmethod
    def parse_intervention(
        cls, action: str, args: Mapping[str, Any], *, field: str = ""
    ) -> InterventionArgs | None:
        """``args`` of ``action`` validated by its model in ``INTERVENTION_ARGS`` (None when
        the action declares none). ``field`` is where the arguments sit in the experiment
        (``workflow.3.intervene.args``); errors are ``ConfigError`` naming the argument."""
        model = cls.INTERVENTION_ARGS.get(action)
        if model is None:
            return None
        return parse_intervention_args(model, args, field=field)

    def check_intervention(self, action: str, args: Mapping[str, Any], *, field: str) -> None:
        """Check a workflow's intervention before the run starts (after ``setup``): the
        action exists and its arguments fit its model. Override it to check the ids the
        arguments name against the module's state (a place, an agent) and call this first.
        ``field`` is the step (``workflow.3.intervene``); errors are ``ConfigError``."""
        if action not in self.INTERVENTIONS:
            problem, _, fix = unknown_intervention(self.name, action, self.INTERVENTIONS).partition(
                "; "
            )
            raise ConfigError(f"{field}.action", problem, fix)
        self.parse_intervention(action, args, field=f"{field}.args")

    def _intervention_args(self, action: str, args: Mapping[str, Any]) -> Any:
        """``args`` parsed by ``action``'s model when the step runs: a problem there (a
        workflow built in Python, never loaded) is an ``EnvError`` naming the action."""
        self._check_intervention(action)
        try:
            return self.parse_intervention(action, args, field="args")
        except ConfigError as exc:
            raise EnvError(f"{self.name}.{action}: {exc.problem}; {exc.fix}") from None

    def _by_id(self, agents: Sequence[AgentInfo]) -> list[AgentInfo]:
        """``setup``'s agents sorted by id (the order seeds are drawn in); an id given twice
        is an ``EnvError``."""
        ordered = sorted(agents, key=lambda a: a.agent_id)
        for before, info in itertools.pairwise(ordered):
            if before.agent_id == info.agent_id:
                raise EnvError(f"{self.name}.setup: agent id {info.agent_id!r} is given twice")
        return ordered

    def _malformed_state(self, exc: Exception) -> EnvError:
        """The error for a ``set_state`` argument that ``get_state`` did not make."""
        return EnvError(
            f"{self.name} state is malformed ({type(exc).__name__}: {exc}); "
            f"pass a dict made by {type(self).__name__}.get_state()"
        )

    def tick_events(self, clock: SimClock) -> list[dict[str, Any]]:
        """Run-level events at the end of each tick, after ``apply`` (``clock.event``)."""
        return []

    def depends_on(self, agent_id: str) -> AgentSet:
        """The agents whose writes can change what ``agent_id`` observes and reads in the
        view of the coming tick, asked of the module's state at that tick (so a follow made
        last tick counts). ``ALL`` (the default) is always correct: every agent waits for
        the whole previous tick, as with ``executor.schedule: barrier``.

        A smaller set lets the agent start its next step as soon as it and those agents
        have finished theirs (docs/performance.md, "Scheduling"). The promise it makes: the
        agent's observation and its actions' answers (but those marked ``reads_all``), and
        the outcome of ``apply`` for its intents, are the same whether or not the intents
        of the agents outside the set, at any tick, have been applied."""
        return ALL

    def fork(self) -> EnvModule:
        """A copy whose state can change without changing this one (the dependency
        scheduler applies early intents to it). Override to share what never changes."""
        return copy.deepcopy(self)

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what ``get_state`` returned."""

    def view_layout(self) -> ViewLayout | None:
        """How the viewer draws this module after ``setup``; None (the default): not drawn."""
        return None


def module_events(events: Iterable[dict[str, Any]], clock: SimClock) -> list[dict[str, Any]]:
    """The events a module returned, as the log holds them: those built with
    ``clock.event`` unchanged; a dict missing ``tick``, ``time`` or ``agent_id`` (the
    contract before ``clock.event``: ``{"type": ..., "agent_id": ...}``) gets the clock's
    tick, its time and ``None`` for what it left out. The engine calls this on what
    ``apply``, ``tick_events`` and ``intervene`` return, before the log check."""
    out = []
    for e in events:
        if "tick" not in e or "time" not in e or "agent_id" not in e:
            e = {"tick": clock.tick, "time": clock.now.isoformat(), "agent_id": None, **e}
        out.append(e)
    return out


def profile_extras(
    modules: Iterable[EnvModule], clock: SimClock, agent_ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """What environment modules assigned to agents (e.g. home and work places), by agent:
    the answers of each module's ``my_places`` action, as place ids."""
    extras: dict[str, dict[str, Any]] = {}
    for mod in modules:
        view = mod.view(clock)
        if "my_places" not in view.actions():
            continue
        for aid in agent_ids:
            ans = view.query(aid, "my_places", {}, seq=0)
            # Skills want place ids in the profile ("home": "home-3"), not place records.
            flat = {
                k: (v["id"] if isinstance(v, dict) and "id" in v else v)
                for k, v in ans.result.items()
            }
            extras.setdefault(aid, {}).update(flat)
    return extras
