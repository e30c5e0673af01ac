"""The workflow of an experiment: run, intervene, survey and interview steps, and the
selection of the agents a step addresses."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, StrictInt, model_serializer, model_validator

from agentsim.config._errors import StrictModel, fail
from agentsim.instruments import INSTRUMENTS, Instrument, InstrumentError, instrument_of

__all__ = [
    "MAX_TICKS",
    "NAME_PATTERN",
    "AgentSelector",
    "AnswerForm",
    "InterveneStep",
    "InterviewStep",
    "RunStep",
    "Step",
    "SurveyStep",
    "WorkflowStep",
]

MAX_TICKS = 1_000_000
"""Most ticks one experiment may run (a year of one-minute ticks is 525,600)."""
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


def _is_id(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, str) or (isinstance(value, int) and value >= 0)


class AgentSelector(StrictModel):
    """Which agents a step addresses: ``all``, ``[ids]``, ``{group: g}`` or ``{sample: n}``."""

    kind: Literal["all", "ids", "group", "sample"]
    ids: tuple[str, ...] = ()
    group: str | None = None
    sample: StrictInt | None = None

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: object) -> object:
        if isinstance(data, AgentSelector) or (isinstance(data, dict) and "kind" in data):
            return data  # already the long form (built in Python, not written in YAML)
        if data == "all":
            return {"kind": "all"}
        if isinstance(data, list | tuple) and data and all(_is_id(x) for x in data):
            # Integers are the ids of ``ids: numeric`` groups, written as YAML numbers.
            return {"kind": "ids", "ids": tuple(str(x) for x in data)}
        if isinstance(data, dict) and len(data) == 1:
            ((key, val),) = data.items()
            if key == "group" and isinstance(val, str):
                return {"kind": "group", "group": val}
            if key == "sample" and isinstance(val, int) and not isinstance(val, bool) and val > 0:
                return {"kind": "sample", "sample": val}
        raise fail(
            f"{data!r} is not an agent selection",
            "use all, a list of agent ids, {group: NAME} or {sample: N} with N >= 1",
        )

    @model_serializer(mode="plain")
    def _dump(self) -> Any:
        if self.kind == "ids":
            return list(self.ids)
        if self.kind == "group":
            return {"group": self.group}
        if self.kind == "sample":
            return {"sample": self.sample}
        return "all"


_ALL = AgentSelector(kind="all")


class RunStep(StrictModel):
    kind: ClassVar[str] = "run"
    ticks: StrictInt = Field(ge=1, le=MAX_TICKS)


class InterveneStep(StrictModel):
    """Either change environment state (``env`` + ``action`` + ``args``) or send agents a
    ``message``."""

    kind: ClassVar[str] = "intervene"
    env: str | None = None
    action: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    message: str | None = None
    agents: AgentSelector = _ALL

    @model_validator(mode="after")
    def _one_form(self) -> InterveneStep:
        env_form = self.env is not None or self.action is not None
        if env_form == (self.message is not None):
            raise fail(
                "needs either env + action (change environment state) or message (tell agents)",
                "write {env: MODULE, action: NAME, args: {...}} or {message: TEXT, agents: all}",
            )
        if env_form and (self.env is None or self.action is None):
            missing = "action" if self.action is None else "env"
            raise fail(f"'{missing}' is missing", f"add '{missing}'", field=missing)
        return self


class AnswerForm(StrictModel):
    """A typed answer (``agentsim.instruments``): ``{likert: [1, 5]}``, ``{choice: [a, b]}``,
    ``{number: {min: 0, max: 100}}`` (either bound optional) or ``{json: SCHEMA}``."""

    kind: Literal["likert", "choice", "number", "json"]
    spec: Any = None

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: object) -> object:
        if isinstance(data, AnswerForm) or (isinstance(data, dict) and "kind" in data):
            return data  # the long form (built in Python)
        if not (isinstance(data, dict) and len(data) == 1 and next(iter(data)) in INSTRUMENTS):
            raise fail(
                f"{data!r} is not an answer form",
                "use {likert: [1, 5]}, {choice: [yes, no]}, {number: {min: 0, max: 100}} or "
                "{json: SCHEMA}; leave answer out for free text",
            )
        ((key, val),) = data.items()
        try:
            instrument_of(key, val)
        except InstrumentError as exc:
            raise fail(exc.problem, exc.fix, field=exc.where) from None
        return {"kind": key, "spec": val}

    @model_serializer(mode="plain")
    def _dump(self) -> Any:
        return {self.kind: self.spec}

    def instrument(self) -> Instrument:
        return instrument_of(self.kind, self.spec)


class SurveyStep(StrictModel):
    """Ask agents a question in read-only mode and store the answers; ``answer`` asks for
    a typed answer (absent: free text)."""

    kind: ClassVar[str] = "survey"
    question: str = Field(min_length=1)
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    agents: AgentSelector = _ALL
    answer: AnswerForm | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        # A free-text step dumps as before (its config hash does not change).
        data = handler(self)
        if data.get("answer") is None:
            data.pop("answer", None)
        return data


class InterviewStep(SurveyStep):
    """A survey meant for a few agents; ``isinstance(step, SurveyStep)`` holds for it too."""

    kind: ClassVar[str] = "interview"


Step = RunStep | InterveneStep | SurveyStep | InterviewStep
_STEP_KINDS = ("run", "intervene", "survey", "interview")


class WorkflowStep(StrictModel):
    """One workflow item: a mapping with exactly one of the keys below."""

    run: RunStep | None = None
    intervene: InterveneStep | None = None
    survey: SurveyStep | None = None
    interview: InterviewStep | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> WorkflowStep:
        given = [k for k in _STEP_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise fail(
                f"a workflow step needs exactly one key, got {len(given)} ({', '.join(given)})",
                f"split it into separate list items, each one of: {', '.join(_STEP_KINDS)}",
            )
        return self

    @property
    def step(self) -> Step:
        found: Step | None = self.run or self.intervene or self.survey or self.interview
        assert found is not None  # guaranteed by _exactly_one
        return found

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        return {k: v for k, v in handler(self).items() if v is not None}
