"""What one agent step is given and gives back, and the model seed it uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, Protocol

from agentsim._seeding import derive_seed
from agentsim.env.clock import WEEKDAYS
from agentsim.llm import prompt_blocks
from agentsim.llm.base import Usage

__all__ = [
    "OUTCOMES",
    "TOOL_RESULTS",
    "AgentSettings",
    "EnvAccess",
    "StepInput",
    "StepInputs",
    "StepOutcome",
    "step_seed",
]

# The ``blocks`` of a step input that has none: one read-only mapping for all of them.
_NO_BLOCKS: Mapping[str, str] = MappingProxyType({})


class EnvAccess(Protocol):
    """What an agent needs of the environment router (see ``agentsim.env.router``)."""

    def ask(
        self, agent_id: str, module: str, action: str, args: Mapping[str, Any], *, seq: int
    ) -> Any: ...
    async def aask(
        self, agent_id: str, module: str, action: str, args: Mapping[str, Any], *, seq: int
    ) -> Any: ...
    def observe(self, agent_id: str) -> str: ...
    def facts(self, agent_id: str) -> Mapping[str, Any]: ...
    def describe(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    max_react_turns: int = 4
    max_hook_retries: int = 2
    memory_prompt_tokens: int = 600
    prompt_cap_tokens: int = 6000
    trace: str = "full"  # full | summary | off
    # The model's ``model.tool_calls``: native | auto | text (agentsim.llm.textcalls).
    tool_calls: str = "auto"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepInput:
    """What one step is given. Agents without messages share one per tick, so the derived
    texts (``iso``, ``stamp``) are computed once per tick, not once per agent; build them
    with ``StepInputs``.

    ``blocks``: the texts of per-step prompt blocks by name (declared with ``step_input``
    in ``agentsim.llm.prompt_blocks``), rendered in the turn where the declaration puts
    them."""

    tick: int
    time: datetime
    env: EnvAccess | None = None
    messages: tuple[str, ...] = ()
    question: str | None = None
    read_only: bool = False
    blocks: Mapping[str, str] = field(default_factory=lambda: _NO_BLOCKS, hash=False)
    iso: str = field(init=False, repr=False, compare=False)
    stamp: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        iso = self.time.isoformat()
        day = WEEKDAYS[self.time.weekday()]
        object.__setattr__(self, "iso", iso)
        object.__setattr__(self, "stamp", f"time: {iso} ({day} {self.time:%H:%M})")
        if self.blocks:
            declared = prompt_blocks.BLOCKS
            for name in self.blocks:
                declared.step_block(name)


class StepInputs:
    """The step inputs of one tick, made once per tick from its tick, time and environment
    router (and the texts of its per-step prompt blocks, the same for every agent).

    ``shared`` is the one input of every agent without messages; ``for_agent`` gives an
    agent's input (``shared`` when it has no messages); ``question`` the read-only input of
    a survey or an interview, one for every agent asked."""

    __slots__ = ("shared",)

    def __init__(
        self,
        *,
        tick: int,
        time: datetime,
        env: EnvAccess | None = None,
        blocks: Mapping[str, str] | None = None,
    ) -> None:
        frozen = MappingProxyType(dict(blocks)) if blocks else _NO_BLOCKS
        self.shared = StepInput(tick=tick, time=time, env=env, blocks=frozen)

    @property
    def iso(self) -> str:
        """The tick's time, ISO-formatted (what memory lines and events carry)."""
        return self.shared.iso

    def for_agent(self, messages: Sequence[str] | None = None) -> StepInput:
        """The input of an agent that received ``messages`` this tick."""
        if not messages:
            return self.shared
        return replace(self.shared, messages=tuple(messages))

    def question(self, question: str) -> StepInput:
        """The read-only input that asks ``question`` (no tool that writes is offered)."""
        return replace(self.shared, question=question, read_only=True)


OUTCOMES = ("finished", "answered", "out_of_turns", "degraded", "error", "skipped")
"""How a step ends: the model called ``finish``; it ended with text and no tool call; it ran
out of ReAct turns; the model failed (after its retries); the step failed (a bug, a timeout,
a cancellation); a ``pre_step`` hook had it sit out."""

TOOL_RESULTS = ("ok", "refused", "failed")
"""A tool call's result: it did what it was asked; it was refused before it ran (bad
arguments, an unknown tool, action or skill, a skill that is not active, read-only mode);
it ran and failed (a script's or the environment's error)."""


@dataclass(slots=True, kw_only=True)
class StepOutcome:
    agent_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    intents: list[Any] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model_calls: int = 0
    script_calls: int = 0
    hook_calls: int = 0
    degraded: bool = False
    skipped: bool = False
    action: str = ""
    answer: str | None = None
    # How the step ended (one of ``OUTCOMES``), decided once when the step ends; whether it
    # acted on the world (an environment write, or a skill script ran) or only narrated.
    outcome: str = ""
    acted: bool = False
    # Tool calls by (tool, skill id or "", result), result one of ``TOOL_RESULTS``.
    tool_results: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # Tool calls the model wrote as text in its answer and the step ran (``model.tool_calls``).
    recovered_calls: int = 0
    # The skill ids the step's catalog listed (the catalog's own tuple, shared), and per
    # skill id [hook outputs shown, calls they suggested, suggested calls the step made]:
    # what ``tick_end``'s ``skills`` counts (trigger rates).
    catalog: tuple[str, ...] = ()
    hooks_seen: dict[str, list[int]] = field(default_factory=dict)


@dataclass(slots=True)
class StepScratch:
    """Mutable scratch of one step; never outlives it."""

    inp: StepInput
    out: StepOutcome
    seq: int = 0
    finished: bool = False
    # Whether the model's last round ended with ``finish`` (not with text alone).
    finish_called: bool = False
    # The current tool call's result (one of ``TOOL_RESULTS``) and the skill it concerns
    # ("" when none): its handler sets them, ``Agent._dispatch`` counts them.
    call_result: str = "ok"
    call_skill: str = ""
    # What skill scripts printed during the step: to the trace, never to the terminal.
    logs: list[dict[str, str]] = field(default_factory=list)
    # Whether the step's catalog and hook outputs were counted (on its first model round),
    # and the calls shown hook outputs suggested that the step has not made yet:
    # (skill id, tool, arguments).
    counted: bool = False
    suggested: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


def step_seed(seed: int, agent_id: str, tick: int, *, sample: int = 0) -> int:
    """The model seed of one agent's step: stable across executors and resumes. ``sample``
    (a study's sampled replicate, >= 1) draws another seed for the same step; 0 is the
    run's own."""
    where = str(tick) if not sample else f"{tick}:sample-{sample}"
    return derive_seed(seed, agent_id, where) & 0x7FFFFFFF
