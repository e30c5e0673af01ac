"""The engine: runs an experiment's workflow tick by tick and keeps its workspace.

Each tick: refresh the skill registry (stat only), build one read-only view per environment
module, call every host once (``step_tick``), merge events by agent id, apply the agents'
environment intents in ``(agent_id, seq)`` order, append the tick's events, update metrics,
and checkpoint every k ticks. Events hold simulation time only, so a seed gives a
byte-identical ``events.jsonl`` on every executor.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsim.agent.agent import AgentSettings
from agentsim.env import create_module
from agentsim.env.base import AgentInfo, EnvModule, EnvView
from agentsim.env.clock import SimClock
from agentsim.errors import ConfigError, RunError, SkillNotFoundError
from agentsim.sim.checkpoints import (
    Checkpoint,
    latest_checkpoint,
    remove_partial_checkpoints,
    rewind,
    write_checkpoint,
)
from agentsim.sim.config import (
    ExperimentConfig,
    InterveneStep,
    InterviewStep,
    RunStep,
    SurveyStep,
)
from agentsim.sim.executors import Executor, LocalExecutor, partition
from agentsim.sim.host import HostSpec, SkillSources, TickInput, build_registry
from agentsim.sim.metrics import add_tick, new_metrics, public_metrics
from agentsim.sim.profiles import AgentSpec, resolve_agents, select_agents
from agentsim.sim.workspace import RunWorkspace, atomic_write_text
from agentsim.store.layout import run_hosts

__all__ = ["Engine", "Progress", "RunSummary", "builtin_skills_dir"]


# What ``Engine.checkpoint`` saves and ``_restore`` reads back.
_ENGINE_STATE = ("pos", "clock", "modules", "pending_messages", "metrics")


def builtin_skills_dir() -> Path | None:
    """The built-in skills: ``skills/`` of a source checkout, or the copy in the wheel."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "skills", here / "_builtin_skills"):
        if candidate.is_dir():
            return candidate
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    tick: int
    total: int
    agent_steps: int
    steps_per_s: float
    model_calls: int
    tokens: int
    errors: int


@dataclass(slots=True, kw_only=True)
class RunSummary:
    run_id: str
    run_dir: Path
    status: str
    ticks: int
    agents: int
    metrics: dict[str, Any] = field(default_factory=dict)


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
    ) -> None:
        self.config = config
        self.run_dir = run_dir
        self.executor: Executor = executor or LocalExecutor()
        self.progress = progress
        self.stop = stop or threading.Event()
        self.max_ticks = max_ticks
        self.trace = trace
        self.clock = SimClock(config.clock.start, config.clock.tick)
        self.modules: dict[str, EnvModule] = {}
        self.agents: list[AgentSpec] = []
        self.ws: RunWorkspace | None = None
        self._pending_messages: dict[str, list[str]] = {}
        self._metrics = new_metrics()
        self._pos = (0, 0)  # (workflow step index, ticks done inside it)
        self._registry_sources: SkillSources | None = None
        # A resume writes nothing until its checkpoint is restored: a resume that fails
        # before that leaves the run folder exactly as it found it.
        self._may_write = True

    # -- set-up ----------------------------------------------------------------------------

    def _sources(self) -> SkillSources:
        cfg = self.config
        builtin = builtin_skills_dir() if cfg.skills.builtin else None
        custom = tuple(str(cfg.resolve_path(p)) for p in cfg.skills.paths)
        env = tuple(
            (str(d), name) for name, m in self.modules.items() if (d := m.skills_dir()) is not None
        )
        return SkillSources(
            builtin=str(builtin) if builtin else None,
            custom=custom,
            env=env,
            catalog_budget_tokens=cfg.skills.catalog_budget_tokens,
            trusted_namespaces=cfg.skills.trusted_namespaces,
        )

    def _host_specs(self, n: int, *, resume: bool = False) -> list[HostSpec]:
        cfg = self.config
        settings = AgentSettings(
            max_react_turns=cfg.agent.max_react_turns,
            max_hook_retries=cfg.agent.max_hook_retries,
            memory_prompt_tokens=cfg.agent.memory_prompt_tokens,
            prompt_cap_tokens=cfg.agent.prompt_cap_tokens,
            trace=self.trace,
        )
        assert self._registry_sources is not None
        return [
            HostSpec(
                host_id=i,
                run_dir=str(self.run_dir),
                seed=cfg.seed,
                skills=self._registry_sources,
                model=cfg.model,
                settings=settings,
                hosts=n,
                # Concurrent stepping bounds a tick by step_timeout even when one model call
                # hangs; with the offline model it costs nothing (measured: same speed).
                step_timeout=cfg.executor.step_timeout,
                concurrent=True,
                flush_every=cfg.output.flush_every,
                resume=resume,
            )
            for i in range(n)
        ]

    def _prepare(self) -> None:
        """Everything that can reject the configuration, before anything is written."""
        cfg = self.config
        self.agents = resolve_agents(cfg)
        for i, m in enumerate(cfg.environment):
            try:
                self.modules[m.module] = create_module(
                    m.module, m.options, seed=cfg.seed, base_dir=cfg.source_dir
                )
            except ConfigError as exc:
                raise ConfigError(
                    f"environment.{i}.{exc.field}".rstrip("."), exc.problem, exc.fix
                ) from None
        infos = [
            AgentInfo(agent_id=a.agent_id, group=a.group, profile=a.profile) for a in self.agents
        ]
        for mod in self.modules.values():
            mod.setup(infos)
        self._registry_sources = self._sources()
        self.registry = build_registry(self._registry_sources)
        for gi, group in enumerate(cfg.agents):
            for name in group.skills.default:
                try:
                    self.registry.resolve(name)
                except SkillNotFoundError as exc:
                    close = f" (close matches: {', '.join(exc.close)})" if exc.close else ""
                    raise ConfigError(
                        f"agents.{gi}.skills.default",
                        f"default skill {name!r} is not registered{close}",
                        "fix the name, or add the folder holding it to skills.paths",
                    ) from None

    async def _start(self, *, resume: bool) -> list[dict[str, Any]]:
        cfg = self.config
        n_hosts = cfg.executor.hosts or (
            1 if self.executor.kind == "local" else os.cpu_count() or 1
        )
        if resume:  # the run's own split: each host's shard holds its agents' history
            n_hosts = run_hosts(self.run_dir) or n_hosts
        blocks = partition(self.agents, n_hosts)
        await self.executor.start(
            self._host_specs(len(blocks), resume=resume), blocks, self.registry
        )
        events = await self.executor.setup(self._profile_extras())
        if resume:
            return []
        diag = [str(d) for d in self.registry.diagnostics]
        start = {
            "tick": 0,
            "time": self.clock.now.isoformat(),
            "type": "run_start",
            "agent_id": None,
            "agents": len(self.agents),
            "seed": cfg.seed,
            "skills": len(self.registry.list_all()),
            "skill_diagnostics": len(diag),
            "modules": sorted(self.modules),
        }
        for e in events:
            e.setdefault("time", start["time"])
        return [start, *sorted(events, key=lambda e: str(e.get("agent_id") or ""))]

    def _profile_extras(self) -> dict[str, dict[str, Any]]:
        """What environment modules assigned to agents (e.g. home and work places)."""
        extras: dict[str, dict[str, Any]] = {}
        for mod in self.modules.values():
            view = mod.view(self.clock)
            if "my_places" not in view.actions():
                continue
            for a in self.agents:
                ans = view.query(a.agent_id, "my_places", {}, seq=0)
                # Skills want place ids in the profile ("home": "home-3"), not place records.
                flat = {
                    k: (v["id"] if isinstance(v, dict) and "id" in v else v)
                    for k, v in ans.result.items()
                }
                extras.setdefault(a.agent_id, {}).update(flat)
        return extras

    # -- the run ---------------------------------------------------------------------------

    async def run(self, *, resume: bool = False) -> RunSummary:
        """Run (or, with ``resume``, continue from the last checkpoint) the experiment.

        Configuration errors (``ConfigError``) are raised before the run folder is created,
        so a bad experiment never leaves a half-made folder behind."""
        cfg = self.config
        t_start = time.perf_counter()
        checkpoint: Checkpoint | None = None
        if resume:
            self.ws = RunWorkspace.open_existing(self.run_dir)
            try:
                self._prepare()
                # Read and checked before anything is written (see ``_may_write``).
                checkpoint = latest_checkpoint(
                    self.ws, config_hash=cfg.config_hash(), engine_keys=_ENGINE_STATE
                )
            except BaseException:
                self.ws.release()  # nothing was written: the folder is free for the next try
                raise
            self._may_write = False
        else:
            check_run_dir(self.run_dir)
            self._prepare()
            self.ws = RunWorkspace.create(self.run_dir)
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
                ws.update_manifest(source_dir=str(cfg.source_dir.resolve()))
                ws.write_config(cfg.resolved_dict())
            events = await self._start(resume=resume)
            if checkpoint is not None:
                await self._restore(checkpoint)
                self._may_write = True
                ws.update_manifest(status="running", resumed=True, pid=os.getpid())
            self._emit(events)
            status = await self._workflow()
            if status != "completed":
                # A checkpoint at the stopping point makes the printed resume command work
                # whatever output.checkpoint_every says.
                await self.checkpoint()
        except BaseException:
            status = "failed" if not self.stop.is_set() else "interrupted"
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
            metrics=public_metrics(self._metrics),
        )

    async def _workflow(self) -> str:
        done = 0
        steps = self.config.steps()
        first_step, first_done = self._pos
        for si in range(first_step, len(steps)):
            step = steps[si]
            already = first_done if si == first_step else 0
            if isinstance(step, RunStep):
                for k in range(already, step.ticks):
                    if self.stop.is_set():
                        return "interrupted"
                    if self.max_ticks is not None and done >= self.max_ticks:
                        return "stopped"
                    self._pos = (si, k)
                    await self._tick()
                    done += 1
                    self._pos = (si, k + 1)
                    every = self.config.output.checkpoint_every
                    if every and self.clock.tick % every == 0:
                        await self.checkpoint()
            elif already == 0:
                self._pos = (si, 0)
                await self._special(step, si)
                self._pos = (si, 1)
        self._pos = (len(steps), 0)
        return "completed"

    def _views(self) -> dict[str, EnvView]:
        return {name: m.view(self.clock) for name, m in self.modules.items()}

    async def _tick(self) -> None:
        t0 = time.perf_counter()
        tick, now = self.clock.tick, self.clock.now
        iso = now.isoformat()
        refresh = self.config.skills.hot_reload
        run_events: list[dict[str, Any]] = []
        changed: tuple[str, ...] = ()
        if refresh:
            res = self.registry.refresh()
            changed = (*res.added, *res.changed)
            if res.added or res.changed or res.removed:
                self._metrics["skills_reloads"] += 1
                run_events.append(
                    {
                        "tick": tick,
                        "time": iso,
                        "type": "skills_reloaded",
                        "agent_id": None,
                        "generation": res.generation,
                        "added": sorted(res.added),
                        "changed": sorted(res.changed),
                        "removed": sorted(res.removed),
                    }
                )
        messages = {aid: tuple(m) for aid, m in self._pending_messages.items()}
        self._pending_messages.clear()
        results = await self.executor.step_tick(
            TickInput(
                tick=tick,
                time=now,
                views=self._views(),
                messages=messages,
                refresh_skills=refresh,
                skills_changed=changed,
            )
        )
        agent_events = sorted(
            (e for r in results for e in r.events), key=lambda e: str(e.get("agent_id") or "")
        )
        intents = sorted((i for r in results for i in r.intents), key=lambda i: i.sort_key)
        env_events: list[dict[str, Any]] = []
        for name, mod in self.modules.items():
            env_events.extend(mod.apply([i for i in intents if i.module == name], self.clock))
        for mod in self.modules.values():
            env_events.extend(mod.tick_events(self.clock))
        for e in env_events:
            e.setdefault("tick", tick)
            e.setdefault("time", iso)
            e.setdefault("agent_id", None)
        summary = add_tick(self._metrics, results)
        tick_end = {"tick": tick, "time": iso, "type": "tick_end", "agent_id": None, **summary}
        self._emit([*run_events, *agent_events, *env_events, tick_end])
        self.clock.advance()
        self._metrics["ticks"] += 1
        dt = time.perf_counter() - t0
        self._metrics["tick_seconds"].append(round(dt, 4))
        assert self.ws is not None
        self.ws.update_manifest(ticks_done=self.clock.tick)
        self.ws.write_metrics(public_metrics(self._metrics))
        if self.progress is not None:
            m = self._metrics
            total_dt = sum(m["tick_seconds"]) or 1e-9
            self.progress(
                Progress(
                    tick=self.clock.tick,
                    total=self.config.total_ticks(),
                    agent_steps=m["agent_steps"],
                    steps_per_s=m["agent_steps"] / total_dt,
                    model_calls=m["model_calls"],
                    tokens=m["prompt_tokens"] + m["completion_tokens"],
                    errors=m["errors"],
                )
            )

    def _emit(self, events: Sequence[dict[str, Any]]) -> None:
        assert self.ws is not None
        self._metrics["events"] += self.ws.append_events(events)

    async def _special(self, step: Any, index: int) -> None:
        tick, iso = self.clock.tick, self.clock.now.isoformat()
        if isinstance(step, InterveneStep):
            if step.env is not None:
                assert step.action is not None
                out = self.modules[step.env].intervene(step.action, step.args, self.clock)
                for e in out:
                    e.setdefault("tick", tick)
                    e.setdefault("time", iso)
                    e.setdefault("agent_id", None)
                self._emit(
                    [
                        {
                            "tick": tick,
                            "time": iso,
                            "type": "intervention",
                            "agent_id": None,
                            "env": step.env,
                            "action": step.action,
                            "args": step.args,
                        },
                        *out,
                    ]
                )
            else:
                chosen = select_agents(
                    step.agents,
                    self.agents,
                    seed=self.config.seed,
                    stream=f"step-{index}",
                    field=f"workflow.{index}.intervene.agents",
                )
                for aid in chosen:
                    self._pending_messages.setdefault(aid, []).append(str(step.message))
                self._emit(
                    [
                        {
                            "tick": tick,
                            "time": iso,
                            "type": "intervention",
                            "agent_id": None,
                            "message": step.message,
                            "recipients": len(chosen),
                        }
                    ]
                )
        elif isinstance(step, SurveyStep):
            chosen = select_agents(
                step.agents,
                self.agents,
                seed=self.config.seed,
                stream=f"step-{index}",
                field=f"workflow.{index}.agents",
            )
            answers = await self.executor.ask(
                chosen, step.question, tick=tick, when=self.clock.now, views=self._views()
            )
            kind = "interview" if isinstance(step, InterviewStep) else "survey"
            name = step.name or f"{kind}-{index}"
            assert self.ws is not None
            sdir = self.ws.root / "surveys"
            sdir.mkdir(exist_ok=True)
            rows = [
                {
                    "agent_id": aid,
                    "question": step.question,
                    "answer": answers.get(aid, ""),
                    "tick": tick,
                    "time": iso,
                }
                for aid in sorted(chosen)
            ]
            atomic_write_text(
                sdir / f"{name}.jsonl",
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
            )
            self._emit(
                [
                    {
                        "tick": tick,
                        "time": iso,
                        "type": f"{kind}_answer",
                        "agent_id": r["agent_id"],
                        "name": name,
                        "answer": r["answer"],
                    }
                    for r in rows
                ]
            )

    # -- checkpoints -----------------------------------------------------------------------

    async def checkpoint(self) -> Path:
        """Write ``checkpoints/tick-<N>/`` atomically (see ``agentsim.sim.checkpoints``)."""
        assert self.ws is not None
        agents = await self.executor.get_state()  # hosts flush their agents' files first
        engine = {
            "pos": list(self._pos),
            "clock": self.clock.get_state(),
            "modules": {n: m.get_state() for n, m in self.modules.items()},
            "pending_messages": self._pending_messages,
            "metrics": self._metrics,
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
        self._metrics = state["metrics"]
        self._pos = (int(state["pos"][0]), int(state["pos"][1]))
        rewind(self.ws, cp)
        remove_partial_checkpoints(self.ws)
        await self.executor.set_state(cp.agents)

    # -- the end ---------------------------------------------------------------------------

    async def _finish(self, status: str) -> None:
        ws = self.ws
        if ws is None:
            return
        if not self._may_write:
            await self.executor.close()
            return
        try:
            if status in ("completed", "stopped", "interrupted") and self._registry_sources:
                self._emit(
                    [
                        {
                            "tick": self.clock.tick,
                            "time": self.clock.now.isoformat(),
                            "type": "run_end",
                            "agent_id": None,
                            "status": status,
                        }
                    ]
                )
            stats = await self.executor.model_stats() if self._registry_sources else []
            m = public_metrics(self._metrics)
            m["model"] = stats
            ws.write_metrics(m)
            ws.close()
            if "parquet" in self.config.output.formats and status != "failed":
                ws.write_parquet()
        finally:
            from datetime import UTC, datetime

            ws.update_manifest(
                status=status,
                ended=datetime.now(UTC).isoformat(timespec="seconds"),
                ticks_done=self.clock.tick,
            )
            ws.release()  # the run folder's lock, after its last write
            await self.executor.close()


def check_run_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise RunError(f"{path} exists and is not a folder; choose another --out")
