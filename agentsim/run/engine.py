"""The engine: runs an experiment's workflow tick by tick and keeps its workspace.

Each tick: refresh the skill registry (stat only), build one read-only view per environment
module, step every agent (in the order the run's schedule chooses: ``agentsim.run.schedules``),
merge events by agent id, apply the agents' environment intents in ``(agent_id, seq)`` order,
append the tick's events, update metrics, and checkpoint every k ticks. Events hold
simulation time only, so a seed gives a byte-identical ``events.jsonl`` on every executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsim.config.experiment import (
    DEFAULT_MODEL,
    AgentSelector,
    ExperimentConfig,
    InterveneStep,
    InterviewStep,
    RunStep,
    SurveyStep,
)
from agentsim.config.profiles import AgentSpec, select_agents
from agentsim.env.base import EnvModule, EnvView, module_events, profile_extras
from agentsim.env.clock import SimClock
from agentsim.env.loader import module_code
from agentsim.errors import AgentsimError, ConfigError, SkillNotFoundError, StorageError
from agentsim.events import EVENTS, checked, event
from agentsim.hosts.local import LocalExecutor, partition
from agentsim.hosts.protocol import Answer, Executor, HostSpec, TickResult, build_registry
from agentsim.llm.preflight import check_model_caches, preflight_model
from agentsim.run.budget import (
    BudgetStop,
    Projection,
    add_lost,
    add_steps,
    add_usage,
    new_spending,
    over_budget,
    prices_of,
    ticks_within,
    usage_by_model,
)
from agentsim.run.capacity import check_capacity
from agentsim.run.checkpoints import (
    Checkpoint,
    checkpoint_dirs,
    latest_checkpoint,
    remove_partial_checkpoints,
    rewind,
    write_checkpoint,
)
from agentsim.run.fork import ForkPoint, copy_history, own_checkpoint
from agentsim.run.metrics import (
    add_answers,
    add_tick,
    merge_model_stats,
    new_metrics,
    public_metrics,
)
from agentsim.run.problems import over_limits
from agentsim.run.progress import Progress, RunSummary
from agentsim.run.schedules import schedule_named
from agentsim.run.surveys import write_survey_table
from agentsim.run.workspace import RunWorkspace, atomic_write_text, check_run_dir
from agentsim.run.world import World, build_world
from agentsim.skills.catalog import RunProvides, unmet_requirements
from agentsim.skills.frontmatter import Diagnostic
from agentsim.skills.mcp import McpSkillDescriptor
from agentsim.skills.provenance import ProvenanceRecorder, RestorePlan, plan_restore, restore
from agentsim.skills.registry import RegistrySnapshot
from agentsim.skills.scan import check_scripts, namespace_rank
from agentsim.skills.scripts.sandbox import sandbox, warn_unsandboxed
from agentsim.store.layout import run_hosts

if TYPE_CHECKING:
    from agentsim.run.estimate import Estimate

__all__ = [
    "COMPLETED_WITH_PROBLEMS",
    "ENGINE_STATE",
    "Engine",
    "Progress",
    "RunSummary",
    "loading_notices",
]

COMPLETED_WITH_PROBLEMS = "completed with problems"
"""The status of a run that completed with more failures than its limits allow."""


def loading_notices(refused: Mapping[str, str], shadowed: Mapping[str, str]) -> list[str]:
    """The lines that tell a run's user which skills it refused and which names collide."""
    lines = [f"skill {key} refused: {why}" for key, why in refused.items()]
    lines += [
        f"skill name collision: {winner} wins the name {winner.partition('@')[2]!r} over "
        f"{loser} (call that one by its id)"
        for loser, winner in shadowed.items()
    ]
    return lines


def _refusal(snap: RegistrySnapshot, wanted: str) -> Diagnostic | None:
    """The first error of the refused skill folder ``wanted`` names (an id or a bare name,
    in precedence order), or None when no refused folder has that name."""
    namespace, sep, name = wanted.rpartition("@")
    spaces = (
        [namespace]
        if sep
        else sorted({s.namespace for s in snap.scans}, key=lambda ns: (namespace_rank(ns), ns))
    )
    for ns in spaces:
        found = snap.problem_of(ns, name)
        if found is not None:
            return found
    return None


# What ``Engine.checkpoint`` saves and ``_restore`` reads back.
# How often the progress line hears of a survey under way.
SURVEY_PROGRESS_EVERY = 1.0
ENGINE_STATE = ("pos", "clock", "modules", "pending_messages", "metrics")


class Engine:
    """Run one experiment. Create it, then ``await engine.run()``."""

    def __init__(
        self,
        config: ExperimentConfig,
        *,
        run_dir: Path,
        executor: Executor | None = None,
        progress: Callable[[Progress], None] | None = None,
        stop: threading.Event | None = None,
        max_ticks: int | None = None,
        trace: str = "full",
        preflight: bool = False,
        fork: ForkPoint | None = None,
        notice: Callable[[str], None] | None = None,
        capacity_check: bool = False,
        checkpoint_at: Collection[int] = (),
        sample: int = 0,
        estimate: Estimate | None = None,
    ) -> None:
        self.config = config
        # The run's estimate (``agentsim.run.estimate``), kept in ``estimate.json``: it
        # projects the first tick against ``budget:`` and the summary compares it with
        # what the run spent.
        self.estimate = estimate
        # Set when the run stopped before passing its ``budget:`` (exit code 4).
        self.budget_stop: BudgetStop | None = None
        # Under a budget, the tick the current ``run_ticks`` call was paid for up to.
        self._paid_to: int | None = None
        self._estimate_cmp: dict[str, Any] | None = None
        self._prices = prices_of(config)
        self._t_start = time.perf_counter()
        self.run_dir = run_dir
        self.executor: Executor = executor or LocalExecutor()
        self.progress = progress
        self.stop = stop or threading.Event()
        self.max_ticks = max_ticks
        self.trace = trace
        # ``agentsim run`` checks the model server before writing anything (see
        # ``agentsim.llm.preflight``); code that builds its own engine chooses.
        self.preflight = preflight
        # ``agentsim run`` refuses a run whose agents will not fit the machine's memory or
        # the run folder's disk (``agentsim.run.capacity``) unless told to start anyway.
        self.capacity_check = capacity_check
        # Ticks to checkpoint at besides every output.checkpoint_every (a study forks its
        # treatment arms from them); a checkpoint writes no event, so the events stay the same.
        self.checkpoint_at = frozenset(checkpoint_at)
        # A sampled replicate (a study's ``replicates: {samples: N}``): the model seeds of
        # the steps differ by sample, everything the experiment seed makes stays the same.
        self.sample = sample
        # Where loading problems are told as they are found (``agentsim run``: stderr):
        # refused and shadowed skills at the start, skills an edit broke at each tick.
        self.notice = notice
        self.reason: str | None = None
        # What set ``stop``, when it was not an interrupt (Ctrl-C): "SIGTERM" says so in
        # the run's reason.
        self.stop_cause: str | None = None
        # A fork starts from another run's checkpoint (``agentsim.run.fork``).
        self.fork = fork
        self.parent: dict[str, Any] | None = fork.lineage() if fork is not None else None
        # The parent's skill versions at the fork's tick, restored into the fork's folder
        # (None: not a fork, or a parent from before skill provenance).
        self._restore_plan: RestorePlan | None = None
        self._provenance: ProvenanceRecorder | None = None
        self.clock = SimClock(config.clock.start, config.clock.tick)
        self.modules: dict[str, EnvModule] = {}
        self.agents: list[AgentSpec] = []
        self.ws: RunWorkspace | None = None
        self._pending_messages: dict[str, list[str]] = {}
        self._metrics = new_metrics()
        # The model block of metrics.json, once the run wrote it (the summary shows it).
        self._model_block: dict[str, Any] | None = None
        self._pos = (0, 0)  # (workflow step index, ticks done inside it)
        self._world: World | None = None  # set by ``_prepare``: the run got that far
        self._skills_hidden: dict[str, str] = {}  # skill id -> why no catalog offers it
        self._broken_scripts: dict[str, str] = {}  # skill id -> its script's load problem
        # Agent id -> its model's name, when groups use several models (set by ``_prepare``):
        # each model's failures are counted against its own limits.
        self._agent_models: dict[str, str] | None = None
        # A resume writes nothing until its checkpoint is restored: a resume that fails
        # before that leaves the run folder exactly as it found it.
        self._may_write = True
        self.host_agents: list[list[str]] = []  # each host's agent ids, by host index
        # How ``run`` workflow steps step the agents (``executor.schedule``), through
        # ``agentsim.run.schedules.Stepping``.
        self._schedule = schedule_named(config.executor.schedule)

    # -- set-up ----------------------------------------------------------------------------

    def _host_specs(self, n: int, *, resume: bool = False) -> list[HostSpec]:
        cfg = self.config
        assert self._world is not None
        return [
            HostSpec(
                host_id=i,
                # Absolute: a host in another process (Ray) has another working folder.
                run_dir=str(self.run_dir.absolute()),
                seed=cfg.seed,
                sample=self.sample,
                skills=self._world.skills,
                model=cfg.model,
                settings=self._world.settings,
                hosts=n,
                # Concurrent stepping bounds a tick by step_timeout even when one model call
                # hangs (its cost offline: docs/performance.md).
                step_timeout=cfg.executor.step_timeout,
                concurrent=True,
                flush_every=cfg.output.flush_every,
                resume=resume,
                env_code=module_code([type(m) for m in self.modules.values()]),
                models=dict(cfg.models),
                group_models=cfg.group_models(),
            )
            for i in range(n)
        ]

    def _prepare(self) -> None:
        """Everything that can reject the configuration, before anything is written."""
        cfg = self.config
        world = build_world(cfg, trace=self.trace, check_paths=True)
        self.agents = list(world.agents)
        self.modules = dict(world.modules)
        self._world = world
        group_models = cfg.group_models()
        if set(group_models.values()) != {DEFAULT_MODEL}:
            self._agent_models = {a.agent_id: group_models[a.group] for a in self.agents}
        self.registry = build_registry(world.skills)
        if self.fork is not None:  # read and checked before the fork's folder exists
            self._restore_plan = plan_restore(self.fork.parent, self.fork.tick)
        for i, step in enumerate(cfg.steps()):
            if isinstance(step, InterveneStep) and step.env is not None and step.action:
                # Arguments and the ids they name (a place, an agent), before any tick.
                self.modules[step.env].check_intervention(
                    step.action, step.args, field=f"workflow.{i}.intervene"
                )
        provides = RunProvides.for_modules(self.modules)
        self._skills_hidden = unmet_requirements(self.registry.list_all(), provides)
        # Every skill a run may activate: its scripts compile and their top-level imports
        # exist (checked without running them). A default skill's problem stops the run
        # below; another's is told and listed in run_start (calling it fails, as it would).
        unloadable = {
            d.skill_id: problems[0]
            for d in self.registry.list_all()
            if d.skill_id not in self._skills_hidden and (problems := check_scripts(d))
        }
        for gi, group in enumerate(cfg.agents):
            for name in group.skills.default:
                try:
                    desc = self.registry.resolve(name)
                except SkillNotFoundError as exc:
                    broken = _refusal(self.registry.snapshot(), name)
                    if broken is not None:
                        raise ConfigError(
                            f"agents.{gi}.skills.default",
                            f"default skill {name!r} is broken: {broken}",
                            f"fix its SKILL.md (agentsim skills validate {broken.file})",
                        ) from None
                    close = f" (close matches: {', '.join(exc.close)})" if exc.close else ""
                    raise ConfigError(
                        f"agents.{gi}.skills.default",
                        f"default skill {name!r} is not registered{close}",
                        "fix the name, or add the folder holding it to skills.paths",
                    ) from None
                why = self._skills_hidden.get(desc.skill_id)
                if why is not None:
                    raise ConfigError(
                        f"agents.{gi}.skills.default",
                        f"default skill {name!r} is not available in this run: it {why}",
                        "add what it needs under environment, or remove it from the defaults",
                    )
                bad = unloadable.get(desc.skill_id)
                if bad is not None:
                    raise ConfigError(
                        f"agents.{gi}.skills.default",
                        f"default skill {name!r} has a script that cannot load: {bad.file}:"
                        f"{bad.line}: {bad.message}",
                        f"fix it (agentsim skills validate {desc.path})",
                    )
        self._broken_scripts = {sid: str(d) for sid, d in sorted(unloadable.items())}

    def _check_capacity(self, agents: int) -> None:
        here = self.executor.kind == "local" or not self.config.executor.address
        check_capacity(agents, self.run_dir, memory_here=here)

    def _check_caches(self) -> None:
        """Every model-cache file the run will open, checked whole before anything is
        written (a damaged one would fail every call that reads it)."""
        check_model_caches(self.config.used_models(), run_dir=self.run_dir)

    async def _preflight(self) -> None:
        """Check each model some group uses (its own server, key and model)."""
        for name, model in self.config.used_models().items():
            await preflight_model(model, run_dir=self.run_dir, name=name)

    def _hosts_wanted(self, *, resume: bool) -> int:
        n_hosts = self.config.executor.hosts or (
            1 if self.executor.kind == "local" else os.cpu_count() or 1
        )
        if resume:  # the run's own split: each host's shard holds its agents' history
            n_hosts = run_hosts(self.run_dir) or n_hosts
        return n_hosts

    async def _connect(self, *, resume: bool) -> None:
        """Reach where the hosts will run, and check they fit there, before any write."""
        await self.executor.connect(
            hosts=min(self._hosts_wanted(resume=resume), max(1, len(self.agents))),
            env_code=module_code([type(m) for m in self.modules.values()]),
        )

    async def _start(self, *, resume: bool) -> list[dict[str, Any]]:
        cfg = self.config
        blocks = partition(self.agents, self._hosts_wanted(resume=resume))
        self.host_agents = [[a.agent_id for a in b] for b in blocks]
        await self.executor.start(
            self._host_specs(len(blocks), resume=resume), blocks, self.registry
        )
        events = await self.executor.setup(
            profile_extras(self.modules.values(), self.clock, [a.agent_id for a in self.agents]),
            tick=self.clock.tick,
            when=self.clock.now,
        )
        if resume:
            return []
        diag = [str(d) for d in self.registry.diagnostics]
        snap = self.registry.snapshot()
        refused = {key: str(d) for key, d in snap.refused().items()}
        shadowed = snap.shadowed()
        self._tell(loading_notices(refused, shadowed))
        self._tell(
            [
                f"skill {sid}: a script cannot load ({why}); calling it fails"
                for sid, why in self._broken_scripts.items()
            ]
        )
        broken: dict[str, Any] = (
            {"skills_broken_scripts": self._broken_scripts} if self._broken_scripts else {}
        )
        start = self._run_event(  # tick 0: a run that starts (not a resume or a fork)
            "run_start",
            agents=len(self.agents),
            seed=cfg.seed,
            skills=len(self.registry.list_all()),
            skill_diagnostics=len(diag),
            modules=sorted(self.modules),
            # What every catalog of this run leaves out, and why (``inspect`` shows it).
            skills_hidden=self._skills_hidden,
            skills_refused=refused,
            skills_shadowed=shadowed,
            **broken,
            sandbox=self._sandbox(),
        )
        return [start, *sorted(events, key=lambda e: str(e.get("agent_id") or ""))]

    # -- the run ---------------------------------------------------------------------------

    async def run(self, *, resume: bool = False) -> RunSummary:
        """Run (or, with ``resume``, continue from the last checkpoint) the experiment.

        Configuration errors (``ConfigError``) are raised before the run folder is created,
        so a bad experiment never leaves a half-made folder behind."""
        cfg = self.config
        t_start = self._t_start = time.perf_counter()
        checkpoint: Checkpoint | None = None
        if resume:
            self.ws = RunWorkspace.open_existing(self.run_dir)
            try:
                self._prepare()
                # Read and checked before anything is written (see ``_may_write``).
                checkpoint = latest_checkpoint(
                    self.ws, config_hash=cfg.config_hash(), engine_keys=ENGINE_STATE
                )
                self._check_caches()
                if self.preflight:
                    await self._preflight()
                await self._connect(resume=True)
            except BaseException:
                self.ws.release()  # nothing was written: the folder is free for the next try
                self._close_skills()
                await self.executor.close()
                raise
            self._may_write = False
        else:
            check_run_dir(self.run_dir)
            if self.capacity_check:  # before the agents are built: they may not fit
                self._check_capacity(sum(g.count or 0 for g in cfg.agents))
            try:
                self._prepare()
                if self.capacity_check:
                    self._check_capacity(len(self.agents))
                self._check_caches()
                if self.preflight:
                    await self._preflight()
            except BaseException:
                self._close_skills()
                raise
            try:
                await self._connect(resume=False)
                self.ws = RunWorkspace.create(self.run_dir)
            except BaseException:
                self._close_skills()
                await self.executor.close()
                raise
        ws = self.ws
        status = "failed"
        try:
            if not resume:
                ws.new_manifest(
                    run_id=self.run_dir.name,
                    name=cfg.name,
                    config_hash=cfg.config_hash(),
                    seed=cfg.seed,
                    executor=self.executor.kind,
                )
                lineage: dict[str, Any] = {"parent": self.parent} if self.parent else {}
                if self.sample:
                    lineage["sample"] = self.sample
                ws.update_manifest(source_dir=str(cfg.source_dir.resolve()), **lineage)
                ws.write_config(cfg.resolved_dict())
                if self.estimate is not None:
                    atomic_write_text(
                        ws.root / "estimate.json",
                        json.dumps(self.estimate.to_dict(), indent=2) + "\n",
                    )
            if self.fork is not None:
                # The parent's history before the fork, then a resume from its checkpoint.
                copy_history(self.fork, ws)
                self._restore_skills(ws.root)
                checkpoint = own_checkpoint(self.fork, ws, cfg.config_hash())
            events = await self._start(resume=checkpoint is not None)
            if checkpoint is not None:
                await self._restore(checkpoint)
                self._may_write = True
                if self.fork is None:
                    ws.update_manifest(status="running", resumed=True, pid=os.getpid())
                    # The versions of the ticks it runs again are recorded again.
                    ProvenanceRecorder(ws.root).cut(self.clock.tick)
            self._record_skills()
            self._emit(events)
            status = await self._workflow()
            if status != "completed":
                # A checkpoint at the stopping point makes the printed resume command work
                # whatever output.checkpoint_every says.
                await self.checkpoint()
            elif over_limits(public_metrics(self._metrics), self._limits()):
                status = COMPLETED_WITH_PROBLEMS
        except OSError as exc:
            status = "failed"
            if not self._is_write_error(exc):
                self.reason = self.reason or self._why(exc, status)
                raise
            raise self._write_error(exc) from None
        except BaseException as exc:
            status = "failed" if not self.stop.is_set() else "interrupted"
            if self.reason is None:
                self.reason = self._why(exc, status)
            raise
        finally:
            self._metrics["wall_seconds"] = round(
                self._metrics["wall_seconds"] + time.perf_counter() - t_start, 3
            )
            await self._finish(status)
        return RunSummary(
            run_id=self.run_dir.name,
            run_dir=self.run_dir,
            status=status,
            ticks=self.clock.tick,
            agents=len(self.agents),
            metrics={
                **public_metrics(self._metrics),
                **({"model": self._model_block} if self._model_block is not None else {}),
            },
            reason=self.reason,
            max_degraded_share=cfg.model.max_degraded_share,
            limits=self._limits(),
            parent=self.parent,
            done=self._done(),
            budget_stop=self.budget_stop.to_dict() if self.budget_stop else None,
            estimate=self._estimate_cmp,
        )

    def _estimate_error(self, status: str) -> dict[str, Any] | None:
        """The run's estimate (``estimate.json``) against what it spent, once it completed
        (a stopped run has not spent what the estimate is of)."""
        if not status.startswith("completed"):
            return None
        from agentsim.run.estimate import estimate_error

        return estimate_error(self.run_dir, self._metrics)

    def _spending(self) -> dict[str, Any]:
        spending: dict[str, Any] = self._metrics.setdefault("spending", new_spending())
        return spending

    def _projection(self, what: str, *, answers: int = 0) -> Projection | None:
        """What the next tick (``answers`` 0) or a survey of ``answers`` agents is expected
        to cost: the most a tick cost so far, or the estimate's tick before any was measured
        (None: neither, nothing is known yet)."""
        spent = self._spending()
        top = dict(spent["tick_max"])
        if not spent["ticks"] and self.estimate is not None:
            top = dict(self.estimate.per_tick)  # nothing measured yet: the estimate's
        elif not spent["ticks"] and not answers:
            return None
        if answers:
            calls = spent["answers"] or spent["calls"]
            usage = spent["answer_usage"] if spent["answers"] else spent
            tokens = usage["prompt_tokens"] + usage["completion_tokens"]
            total = spent["prompt_tokens"] + spent["completion_tokens"]
            if calls:
                per = tokens / calls
            elif self.estimate is not None:
                per = self.estimate.per_answer_tokens
            else:
                per = 0.0
            per_token = spent["cost"] / total if total else 0.0
            if not total and self.estimate is not None and self.estimate.tokens:
                per_token = self.estimate.cost / self.estimate.tokens
            top = {
                "tokens": per * answers,
                "cost": per * answers * per_token,
                "seconds": top["seconds"],
            }
        return Projection(what, top["tokens"], top["cost"], top["seconds"])

    def _wall(self) -> float:
        """The run's wall time so far, resumes added up."""
        return float(self._metrics["wall_seconds"]) + time.perf_counter() - self._t_start

    def _write_metrics(self) -> None:
        """``metrics.json`` during the run (a tick's end, a survey's): with the run's wall
        time so far, which is what a kill leaves of it (a study gives a resume its wall
        time from it; the end of the run writes it again)."""
        assert self.ws is not None
        now = {**self._metrics, "wall_seconds": round(self._wall(), 3)}
        self.ws.write_metrics(public_metrics(now))

    def _over_budget(self, what: str, *, answers: int = 0) -> bool:
        """Whether the next tick (``answers`` 0) or a survey of ``answers`` agents would
        pass ``budget:``; if so, the run's reason says so and it stops here."""
        if self.config.budget is None:
            return False
        nothing = Projection(what, 0.0, 0.0, 0.0)
        stop = over_budget(
            self.config.budget,
            self._spending(),
            wall_seconds=self._wall(),
            next_step=self._projection(what, answers=answers) or nothing,
        )
        if stop is None:
            return False
        self.budget_stop = stop
        self.reason = stop.message()
        return True

    def _ticks_paid(self, most: int) -> int:
        """How many of the next ``most`` ticks ``budget:`` pays for by the projection of
        ``_over_budget`` (each tick as the most expensive so far): all of them without a
        budget, one while nothing is known of what a tick costs."""
        if self.config.budget is None:
            return most
        per_tick = self._projection(f"tick {self.clock.tick + 1}")
        if per_tick is None:
            return min(1, most)
        return ticks_within(
            self.config.budget,
            self._spending(),
            wall_seconds=self._wall(),
            per_tick=per_tick,
            most=most,
        )

    def _limits(self) -> dict[str, float]:
        """The failure shares the run allows (``agentsim.run.problems.SHARE_LIMITS``)."""
        model, agent = self.config.model, self.config.agent
        per_model = {
            f"models.{name}.max_degraded_share": m.max_degraded_share
            for name, m in self.config.used_models().items()
            if name != DEFAULT_MODEL
        }
        return {
            "model.max_degraded_share": model.max_degraded_share,
            "agent.max_error_share": agent.max_error_share,
            "agent.max_hook_failure_share": agent.max_hook_failure_share,
            "agent.max_script_failure_share": agent.max_script_failure_share,
            "agent.max_unfinished_share": agent.max_unfinished_share,
            "agent.max_tool_failure_share": agent.max_tool_failure_share,
            **per_model,
        }

    def _done(self) -> tuple[str, ...]:
        """What the workflow's steps before the current one did, besides ticks."""
        done = []
        for i, step in enumerate(self.config.steps()[: self._pos[0]]):
            if isinstance(step, InterveneStep):
                if step.env is not None:
                    done.append(f"intervention {step.env}.{step.action} (workflow.{i})")
                else:
                    done.append(f"message to agents (workflow.{i})")
            elif isinstance(step, SurveyStep):
                kind = "interview" if isinstance(step, InterviewStep) else "survey"
                name = step.name or f"{kind}-{i}"
                done.append(f"{kind} {name} -> {self.run_dir / 'surveys' / name}.jsonl")
        return tuple(done)

    async def _workflow(self) -> str:
        done = 0
        steps = self.config.steps()
        first_step, first_done = self._pos
        for si in range(first_step, len(steps)):
            step = steps[si]
            already = first_done if si == first_step else 0
            if isinstance(step, RunStep):
                status = await self._run_ticks(si, already, step.ticks, done)
                if status is not None:
                    return status
                done += step.ticks - already
            elif already == 0:
                self._pos = (si, 0)
                if isinstance(step, SurveyStep) and self._over_budget(
                    f"{step.kind} {step.name or f'{step.kind}-{si}'}",
                    answers=len(self._select(step.agents, si, "agents")),
                ):
                    return "stopped"
                await self._special(step, si)
                self._pos = (si, 1)
        self._pos = (len(steps), 0)
        return "completed"

    async def _run_ticks(self, si: int, k: int, ticks: int, done: int) -> str | None:
        """Ticks ``k..ticks`` of workflow step ``si``, by the run's schedule: every agent
        aligns again (a barrier) at each checkpoint, at a stop, and at the end of the
        step. ``done``: the run's ticks so far. Returns a status if the run stops here."""
        every = self.config.output.checkpoint_every
        while k < ticks:
            if self.stop.is_set():
                by = f" by {self.stop_cause}" if self.stop_cause else ""
                self.reason = f"interrupted{by} before tick {self.clock.tick}; resume it"
                return "interrupted"
            if self.max_ticks is not None and done >= self.max_ticks:
                self.reason = f"stopped after --ticks {self.max_ticks}"
                return "stopped"
            self._pos = (si, k)
            if self._over_budget(f"tick {self.clock.tick + 1}"):
                return "stopped"
            # Under a budget, as many ticks as it pays for (at least the next one, which it
            # just did): no step of a tick it may not pay for starts, and agents may run
            # ahead within them. ``should_stop`` ends the call early when a costlier tick
            # lowers that count; near the limit this is one tick at a time.
            n = max(1, self._ticks_paid(ticks - k))
            if every:
                n = min(n, every - self.clock.tick % every)
            later = [t - self.clock.tick for t in self.checkpoint_at if t > self.clock.tick]
            if later:
                n = min(n, *later)
            if self.max_ticks is not None:
                n = min(n, self.max_ticks - done)
            self._pos = (si, k)
            if self.config.budget is not None:
                self._paid_to = self.clock.tick + n
            try:
                ran = await self._schedule.run_ticks(self, n)
            finally:
                self._paid_to = None
            k, done = k + ran, done + ran
            self._pos = (si, k)
            if ran and (
                (every and self.clock.tick % every == 0) or self.clock.tick in self.checkpoint_at
            ):
                await self.checkpoint()
            if self._model_gave_up():
                return "failed"
        return None

    def _why(self, exc: BaseException, status: str) -> str:
        """The ``reason`` a run that raised records: the error and where the run was."""
        steps = self.config.steps()
        si = self._pos[0]
        where = f"tick {self.clock.tick}"
        if si < len(steps):
            where = f"workflow.{si}.{steps[si].kind}, {where}"
        if status == "interrupted" or isinstance(exc, KeyboardInterrupt):
            return f"interrupted ({where}); resume it"
        text = str(exc) if isinstance(exc, AgentsimError) else f"{type(exc).__name__}: {exc}"
        return f"{text} ({where})"

    def _model_gave_up(self) -> bool:
        """Too many failed model calls in a row: stop rather than degrade every later step.
        With a model per group, each model against its own limit (``models.NAME.*``,
        defaulting to ``model:``'s): one model's dead server stops the run even while the
        others answer."""
        streaks: Mapping[str, int] = self._metrics.get("model_failure_streaks") or {}
        for name, streak in sorted(streaks.items()):
            m = self.config.model_named(name)
            if streak < m.max_consecutive_failures:
                continue
            field = "model" if name == DEFAULT_MODEL else f"models.{name}"
            servers = ", ".join(m.base_urls or ((m.base_url,) if m.base_url else ()))
            at = f" at {servers}" if servers else ""
            self.reason = (
                f"model {name!r} ({field}: {m.backend} {m.model or ''}{at}): {streak} of its "
                f"calls in a row failed ({field}.max_consecutive_failures="
                f"{m.max_consecutive_failures}); check its server, then resume"
            )
            return True
        streak = self._metrics["model_failure_streak"]
        limit = self.config.model.max_consecutive_failures
        if streak < limit:
            return False
        self.reason = (
            f"{streak} model calls in a row failed (model.max_consecutive_failures={limit}); "
            "check the model server, then resume"
        )
        return True

    def should_stop(self) -> bool:
        """Whether the schedule's call stops after the tick just completed: the run was
        interrupted, or its model gave up (the workflow then says which), or the budget no
        longer pays for the call's later ticks (the workflow projects again)."""
        return self.stop.is_set() or self._model_gave_up() or self._paid_less()

    def _paid_less(self) -> bool:
        """Whether the budget no longer pays for every tick the current ``run_ticks`` call
        was given (the tick just completed cost more than any before it): the call ends at
        the next tick boundary every agent can reach and ``_run_ticks`` projects again."""
        if self._paid_to is None:
            return False
        left = self._paid_to - self.clock.tick
        return left > 0 and self._ticks_paid(left) < left

    def views(self) -> dict[str, EnvView]:
        return {name: m.view(self.clock) for name, m in self.modules.items()}

    def refresh_skills(self) -> tuple[list[dict[str, Any]], tuple[str, ...] | None]:
        """Hot reload's check (a stat per file): the ``skills_reloaded`` event, if any, and
        the ids added or changed (None: nothing changed)."""
        res = self.registry.refresh()
        self._record_skills()  # a file an agent reads may change without the registry moving
        events: list[dict[str, Any]] = []
        changed: tuple[str, ...] | None = None
        if res.added or res.changed or res.removed:
            self._metrics["skills_reloads"] += 1
            events.append(
                self._run_event(
                    "skills_reloaded",
                    generation=res.generation,
                    added=sorted(res.added),
                    changed=sorted(res.changed),
                    removed=sorted(res.removed),
                )
            )
            changed = (*res.added, *res.changed)
        events += self._broken_events(res.broken)
        return events, changed

    def take_messages(self) -> dict[str, tuple[str, ...]]:
        """The messages of ``intervene`` steps, for each addressee's next step."""
        messages = {aid: tuple(m) for aid, m in self._pending_messages.items()}
        self._pending_messages.clear()
        return messages

    def complete_tick(
        self,
        results: Sequence[TickResult],
        run_events: list[dict[str, Any]],
        t0: float,
        *,
        fastest: int | None = None,
    ) -> None:
        """Every agent has stepped the current tick: apply its intents, write its events
        and metrics, and advance the clock (see ``agentsim.run.schedules.Stepping``)."""
        agent_events = sorted(
            (e for r in results for e in r.events), key=lambda e: str(e.get("agent_id") or "")
        )
        intents = sorted((i for r in results for i in r.intents), key=lambda i: i.sort_key)
        env_events: list[dict[str, Any]] = []
        for name, mod in self.modules.items():
            env_events.extend(mod.apply([i for i in intents if i.module == name], self.clock))
        for mod in self.modules.values():
            env_events.extend(mod.tick_events(self.clock))
        env_events = module_events(env_events, self.clock)
        summary: dict[str, Any] = add_tick(
            self._metrics, results, [*run_events, *agent_events], model_of=self._agent_models
        )
        tick_end = self._run_event("tick_end", **summary)
        self._emit([*run_events, *agent_events, *env_events, tick_end])
        self.clock.advance()
        self._metrics["ticks"] += 1
        dt = time.perf_counter() - t0
        self._metrics["tick_seconds"].append(round(dt, 4))
        add_steps(self._spending(), results, self._prices, seconds=dt)
        assert self.ws is not None
        self.ws.update_manifest(ticks_done=self.clock.tick)
        self._write_metrics()
        if self.progress is not None:
            total = self.config.total_ticks()
            self.progress(
                Progress.of(self._metrics, tick=self.clock.tick, total=total, fastest=fastest)
            )

    def _restore_skills(self, root: Path) -> None:
        """A fork's skills are its parent's versions at the fork's tick: restored into the
        fork's folder (``RUN/skills/restored/``, the agents' ``custom/skills``), and the
        registry scans those copies instead of the parent's roots from then on."""
        plan, world = self._restore_plan, self._world
        assert world is not None and self.fork is not None
        if plan is None:
            self._tell(
                [
                    f"run {self.fork.parent} recorded no skill versions (an older agentsim): "
                    "the fork uses the skill folders as they are now"
                ]
            )
            return
        restore(plan, root)
        self._world = dataclasses.replace(world, skills=plan.remap_sources(world.skills))
        before, self.registry = self.registry, build_registry(self._world.skills)
        before.close()  # its connections to MCP skills servers

    def _record_skills(self) -> None:
        """Record the run's skills as in effect from the current tick (``RUN/skills``; a
        skill an edit broke keeps its last good version)."""
        if self.ws is None:
            return
        if self._provenance is None:
            self._provenance = ProvenanceRecorder(self.ws.root)
        plan = self._restore_plan
        self._provenance.record(
            self.registry.list_all(),
            tick=self.clock.tick,
            keep=self.registry.snapshot().broken(),
            origins=plan.origins() if plan is not None else None,
        )

    def _sandbox(self) -> str:
        """What contains ``process`` isolation on this machine (for ``run_start``); said on
        stderr now when nothing does and a skill of the run asks for it."""
        found = sandbox()
        if any(
            d.manifest.isolation == "process"
            or (isinstance(d, McpSkillDescriptor) and d.scripts_allowed)
            for d in self.registry.list_all()
        ):
            warn_unsandboxed(found)
        return found.describe()

    def _tell(self, lines: Sequence[str]) -> None:
        if self.notice is not None:
            for line in lines:
                self.notice(line)

    def _broken_events(self, broken: Sequence[str]) -> list[dict[str, Any]]:
        """A ``skill_broken`` event (and a notice) per skill an edit broke this tick."""
        problems = self.registry.snapshot().broken()
        out = []
        for sid in sorted(broken):
            diag = problems[sid]
            self._tell([f"skill {sid} is broken: {diag}; its last good version stays active"])
            out.append(
                self._run_event(
                    "skill_broken",
                    skill=sid,
                    file=diag.file,
                    line=diag.line,
                    message=diag.message,
                )
            )
        return out

    def _run_event(self, kind: str, *, agent_id: str | None = None, **data: Any) -> dict[str, Any]:
        """An event the engine writes, at the current tick: the run's own (``agent_id``
        None) or an agent's answer to a workflow step."""
        return event(
            kind,
            tick=self.clock.tick,
            time=self.clock.now.isoformat(),
            agent_id=agent_id,
            **data,
        )

    def _emit(self, events: Sequence[dict[str, Any]]) -> None:
        assert self.ws is not None
        # Every line of the log goes through its declaration (agentsim/events.py).
        self._metrics["events"] += self.ws.append_events(
            checked(events, declared=self._world.events if self._world else EVENTS)
        )

    def _select(self, selector: AgentSelector, index: int, option: str) -> list[str]:
        """The agents workflow step ``index`` addresses; ``option`` is where its selector sits
        in the step (for the error message). Each step draws from a stream of its own."""
        return select_agents(
            selector,
            self.agents,
            seed=self.config.seed,
            stream=f"step-{index}",
            field=f"workflow.{index}.{option}",
        )

    async def _special(self, step: Any, index: int) -> None:
        tick, iso = self.clock.tick, self.clock.now.isoformat()
        if isinstance(step, InterveneStep):
            if step.env is not None:
                assert step.action is not None
                out = self.modules[step.env].intervene(step.action, step.args, self.clock)
                self._emit(
                    [
                        self._run_event(
                            "intervention", env=step.env, action=step.action, args=step.args
                        ),
                        *module_events(out, self.clock),
                    ]
                )
            else:
                chosen = self._select(step.agents, index, "intervene.agents")
                for aid in chosen:
                    self._pending_messages.setdefault(aid, []).append(str(step.message))
                self._emit(
                    [self._run_event("intervention", message=step.message, recipients=len(chosen))]
                )
        elif isinstance(step, SurveyStep):
            chosen = self._select(step.agents, index, "agents")
            kind = "interview" if isinstance(step, InterviewStep) else "survey"
            name = step.name or f"{kind}-{index}"
            what = f"{kind} {name}"
            # The reporter only reads; the ask's own error (if any) is the one raised.
            reporter = (
                asyncio.create_task(self._survey_progress(what, len(chosen)))
                if self.progress is not None
                else None
            )
            before = merge_model_stats(await self.executor.model_stats())
            asked_at = time.perf_counter()
            form = step.answer.instrument() if step.answer is not None else None
            try:
                answers = await self.executor.ask(
                    chosen,
                    step.question,
                    tick=tick,
                    when=self.clock.now,
                    views=self.views(),
                    answer=form,
                )
            finally:
                if reporter is not None:
                    reporter.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reporter
            self._report_survey(what, len(chosen), len(chosen))
            used = usage_by_model(
                merge_model_stats(await self.executor.model_stats()),
                before,
                list(self.config.used_models()),
            )
            add_usage(
                self._spending(),
                used,
                self._prices,
                answers=len(chosen),
                seconds=time.perf_counter() - asked_at,
            )
            assert self.ws is not None
            sdir = self.ws.root / "surveys"
            sdir.mkdir(exist_ok=True)
            # Each row says whether its answer is the model's (``status: ok``) or what a
            # failed step left (``degraded`` or ``error``, with the ``reason``), or a typed
            # answer that did not fit its form (``invalid``), and whether it only copies
            # the agent's own prompt (``echo``). A typed row adds its ``instrument`` and
            # ``value`` (null unless ok); every row names the agent's ``group``.
            lost = Answer(text="", status="error", reason="no answer came back")
            groups = self._groups()
            rows: list[dict[str, Any]] = []
            for aid in sorted(chosen):
                got = answers.get(aid, lost)
                why = {"reason": got.reason} if got.reason is not None else {}
                typed = (
                    {
                        "instrument": form.kind,
                        "value": got.value if got.status == "ok" else None,
                    }
                    if form is not None
                    else {}
                )
                rows.append(
                    {
                        "agent_id": aid,
                        "question": step.question,
                        "answer": got.text,
                        "status": got.status,
                        **why,
                        "echo": got.echo,
                        "tick": tick,
                        "time": iso,
                        "group": groups[aid],
                        **typed,
                    }
                )
            models = self.config.group_models()
            add_answers(
                self._metrics,
                [
                    (
                        r["group"],
                        models.get(r["group"], "default"),
                        r["echo"],
                        r["status"] == "invalid",
                    )
                    for r in rows
                ],
            )
            atomic_write_text(
                sdir / f"{name}.jsonl",
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
            )
            write_survey_table(sdir / f"{name}.parquet", rows, form.kind if form else None)
            self._emit(
                [
                    self._run_event(
                        f"{kind}_answer",
                        agent_id=r["agent_id"],
                        name=name,
                        answer=r["answer"],
                        status=r["status"],
                        **({"reason": r["reason"]} if "reason" in r else {}),
                        echo=r["echo"],
                        **(
                            {"instrument": r["instrument"], "value": r["value"]}
                            if form is not None
                            else {}
                        ),
                    )
                    for r in rows
                ]
            )
            # What the survey spent survives a kill before the next tick's end (a resume
            # counts it as thrown away).
            self._write_metrics()
            failed = sum(r["status"] not in ("ok", "invalid") for r in rows)
            if failed:
                self._tell(
                    [
                        f"{what}: {failed:,} of {len(rows):,} answers are not the model's "
                        f"(status degraded or error; {sdir / name}.jsonl says which and why)"
                    ]
                )
            invalid = sum(r["status"] == "invalid" for r in rows)
            if invalid:
                self._tell(
                    [
                        f"{what}: {invalid:,} of {len(rows):,} answers did not fit the "
                        f"{form.kind if form else ''} form after a retry (status invalid, "
                        f"not data; {sdir / name}.jsonl says why)"
                    ]
                )

    def _groups(self) -> dict[str, str]:
        """Agent id -> its group."""
        return {a.agent_id: a.group for a in self.agents}

    async def _survey_progress(self, what: str, asked: int) -> None:
        """Report a survey's answers so far every ``SURVEY_PROGRESS_EVERY`` seconds until
        cancelled (when the survey is over)."""
        while True:
            await asyncio.sleep(SURVEY_PROGRESS_EVERY)
            try:
                answered = await self.executor.answered()
            except Exception:  # a host that fails shows in the survey's own result
                return
            self._report_survey(what, answered, asked)

    def _report_survey(self, what: str, answered: int, asked: int) -> None:
        if self.progress is None:
            return
        total = self.config.total_ticks()
        self.progress(
            Progress.of(
                self._metrics,
                tick=self.clock.tick,
                total=total,
                survey=what,
                answered=answered,
                asked=asked,
            )
        )

    # -- checkpoints -----------------------------------------------------------------------

    async def checkpoint(self) -> Path:
        """Write ``checkpoints/tick-<N>/`` atomically (see ``agentsim.run.checkpoints``).

        A checkpoint at one of ``checkpoint_at``'s ticks is kept once written: forks start
        from it, at the end of the run step that reached the tick, so a later one at the
        same tick (a stop after the steps that follow) does not replace it; a resume from it
        does those steps again, as the run without the stop did."""
        assert self.ws is not None
        kept = self.ws.root / "checkpoints" / f"tick-{self.clock.tick:08d}"
        if self.clock.tick in self.checkpoint_at and kept.is_dir():
            return kept
        agents = await self.executor.get_state()  # hosts flush their agents' files first
        engine = {
            "pos": list(self._pos),
            "clock": self.clock.get_state(),
            "modules": {n: m.get_state() for n, m in self.modules.items()},
            "pending_messages": self._pending_messages,
            # The wall time so far, this invocation's included: a resume adds on to it.
            "metrics": {
                **self._metrics,
                "wall_seconds": round(
                    self._metrics["wall_seconds"] + time.perf_counter() - self._t_start, 3
                ),
            },
            "config_hash": self.config.config_hash(),
        }
        return write_checkpoint(self.ws, tick=self.clock.tick, engine=engine, agents=agents)

    async def _restore(self, cp: Checkpoint) -> None:
        assert self.ws is not None
        state = cp.engine
        self.clock.set_state(state["clock"])
        for n, s in state["modules"].items():
            self.modules[n].set_state(s)
        self._pending_messages = {k: list(v) for k, v in state["pending_messages"].items()}
        self._metrics = {**new_metrics(), **state["metrics"]}  # counters added since: 0
        if self.fork is None:  # a resume: what was spent after the checkpoint stays spent
            self._count_lost()
        self._pos = (int(state["pos"][0]), int(state["pos"][1]))
        rewind(self.ws, cp)
        remove_partial_checkpoints(self.ws)
        await self.executor.set_state(cp.agents)

    def _count_lost(self) -> None:
        """Count what the work this resume throws away had spent (``budget.add_lost``):
        ``metrics.json`` as the interrupted invocation last wrote it (at a tick's end or
        after a survey) against the checkpoint's metrics just restored."""
        assert self.ws is not None
        try:
            written = json.loads((self.ws.root / "metrics.json").read_text("utf-8"))
        except (OSError, ValueError):  # none written yet, or unreadable: nothing known
            return
        if isinstance(written, dict):
            add_lost(self._metrics, written)

    # -- the end ---------------------------------------------------------------------------

    async def _finish(self, status: str) -> None:
        ws = self.ws
        if ws is None:
            return
        try:
            try:
                if self._may_write:
                    await self._write_end(ws, status)
            finally:
                try:
                    ws.release()  # the run folder's lock, after its last write
                finally:
                    await self._close_executor(status)
        except OSError as exc:
            if not self._is_write_error(exc):
                raise
            raise self._write_error(exc) from None

    def _is_write_error(self, exc: OSError) -> bool:
        """Whether ``exc`` is the run folder refusing a write (space, permissions, or any
        error on a file inside it), not some other file's problem."""
        if exc.errno in _NO_SPACE or exc.errno in _NO_PERMISSION:
            return True
        if not exc.filename:
            return False
        root = self.run_dir.absolute()
        return Path(os.fsdecode(exc.filename)).absolute().is_relative_to(root)

    def _write_error(self, exc: OSError) -> StorageError:
        """The one error of a run folder that could not be written any more: what, where,
        the fix, and the resume command only when there is a checkpoint to resume from."""
        where = f" ({exc.filename})" if exc.filename else ""
        what = exc.strerror or str(exc)
        if self.reason is None or not self.reason.startswith("cannot write"):
            self.reason = f"cannot write the run folder {self.run_dir}: {what}{where}"
        if exc.errno in _NO_SPACE:
            fix = "free space (or raise the quota or file size limit)"
        elif exc.errno in _NO_PERMISSION:
            fix = f"make {exc.filename or self.run_dir} writable for this user"
        else:
            fix = "check the disk and the run folder"
        if checkpoint_dirs(self.run_dir):
            then = f"then resume with: agentsim run --resume {self.run_dir}"
        else:
            then = (
                "then run the experiment again into a new folder (no checkpoint was "
                f"written yet, so {self.run_dir} cannot be resumed)"
            )
        return StorageError(f"{self.reason}; {fix}, {then}")

    async def _write_end(self, ws: RunWorkspace, status: str) -> None:
        """The run's last writes: ``run_end``, metrics, parquet, the manifest's status.

        A failed run (its disk may be full) writes what it still can and leaves no temp
        files; a run that fails here says ``failed`` in its manifest if it still can."""
        from datetime import UTC, datetime

        failed = status == "failed"
        try:
            if (not failed or self.reason) and self._world is not None:
                why = {"reason": self.reason} if self.reason else {}
                self._emit([self._run_event("run_end", status=status, **why)])
            stats = await self.executor.model_stats() if self._world is not None else []
            m = public_metrics(self._metrics)
            m["model"] = self._model_block = merge_model_stats(stats)
            ws.write_metrics(m)
            ws.close()
            if "parquet" in self.config.output.formats and not failed:
                ws.write_parquet()
        except OSError:
            if not failed:
                failed, status = True, "failed"
                raise
        finally:
            ended = datetime.now(UTC).isoformat(timespec="seconds")
            # Both always written: a resume that mends a run leaves no stale reason behind.
            problems = over_limits(public_metrics(self._metrics), self._limits())
            try:
                ws.update_manifest(
                    status=status,
                    ended=ended,
                    ticks_done=self.clock.tick,
                    reason=self.reason,
                    problems=problems,
                    **self._estimate_fields(status),
                    **(
                        {"budget_stop": self.budget_stop.to_dict() if self.budget_stop else None}
                        if self.config.budget is not None or self.budget_stop
                        else {}
                    ),
                )
            except OSError:
                if not failed:
                    raise
            if failed:
                with contextlib.suppress(OSError):  # lines it could not write are lost
                    ws.close()
                remove_partial_checkpoints(ws)
                for tmp in ws.root.glob(".*.tmp-*"):
                    tmp.unlink(missing_ok=True)

    def _estimate_fields(self, status: str) -> dict[str, Any]:
        """The manifest's ``estimate_error`` when the run folder holds an estimate."""
        if not (self.run_dir / "estimate.json").is_file():
            return {}
        self._estimate_cmp = self._estimate_error(status)
        return {"estimate_error": self._estimate_cmp}

    async def _close_executor(self, status: str) -> None:
        try:
            await self.executor.close()  # hosts write their agents' last lines
        except OSError:
            if status != "failed":
                raise
        finally:
            self._close_skills()

    def _close_skills(self) -> None:
        """Close the registry's connections to MCP skills servers (if it was built)."""
        registry = getattr(self, "registry", None)
        if registry is not None:
            registry.close()


# Write errors that freeing space (or raising a limit) cures, and those that permissions
# cure: one line each, then resume (when a checkpoint was written).
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_NO_PERMISSION = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
