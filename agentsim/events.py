"""Every event the runtime writes to ``events.jsonl``, declared once.

Each line of the log is one JSON object: the four fields every event has (``tick``,
``time``, ``type``, ``agent_id``) and the fields of its type, keys sorted. ``EVENTS`` maps
each type name to its ``EventType``; the engine passes every batch through ``checked``
before it is written, so an event type or field declared nowhere fails the run loudly
instead of reaching the log. ``problems`` also checks the values against the declared
types (the tests run every shipped experiment through it).

The table in docs/inspection.md is rendered from here; regenerate it with::

    python -m agentsim.events --write docs/inspection.md

This module imports nothing from the rest of the package but ``errors``, so every layer
may use it.
"""

from __future__ import annotations

import re
import sys
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from agentsim.errors import EventError

__all__ = [
    "COMMON",
    "DOC_END",
    "DOC_START",
    "EVENTS",
    "EventType",
    "Field",
    "checked",
    "event",
    "main",
    "problems",
    "render_table",
    "replace_table",
]

DOC_START = "<!-- events:start (generated: python -m agentsim.events --write FILE) -->"
DOC_END = "<!-- events:end -->"


@dataclass(frozen=True, slots=True, kw_only=True)
class Field:
    """One field of an event: its JSON name, its type (a type expression such as
    ``int``, ``str | None`` or ``dict[str, int]``) and whether an event may leave it out."""

    name: str
    type: Any
    doc: str
    optional: bool = False


# The fields every event has.
COMMON: tuple[Field, ...] = (
    Field(name="tick", type=int, doc="the tick it happened in"),
    Field(name="time", type=str, doc="simulated time, ISO 8601"),
    Field(name="type", type=str, doc="the event type"),
    Field(name="agent_id", type=str | None, doc="the agent it concerns; null for the run's"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class EventType:
    """One event type: who writes it, what it means, and its own fields (besides
    ``COMMON``)."""

    name: str
    writer: str
    doc: str
    fields: tuple[Field, ...] = ()
    names: frozenset[str] = field(init=False)
    required: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        every = (*COMMON, *self.fields)
        object.__setattr__(self, "names", frozenset(f.name for f in every))
        object.__setattr__(self, "required", frozenset(f.name for f in every if not f.optional))


def _f(name: str, tp: Any, doc: str, *, optional: bool = False) -> Field:
    return Field(name=name, type=tp, doc=doc, optional=optional)


_SKILL = _f("skill", str, "the skill id")
_HOOK = _f("hook", str, "`pre_step` or `post_step`")
_ECHO = _f(
    "echo",
    bool,
    "(new) the answer only copies lines or sentences of the agent's own prompt",
    optional=True,
)
_INSTRUMENT = _f(
    "instrument",
    str,
    "(new) a typed answer's form: `likert`, `choice`, `number` or `json` (absent: free text)",
    optional=True,
)
_VALUE = _f(
    "value",
    Any,
    "(new) a typed answer's value (int, str, float or the JSON value); null unless `ok`",
    optional=True,
)

_DECLARED: tuple[EventType, ...] = (
    # -- the run (sim/engine.py) -----------------------------------------------------------
    EventType(
        name="run_start",
        writer="sim",
        doc="the first line of a run (not written again on resume)",
        fields=(
            _f("agents", int, "agents in the run"),
            _f("seed", int, "the experiment's seed"),
            _f("skills", int, "skills in the registry"),
            _f("skill_diagnostics", int, "problems found while scanning the skills"),
            _f("modules", list[str], "environment modules, sorted"),
            _f("skills_hidden", dict[str, str], "skill id -> why every catalog leaves it out"),
            _f(
                "skills_refused",
                dict[str, str],
                "`namespace@folder` -> why its SKILL.md was refused (`file:line: problem`)",
            ),
            _f(
                "skills_shadowed",
                dict[str, str],
                "skill id -> the id of the same name that wins the bare name",
            ),
            _f(
                "skills_broken_scripts",
                dict[str, str],
                "skill id -> why one of its scripts cannot load (`file:line: problem`); "
                "written only when some cannot",
                optional=True,
            ),
            _f(
                "sandbox",
                str,
                "what contains `process` isolation here: `bubblewrap`, or `none: <why>`",
                optional=True,
            ),
        ),
    ),
    EventType(
        name="skill_broken",
        writer="sim",
        doc="a hot reload found a skill's SKILL.md broken by an edit (or, for a skill from an "
        "MCP server, a file not matching its digest, or the server not answering); its last "
        "good version stays active until the file is fixed (counted as a problem)",
        fields=(
            _SKILL,
            _f("file", str, "the SKILL.md (an MCP skill's `skill://` URI)"),
            _f("line", int, "the line of the problem, 1-based (0: not a line of the file)"),
            _f("message", str, "what is wrong and how to fix it"),
        ),
    ),
    EventType(
        name="skills_reloaded",
        writer="sim",
        doc="a hot reload found skills added, changed or removed",
        fields=(
            _f("generation", int, "the registry's generation after the reload"),
            _f("added", list[str], "skill ids, sorted"),
            _f("changed", list[str], "skill ids, sorted"),
            _f("removed", list[str], "skill ids, sorted"),
        ),
    ),
    EventType(
        name="tick_end",
        writer="sim",
        doc="the sums of one tick, its last line",
        fields=(
            _f("steps", int, "agent steps"),
            _f("model_calls", int, "model calls"),
            _f("script_calls", int, "skill script calls"),
            _f("hook_calls", int, "pre_step and post_step hook calls", optional=True),
            _f("prompt_tokens", int, "prompt tokens"),
            _f("completion_tokens", int, "completion tokens"),
            _f("cached_prompt_tokens", int, "prompt tokens the server served from its cache"),
            _f(
                "recovered_calls",
                int,
                "tool calls models wrote as text and the steps ran (`model.tool_calls`)",
                optional=True,
            ),
            _f("degraded", int, "degraded steps"),
            _f("skipped", int, "steps a pre_step hook skipped"),
            _f("errors", int, "the tick's problems (`agentsim.run.problems`)"),
            _f("gate_retries", int, "extra model rounds post_step gates asked for"),
            _f(
                "outcomes",
                dict[str, int],
                "(new) steps by how they ended (`finished`, `answered`, `out_of_turns`, "
                "`degraded`, `error`, `skipped`; outcomes of no step left out)",
                optional=True,
            ),
            _f(
                "acted",
                int,
                "(new) steps that wrote to the environment or ran a skill script",
                optional=True,
            ),
            _f(
                "tool_calls",
                dict[str, int],
                "(new) tool calls by result (`ok`, `refused`, `failed`; results of no call "
                "left out)",
                optional=True,
            ),
            _f(
                "skills",
                dict[str, dict[str, dict[str, int]]],
                "(new) trigger counts, group -> skill id -> `visible` (agent-steps whose "
                "catalog listed it), `activated` (agent-steps in which it became active), "
                "`scripts` (script calls that ran), `hooks_shown` (hook outputs with text "
                "shown to the model), `suggested` (calls their `SUGGESTED:` lines proposed), "
                "`followed` (of those, calls the step made with the same arguments); zero "
                "counts left out",
                optional=True,
            ),
        ),
    ),
    EventType(
        name="intervention",
        writer="sim",
        doc="a workflow `intervene` step: an environment action, or a message to agents",
        fields=(
            _f("env", str, "the module (environment action)", optional=True),
            _f("action", str, "its intervention (environment action)", optional=True),
            _f("args", dict[str, Any], "its arguments (environment action)", optional=True),
            _f("message", str, "the text sent (message)", optional=True),
            _f("recipients", int, "how many agents get it (message)", optional=True),
        ),
    ),
    EventType(
        name="survey_answer",
        writer="sim",
        doc="one agent's answer to a workflow `survey` step",
        fields=(
            _f("name", str, "the survey's name"),
            _f("answer", str, "the answer (empty when the step failed before one)"),
            _f(
                "status",
                str,
                "`ok` (the model answered), `degraded`, `error` or `invalid` (a typed answer "
                "that did not fit its form after a retry)",
                optional=True,
            ),
            _f("reason", str, "why the status is not `ok`", optional=True),
            _ECHO,
            _INSTRUMENT,
            _VALUE,
        ),
    ),
    EventType(
        name="interview_answer",
        writer="sim",
        doc="one agent's answer to a workflow `interview` step",
        fields=(
            _f("name", str, "the interview's name"),
            _f("answer", str, "the answer (empty when the step failed before one)"),
            _f(
                "status",
                str,
                "`ok` (the model answered), `degraded`, `error` or `invalid` (a typed answer "
                "that did not fit its form after a retry)",
                optional=True,
            ),
            _f("reason", str, "why the status is not `ok`", optional=True),
            _ECHO,
            _INSTRUMENT,
            _VALUE,
        ),
    ),
    EventType(
        name="run_end",
        writer="sim",
        doc="the last line of a run that ended (or stopped) on purpose",
        fields=(
            _f("status", str, "the manifest's status"),
            _f("reason", str, "why it stopped early", optional=True),
        ),
    ),
    # -- hosts (sim/host.py) ---------------------------------------------------------------
    EventType(
        name="agent_error",
        writer="sim",
        doc="a step that failed (or a default skill that could not be activated)",
        fields=(_f("error", str, "the error, cut at 500 characters"),),
    ),
    # -- agents (agent/agent.py; hosts too: defaults at setup, skills removed by a reload) --
    EventType(
        name="skill_activated",
        writer="agent, sim",
        doc="a skill became active",
        fields=(_SKILL, _f("default", bool, "a group default, at agent setup", optional=True)),
    ),
    EventType(
        name="skill_deactivated",
        writer="agent, sim",
        doc="a skill stopped being active",
        fields=(_SKILL, _f("reason", str, "set when its folder lost it", optional=True)),
    ),
    EventType(
        name="script_called",
        writer="agent",
        doc="a skill script ran",
        fields=(
            _SKILL,
            _f("ok", bool, "whether it succeeded"),
            _f("exit_code", int, "its exit code"),
            _f("tier", str, "how it ran: `entrypoint`, `hook`, `wrapper` or `subprocess`"),
            _f("isolation", str, "its isolation: `inline`, `thread` or `process`"),
            _f(
                "truncated",
                bool,
                "true: its output was cut at the runner's cap (written only then)",
                optional=True,
            ),
        ),
    ),
    EventType(
        name="measure",
        writer="agent",
        doc="a measure a skill recorded for the agent (`ctx.record` or an `AGENTSIM_MEASURE` line)",
        fields=(
            _SKILL,
            _f("name", str, "the measure's name"),
            _f("value", float, "its value"),
            _f("group", str, "the agent's group"),
        ),
    ),
    EventType(
        name="hook_decision",
        writer="agent",
        doc="a hook skipped the step or asked for a retry",
        fields=(
            _SKILL,
            _HOOK,
            _f("decision", str, "`skip` or `retry`"),
            _f("retried", bool, "whether the gate made the model answer again", optional=True),
        ),
    ),
    EventType(
        name="hook_gate_failed",
        writer="agent",
        doc="a post_step gate still failing after `agent.max_hook_retries`",
        fields=(_SKILL, _f("retries", int, "the retries made")),
    ),
    EventType(
        name="hook_failed",
        writer="agent",
        doc="a hook that failed or timed out",
        fields=(
            _SKILL,
            _HOOK,
            _f("timed_out", bool, "whether it overran its timeout"),
            _f("error", str, "the last line of the error, cut at 300 characters"),
        ),
    ),
    EventType(
        name="skill_quarantined",
        writer="agent",
        doc="a script quarantined after repeated timeouts (once per quarantine)",
        fields=(
            _SKILL,
            _f("script", str, "the script's path in the skill"),
            _f("hook", str | None, "the hook it ran as; null for a script call"),
        ),
    ),
    EventType(
        name="agent_degraded",
        writer="agent",
        doc="a model call failed after its retries: the agent kept its plan",
        fields=(_f("reason", str, "why, cut at 300 characters"),),
    ),
    EventType(
        name="agent_action",
        writer="agent",
        doc="what the agent did in a step it was not skipped",
        fields=(
            _f("action", str, "its action, cut at 300 characters"),
            _f("degraded", bool, "whether the step degraded"),
            _f(
                "outcome",
                str,
                "(new) how the step ended: `finished` (it called finish), `answered` (text and "
                "no tool call), `out_of_turns`, `degraded`",
                optional=True,
            ),
            _f(
                "acted",
                bool,
                "(new) whether the step wrote to the environment or ran a skill script",
                optional=True,
            ),
        ),
    ),
    # -- the city (env/city.py) ------------------------------------------------------------
    EventType(
        name="move",
        writer="env:city",
        doc="an agent starts walking",
        fields=(
            _f("from", str, "the place it leaves"),
            _f("to", str, "the place it walks to"),
            _f("depart", str, "simulated time, ISO 8601"),
            _f("arrive", str, "simulated time, ISO 8601"),
            _f("minutes", int, "walking time"),
            _f("reason", str, "`agent` or `place_closed`"),
        ),
    ),
    EventType(
        name="move_refused",
        writer="env:city",
        doc="a move that could not happen at the tick's end",
        fields=(_f("to", str, "the place asked for"), _f("reason", str, "why not")),
    ),
    EventType(
        name="arrive",
        writer="env:city",
        doc="an agent reaches the place it walked to (`time`: when)",
        fields=(_f("place", str, "the place id"),),
    ),
    EventType(
        name="place_closed",
        writer="env:city",
        doc="intervention `close_place`",
        fields=(_f("place", str, "the place id"),),
    ),
    EventType(
        name="place_opened",
        writer="env:city",
        doc="intervention `open_place`",
        fields=(_f("place", str, "the place id"),),
    ),
    EventType(
        name="city_occupancy",
        writer="env:city",
        doc="where agents are at the tick's end",
        fields=(
            _f("occupancy", dict[str, int], "place id -> agents there, sorted"),
            _f("in_transit", int, "agents walking"),
        ),
    ),
    # -- the social network (env/social.py) ------------------------------------------------
    EventType(
        name="post",
        writer="env:social",
        doc="a post, by an agent or broadcast (intervention `broadcast`)",
        fields=(
            _f("post_id", str, "`post-N`"),
            _f("text", str, "the post"),
            _f("stance", float | None, "its stance, -1..+1"),
            _f("author", str, "set for a broadcast", optional=True),
        ),
    ),
    EventType(
        name="message",
        writer="env:social",
        doc="a direct message",
        fields=(
            _f("to", str, "the recipient"),
            _f("message_id", str, "`msg-N`"),
            _f("text", str, "the message"),
        ),
    ),
    EventType(
        name="follow",
        writer="env:social",
        doc="an agent follows another",
        fields=(_f("target", str, "the agent followed"),),
    ),
    EventType(
        name="unfollow",
        writer="env:social",
        doc="an agent stops following another",
        fields=(_f("target", str, "the agent unfollowed"),),
    ),
    EventType(
        name="opinion_change",
        writer="env:social",
        doc="an agent's opinion changed",
        fields=(
            _f("old", float, "before, -1..+1"),
            _f("new", float, "after, -1..+1"),
            _f("cause", str, "`post`, `self` or `intervention`"),
            _f("post_id", str, "the post that moved it (cause `post`)", optional=True),
            _f("reason", str | None, "the agent's reason (cause `self`)", optional=True),
        ),
    ),
    EventType(
        name="social_opinions",
        writer="env:social",
        doc="the opinions at the tick's end",
        fields=(
            _f("n", int, "agents"),
            _f("mean", float, "mean opinion"),
            _f("std", float, "its standard deviation"),
            _f("histogram", list[int], "agents per opinion bin, -1 to +1"),
            _f("groups", dict[str, dict[str, float]], "group -> {n, mean, std}"),
            _f("group_histograms", dict[str, list[int]], "group -> agents per opinion bin"),
            _f("posts_delivered", int, "posts in the tick"),
            _f("messages_delivered", int, "messages in the tick"),
        ),
    ),
)

EVENTS: Mapping[str, EventType] = types.MappingProxyType({e.name: e for e in _DECLARED})
"""Type name -> its declaration, in the order of the docs' table."""


# -- building ---------------------------------------------------------------------------------


def event(
    kind: str, *, tick: int, time: str, agent_id: str | None = None, **fields: Any
) -> dict[str, Any]:
    """One event of ``events.jsonl``: the four common fields, then its type's own.

    Every writer builds its events through this (the engine at its current tick, an agent's
    step from its input, an environment module from the clock it was given), so no event is
    completed later: what a writer returns is what the log holds."""
    return {"tick": tick, "time": time, "type": kind, "agent_id": agent_id, **fields}


# -- checks ----------------------------------------------------------------------------------

_Events = TypeVar("_Events", bound=Sequence[Mapping[str, Any]])


def _key_problem(event: Mapping[str, Any], declared: Mapping[str, EventType] = EVENTS) -> str:
    """Why ``event``'s type or fields are not declared ("" if they are)."""
    kind = event.get("type")
    spec = declared.get(kind) if isinstance(kind, str) else None
    if spec is None:
        return (
            f"event type {kind!r} is not declared (known: {', '.join(sorted(declared))}); "
            "declare it in agentsim/events.py"
        )
    keys = event.keys()
    extra = keys - spec.names
    if extra:
        return (
            f"event {kind!r} has undeclared field(s) {', '.join(sorted(extra))} (declared: "
            f"{', '.join(sorted(spec.names))}); declare them in agentsim/events.py"
        )
    missing = spec.required - keys
    if missing:
        return (
            f"event {kind!r} lacks required field(s) {', '.join(sorted(missing))}; "
            "set them, or mark them optional in agentsim/events.py"
        )
    return ""


def checked(events: _Events, *, declared: Mapping[str, EventType] = EVENTS) -> _Events:
    """``events`` unchanged, once each one's type and field names are declared (in
    ``declared``: ``EVENTS`` and, in a run, its environment modules' own ``EVENTS``); raises
    ``EventError`` naming the first one that is not. (Names only: cheap enough for every
    line of a large run.)"""
    for event in events:
        problem = _key_problem(event, declared)
        if problem:
            raise EventError(problem)
    return events


def _matches(value: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    if tp is None or tp is type(None):
        return value is None
    origin = typing.get_origin(tp)
    if origin is types.UnionType or origin is typing.Union:
        return any(_matches(value, t) for t in typing.get_args(tp))
    if origin is list:
        (item,) = typing.get_args(tp)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is dict:
        key, val = typing.get_args(tp)
        return isinstance(value, dict) and all(
            _matches(k, key) and _matches(v, val) for k, v in value.items()
        )
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:  # a JSON number: 1 is as good as 1.0
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, tp)


def problems(event: Mapping[str, Any], *, declared: Mapping[str, EventType] = EVENTS) -> list[str]:
    """Everything wrong with ``event`` against its declaration (values included); empty
    when it is as declared."""
    problem = _key_problem(event, declared)
    if problem:
        return [problem]
    spec = declared[event["type"]]
    return [
        f"event {spec.name!r} field {f.name!r} is {event[f.name]!r}, "
        f"not {_type_name(f.type)} as declared in agentsim/events.py"
        for f in (*COMMON, *spec.fields)
        if f.name in event and not _matches(event[f.name], f.type)
    ]


# -- the docs' table -------------------------------------------------------------------------


def _type_name(tp: Any, *, bar: str = " | ") -> str:
    """``tp`` as the docs write it (``str | null``); ``bar`` joins a union (a table cell
    escapes it)."""
    if tp is Any:
        return "any"
    if tp is None or tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin is types.UnionType or origin is typing.Union:
        return bar.join(_type_name(t, bar=bar) for t in typing.get_args(tp))
    if origin is not None:
        args = ", ".join(_type_name(t, bar=bar) for t in typing.get_args(tp))
        return f"{origin.__name__}[{args}]"
    return str(tp.__name__)


_CELL_BAR = " \\| "  # a "|" inside a Markdown table cell


def _field_cell(f: Field) -> str:
    mark = "?" if f.optional else ""
    return f"`{f.name}{mark}` ({_type_name(f.type, bar=_CELL_BAR)}): {f.doc}"


def render_table() -> str:
    """The Markdown table of every event type, as docs/inspection.md shows it."""
    common = ", ".join(f"`{f.name}` ({_type_name(f.type)})" for f in COMMON)
    lines = [
        f"Every event has {common}; a field marked `?` may be left out. "
        "Generated from `agentsim/events.py`.",
        "",
        "| type | written by | meaning | fields |",
        "|---|---|---|---|",
    ]
    for spec in EVENTS.values():
        cells = "; ".join(_field_cell(f) for f in spec.fields) or "-"
        lines.append(f"| `{spec.name}` | {spec.writer} | {spec.doc} | {cells} |")
    return "\n".join(lines) + "\n"


_BLOCK = re.compile(re.escape(DOC_START) + r"\n.*?" + re.escape(DOC_END), re.DOTALL)


def replace_table(text: str) -> str:
    """``text`` (a Markdown document) with the block between the markers regenerated."""
    if DOC_START not in text or DOC_END not in text:
        raise EventError(
            f"the document has no event table markers; add a line {DOC_START!r} and a line "
            f"{DOC_END!r} where the table goes"
        )
    block = f"{DOC_START}\n{render_table()}{DOC_END}"
    return _BLOCK.sub(lambda _: block, text, count=1)


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m agentsim.events``: print the table; ``--write FILE`` regenerates it
    between the markers in FILE."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stdout.write(render_table())
        return 0
    if len(args) == 2 and args[0] == "--write":
        path = Path(args[1])
        path.write_text(replace_table(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    sys.stderr.write("usage: python -m agentsim.events [--write FILE]\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
