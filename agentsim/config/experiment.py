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
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from agentsim.config._errors import StrictModel, apply_overrides, fail, to_config_error
from agentsim.config._sections import (
    MAX_AGENTS,
    MAX_TICK_LENGTH,
    PATTERN_HINTS,
    AgentGroup,
    AgentLoopConfig,
    BudgetConfig,
    ClockConfig,
    EnvModuleConfig,
    ExecutorConfig,
    GroupSkills,
    ModelConfig,
    OutputConfig,
    PricesConfig,
    ProfileSpec,
    SkillsConfig,
    format_duration,
    non_empty,
    parse_duration,
)
from agentsim.config._workflow import (
    MAX_TICKS,
    NAME_PATTERN,
    AgentSelector,
    InterveneStep,
    InterviewStep,
    RunStep,
    Step,
    SurveyStep,
    WorkflowStep,
)
from agentsim.config._yaml import MAX_CONFIG_BYTES, read_yaml_mapping
from agentsim.env.base import unknown_intervention
from agentsim.errors import ConfigError

__all__ = [
    "DEFAULT_MODEL",
    "IGNORED_ENV",
    "MAX_AGENTS",
    "MAX_TICKS",
    "MAX_TICK_LENGTH",
    "MODEL_FAILURE_LIMITS",
    "AgentGroup",
    "AgentLoopConfig",
    "AgentSelector",
    "BudgetConfig",
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
DEFAULT_MODEL = "default"
"""The name of the ``model:`` block among the named ``models:`` (metrics, inspect)."""
MODEL_FAILURE_LIMITS = ("max_consecutive_failures", "max_degraded_share")
"""The failure limits a ``models.NAME`` block takes from ``model:`` unless it sets its own."""
IGNORED_ENV: frozenset[str] = frozenset(
    {
        # Set by the runtime for skill scripts and worker processes; never config fields.
        "AGENTSIM_CONTEXT_JSON",
        "AGENTSIM_LOG_LEVEL",
    }
)
"""Runtime variables that are never config overrides.

Every other ``AGENTSIM_*`` variable overrides a field (``AGENTSIM_SEED``,
``AGENTSIM_MODEL__BACKEND``); one that names no field is an error naming the close match, so
a typo is never silently ignored. The variable that ``model.api_key_env`` names is left alone.
"""

# --- the experiment ----------------------------------------------------------------------


class ExperimentConfig(StrictModel):
    name: str = Field(pattern=NAME_PATTERN)
    seed: StrictInt = Field(default=0, ge=0, le=2**63 - 1)
    description: str | None = None
    clock: ClockConfig = ClockConfig()
    ticks: StrictInt | None = Field(default=None, ge=1, le=MAX_TICKS)
    workflow: tuple[WorkflowStep, ...] | None = None
    agents: tuple[AgentGroup, ...]
    skills: SkillsConfig = SkillsConfig()
    model: ModelConfig = ModelConfig()
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    agent: AgentLoopConfig = AgentLoopConfig()
    environment: tuple[EnvModuleConfig, ...] = ()
    executor: ExecutorConfig = ExecutorConfig()
    output: OutputConfig = OutputConfig()
    # What the run may spend (tokens, money, wall time); not part of ``config_hash``: a run
    # stopped by it resumes with a raised budget.
    budget: BudgetConfig | None = None

    _source: str = PrivateAttr(default="<string>")
    _source_dir: Path = PrivateAttr(default=Path("."))

    @model_validator(mode="before")
    @classmethod
    def _models_inherit_limits(cls, data: Any) -> Any:
        """A ``models.NAME`` block without its own ``max_consecutive_failures`` or
        ``max_degraded_share`` takes the ``model:`` block's (each model keeps its own count
        against it: ``agentsim.run.metrics``)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("models"), Mapping):
            return data
        base = data.get("model")
        if isinstance(base, ModelConfig):
            base = base.model_dump()
        if not isinstance(base, Mapping):
            base = {}
        inherited = {k: base[k] for k in MODEL_FAILURE_LIMITS if k in base}
        if not inherited:
            return data
        models = {
            name: {**inherited, **block} if isinstance(block, Mapping) else block
            for name, block in data["models"].items()
        }
        return {**data, "models": models}

    @field_validator("agents", "workflow")
    @classmethod
    def _some(cls, value: tuple[Any, ...] | None, info: ValidationInfo) -> Any:
        example = (
            "[{run: {ticks: 10}}]" if info.field_name == "workflow" else "[{group: g, count: 10}]"
        )
        return None if value is None else non_empty(value, str(info.field_name), example)

    @model_validator(mode="after")
    def _consistent(self) -> ExperimentConfig:
        if (self.ticks is None) == (self.workflow is None):
            raise fail(
                "needs exactly one of 'ticks' or 'workflow'",
                "give ticks: N for a plain run, or a workflow list of run/intervene/survey steps",
                field="ticks",
            )
        _unique([g.group for g in self.agents], "agents", "group", "agent group")
        _unique([m.name for m in self.environment], "environment", "module", "module")
        self._check_sizes()
        groups = {g.group for g in self.agents}
        for i, g in enumerate(self.agents):
            if g.model is not None and g.model not in self.models:
                raise fail(
                    f"model {g.model!r} is not defined "
                    f"(models: {', '.join(sorted(self.models)) or 'none'})",
                    "define it under models: (a block like model:) or fix the name",
                    field=f"agents.{i}.model",
                )
        for name in self.models:
            if name == DEFAULT_MODEL or not re.match(r"^[a-z0-9][a-z0-9_-]*$", name):
                raise fail(
                    f"model name {name!r} is reserved or not a name",
                    "use lower-case letters, digits, '_' and '-', other than 'default'",
                    field=f"models.{name}",
                )
        modules = {m.name: m for m in self.environment}
        asked: dict[str, int] = {}
        for i, item in enumerate(self.workflow or ()):
            step = item.step
            if isinstance(step, RunStep):
                continue
            where = f"workflow.{i}.{step.kind}"
            if isinstance(step, SurveyStep) and step.name is not None:
                # Each asking keeps its answers in surveys/NAME.jsonl: a second asking under
                # the same name would replace the first's.
                if step.name in asked:
                    raise fail(
                        f"the name {step.name!r} is already used by workflow.{asked[step.name]}",
                        f"give each asking its own name, e.g. {step.name}-before and "
                        f"{step.name}-after",
                        field=f"{where}.name",
                    )
                asked[step.name] = i
            if isinstance(step, InterveneStep) and step.env is not None:
                _check_intervention(step, modules, where)
            sel = step.agents
            if sel.kind == "group" and sel.group not in groups:
                raise fail(
                    f"agent group {sel.group!r} does not exist "
                    f"(groups: {', '.join(sorted(groups))})",
                    "use one of the groups defined under agents:",
                    field=f"{where}.agents",
                )
        if self.budget is not None and self.budget.money is not None:
            unpriced = [n for n, m in self.used_models().items() if m.prices is None]
            if unpriced:
                where = ", ".join(
                    "model" if n == DEFAULT_MODEL else f"models.{n}" for n in unpriced
                )
                raise fail(
                    f"a money budget needs the price of every model the run uses; {where} "
                    "has no prices",
                    f"add prices to {where} (e.g. prices: {{prompt_per_1k: 0.00015, "
                    "completion_per_1k: 0.0006}), or budget tokens instead",
                    field="budget.money",
                )
        return self

    def _check_sizes(self) -> None:
        """Bounds on sums, which no single field's bound catches."""
        agents = sum(g.count or 0 for g in self.agents)
        if agents > MAX_AGENTS:
            raise fail(
                f"the groups hold {agents:,} agents together, more than the {MAX_AGENTS:,} "
                "one experiment may hold",
                "lower the counts",
                field="agents",
            )
        ticks = self.total_ticks()
        if ticks > MAX_TICKS:
            raise fail(
                f"the workflow runs {ticks:,} ticks, more than the {MAX_TICKS:,} one experiment "
                "may run",
                "run fewer ticks (a longer clock.tick covers the same time in fewer)",
                field="workflow",
            )
        try:
            self.clock.start + self.clock.tick * ticks
        except OverflowError:
            raise fail(
                f"{ticks:,} ticks of {format_duration(self.clock.tick)} from "
                f"{self.clock.start:%Y-%m-%d} end after the year 9999",
                "run fewer ticks or use a shorter tick",
                field="clock.tick",
            ) from None

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

    def group_models(self) -> dict[str, str]:
        """Group -> the name of its model (``default`` for ``model:``)."""
        return {g.group: g.model or DEFAULT_MODEL for g in self.agents}

    def model_named(self, name: str) -> ModelConfig:
        """The model block ``name`` (``default``: ``model:``)."""
        return self.model if name == DEFAULT_MODEL else self.models[name]

    def used_models(self) -> dict[str, ModelConfig]:
        """The model blocks some group uses, by name, the default first."""
        names = sorted(set(self.group_models().values()), key=lambda n: (n != DEFAULT_MODEL, n))
        return {n: self.model_named(n) for n in names}

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
        for key in ("ticks", "workflow", "budget"):
            if data[key] is None:
                del data[key]
        return data

    def config_hash(self) -> str:
        """sha256 of the canonical JSON of ``resolved_dict()`` without ``budget`` (what the
        run may spend does not change what it does: a resume may raise it)."""
        data = self.resolved_dict()
        data.pop("budget", None)
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _check_intervention(
    step: InterveneStep, modules: Mapping[str, EnvModuleConfig], where: str
) -> None:
    """The module is configured, has the action, and its declared arguments fit (the ids
    they name are checked when the run's modules are built, before the run folder)."""
    if step.env not in modules:
        raise fail(
            f"environment module {step.env!r} is not configured "
            f"(configured: {', '.join(modules) or 'none'})",
            "add it under environment: or fix the name",
            field=f"{where}.env",
        )
    module = modules[step.env or ""]
    known = module.interventions
    if step.action not in known:
        problem, _, fix = unknown_intervention(step.env or "", step.action or "", known).partition(
            "; "
        )
        raise fail(problem, fix, field=f"{where}.action")
    cls = module.module_class
    if cls is None:
        return
    try:
        cls.parse_intervention(step.action, step.args, field=f"{where}.args")
    except ConfigError as exc:
        raise fail(exc.problem, exc.fix, field=exc.field) from None


def _unique(names: Sequence[str], where: str, key: str, what: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise fail(
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
    env = os.environ if environ is None else environ
    text = _read_config_file(path)
    return parse_experiment(text, source=str(path), base_dir=path.parent, environ=env)


def _read_config_file(path: Path) -> str:
    """The file's text; a missing, special (FIFO, device) or oversized file is refused before
    it is read, so that neither blocks nor fills memory."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigError(
            "", f"experiment file {path} does not exist", "check the path and the current folder"
        ) from None
    except OSError as exc:
        raise ConfigError(
            "", f"cannot read experiment file {path}: {exc.strerror}", "check the path"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (FIFO, device)"
        raise ConfigError(
            "", f"cannot read experiment file {path}: it is {kind}", "give the path of a YAML file"
        )
    if info.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            "",
            f"experiment file {path} is {info.st_size:,} bytes, more than the "
            f"{MAX_CONFIG_BYTES:,} an experiment file may hold",
            "keep profiles and places in their own files (agents[].profiles, environment[].places)",
        )
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            "", f"cannot read experiment file {path}: {exc}", "give a readable UTF-8 YAML file"
        ) from None


def parse_experiment(
    text: str,
    *,
    source: str = "<string>",
    base_dir: Path = Path("."),
    environ: Mapping[str, str] | None = None,
) -> ExperimentConfig:
    """Validate experiment YAML text. Pure: ``environ=None`` means no overrides (unlike
    ``load_experiment``, which defaults to the process environment)."""
    data = read_yaml_mapping(text, source=source)
    ignored = IGNORED_ENV
    model = data.get("model")
    if isinstance(model, dict) and isinstance(model.get("api_key_env"), str):
        # The key's own variable may carry the prefix; it is a secret, never an override.
        ignored = ignored | {model["api_key_env"]}
    models = data.get("models")
    if isinstance(models, dict):
        ignored = ignored | {
            m["api_key_env"]
            for m in models.values()
            if isinstance(m, dict) and isinstance(m.get("api_key_env"), str)
        }
    overridden = apply_overrides(
        ExperimentConfig,
        data,
        environ or {},
        prefix=ENV_PREFIX,
        ignored=ignored,
        free_form=EnvModuleConfig,
    )
    try:
        config = ExperimentConfig.model_validate(data, context={"base_dir": Path(base_dir)})
    except ValidationError as exc:
        raise to_config_error(
            ExperimentConfig, exc, source=source, overridden=overridden, hints=PATTERN_HINTS
        ) from None
    config._source = source
    config._source_dir = Path(base_dir)
    return config
