"""The study file: a base experiment, its arms, replicates and measures (docs/studies.md).

``load_study(path)`` reads a study YAML file within the experiment file's limits, validates
it (``StudySpec``: strict, every error a ``ConfigError`` naming the field path and the fix,
exit code 2), loads the base experiment (a path relative to the study file) and builds every
arm's experiment for every replicate, so that a study that cannot run is refused before
anything is written. An arm is the base with its ``set:`` applied exactly as
``agentsim run --set`` applies it, and with ``workflow:`` (if given) in place of the base's
steps from ``from_tick`` on; an arm with ``from_tick`` is a fork of the control's run of the
same replicate at that tick, so it must keep what made the ticks before it (checked here as
``agentsim run --fork`` checks it).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from agentsim.config._errors import StrictModel, fail, to_config_error
from agentsim.config._sections import PATTERN_HINTS, format_duration, parse_duration
from agentsim.config._workflow import NAME_PATTERN, RunStep, WorkflowStep
from agentsim.config._yaml import MAX_CONFIG_BYTES, read_yaml_mapping
from agentsim.config.experiment import ExperimentConfig, load_experiment, parse_experiment
from agentsim.errors import ConfigError
from agentsim.llm.backends import BACKENDS
from agentsim.run.checkpoints import Checkpoint
from agentsim.run.fork import ForkPoint, check_shared, set_value

__all__ = [
    "MAX_REPLICATES",
    "Arm",
    "Measure",
    "PlannedRun",
    "Replicates",
    "Study",
    "StudyBudget",
    "StudySpec",
    "fork_position",
    "load_study",
    "parse_study",
    "sampling_problem",
]

MAX_REPLICATES = 1_000
"""Most replicates one study may run per arm."""
ARM_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$"
_HINTS = {
    **PATTERN_HINTS,
    ARM_PATTERN: "use letters, digits, '_' and '-' (up to 40, starting with a letter or digit)",
}
_MEASURE_KINDS = ("survey", "measure", "env", "action")


class Replicates(StrictModel):
    """``{seeds: [1, 2, 3]}``, ``{count: 3}`` (seeds base.seed, base.seed + 1, ...) or
    ``{samples: 3}`` (the base's seed, the model's samples differ: needs a sampling model)."""

    seeds: tuple[StrictInt, ...] | None = None
    count: StrictInt | None = Field(default=None, ge=1, le=MAX_REPLICATES)
    samples: StrictInt | None = Field(default=None, ge=1, le=MAX_REPLICATES)

    @model_validator(mode="after")
    def _one(self) -> Replicates:
        given = [k for k in ("seeds", "count", "samples") if getattr(self, k) is not None]
        if len(given) != 1:
            raise fail(
                "needs exactly one of seeds, count or samples"
                + (f" (got {', '.join(given)})" if given else ""),
                "write e.g. replicates: {seeds: [1, 2, 3]} or {count: 3}",
            )
        if self.seeds is not None:
            if not self.seeds or len(self.seeds) > MAX_REPLICATES:
                raise fail(
                    f"seeds must list 1 to {MAX_REPLICATES:,} seeds",
                    "write e.g. seeds: [1, 2, 3]",
                    field="seeds",
                )
            if len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
                raise fail(
                    f"seeds {list(self.seeds)} repeat a seed or hold a negative one",
                    "give distinct seeds >= 0 (a repeated seed repeats a run exactly)",
                    field="seeds",
                )
        return self


class Arm(StrictModel):
    """One arm: the base experiment with changes."""

    name: str = Field(pattern=ARM_PATTERN)
    from_tick: StrictInt | None = Field(default=None, ge=1)
    set: dict[str, Any] = Field(default_factory=dict)
    workflow: tuple[WorkflowStep, ...] | None = None

    @field_validator("set")
    @classmethod
    def _keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not key or any(not part for part in key.split(".")):
                raise fail(
                    f"{key!r} is not a dotted path",
                    "write e.g. set: {workflow.1.intervene.args.text: ...}",
                )
        return value

    @field_validator("workflow")
    @classmethod
    def _some(cls, value: tuple[WorkflowStep, ...] | None) -> Any:
        if value is not None and not value:
            raise fail(
                "'workflow' must not be empty",
                "give the steps from from_tick on, e.g. workflow: [{run: {ticks: 4}}]",
            )
        return value


class Measure(StrictModel):
    """One measure to compare: exactly one of ``survey``, ``measure``, ``env``
    (``MODULE.SERIES``) or ``action``. Reading them is ``agentsim.study.compare``'s."""

    survey: str | None = Field(default=None, pattern=NAME_PATTERN)
    measure: str | None = Field(default=None, min_length=1, max_length=200)
    env: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_.-]+$")
    action: str | None = Field(default=None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _one(self) -> Measure:
        given = [k for k in _MEASURE_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise fail(
                "a measure names exactly one of survey, measure, env or action"
                + (f" (got {', '.join(given)})" if given else ""),
                "write e.g. {survey: opinion}, {measure: NAME}, {env: social.opinion} or "
                "{action: post}",
            )
        return self

    @property
    def kind(self) -> str:
        return next(k for k in _MEASURE_KINDS if getattr(self, k) is not None)

    def as_dict(self) -> dict[str, str]:
        """The measure as the study file writes it (``{"survey": "opinion"}``)."""
        return {self.kind: str(getattr(self, self.kind))}


class StudyBudget(StrictModel):
    """``budget:``: the experiment's budget shape (tokens, money, wall time; each optional)."""

    tokens: StrictInt | None = Field(default=None, ge=1)
    money: StrictFloat | StrictInt | None = Field(default=None, gt=0)
    wall_time: timedelta | None = None

    @field_validator("wall_time", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return None if value is None else parse_duration(value)


class StudySpec(StrictModel):
    name: str = Field(pattern=NAME_PATTERN)
    experiment: str = Field(min_length=1)
    control: str | None = None
    replicates: Replicates
    arms: tuple[Arm, ...]
    measures: tuple[Measure, ...] = ()
    concurrency: StrictInt = Field(default=2, ge=1, le=256)
    budget: StudyBudget | None = None

    @model_validator(mode="after")
    def _arms(self) -> StudySpec:
        if not self.arms:
            raise fail(
                "'arms' must not be empty",
                "give the control and a treatment, e.g. arms: [{name: control}, "
                "{name: treated, set: {...}}]",
                field="arms",
            )
        names = [a.name for a in self.arms]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise fail(
                    f"duplicate arm {name!r}", "give each arm a unique name", field=f"arms.{i}.name"
                )
        control = self.control_name
        if control not in names:
            raise fail(
                f"arm {control!r} does not exist (arms: {', '.join(names)})",
                "name one of the arms, or leave control out (the first arm)",
                field="control",
            )
        i = names.index(control)
        if self.arms[i].from_tick is not None:
            raise fail(
                f"the control arm {control!r} has from_tick; the other arms fork from it",
                "remove from_tick from the control arm",
                field=f"arms.{i}.from_tick",
            )
        return self

    @property
    def control_name(self) -> str:
        return self.control or self.arms[0].name


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedRun:
    """One run of a study: an arm's experiment for one replicate."""

    id: str
    arm: str
    replicate: int
    seed: int
    sample: int | None
    config: ExperimentConfig
    fork_of: tuple[str, int] | None  # (the control run's id, the tick)
    checkpoint_at: tuple[int, ...]  # ticks its forks start from

    @property
    def dir(self) -> str:
        return f"runs/{self.id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Study:
    """A loaded study: the file, its spec, the base experiment and every planned run."""

    path: Path
    raw: bytes  # the file as given, byte for byte
    spec: StudySpec
    base_path: Path
    base: ExperimentConfig
    runs: tuple[PlannedRun, ...]

    def run(self, run_id: str) -> PlannedRun:
        return next(r for r in self.runs if r.id == run_id)


def load_study(path: Path, *, base_dir: Path | None = None) -> Study:
    """Read, validate and plan the study file at ``path``. ``base_dir``: where the base
    experiment's relative path starts (default: the study file's folder; a resumed study
    gives the folder the study was started from)."""
    path = Path(path)
    raw = _read(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "", f"cannot read study file {path}: {exc}", "give a readable UTF-8 YAML file"
        ) from None
    return parse_study(text, source=str(path), base_dir=base_dir or path.parent, path=path)


def _read(path: Path) -> bytes:
    try:
        info = path.stat()
    except OSError as exc:
        raise ConfigError(
            "", f"cannot read study file {path}: {exc.strerror}", "check the path"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError("", f"study file {path} is not a regular file", "give a YAML file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            "",
            f"study file {path} is {info.st_size:,} bytes, more than {MAX_CONFIG_BYTES:,}",
            "keep the study file to its arms and measures",
        )
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            "", f"cannot read study file {path}: {exc.strerror}", "check the path"
        ) from None


def parse_study(
    text: str,
    *,
    source: str = "<string>",
    base_dir: Path = Path("."),
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Study:
    """Validate study YAML text and plan its runs (``ConfigError`` on any problem).
    ``environ``: the ``AGENTSIM_*`` overrides of the base experiment (default: the
    process environment, as ``agentsim run`` reads it)."""
    data = read_yaml_mapping(text, source=source)
    try:
        spec = StudySpec.model_validate(data)
    except ValidationError as exc:
        raise to_config_error(StudySpec, exc, source=source, overridden={}, hints=_HINTS) from None
    base_path = Path(spec.experiment).expanduser()
    if not base_path.is_absolute():
        base_path = base_dir / base_path
    if not base_path.is_file():
        raise ConfigError(
            "experiment",
            f"the base experiment {spec.experiment!r} is not a file ({base_path})",
            f"give its path relative to the study file's folder ({base_dir})",
        )
    try:
        base = load_experiment(base_path, environ=os.environ if environ is None else environ)
    except ConfigError as exc:
        raise ConfigError(
            f"experiment -> {exc.field}" if exc.field else "experiment",
            f"the base experiment {base_path}: {exc.problem}",
            exc.fix,
        ) from None
    if spec.replicates.samples is not None:
        problem = sampling_problem(base)
        if problem:
            raise ConfigError(
                "replicates.samples",
                f"sampled replicates need a sampling model, and {problem}",
                "use replicates: {seeds: [...]} or {count: N} (each replicate its own seed), "
                "or a served model with temperature > 0 and cache off",
            )
    runs = _plan(spec, base)
    return Study(
        path=path or Path(source),
        raw=text.encode("utf-8"),
        spec=spec,
        base_path=base_path,
        base=base,
        runs=runs,
    )


def sampling_problem(config: ExperimentConfig) -> str | None:
    """Why the experiment's models cannot give sampled replicates of one seed, or None.

    A sampling model is one whose answers to the same prompt vary with the request's seed:
    a model server (not an in-process backend such as ``scripted``, which answers
    deterministically whatever the seed), at a temperature above 0, not replayed from a cache."""
    for name, model in config.used_models().items():
        where = "model" if name == "default" else f"models.{name}"
        backend = BACKENDS.get(model.backend)
        if backend is None or backend.server is None:
            return (
                f"{where} uses the {model.backend!r} backend, which answers the same "
                "whatever the seed"
            )
        if model.temperature == 0:
            return f"{where}.temperature is 0 (greedy decoding gives one answer per prompt)"
        if model.cache == "replay":
            return f"{where}.cache is replay (the recorded answers are replayed)"
    return None


def _replicates(spec: StudySpec, base: ExperimentConfig) -> list[tuple[int, int | None]]:
    """(seed, sample) per replicate, in order."""
    r = spec.replicates
    if r.seeds is not None:
        return [(s, None) for s in r.seeds]
    if r.count is not None:
        return [(base.seed + i, None) for i in range(r.count)]
    return [(base.seed, i + 1) for i in range(r.samples or 0)]


def fork_position(config: ExperimentConfig, tick: int) -> tuple[int, int] | None:
    """(workflow step, ticks done in it) of ``config``'s run at ``tick``, as its checkpoint
    there records it; None if the run ends before ``tick``."""
    done = 0
    for i, step in enumerate(config.steps()):
        if isinstance(step, RunStep):
            if done + step.ticks >= tick:
                return i, tick - done
            done += step.ticks
    return None


def _arm_data(
    base: ExperimentConfig, arm: Arm, index: int, seed: int, from_pos: tuple[int, int] | None
) -> dict[str, Any]:
    data = base.resolved_dict()
    data["seed"] = seed
    for key, value in arm.set.items():
        set_value(data, key, value, option=f"arms.{index}.set")
    if arm.workflow is not None:
        steps = data.pop("workflow", None) or [{"run": {"ticks": data.get("ticks")}}]
        data.pop("ticks", None)
        kept: list[Any] = []
        if from_pos is not None:
            si, done = from_pos
            kept = list(steps[:si])
            if done:
                kept.append({"run": {"ticks": done}})
        new = [step.model_dump(mode="json") for step in arm.workflow]
        data["workflow"] = kept + new
    return data


def _arm_config(
    base: ExperimentConfig, arm: Arm, index: int, seed: int, from_pos: tuple[int, int] | None
) -> ExperimentConfig:
    data = _arm_data(base, arm, index, seed, from_pos)
    try:
        return parse_experiment(
            yaml.safe_dump(data, sort_keys=False),
            source=f"{base.source} (arm {arm.name})",
            base_dir=base.source_dir,
            environ={},
        )
    except ConfigError as exc:
        raise ConfigError(
            f"arms.{index} -> {exc.field}" if exc.field else f"arms.{index}",
            f"arm {arm.name!r} makes an experiment that is not valid: {exc.problem}",
            exc.fix,
        ) from None


def _plan(spec: StudySpec, base: ExperimentConfig) -> tuple[PlannedRun, ...]:
    control = spec.control_name
    ci = next(i for i, a in enumerate(spec.arms) if a.name == control)
    forks = sorted({a.from_tick for a in spec.arms if a.from_tick is not None})
    runs: list[PlannedRun] = []
    for r, (seed, sample) in enumerate(_replicates(spec, base), start=1):
        parent = _arm_config(base, spec.arms[ci], ci, seed, None)
        parent_id = f"{control}-r{r}"
        by_arm: dict[str, PlannedRun] = {
            control: PlannedRun(
                id=parent_id,
                arm=control,
                replicate=r,
                seed=seed,
                sample=sample,
                config=parent,
                fork_of=None,
                checkpoint_at=tuple(forks),
            )
        }
        for i, arm in enumerate(spec.arms):
            if i == ci:
                continue
            pos = None
            if arm.from_tick is not None:
                pos = fork_position(parent, arm.from_tick)
                if pos is None:
                    raise ConfigError(
                        f"arms.{i}.from_tick",
                        f"tick {arm.from_tick} is after the control's last tick "
                        f"({parent.total_ticks()})",
                        f"fork at a tick from 1 to {parent.total_ticks()}",
                    )
            config = _arm_config(base, arm, i, seed, pos)
            if arm.from_tick is not None and pos is not None:
                _check_fork(parent, parent_id, config, arm.from_tick, pos, i)
            by_arm[arm.name] = PlannedRun(
                id=f"{arm.name}-r{r}",
                arm=arm.name,
                replicate=r,
                seed=seed,
                sample=sample,
                config=config,
                fork_of=(parent_id, arm.from_tick) if arm.from_tick is not None else None,
                checkpoint_at=(),
            )
        runs.extend(by_arm[a.name] for a in spec.arms)
    return tuple(runs)


def _check_fork(
    parent: ExperimentConfig,
    parent_id: str,
    config: ExperimentConfig,
    tick: int,
    pos: tuple[int, int],
    index: int,
) -> None:
    """The fork check of ``agentsim run --fork``, made before the control has run."""
    point = ForkPoint(
        parent=Path("runs") / parent_id,
        tick=tick,
        config=parent,
        checkpoint=Checkpoint(path=Path(), engine={"pos": list(pos)}, agents={}),
    )
    try:
        check_shared(point, config)
    except ConfigError as exc:
        raise ConfigError(
            f"arms.{index} -> {exc.field}",
            f"the arm forks from the control at tick {tick}, so its {exc.field} {exc.problem}",
            exc.fix + "; or drop from_tick to run the arm from the start",
        ) from None


def describe_budget(budget: StudyBudget | None) -> dict[str, Any] | None:
    """The budget as the study file gives it (durations as text)."""
    if budget is None:
        return None
    out: dict[str, Any] = budget.model_dump(exclude_none=True)
    if budget.wall_time is not None:
        out["wall_time"] = format_duration(budget.wall_time)
    return out
