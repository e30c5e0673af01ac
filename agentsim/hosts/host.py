"""``AgentHost``: many resident agents, stepped by ``start_steps`` and ``collect``.

The same class serves the in-process executor and the Ray executor (where it lives inside
an async actor, reached through ``call``). A host builds the skill registry once for its
process (or shares the engine's, in process) and creates its agents. The engine starts
agents' steps of a tick (all of them under ``executor.schedule: barrier``, each as soon as
it may under ``dependencies``) and collects the finished ones; the steps run concurrently
behind the model limiter, one asyncio task per agent step, so each step runs in its own
copy of the context (skill scripts keep per-call state in context variables). What
``collect`` hands back is sorted by agent id, so that the merged log does not depend on
completion order.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import inspect
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from agentsim.agent.agent import Agent, StepInput, StepInputs, StepOutcome, step_seed
from agentsim.agent.echo import echoes
from agentsim.agent.step import AgentSettings
from agentsim.config.profiles import AgentSpec
from agentsim.env.base import EnvView
from agentsim.env.router import EnvRouter
from agentsim.errors import AgentsimError
from agentsim.events import event
from agentsim.hosts.protocol import (
    Answer,
    HostSpec,
    SkillSources,
    StepDone,
    TickInput,
    TickResult,
    build_registry,
    build_space,
)
from agentsim.instruments import Instrument
from agentsim.llm.base import ChatModel, as_chat_model
from agentsim.llm.stats import ModelStats
from agentsim.skills.provenance import ProvenanceRecorder
from agentsim.skills.registry import SkillOverlay, SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime
from agentsim.skills.scripts import ScriptRunner
from agentsim.store.layout import HostStore

# The data types live in agentsim.hosts.protocol; named here too for the modules that import
# them from the host.
__all__ = [
    "ANSWER_STATUSES",
    "AgentHost",
    "HostSpec",
    "SkillSources",
    "StepDone",
    "TickInput",
    "TickResult",
    "answer_of",
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
        self.space = build_space(
            spec.skills, self.registry, runner=ScriptRunner(check_every_call=False)
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
        # Absolute: a script's workspace (``ctx.workspace_root``, ``AGENT_WORK_DIR``) must
        # name the same folder from a child process started inside it.
        self._agents_dir = run_dir.absolute() / "agents"
        self.store = HostStore(run_dir, spec.host_id)
        # Agents with a skills folder of their own (``custom/skills`` in their workspace).
        self._own_views: dict[str, SkillOverlay] = {}
        # Their versions, recorded in the run folder (``RUN/skills``) from the first tick this
        # host steps (``_own_tick`` None until then) and at each rescan.
        self._provenance = ProvenanceRecorder(run_dir.absolute())
        self._own_tick: int | None = None
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
        # The steps started and not yet collected (see ``start_steps``).
        self._running: set[asyncio.Task[None]] = set()
        self._done: list[StepDone] = []
        self._done_event = asyncio.Event()
        # Complete views of ticks that steps started early may wait for (``tick_final``).
        self._final: dict[int, Mapping[str, EnvView]] = {}
        self._final_events: dict[int, asyncio.Event] = {}
        # The first tick stepped since the agents' files were last written in full: the
        # agents' files are written after tick t when t - _flushed_from + 1 is a multiple of
        # ``flush_every``, once every agent of the host has stepped t; until then
        # _flush_rows (by tick, by agent) notes the agents done (None: the rows are still in
        # the agent's buffers) or holds rows taken from an agent before its next step.
        self._flushed_from: int | None = None
        self._flush_rows: dict[int, dict[str, list[tuple[str, str]] | None]] = {}
        # Events of a hot reload, by agent, sent with its next step: (type, fields).
        self._pending: dict[str, list[tuple[str, dict[str, Any]]]] = {}

    @property
    def agent_ids(self) -> list[str]:
        return list(self._specs)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self.<method>(*args, **kwargs)``, awaited if it is a coroutine: the one entry
        an executor calls a host by (see ``agentsim.hosts.protocol.Executor``)."""
        if method.startswith("_") or not callable(getattr(type(self), method, None)):
            raise AttributeError(f"AgentHost has no capability {method!r}")
        out = getattr(self, method)(*args, **kwargs)
        return await out if inspect.isawaitable(out) else out

    async def setup(
        self, extra_profiles: Mapping[str, Mapping[str, Any]], *, tick: int, when: datetime
    ) -> list[dict[str, Any]]:
        """Create the agents, write their profiles, activate their default skills (not when
        resuming: ``set_state`` then activates the saved ones, once).

        Returns events at ``tick`` and ``when`` (the run's start), e.g. a default skill
        that could not be activated."""
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
                events.extend(
                    await _activate_defaults(aid, runtime, spec.default_skills, tick, when)
                )
            self.agents[aid] = agent
        return events

    def _own_view(self, ws: Path) -> SkillOverlay | None:
        own_dir = ws / "custom" / "skills"
        return self.registry.view(own_dir) if own_dir.is_dir() else None

    async def reload(self, tick: int, when: datetime, *, changed: Collection[str] = ()) -> None:
        """Bring every agent up to the registry's current skills (hot reload), between steps.

        Installs the registry's snapshot when its generation moved (whoever refreshed it),
        rescans the agents' own skill folders, re-renders the bodies of active skills that
        were edited (``changed``, plus what this host's own refresh found), deactivates
        active skills that are gone and activates again lost default skills that are back.
        Each agent's ``skill_deactivated`` / ``skill_activated`` events come with its next
        step (the engine's own refresh reports what was reloaded)."""
        if self._running:
            raise RuntimeError("reload() while steps run; collect them first")
        del tick, when  # the events take the tick and time of the step they come with
        self._take_rows()  # a tick's rows as they were when it was stepped
        edited = set(changed)
        if self._owns_registry:
            res = self.registry.refresh()
            edited.update(res.added, res.changed)
        snap = self.registry.snapshot()
        if snap.generation != self.space.view.generation:
            self.space.swap_view(snap)
        for agent in self.agents.values():
            await self._refresh_agent(agent, edited)

    async def _refresh_agent(self, agent: Agent, edited: Collection[str] = ()) -> None:
        """Bring one agent up to the skill view and its own skills folder (see ``reload``)."""
        aid = agent.agent_id
        own_edited = self._refresh_own_view(agent)
        gone = await agent.skills.sync(set(edited).union(own_edited) if own_edited else edited)
        if gone:
            self._pending.setdefault(aid, []).extend(
                ("skill_deactivated", {"skill": sid, "reason": "removed from its skills folder"})
                for sid in gone
            )
            self._note_lost_defaults(aid, gone)
        back = await self._restore_defaults(aid, agent)
        if back:
            self._pending.setdefault(aid, []).extend(
                ("skill_activated", {"skill": sid, "default": True}) for sid in back
            )

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
                self._record_own(agent.agent_id, own)
            return ()
        res = own.refresh()
        self._record_own(agent.agent_id, own)
        return (*res.added, *res.changed)

    def _record_own(self, aid: str, own: SkillOverlay) -> None:
        """Record the versions of an agent's own skills, from the tick being started."""
        if self._own_tick is not None:
            self._provenance.record(own.own(), tick=self._own_tick, agent_id=aid)

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
                        settings=self._settings_of(agent.agent_id),
                        seed=step_seed(
                            self.spec.seed, agent.agent_id, inp.tick, sample=self.spec.sample
                        ),
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
        """Step ``agents`` concurrently, each in a task of its own (``ask``: the answers come
        back together, not through ``collect``). A task runs in a copy of the context it was
        created in, so a context variable that a step sets (the skill script context) is
        seen by that step only. ``_step_one`` never raises an
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
        # the group ignores such a child, and so does the ask.
        return [
            _error_outcome(a.agent_id, inputs[a.agent_id], "step was cancelled")
            if t.cancelled()
            else t.result()
            for a, t in zip(agents, tasks, strict=True)
        ]

    async def start_steps(
        self, tick: TickInput, by_host: Mapping[int, Sequence[str]] | None = None
    ) -> None:
        """Start agents' steps of ``tick`` and return; ``collect`` hands back each finished
        step. ``by_host``: the agents to start by host id (this host's entry), None: all of
        them. Hot reload happens first, as ``tick`` asks (``reload_skills``,
        ``refresh_skills``); an agent's messages go to its memory as its step starts."""
        ids: Sequence[str] = (
            list(self.agents) if by_host is None else by_host.get(self.spec.host_id, ())
        )
        if self._flush_rows:  # before the agents change (hot reload, messages, steps)
            for aid in ids:
                self._take_rows(aid)
        first = self._own_tick is None
        self._own_tick = tick.tick
        if first:  # the agents' own skills as the first tick stepped here finds them
            for aid, own in sorted(self._own_views.items()):
                self._record_own(aid, own)
        if tick.reload_skills:
            await self.reload(tick.tick, tick.time, changed=tick.skills_changed)
        elif tick.refresh_skills:
            # Each agent's own skills folder; the run's folders reload through ``reload``,
            # between steps.
            for aid in ids:
                await self._refresh_agent(self.agents[aid])
        self.space.runner.new_tick()  # edited scripts are re-imported from this tick on
        if self._flushed_from is None:
            self._flushed_from = tick.tick
        wait = None if tick.final else functools.partial(self._wait_final, tick.tick)
        router = EnvRouter(tick.views, final=wait)
        # One input shared by every agent without messages: built once per call.
        inputs = StepInputs(tick=tick.tick, time=tick.time, env=router)
        loop = asyncio.get_running_loop()
        before: asyncio.Task[None] | None = None  # the step to wait for (not concurrent)
        for i, aid in enumerate(ids):
            if i and i % START_BATCH == 0:
                await asyncio.sleep(0)  # see _step_all
            agent = self.agents[aid]
            msgs = tick.messages.get(aid)
            inp = inputs.for_agent(msgs)
            for m in msgs or ():
                agent.remember(tick=tick.tick, time=inputs.iso, kind="message", text=m)
            task = loop.create_task(self._step_and_keep(agent, inp, after=before))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
            if not self.spec.concurrent:
                before = task

    async def collect(self, *, wait_all: bool = False) -> list[StepDone]:
        """The steps finished since the last call, sorted by agent id: at least one, or
        with ``wait_all`` every step started. A ``skill_quarantined`` event is kept once
        per quarantine, by the first of them in that order."""
        while self._running if wait_all else not self._done:
            self._done_event.clear()
            await self._done_event.wait()
        done, self._done = self._done, []
        done.sort(key=lambda d: d.agent_id)
        self._once_per_quarantine([d.result.events for d in done])
        return done

    def tick_final(self, tick: int, views: Mapping[str, EnvView]) -> None:
        """Every agent's tick ``tick - 1`` is applied: these are tick ``tick``'s views."""
        self._final = {t: v for t, v in self._final.items() if t >= tick}
        self._final[tick] = views
        waiting = self._final_events.pop(tick, None)
        if waiting is not None:
            waiting.set()
        for t in [t for t in self._final_events if t < tick]:
            self._final_events.pop(t).set()

    async def _wait_final(self, tick: int) -> Mapping[str, EnvView]:
        views = self._final.get(tick)
        if views is not None:
            return views
        waiting = self._final_events.setdefault(tick, asyncio.Event())
        # Waiting for the others is not this step's own time: it gives its place among
        # the steps in flight to theirs, and its time limit waits with it.
        loop = asyncio.get_running_loop()
        limit, began = _STEP_LIMIT.get(), loop.time()
        when = limit.when() if limit is not None else None
        if limit is not None:
            limit.reschedule(None)  # no deadline while it waits for the others
        self._in_flight.release()
        try:
            await waiting.wait()
        finally:
            await self._in_flight.acquire()
            if limit is not None and when is not None:
                limit.reschedule(when + loop.time() - began)
        return self._final[tick]

    async def _step_and_keep(
        self, agent: Agent, inp: StepInput, *, after: asyncio.Task[None] | None = None
    ) -> None:
        """Step ``agent`` (after the step ``after``, if any) and keep what it did for
        ``collect``: its hot reload events, then its step's, and its counts."""
        aid = agent.agent_id
        try:
            if after is not None:
                await asyncio.wait([after])
            out = await self._step_one(agent, inp)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the host is closing
            out = _error_outcome(aid, inp, "step was cancelled")
        res = TickResult(host_id=self.spec.host_id, events=[], intents=out.intents)
        res.events.extend(
            event(kind, tick=inp.tick, time=inp.iso, agent_id=aid, **fields)
            for kind, fields in self._pending.pop(aid, ())
        )
        res.events.extend(out.events)
        res.steps = 1
        res.model_calls, res.script_calls = out.model_calls, out.script_calls
        res.hook_calls = out.hook_calls
        res.prompt_tokens = out.usage.prompt_tokens
        res.completion_tokens = out.usage.completion_tokens
        res.cached_prompt_tokens = out.usage.cached_prompt_tokens
        if out.recovered_calls:
            res.recovered_calls = out.recovered_calls
            self._stats_of(aid).record_recovered(out.recovered_calls)
        res.degraded, res.skipped = out.degraded, out.skipped
        res.outcomes = {out.outcome: 1}
        res.acted = int(out.acted)
        res.tool_results = out.tool_results
        res.catalog, res.hooks_seen = out.catalog, out.hooks_seen
        res.group = agent.group
        res.model = self._model_name(aid)
        res.action = "" if out.skipped or out.outcome == "error" else out.action
        self._flush_agent(agent, inp.tick)
        self._done.append(StepDone(tick=inp.tick, agent_id=aid, result=res))
        # Not running from here on, for ``collect``: a task's done callbacks run later.
        me = asyncio.current_task()
        if me is not None:
            self._running.discard(me)
        self._done_event.set()

    def _flush_agent(self, agent: Agent, tick: int) -> None:
        """Every ``flush_every`` ticks, an agent's memory lines and store rows are written
        once every agent of the host has stepped that tick: the rows in agent order, in one
        append, each agent's taken from it in turn (so they are not all held at once)."""
        first = tick if self._flushed_from is None else self._flushed_from
        if (tick - first + 1) % self.spec.flush_every:
            return
        rows = self._flush_rows.setdefault(tick, {})
        rows[agent.agent_id] = None  # still in the agent's buffers
        if len(rows) == len(self.agents):
            del self._flush_rows[tick]
            self.store.append(r for aid in self.agents for r in self._rows_of(aid, rows[aid]))

    def _rows_of(self, aid: str, taken: list[tuple[str, str]] | None) -> Iterable[tuple[str, str]]:
        if taken is not None:
            return taken
        return ((aid, line) for line in self.agents[aid].flush())

    def _take_rows(self, aid: str | None = None) -> None:
        """Take the rows of a tick still waiting for other agents out of this agent's
        (None: every agent's) buffers, before it changes: its next step, a reload."""
        for rows in self._flush_rows.values():
            for a in (aid,) if aid is not None else list(rows):
                if a in rows and rows[a] is None:
                    rows[a] = [(a, line) for line in self.agents[a].flush()]

    def _once_per_quarantine(self, steps: Sequence[list[dict[str, Any]]]) -> None:
        """Keep one ``skill_quarantined`` event per quarantine in these steps' events (a
        script edited since gets a fresh start, and may be reported again)."""
        still = {q.skill_id for q in self.space.runner.quarantined()}
        self._quarantines = {k for k in self._quarantines if k[0] in still}
        for events in steps:
            if not any(e["type"] == "skill_quarantined" for e in events):
                continue
            kept = []
            for e in events:
                key = (str(e.get("skill")), str(e.get("script")))
                if e["type"] == "skill_quarantined":
                    if key in self._quarantines:
                        continue
                    self._quarantines.add(key)
                kept.append(e)
            events[:] = kept

    async def ask(
        self,
        agent_ids: Sequence[str],
        question: str,
        *,
        tick: int,
        when: datetime,
        views: Mapping[str, EnvView],
        answer: Instrument | None = None,
    ) -> dict[str, Answer]:
        """Ask agents a question in read-only mode (survey / interview): all at once, under
        the same limits as a tick's steps (the host's steps in flight, the model's limiter)
        and each under its own step timeout. ``answered`` counts the answers in so far.

        Each agent's answer is ``answer_of`` its step (the text and its status); an ok
        free-text answer that only copies the agent's own prompt is marked ``echo``.
        ``answer``: the form of a typed answer (``agentsim.instruments``)."""
        router = EnvRouter(views)
        mine = [self.agents[aid] for aid in agent_ids if aid in self.agents]
        asked = StepInputs(tick=tick, time=when, env=router).question(question, answer)
        inputs = dict.fromkeys((a.agent_id for a in mine), asked)
        self._answered_base = self._steps_done
        outcomes = await self._step_all(mine, inputs)
        answers = {}
        for agent, out in zip(mine, outcomes, strict=True):
            given = answer_of(out)
            if (
                given.status == "ok"
                and answer is None
                and out.outcome in ("finished", "answered")
                and echoes(given.text, self._prompt_of(agent, asked))
            ):
                given = dataclasses.replace(given, echo=True)
            answers[agent.agent_id] = given
        return answers

    def _prompt_of(self, agent: Agent, inp: StepInput) -> str:
        """The agent's own part of the prompt of a read-only step and its turn, with its
        memory (a cap may have left it out) and its last step's post_step hooks."""
        turn = agent.user_prompt(
            inp, agent.last_hooks, memory_tokens=self.spec.settings.memory_prompt_tokens
        )
        return f"{agent.agent_prompt()}\n{turn}"

    def answered(self) -> int:
        """Answers given in the current (or last) ``ask``."""
        return self._steps_done - self._answered_base

    def flush(self, *, force: bool = False) -> None:
        """Write every agent's buffered memory lines to its folder, and their trace, skills
        and prompt rows to this host's store, in one append."""
        self.store.append(
            (aid, line) for aid, agent in self.agents.items() for line in agent.flush(force=force)
        )
        self._flushed_from = None  # counted again from the next tick stepped

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

    def _stats_of(self, agent_id: str) -> ModelStats:
        """The stats of the model an agent uses (by name in ``metrics.json``)."""
        return self.named_stats.get(self._model_name(agent_id), self.stats)

    def _settings_of(self, agent_id: str) -> AgentSettings:
        """The step settings of an agent: the run's, with its model's ``tool_calls``."""
        name = self._model_name(agent_id)
        cfg = self.spec.models.get(name, self.spec.model)
        settings = self.spec.settings
        if settings.tool_calls != cfg.tool_calls:
            settings = dataclasses.replace(settings, tool_calls=cfg.tool_calls)
        return settings

    def _model_name(self, agent_id: str) -> str:
        """The name of the model the agent uses ("default": the ``model:`` block)."""
        spec = self._specs.get(agent_id)
        return self.spec.group_models.get(spec.group, "default") if spec else "default"

    def _model_of(self, agent_id: str) -> ChatModel:
        return self.named_models.get(self._model_name(agent_id), self.model)

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
        if self._owns_registry:  # its MCP connections (a shared one is the engine's)
            self.registry.close()


async def _activate_defaults(
    aid: str, runtime: AgentSkillRuntime, names: Sequence[str], tick: int, when: datetime
) -> list[dict[str, Any]]:
    iso = when.isoformat()
    events: list[dict[str, Any]] = []
    for name in names:
        try:
            res = await runtime.activate(name)
        except AgentsimError as exc:
            error = f"default skill: {exc}"
            events.append(event("agent_error", tick=tick, time=iso, agent_id=aid, error=error))
            continue
        events.extend(
            event("skill_activated", tick=tick, time=iso, agent_id=aid, skill=sid, default=True)
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


ANSWER_STATUSES = ("ok", "degraded", "error", "invalid")
"""A survey or interview answer's status: the model answered; its model failed after its
retries; the step failed (a bug, a timeout, a cancellation); a typed answer did not fit its
form after one retry (never data)."""


def answer_of(out: StepOutcome) -> Answer:
    """A read-only step's answer and its status (``reason`` when it is not ``ok``). A step
    that failed never gives its stand-in text ("kept its plan (model unavailable)", "error")
    as an answer: its answer is what the model answered before it failed, if anything, else
    empty."""
    for kind, status, key in (
        ("agent_error", "error", "error"),
        ("agent_degraded", "degraded", "reason"),
    ):
        found = next((e for e in out.events if e.get("type") == kind), None)
        if found is not None or (status == "degraded" and out.degraded):
            why = str((found or {}).get(key) or "the model failed after its retries")
            return Answer(text=out.answer or "", status=status, reason=why)
    if out.invalid is not None:
        return Answer(text=out.answer or "", status="invalid", reason=out.invalid)
    if out.value is not None:
        return Answer(text=out.answer or "", value=out.value)
    return Answer(text=out.answer or out.action)


def _error_outcome(agent_id: str, inp: StepInput, error: str) -> StepOutcome:
    out = StepOutcome(agent_id=agent_id)
    out.events.append(
        event("agent_error", tick=inp.tick, time=inp.iso, agent_id=agent_id, error=error[:500])
    )
    out.action = "error"
    out.outcome = "error"
    return out
