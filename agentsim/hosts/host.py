"""``AgentHost``: many resident agents, one ``step_tick`` call per tick.

The same class serves the in-process executor and the Ray executor (where it lives inside
an async actor). A host builds the skill registry once for its process (or shares the
engine's, in process), creates its agents, and each tick steps them concurrently behind the
model limiter: one asyncio task per agent step, so each step runs in its own copy of the
context (skill scripts keep per-call state in context variables). Events come back sorted
by agent id so that the merged log does not depend on completion order.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agentsim.agent.agent import Agent, AgentSettings, StepInput, StepOutcome, step_seed
from agentsim.config.experiment import ModelConfig
from agentsim.config.profiles import AgentSpec
from agentsim.env.base import EnvView, Intent
from agentsim.env.loader import ModuleCode
from agentsim.env.router import EnvRouter
from agentsim.errors import AgentsimError
from agentsim.llm.base import ChatModel, as_chat_model
from agentsim.llm.stats import ModelStats
from agentsim.skills.registry import SkillOverlay, SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
from agentsim.skills.scripts import ScriptRunner
from agentsim.store.layout import HostStore

__all__ = [
    "AgentHost",
    "HostSpec",
    "SkillSources",
    "StepDone",
    "TickInput",
    "TickResult",
    "build_registry",
]

# Agent steps started per turn of the event loop at the start of a tick (see _step_all).
START_BATCH = 32
# Agent steps a host runs at once: several times the model calls it may have in flight, so
# the model stays busy, but not every agent at once, since each step in flight holds its
# prompt and script calls (about 15 KB) until it ends.
_STEPS_PER_MODEL_SLOT = 4
_MIN_STEPS_IN_FLIGHT = 256
# The running step's time limit, so that waiting for a tick's complete views (which is not
# the step's own time) can push it back.
_STEP_LIMIT: contextvars.ContextVar[asyncio.Timeout | None] = contextvars.ContextVar(
    "agentsim_step_limit", default=None
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillSources:
    """Where a process finds its skills (paths as str so the spec pickles small)."""

    builtin: str | None
    custom: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # (skills_dir, module name)
    catalog_budget_tokens: int = 2000
    trusted_namespaces: tuple[str, ...] = ("built-in",)
    # The run's environment modules: a skill requiring another is hidden. None: not known.
    modules: tuple[str, ...] | None = None


def build_registry(src: SkillSources) -> SkillRegistry:
    reg = SkillRegistry()
    if src.builtin:
        reg.scan_builtin(Path(src.builtin))
    for path in src.custom:
        reg.scan_custom(Path(path))
    for skills_dir, module in src.env:
        reg.scan_env_skills(Path(skills_dir), module)
    return reg


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSpec:
    host_id: int
    run_dir: str
    seed: int
    skills: SkillSources
    model: ModelConfig
    settings: AgentSettings
    hosts: int = 1
    step_timeout: float = 120.0
    concurrent: bool = True  # False: step agents one after another
    flush_every: int = 1  # ticks between writes of agents' memory lines and store rows
    # Set up to be restored from a checkpoint (``set_state`` follows): the agents' default
    # skills are not activated (``set_state`` activates the saved ones), and the host must
    # hold the same agents as before (its shard holds their history).
    resume: bool = False
    # The experiment's own environment modules, for views unpickled in another process.
    env_code: ModuleCode = field(default_factory=ModuleCode)
    # Named models (``models:``) and the groups that use them; other groups use ``model``.
    models: Mapping[str, ModelConfig] = field(default_factory=dict)
    group_models: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class TickInput:
    tick: int
    time: datetime
    views: Mapping[str, EnvView]
    messages: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    refresh_skills: bool = False
    # Ids the engine's own refresh found added or changed this tick. A host that shares the
    # engine's registry (local executor) cannot learn them from its own refresh, which then
    # finds nothing new; it needs them to re-render the bodies of edited active skills.
    skills_changed: tuple[str, ...] = ()


@dataclass(slots=True, kw_only=True)
class TickResult:
    host_id: int
    events: list[dict[str, Any]]
    intents: list[Intent]
    steps: int = 0
    model_calls: int = 0
    script_calls: int = 0
    hook_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    degraded: int = 0
    skipped: int = 0
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StepDone:
    """One agent's finished step of one tick (``executor.schedule: dependencies``)."""

    tick: int
    agent_id: str
    result: TickResult


class AgentHost:
    """Holds resident agents (plain objects, never one actor per agent)."""

    def __init__(
        self,
        spec: HostSpec,
        agents: Sequence[AgentSpec],
        *,
        registry: SkillRegistry | None = None,
        model: ChatModel | None = None,
    ) -> None:
        from agentsim.llm.models import build_model, cache_file

        self.spec = spec
        # A host refreshes only a registry of its own; a shared one is the engine's to refresh.
        self._owns_registry = registry is None
        self.registry = registry if registry is not None else build_registry(spec.skills)
        self.space = SkillSpace(
            self.registry.snapshot(),
            runner=ScriptRunner(check_every_call=False),
            catalog_budget_tokens=spec.skills.catalog_budget_tokens,
            trusted_namespaces=spec.skills.trusted_namespaces,
            env_modules=spec.skills.modules,
        )
        self.stats = ModelStats()
        run_dir = Path(spec.run_dir)
        self.model = model or build_model(
            spec.model,
            run_dir=run_dir,
            hosts=spec.hosts,
            stats=self.stats,
            max_react_turns=spec.settings.max_react_turns,
        )
        self._specs = {a.agent_id: a for a in agents}
        # One model (limiter, stats, cache) per named model this host's agents use.
        used = sorted({spec.group_models.get(a.group, "default") for a in agents} - {"default"})
        self.named_stats = {name: ModelStats() for name in used}
        self.named_models: dict[str, ChatModel] = {
            name: build_model(
                spec.models[name],
                run_dir=run_dir,
                hosts=spec.hosts,
                stats=self.named_stats[name],
                max_react_turns=spec.settings.max_react_turns,
                cache_file=cache_file(name),
            )
            for name in used
        }
        self.agents: dict[str, Agent] = {}
        self._unflushed = 0
        self._agents_dir = run_dir / "agents"
        self.store = HostStore(run_dir, spec.host_id)
        # Agents with a skills folder of their own (``custom/skills`` in their workspace).
        self._own_views: dict[str, SkillOverlay] = {}
        # Default skills (as the group names them) that a reload took away, by agent: they
        # are activated again as soon as their folder has them back.
        self._lost_defaults: dict[str, list[str]] = {}
        # (skill, script) quarantines already reported: concurrent steps may all overrun.
        self._quarantines: set[tuple[str, str]] = set()
        slots = spec.model.max_concurrency + sum(spec.models[n].max_concurrency for n in used)
        per_host = max(1, slots // spec.hosts)
        self._steps_done = 0  # steps finished, for ``answered``
        self._answered_base = 0
        self._in_flight = asyncio.Semaphore(
            max(_MIN_STEPS_IN_FLIGHT, _STEPS_PER_MODEL_SLOT * per_host)
        )
        # Stepping agents one by one as the engine schedules them (see ``start_steps``).
        self._running: set[asyncio.Task[None]] = set()
        self._done: list[StepDone] = []
        self._done_event = asyncio.Event()
        self._final: dict[int, Mapping[str, EnvView]] = {}
        self._final_events: dict[int, asyncio.Event] = {}
        self._agent_unflushed: dict[str, int] = {}
        self._flush_rows: dict[int, dict[str, list[tuple[str, str]]]] = {}
        self._deactivated: dict[str, list[dict[str, Any]]] = {}

    @property
    def agent_ids(self) -> list[str]:
        return list(self._specs)

    async def setup(self, extra_profiles: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Create the agents, write their profiles, activate their default skills (not when
        resuming: ``set_state`` then activates the saved ones, once).

        Returns events (e.g. a default skill that could not be activated)."""
        events: list[dict[str, Any]] = []
        self.store.write_agents(self._specs, resume=self.spec.resume)
        store_part = self.store.add_part  # one bound method for all agents
        for aid, spec in self._specs.items():
            extra = extra_profiles.get(aid)
            # The spec's own dict when nothing is added: one copy per agent, not two.
            profile = {**spec.profile, **extra} if extra else spec.profile
            ws = self._agents_dir / aid
            if not ws.is_dir():  # present on resume: a stat, not a failing mkdir
                ws.mkdir(parents=True)
            own = self._own_view(ws)
            if own is not None:
                self._own_views[aid] = own
            runtime = AgentSkillRuntime(
                self.space,
                agent_id=aid,
                workspace_root=ws,
                disabled=spec.disabled_skills,
                own_view=own,
            )
            agent = Agent(
                agent_id=aid,
                group=spec.group,
                profile=profile,
                persona=spec.persona,
                workspace=ws,
                skills=runtime,
                prompt_parts=store_part,
            )
            _write_profile(
                ws, {"agent_id": aid, "group": spec.group, "persona": spec.persona, **profile}
            )
            if not self.spec.resume:
                events.extend(await _activate_defaults(aid, runtime, spec.default_skills))
            self.agents[aid] = agent
        return events

    def _own_view(self, ws: Path) -> SkillOverlay | None:
        own_dir = ws / "custom" / "skills"
        return self.registry.view(own_dir) if own_dir.is_dir() else None

    async def refresh_skills(
        self, tick: int, when: datetime, *, changed: Collection[str] = ()
    ) -> dict[str, list[dict[str, Any]]]:
        """Bring every agent up to the registry's current skills.

        Installs the registry's snapshot when its generation moved (whoever refreshed it),
        rescans the agents' own skill folders, re-renders the bodies of active skills that
        were edited (``changed``, plus what this host's own refresh found) and deactivates
        active skills that are gone. Returns the ``skill_deactivated`` events by agent id
        (the engine's own refresh reports what was reloaded)."""
        edited = set(changed)
        if self._owns_registry:
            res = self.registry.refresh()
            edited.update(res.added, res.changed)
        snap = self.registry.snapshot()
        if snap.generation != self.space.view.generation:
            self.space.swap_view(snap)
        events: dict[str, list[dict[str, Any]]] = {}
        for aid, agent in self.agents.items():
            own_edited = self._refresh_own_view(agent)
            gone = await agent.skills.sync(edited.union(own_edited) if own_edited else edited)
            if gone:
                events[aid] = [
                    {
                        "tick": tick,
                        "time": when.isoformat(),
                        "type": "skill_deactivated",
                        "agent_id": aid,
                        "skill": sid,
                        "reason": "removed from its skills folder",
                    }
                    for sid in gone
                ]
                self._note_lost_defaults(aid, gone)
            back = await self._restore_defaults(aid, agent)
            if back:
                events.setdefault(aid, []).extend(
                    {
                        "tick": tick,
                        "time": when.isoformat(),
                        "type": "skill_activated",
                        "agent_id": aid,
                        "skill": sid,
                        "default": True,
                    }
                    for sid in back
                )
        return events

    def _note_lost_defaults(self, aid: str, gone: Sequence[str]) -> None:
        names = {sid: sid.partition("@")[2] for sid in gone}
        for default in self._specs[aid].default_skills:
            bare = default.partition("@")[2] or default
            if any(default in (sid, name) or bare == name for sid, name in names.items()):
                lost = self._lost_defaults.setdefault(aid, [])
                if default not in lost:
                    lost.append(default)

    async def _restore_defaults(self, aid: str, agent: Agent) -> list[str]:
        """Activate again the agent's lost default skills that are back; their ids."""
        lost = self._lost_defaults.get(aid)
        if not lost:
            return []
        back: list[str] = []
        for name in list(lost):
            try:
                res = await agent.skills.activate(name)
            except AgentsimError:
                continue  # not back yet
            lost.remove(name)
            back.extend(res.newly_active)
        if not lost:
            del self._lost_defaults[aid]
        return back

    def _refresh_own_view(self, agent: Agent) -> tuple[str, ...]:
        """Rescan the agent's own ``custom/skills`` folder; the ids it added or changed."""
        own = self._own_views.get(agent.agent_id)
        if own is None:
            own = self._own_view(agent.workspace)
            if own is not None:  # the folder appeared during the run
                self._own_views[agent.agent_id] = own
                agent.skills.set_own_view(own)
            return ()
        res = own.refresh()
        return (*res.added, *res.changed)

    async def _step_one(self, agent: Agent, inp: StepInput) -> StepOutcome:
        """One agent's step; a failure or an overrun becomes that agent's error outcome, so
        that one broken step never cancels the others."""
        async with self._in_flight:  # the step's time starts when it gets its turn
            limit = asyncio.timeout(self.spec.step_timeout)
            _STEP_LIMIT.set(limit)  # this step's task has a context of its own
            try:
                async with limit:
                    return await agent.step(
                        inp,
                        model=self._model_of(agent.agent_id),
                        settings=self.spec.settings,
                        seed=step_seed(self.spec.seed, agent.agent_id, inp.tick),
                    )
            except Exception as exc:  # a bug in one agent's step must not stop the run
                if limit.expired():
                    error = f"step timed out after {self.spec.step_timeout:g}s"
                else:
                    error = f"{type(exc).__name__}: {exc}"
            finally:
                self._steps_done += 1
        return _error_outcome(agent.agent_id, inp, error)

    async def _step_all(
        self, agents: Sequence[Agent], inputs: Mapping[str, StepInput]
    ) -> list[StepOutcome]:
        """Step ``agents`` concurrently, each in a task of its own. A task runs in a copy of
        the context it was created in, so a context variable that a step sets (the skill
        script context) is seen by that step only. ``_step_one`` never raises an
        ``Exception``, so the group never cancels a sibling."""
        tasks = []
        async with asyncio.TaskGroup() as tg:
            for i, a in enumerate(agents):
                if i and i % START_BATCH == 0:
                    # Let the started steps run before starting more: a step's first model
                    # request then leaves once built, not after every agent has built its
                    # own (asyncio runs ready tasks in turn, and a request needs several
                    # turns to reach the socket: with 2,000 agents the model sat idle for
                    # a second or more at the start of every tick).
                    await asyncio.sleep(0)
                tasks.append(tg.create_task(self._step_one(a, inputs[a.agent_id])))
        # A step that cancels itself (a script raising CancelledError) ends only that step:
        # the group ignores such a child, and so does the tick.
        return [
            _error_outcome(a.agent_id, inputs[a.agent_id], "step was cancelled")
            if t.cancelled()
            else t.result()
            for a, t in zip(agents, tasks, strict=True)
        ]

    async def step_tick(self, tick: TickInput) -> TickResult:
        t0 = time.perf_counter()
        deactivated: dict[str, list[dict[str, Any]]] = {}
        if tick.refresh_skills:
            deactivated = await self.refresh_skills(
                tick.tick, tick.time, changed=tick.skills_changed
            )
        self.space.runner.new_tick()  # edited scripts are re-imported from this tick on
        router = EnvRouter(tick.views)
        outcomes: list[StepOutcome]
        # One input shared by every agent without messages: built once per tick.
        shared = StepInput(tick=tick.tick, time=tick.time, env=router)
        inputs = dict.fromkeys(self.agents, shared)
        for aid, msgs in tick.messages.items():
            if aid in inputs:
                inputs[aid] = StepInput(tick=tick.tick, time=tick.time, env=router, messages=msgs)
        for aid, msgs in tick.messages.items():
            agent = self.agents.get(aid)
            if agent is not None:
                for m in msgs:
                    agent.remember(tick=tick.tick, time=shared.iso, kind="message", text=m)
        if self.spec.concurrent:
            outcomes = await self._step_all(list(self.agents.values()), inputs)
        else:
            outcomes = []
            for agent in self.agents.values():
                outcomes.extend(await self._step_all([agent], inputs))
        self._unflushed += 1
        if self._unflushed >= self.spec.flush_every:
            self.flush()
        outcomes.sort(key=lambda o: o.agent_id)
        res = TickResult(host_id=self.spec.host_id, events=[], intents=[])
        self._once_per_quarantine(outcomes)
        for o in outcomes:
            res.events.extend(deactivated.get(o.agent_id, ()))
            res.events.extend(o.events)
            res.intents.extend(o.intents)
            res.steps += 1
            res.model_calls += o.model_calls
            res.script_calls += o.script_calls
            res.hook_calls += o.hook_calls
            res.prompt_tokens += o.usage.prompt_tokens
            res.completion_tokens += o.usage.completion_tokens
            res.cached_prompt_tokens += o.usage.cached_prompt_tokens
            res.degraded += o.degraded
            res.skipped += o.skipped
        res.elapsed = time.perf_counter() - t0
        return res

    # -- stepping agents as their dependencies allow (executor.schedule: dependencies) ----

    async def start_steps(self, tick: TickInput, agent_ids: Sequence[str], *, final: bool) -> None:
        """Start these agents' steps of ``tick`` and return; ``collect`` hands back each
        finished step. ``final``: ``tick.views`` are the tick's complete views; if not,
        an action marked ``reads_all`` waits for them (``tick_final``)."""
        self.space.runner.new_tick()
        if tick.refresh_skills:
            # Hot reload of each agent's own skills folder, as step_tick's refresh does;
            # the run's folders reload through ``reload``, between steps.
            for aid in agent_ids:
                await self._refresh_one(self.agents[aid], tick)
        wait = None if final else functools.partial(self._wait_final, tick.tick)
        router = EnvRouter(tick.views, final=wait)
        shared = StepInput(tick=tick.tick, time=tick.time, env=router)
        loop = asyncio.get_running_loop()
        for i, aid in enumerate(agent_ids):
            if i and i % START_BATCH == 0:
                await asyncio.sleep(0)  # see _step_all
            agent = self.agents[aid]
            inp = shared
            msgs = tick.messages.get(aid)
            if msgs:
                inp = StepInput(tick=tick.tick, time=tick.time, env=router, messages=msgs)
                for m in msgs:
                    agent.remember(tick=tick.tick, time=shared.iso, kind="message", text=m)
            task = loop.create_task(self._step_and_keep(agent, inp))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def collect(self) -> list[StepDone]:
        """The steps finished since the last call; waits for at least one."""
        while not self._done:
            self._done_event.clear()
            await self._done_event.wait()
        done, self._done = self._done, []
        return done

    def tick_final(self, tick: int, views: Mapping[str, EnvView]) -> None:
        """Every agent's tick ``tick - 1`` is applied: these are tick ``tick``'s views."""
        self._final = {t: v for t, v in self._final.items() if t >= tick}
        self._final[tick] = views
        event = self._final_events.pop(tick, None)
        if event is not None:
            event.set()
        for t in [t for t in self._final_events if t < tick]:
            self._final_events.pop(t).set()

    async def reload(self, tick: int, when: datetime, *, changed: Collection[str] = ()) -> None:
        """Bring the agents up to the registry's skills between steps (hot reload); each
        agent's ``skill_deactivated`` events come with its next step."""
        if self._running:
            raise RuntimeError("reload() while steps run; wait for them first")
        found = await self.refresh_skills(tick, when, changed=changed)
        for aid, events in found.items():
            self._deactivated.setdefault(aid, []).extend(events)

    async def _refresh_one(self, agent: Agent, tick: TickInput) -> None:
        own_edited = self._refresh_own_view(agent)
        gone = await agent.skills.sync(own_edited)
        self._deactivated.setdefault(agent.agent_id, []).extend(
            {
                "tick": tick.tick,
                "time": tick.time.isoformat(),
                "type": "skill_deactivated",
                "agent_id": agent.agent_id,
                "skill": sid,
                "reason": "removed from its skills folder",
            }
            for sid in gone
        )

    async def _wait_final(self, tick: int) -> Mapping[str, EnvView]:
        views = self._final.get(tick)
        if views is not None:
            return views
        event = self._final_events.setdefault(tick, asyncio.Event())
        # Waiting for the others is not this step's own time: it gives its place among
        # the steps in flight to theirs, and its time limit waits with it.
        loop = asyncio.get_running_loop()
        limit, began = _STEP_LIMIT.get(), loop.time()
        when = limit.when() if limit is not None else None
        if limit is not None:
            limit.reschedule(None)  # no deadline while it waits for the others
        self._in_flight.release()
        try:
            await event.wait()
        finally:
            await self._in_flight.acquire()
            if limit is not None and when is not None:
                limit.reschedule(when + loop.time() - began)
        return self._final[tick]

    async def _step_and_keep(self, agent: Agent, inp: StepInput) -> None:
        aid = agent.agent_id
        try:
            out = await self._step_one(agent, inp)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the host is closing
            out = _error_outcome(aid, inp, "step was cancelled")
        self._once_per_quarantine([out])
        res = TickResult(host_id=self.spec.host_id, events=[], intents=out.intents)
        for e in self._deactivated.pop(aid, ()):
            res.events.append({**e, "tick": inp.tick, "time": inp.iso})
        res.events.extend(out.events)
        res.steps = 1
        res.model_calls, res.script_calls = out.model_calls, out.script_calls
        res.hook_calls = out.hook_calls
        res.prompt_tokens = out.usage.prompt_tokens
        res.completion_tokens = out.usage.completion_tokens
        res.cached_prompt_tokens = out.usage.cached_prompt_tokens
        res.degraded, res.skipped = out.degraded, out.skipped
        self._flush_agent(agent, inp.tick)
        self._done.append(StepDone(tick=inp.tick, agent_id=aid, result=res))
        self._done_event.set()

    def _flush_agent(self, agent: Agent, tick: int) -> None:
        """Flush an agent after the same ticks as ``step_tick`` flushes every agent; its
        store rows wait until every agent of the host has flushed after that tick, and
        are then appended in agent order, as ``flush`` does."""
        aid = agent.agent_id
        n = self._agent_unflushed.get(aid, self._unflushed) + 1
        if n < self.spec.flush_every:
            self._agent_unflushed[aid] = n
            return
        self._agent_unflushed[aid] = 0
        rows = self._flush_rows.setdefault(tick, {})
        rows[aid] = [(aid, line) for line in agent.flush()]
        if len(rows) == len(self.agents):
            del self._flush_rows[tick]
            self.store.append(r for a in self.agents if a in rows for r in rows[a])

    def _once_per_quarantine(self, outcomes: Sequence[StepOutcome]) -> None:
        """Keep one ``skill_quarantined`` event per quarantine (a script edited since gets a
        fresh start, and may be reported again)."""
        still = {q.skill_id for q in self.space.runner.quarantined()}
        self._quarantines = {k for k in self._quarantines if k[0] in still}
        for o in outcomes:
            if not any(e["type"] == "skill_quarantined" for e in o.events):
                continue
            kept = []
            for e in o.events:
                key = (str(e.get("skill")), str(e.get("script")))
                if e["type"] == "skill_quarantined":
                    if key in self._quarantines:
                        continue
                    self._quarantines.add(key)
                kept.append(e)
            o.events[:] = kept

    async def ask(
        self,
        agent_ids: Sequence[str],
        question: str,
        *,
        tick: int,
        when: datetime,
        views: Mapping[str, EnvView],
    ) -> dict[str, str]:
        """Ask agents a question in read-only mode (survey / interview): all at once, under
        the same limits as a tick's steps (the host's steps in flight, the model's limiter)
        and each under its own step timeout. ``answered`` counts the answers in so far."""
        router = EnvRouter(views)
        mine = [self.agents[aid] for aid in agent_ids if aid in self.agents]
        inputs = {
            a.agent_id: StepInput(
                tick=tick, time=when, env=router, question=question, read_only=True
            )
            for a in mine
        }
        self._answered_base = self._steps_done
        outcomes = await self._step_all(mine, inputs)
        return {a.agent_id: o.answer or o.action for a, o in zip(mine, outcomes, strict=True)}

    @property
    def answered(self) -> int:
        """Answers given in the current (or last) ``ask``."""
        return self._steps_done - self._answered_base

    def flush(self, *, force: bool = False) -> None:
        """Write every agent's buffered memory lines to its folder, and their trace, skills
        and prompt rows to this host's store, in one append."""
        self.store.append(
            (aid, line) for aid, agent in self.agents.items() for line in agent.flush(force=force)
        )
        self._unflushed = 0
        self._agent_unflushed.clear()

    def get_state(self) -> dict[str, Any]:
        self.flush(force=True)  # a checkpoint records file sizes right after this
        return {aid: a.get_state() for aid, a in sorted(self.agents.items())}

    async def set_state(self, state: Mapping[str, Any]) -> None:
        """Put the agents back as a checkpoint saved them (the run folder was cut back to
        that checkpoint before)."""
        self.store.reload()
        for aid, st in state.items():
            agent = self.agents.get(aid)
            if agent is not None:
                await agent.set_state(st)

    def _model_of(self, agent_id: str) -> ChatModel:
        spec = self._specs.get(agent_id)
        name = self.spec.group_models.get(spec.group, "default") if spec else "default"
        return self.named_models.get(name, self.model)

    def model_stats(self) -> dict[str, Any]:
        """All calls of the host; with named models, also ``by_model`` (name -> calls)."""
        if not self.named_stats:
            return self.stats.snapshot()
        by_model = {"default": self.stats.snapshot()}
        by_model.update((n, s.snapshot()) for n, s in self.named_stats.items())
        total = ModelStats()
        for snap in by_model.values():
            total.merge(snap)
        return {**total.snapshot(), "by_model": by_model}

    async def close(self) -> None:
        for task in list(self._running):  # a run that failed may leave steps behind
            task.cancel()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        self.flush(force=True)
        for model in (self.model, *self.named_models.values()):
            await as_chat_model(model).aclose()


async def _activate_defaults(
    aid: str, runtime: AgentSkillRuntime, names: Sequence[str]
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for name in names:
        try:
            res = await runtime.activate(name)
        except AgentsimError as exc:
            events.append(
                {
                    "tick": 0,
                    "type": "agent_error",
                    "agent_id": aid,
                    "error": f"default skill: {exc}",
                }
            )
            continue
        events.extend(
            {"tick": 0, "type": "skill_activated", "agent_id": aid, "skill": sid, "default": True}
            for sid in res.newly_active
        )
    return events


def _write_profile(folder: Path, profile: Mapping[str, Any]) -> None:
    """``profile.json``, read by skills. Never rewritten: a resume finds the one the run
    wrote (the same configuration makes the same profile), and skipping 100,000 writes is
    much of what makes a resume fast."""
    path = folder / "profile.json"
    if not path.exists():
        path.write_text(
            json.dumps(profile, indent=1, sort_keys=True, ensure_ascii=False), encoding="utf-8"
        )


def _error_outcome(agent_id: str, inp: StepInput, error: str) -> StepOutcome:
    out = StepOutcome(agent_id=agent_id)
    out.events.append(
        {
            "tick": inp.tick,
            "time": inp.time.isoformat(),
            "type": "agent_error",
            "agent_id": agent_id,
            "error": error[:500],
        }
    )
    out.action = "error"
    return out
