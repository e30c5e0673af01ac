"""The experiment schema: ``ExperimentConfig`` loaded from YAML, with ``AGENTSIM_*`` overrides.

``load_experiment(path)`` reads the file and calls the pure ``parse_experiment(text)``. Every
problem becomes one ``ConfigError`` (exit code 2) naming the dotted field path, what was given,
what is allowed and how to fix it; nothing is written anywhere, so a bad file never leaves a
half-made run folder behind.

Relative paths (profile files, environment data, skill roots) resolve with
``ExperimentConfig.resolve_path``: against the YAML file's folder if the path exists there,
else against the current working directory if it exists there, else (so that the error names
the expected place) against the YAML file's folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agentsim.env.clock import parse_duration as _clock_duration
from agentsim.errors import ConfigError
from agentsim.sim._config_errors import apply_overrides, to_config_error
from agentsim.sim.profiles import TEMPLATE_NAMES

__all__ = [
    "IGNORED_ENV",
    "AgentGroup",
    "AgentLoopConfig",
    "AgentSelector",
    "ClockConfig",
    "EnvModuleConfig",
    "ExecutorConfig",
    "ExperimentConfig",
    "GroupSkills",
    "InterveneStep",
    "InterviewStep",
    "ModelConfig",
    "OutputConfig",
    "PricesConfig",
    "ProfileSpec",
    "RunStep",
    "SkillsConfig",
    "Step",
    "SurveyStep",
    "WorkflowStep",
    "format_duration",
    "load_experiment",
    "parse_duration",
    "parse_experiment",
]

ENV_PREFIX = "AGENTSIM_"
IGNORED_ENV: frozenset[str] = frozenset(
    {
        # Set by the runtime for skill scripts and worker processes; never config fields.
        "AGENTSIM_CONTEXT_JSON",
        "AGENTSIM_LOG_LEVEL",
    }
)
"""Runtime variables that are never config overrides, even if a field of that name appears.

An ``AGENTSIM_*`` variable is an override when its first part names a top-level field
(``AGENTSIM_SEED``, ``AGENTSIM_MODEL__BACKEND``); others (``AGENTSIM_API_KEY``,
``AGENTSIM_RAY_ADDRESS``) are left alone, so that users may name their own variables so.
Below the top level an unknown name is an error that names the variable.
"""

_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_GROUP_RE = r"^[a-z0-9][a-z0-9_-]*$"
_MODULE_RE = r"^[a-z][a-z0-9_]*$"
_URL_RE = r"^https?://\S+$"
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _fail(problem: str, fix: str, *, field: str = "") -> PydanticCustomError:
    """A validation error carrying our own wording; ``field`` extends the error location."""
    return PydanticCustomError(
        "agentsim", "{problem}", {"problem": problem, "fix": fix, "field": field}
    )


def parse_duration(value: object) -> timedelta:
    """``"15m"``, ``"1h30m"``, ``"90s"``, ``"2d"`` or int seconds -> a positive timedelta.

    The rules are the clock's (``agentsim.env.clock.parse_duration``); its ``ConfigError``
    becomes a pydantic custom error here, so that it reads well inside a model.
    """
    try:
        return _clock_duration(value)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise _fail(exc.problem, exc.fix) from None


def format_duration(delta: timedelta) -> str:
    """The canonical text of a duration (``timedelta(minutes=90)`` -> ``"1h30m"``)."""
    total = int(delta.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


def _non_empty(value: tuple[Any, ...], name: str, example: str) -> tuple[Any, ...]:
    # Checked here rather than with min_length, which pydantic also reports when an item fails.
    if not value:
        raise _fail(
            f"'{name}' must not be empty", f"give at least one item, e.g. {name}: {example}"
        )
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- clock -------------------------------------------------------------------------------


class ClockConfig(_Frozen):
    start: datetime = datetime(2026, 1, 1, 6, 0)
    tick: timedelta = timedelta(minutes=15)

    @field_validator("start", mode="before")
    @classmethod
    def _date_to_datetime(cls, value: object) -> object:
        # YAML turns an unquoted 2026-03-02 into a date; a clock needs a time of day.
        if isinstance(value, date) and not isinstance(value, datetime):
            return datetime.combine(value, time())
        return value

    @field_validator("tick", mode="before")
    @classmethod
    def _tick(cls, value: object) -> timedelta:
        return parse_duration(value)

    @field_serializer("tick")
    def _tick_text(self, value: timedelta) -> str:
        return format_duration(value)


# --- workflow ----------------------------------------------------------------------------


class AgentSelector(_Frozen):
    """Which agents a step addresses: ``all``, ``[ids]``, ``{group: g}`` or ``{sample: n}``."""

    kind: Literal["all", "ids", "group", "sample"]
    ids: tuple[str, ...] = ()
    group: str | None = None
    sample: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: object) -> object:
        if isinstance(data, AgentSelector) or (isinstance(data, dict) and "kind" in data):
            return data  # already the long form (built in Python, not written in YAML)
        if data == "all":
            return {"kind": "all"}
        if isinstance(data, list | tuple) and data and all(isinstance(x, str) for x in data):
            return {"kind": "ids", "ids": tuple(data)}
        if isinstance(data, dict) and len(data) == 1:
            ((key, val),) = data.items()
            if key == "group" and isinstance(val, str):
                return {"kind": "group", "group": val}
            if key == "sample" and isinstance(val, int) and not isinstance(val, bool) and val > 0:
                return {"kind": "sample", "sample": val}
        raise _fail(
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


class RunStep(_Frozen):
    kind: ClassVar[str] = "run"
    ticks: int = Field(ge=1)


class InterveneStep(_Frozen):
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
            raise _fail(
                "needs either env + action (change environment state) or message (tell agents)",
                "write {env: MODULE, action: NAME, args: {...}} or {message: TEXT, agents: all}",
            )
        if env_form and (self.env is None or self.action is None):
            missing = "action" if self.action is None else "env"
            raise _fail(f"'{missing}' is missing", f"add '{missing}'", field=missing)
        return self


class SurveyStep(_Frozen):
    """Ask agents a question in read-only mode and store the answers."""

    kind: ClassVar[str] = "survey"
    question: str = Field(min_length=1)
    name: str | None = Field(default=None, pattern=_NAME_RE)
    agents: AgentSelector = _ALL


class InterviewStep(SurveyStep):
    """A survey meant for a few agents; ``isinstance(step, SurveyStep)`` holds for it too."""

    kind: ClassVar[str] = "interview"


Step = RunStep | InterveneStep | SurveyStep | InterviewStep
_STEP_KINDS = ("run", "intervene", "survey", "interview")


class WorkflowStep(_Frozen):
    """One workflow item: a mapping with exactly one of the keys below."""

    run: RunStep | None = None
    intervene: InterveneStep | None = None
    survey: SurveyStep | None = None
    interview: InterviewStep | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> WorkflowStep:
        given = [k for k in _STEP_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise _fail(
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


# --- agents ------------------------------------------------------------------------------


class ProfileSpec(_Frozen):
    """Profiles sampled from a built-in ``template`` with the seed; ``fields`` are fixed
    overrides applied to every agent of the group."""

    template: str | None = None
    fields: dict[str, Any] = Field(default_factory=dict)

    @field_validator("template")
    @classmethod
    def _known(cls, value: str | None) -> str | None:
        if value is not None and value not in TEMPLATE_NAMES:
            raise _fail(
                f"unknown profile template {value!r} (known: {', '.join(TEMPLATE_NAMES)})",
                "use one of the known templates or give a profiles file",
            )
        return value


class GroupSkills(_Frozen):
    default: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _disjoint(self) -> GroupSkills:
        both = sorted(set(self.default) & set(self.disabled))
        if both:
            raise _fail(
                f"skill(s) {', '.join(both)} both default-activated and disabled",
                "remove them from one of the two lists",
            )
        return self


class AgentGroup(_Frozen):
    group: str = Field(pattern=_GROUP_RE, max_length=64)
    count: int | None = Field(default=None, ge=1)
    profiles: str | None = None
    profile: ProfileSpec | None = None
    persona: str | None = None
    skills: GroupSkills = GroupSkills()

    @model_validator(mode="after")
    def _source(self) -> AgentGroup:
        if (self.count is None) == (self.profiles is None):
            raise _fail(
                "needs exactly one of 'count' or 'profiles'",
                "give count: N (with an optional profile template) or profiles: FILE.jsonl|csv",
                field="count",
            )
        if self.profiles is not None:
            if not self.profiles.lower().endswith((".jsonl", ".csv")):
                raise _fail(
                    f"profiles file {self.profiles!r} must end in .jsonl or .csv",
                    "convert the file to JSON Lines or CSV",
                    field="profiles",
                )
            if self.profile is not None and self.profile.template is not None:
                raise _fail(
                    "a template cannot be combined with a profiles file",
                    "drop profile.template (profile.fields may still override file columns)",
                    field="profile.template",
                )
        return self


# --- skills, model, agent loop, environment, executor, output -----------------------------


class SkillsConfig(_Frozen):
    paths: tuple[str, ...] = ()
    builtin: bool = True
    catalog_budget_tokens: int = Field(default=2000, ge=64)
    trusted_namespaces: tuple[str, ...] = ("built-in",)
    hot_reload: bool = True


class PricesConfig(_Frozen):
    prompt_per_1k: float = Field(ge=0)
    completion_per_1k: float = Field(ge=0)


class ModelConfig(_Frozen):
    backend: Literal["scripted", "openai"] = "scripted"
    model: str | None = None
    base_url: str | None = Field(default=None, pattern=_URL_RE)
    api_key_env: str | None = None
    max_concurrency: int = Field(default=64, ge=1)
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    timeout: float = Field(default=60, gt=0)
    max_retries: int = Field(default=5, ge=0)
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_tokens: int = Field(default=512, ge=1)
    cache: Literal["off", "record", "replay"] = "off"
    cache_path: str | None = None
    cache_fallthrough: bool = False
    prices: PricesConfig | None = None

    @field_validator("cache", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        # YAML 1.1 reads a bare `off` as False.
        return "off" if value is False else value

    @field_validator("api_key_env")
    @classmethod
    def _key_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        looks_like_key = value.startswith(("sk-", "sk_")) or (
            len(value) >= 24 and "_" not in value and not value.isupper()
        )
        if looks_like_key or not _ENV_NAME_RE.match(value):
            # Never echo the value: it may be a real secret.
            raise _fail(
                "must be the NAME of an environment variable holding the key, and the value "
                "given looks like a key itself or is not a variable name",
                "write api_key_env: OPENAI_API_KEY and export OPENAI_API_KEY=... in the shell",
            )
        return value

    @model_validator(mode="after")
    def _openai_needs(self) -> ModelConfig:
        if self.backend == "openai":
            for name, example in (
                ("model", "gpt-4o-mini"),
                ("base_url", "http://127.0.0.1:8000/v1"),
            ):
                if getattr(self, name) is None:
                    raise _fail(
                        f"'{name}' is required when backend is openai",
                        f"add {name}: {example}",
                        field=name,
                    )
        return self


class AgentLoopConfig(_Frozen):
    max_react_turns: int = Field(default=6, ge=1)
    max_hook_retries: int = Field(default=2, ge=0)
    memory_prompt_tokens: int = Field(default=600, ge=0)
    prompt_cap_tokens: int = Field(default=6000, ge=1)


class EnvModuleConfig(_Frozen):
    """An environment module; every key but ``module`` is an option the module validates."""

    module: str = Field(pattern=_MODULE_RE)
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: object) -> object:
        if isinstance(data, dict) and set(data) != {"module", "options"}:
            rest = {k: v for k, v in data.items() if k != "module"}
            return (
                {"module": data.get("module"), "options": rest}
                if "module" in data
                else {"options": rest}
            )
        return data

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        return {"module": self.module, **self.options}


class ExecutorConfig(_Frozen):
    kind: Literal["local", "ray"] = "local"
    hosts: int | None = Field(default=None, ge=1)
    address: str | None = None
    step_timeout: float = Field(default=120, gt=0)


class OutputConfig(_Frozen):
    dir: str = "workspace"
    run_id: str | None = Field(default=None, pattern=_NAME_RE)
    formats: tuple[Literal["jsonl", "parquet"], ...] = ("jsonl", "parquet")
    checkpoint_every: int = Field(default=0, ge=0)
    # Ticks between writes of agents' memory.jsonl / trace.jsonl (also written at checkpoints,
    # on stop and at the end). 1 = every tick; larger values trade freshness for speed.
    flush_every: int = Field(default=4, ge=1)

    @field_validator("formats")
    @classmethod
    def _some_format(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _non_empty(value, "formats", "[jsonl]")


# --- the experiment ----------------------------------------------------------------------


class ExperimentConfig(_Frozen):
    name: str = Field(pattern=_NAME_RE)
    seed: int = Field(default=0, ge=0)
    description: str | None = None
    clock: ClockConfig = ClockConfig()
    ticks: int | None = Field(default=None, ge=1)
    workflow: tuple[WorkflowStep, ...] | None = None
    agents: tuple[AgentGroup, ...]
    skills: SkillsConfig = SkillsConfig()
    model: ModelConfig = ModelConfig()
    agent: AgentLoopConfig = AgentLoopConfig()
    environment: tuple[EnvModuleConfig, ...] = ()
    executor: ExecutorConfig = ExecutorConfig()
    output: OutputConfig = OutputConfig()

    _source: str = PrivateAttr(default="<string>")
    _source_dir: Path = PrivateAttr(default=Path("."))

    @field_validator("agents", "workflow")
    @classmethod
    def _some(cls, value: tuple[Any, ...] | None, info: ValidationInfo) -> Any:
        example = (
            "[{run: {ticks: 10}}]" if info.field_name == "workflow" else "[{group: g, count: 10}]"
        )
        return None if value is None else _non_empty(value, str(info.field_name), example)

    @model_validator(mode="after")
    def _consistent(self) -> ExperimentConfig:
        if (self.ticks is None) == (self.workflow is None):
            raise _fail(
                "needs exactly one of 'ticks' or 'workflow'",
                "give ticks: N for a plain run, or a workflow list of run/intervene/survey steps",
                field="ticks",
            )
        _unique([g.group for g in self.agents], "agents", "group", "agent group")
        _unique([m.module for m in self.environment], "environment", "module", "module")
        groups = {g.group for g in self.agents}
        modules = [m.module for m in self.environment]
        for i, item in enumerate(self.workflow or ()):
            step = item.step
            if isinstance(step, RunStep):
                continue
            where = f"workflow.{i}.{step.kind}"
            if isinstance(step, InterveneStep) and step.env is not None and step.env not in modules:
                raise _fail(
                    f"environment module {step.env!r} is not configured "
                    f"(configured: {', '.join(modules) or 'none'})",
                    "add it under environment: or fix the name",
                    field=f"{where}.env",
                )
            sel = step.agents
            if sel.kind == "group" and sel.group not in groups:
                raise _fail(
                    f"agent group {sel.group!r} does not exist "
                    f"(groups: {', '.join(sorted(groups))})",
                    "use one of the groups defined under agents:",
                    field=f"{where}.agents",
                )
        return self

    @property
    def source(self) -> str:
        """Where the config came from (a file path or ``"<string>"``)."""
        return self._source

    @property
    def source_dir(self) -> Path:
        """The folder relative paths resolve against (the YAML file's folder)."""
        return self._source_dir

    def resolve_path(self, path: str | Path) -> Path:
        """Resolve a path from the config: see the module docstring for the rule."""
        p = Path(path).expanduser()
        if p.is_absolute():
            return p
        beside = self._source_dir / p
        if beside.exists() or not p.exists():
            return beside
        return p.absolute()

    def steps(self) -> tuple[Step, ...]:
        """The workflow as steps; a plain ``ticks: N`` is one ``RunStep``."""
        if self.workflow is None:
            return (RunStep(ticks=self.ticks or 0),)
        return tuple(item.step for item in self.workflow)

    def total_ticks(self) -> int:
        return sum(s.ticks for s in self.steps() if isinstance(s, RunStep))

    def resolved_dict(self) -> dict[str, Any]:
        """Every field with its defaults, JSON/YAML-serialisable (durations as text)."""
        data = self.model_dump(mode="json")
        for key in ("ticks", "workflow"):
            if data[key] is None:
                del data[key]
        return data

    def config_hash(self) -> str:
        """sha256 of the canonical JSON of ``resolved_dict()``."""
        text = json.dumps(self.resolved_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _unique(names: Sequence[str], where: str, key: str, what: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise _fail(
                f"duplicate {what} {name!r}",
                f"give each {what} a unique name",
                field=f"{where}.{i}.{key}",
            )
        seen.add(name)


# --- loading -----------------------------------------------------------------------------


def load_experiment(path: Path, *, environ: Mapping[str, str] | None = None) -> ExperimentConfig:
    """Read and validate an experiment YAML file.

    ``environ`` defaults to ``os.environ``: its ``AGENTSIM_*`` variables override fields. Pass
    ``{}`` to ignore the environment. Raises ``ConfigError`` before anything is written.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            "", f"experiment file {path} does not exist", "check the path and the current folder"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            "", f"cannot read experiment file {path}: {exc}", "give a readable UTF-8 YAML file"
        ) from None
    env = os.environ if environ is None else environ
    return parse_experiment(text, source=str(path), base_dir=path.parent, environ=env)


def parse_experiment(
    text: str,
    *,
    source: str = "<string>",
    base_dir: Path = Path("."),
    environ: Mapping[str, str] | None = None,
) -> ExperimentConfig:
    """Validate experiment YAML text. Pure: ``environ=None`` means no overrides (unlike
    ``load_experiment``, which defaults to the process environment)."""
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark, ctx = exc.problem_mark, exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        if ctx is not None and exc.context and (mark is None or ctx.line != mark.line):
            # The problem is often found at the end of the file; say where it started.
            at += f" ({exc.context} started at line {ctx.line + 1})"
        raise ConfigError(
            "",
            f"{source} is not valid YAML{at}: {exc.problem or 'syntax error'}",
            "fix the indentation, quoting or colons there",
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError("", f"{source} is not valid YAML: {exc}", "fix the YAML syntax") from None
    if not isinstance(data, dict):
        raise ConfigError(
            "",
            f"{source} must hold a mapping of fields, got {type(data).__name__}",
            "start the file with `name: ...`, `agents: ...` and `ticks: ...` lines",
        )
    overridden = apply_overrides(
        ExperimentConfig,
        data,
        environ or {},
        prefix=ENV_PREFIX,
        ignored=IGNORED_ENV,
        free_form=EnvModuleConfig,
    )
    try:
        config = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise to_config_error(
            ExperimentConfig, exc, source=source, overridden=overridden, hints=_PATTERN_HINTS
        ) from None
    config._source = source
    config._source_dir = Path(base_dir)
    return config


_PATTERN_HINTS = {
    _NAME_RE: "use letters, digits, '.', '_' and '-' (up to 64, starting with a letter or digit)",
    _GROUP_RE: "use lower-case letters, digits, '_' and '-', starting with a letter or digit",
    _MODULE_RE: "use lower-case letters, digits and '_', starting with a letter",
    _URL_RE: "use an http:// or https:// URL such as http://127.0.0.1:8000/v1",
}
