"""``executor.schedule: dependencies``: an agent starts its next tick as soon as what it
will observe is final, and the run writes what a barrier run writes.

The engine still completes ticks one at a time, as under ``barrier``: once every agent has
stepped tick ``t`` it applies the tick's intents in ``(agent_id, seq)`` order, writes the
tick's events and metrics and advances the clock. What changes is when an agent starts
its step of ``t + 1``: as soon as it has finished its own step of ``t`` and so have the
agents its environment modules name (``EnvModule.depends_on``, asked of the state at
``t + 1``), and no more than ``executor.max_lead`` ticks ahead of the slowest agent. Its
views of ``t + 1`` come from forks of the modules with every finished step's intents
applied (a *wave*); by ``depends_on``'s promise they answer it as the complete views
would, and an action marked ``reads_all`` waits for the complete views. A module that
declares nothing (``ALL``) makes every agent wait for the whole tick: a barrier.

A wave costs a copy of the modules' state per tick ahead, so waves are spaced by a few
times their own cost; steps that can start with the complete views never wait for one.
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
from typing import Any

from agentsim.env.base import ALL, EnvModule, EnvView
from agentsim.hosts.protocol import StepDone, TickInput, TickResult
from agentsim.run.schedules import Stepping

__all__ = ["Dependencies"]

# A wave may cost at most this share of the engine's time.
_WAVE_SHARE = 0.25


class Dependencies:
    async def run_ticks(self, engine: Stepping, n: int) -> int:
        return await _Run(engine, n).run()


class _Run:
    """One ``run_ticks`` call: the agents' progress from the engine's tick on."""

    def __init__(self, engine: Stepping, n: int) -> None:
        self.eng = engine
        self.c0 = engine.clock.tick
        self.end = self.c0 + n  # no step of this tick or later starts
        self.max_lead = engine.config.executor.max_lead
        self.hot_reload = engine.config.skills.hot_reload
        self.host_of = {aid: h for h, ids in enumerate(engine.host_agents) for aid in ids}
        self.ids = sorted(self.host_of)
        self.next = dict.fromkeys(self.ids, self.c0)  # the tick each agent steps next
        self.running: set[str] = set()
        self.in_flight = [0] * len(engine.host_agents)
        self.done: dict[int, dict[str, TickResult]] = {}
        self.messages = engine.take_messages()  # for each addressee's first step
        self.declares = any(
            type(m).depends_on is not EnvModule.depends_on for m in engine.modules.values()
        )
        self.canon: tuple[int, dict[str, EnvView]] | None = None
        self.run_events: list[dict[str, Any]] = []  # of the current tick (hot reload)
        self.reload: tuple[str, ...] | None = None  # skills changed: reload between steps
        self.waiting = False  # an agent may start early once the next wave is built
        self.wave_at = -math.inf
        self.wave_gap = 0.0

    async def run(self) -> int:
        eng = self.eng
        t0 = time.perf_counter()
        if self.hot_reload:
            self._check_skills()
        collectors: dict[int, asyncio.Task[list[StepDone]]] = {}
        try:
            while True:
                t0 = await self._complete(t0)
                if eng.clock.tick >= self.end:
                    break
                await self._launch()
                for h, count in enumerate(self.in_flight):
                    if count and h not in collectors:
                        collectors[h] = asyncio.ensure_future(eng.executor.collect(h))
                if not collectors:  # cannot happen: the slowest agents can always start
                    raise RuntimeError(
                        f"the dependency scheduler has no step to wait for at tick "
                        f"{eng.clock.tick}; run with executor.schedule: barrier and report it"
                    )
                timeout = None
                if self.waiting:
                    timeout = max(0.0, self.wave_at + self.wave_gap - time.perf_counter())
                finished, _ = await asyncio.wait(
                    collectors.values(), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                for h in [h for h, task in collectors.items() if task in finished]:
                    for step in collectors.pop(h).result():
                        self._finished(h, step)
        finally:
            for task in collectors.values():
                task.cancel()
            if collectors:
                await asyncio.gather(*collectors.values(), return_exceptions=True)
        return eng.clock.tick - self.c0

    # -- ticks complete one at a time, as under barrier ----------------------------------

    async def _complete(self, t0: float) -> float:
        eng = self.eng
        while eng.clock.tick < self.end:
            c = eng.clock.tick
            got = self.done.get(c, {})
            if len(got) < len(self.ids):
                break
            del self.done[c]
            run_events, self.run_events = self.run_events, []
            eng.complete_tick(
                [got[a] for a in self.ids], run_events, t0, fastest=max(self.next.values())
            )
            t0 = time.perf_counter()
            if eng.should_stop():
                # Let the others catch up with the agent furthest ahead, then stop there.
                self.end = min(self.end, max(self._reached(a) for a in self.ids))
            if eng.clock.tick < self.end:
                if self.declares:
                    await eng.executor.tick_final(eng.clock.tick, self._canon())
                if self.hot_reload:
                    self._check_skills()
                self.waiting = True  # the slowest moved: agents held by max_lead may go
        return t0

    def _reached(self, aid: str) -> int:
        """The ticks this agent has stepped or is stepping."""
        return self.next[aid] + (aid in self.running)

    def _canon(self) -> dict[str, EnvView]:
        tick = self.eng.clock.tick
        if self.canon is None or self.canon[0] != tick:
            self.canon = (tick, self.eng.views())
        return self.canon[1]

    def _check_skills(self) -> None:
        events, changed = self.eng.refresh_skills()
        self.run_events.extend(events)
        if changed is not None:
            self.reload = (*(self.reload or ()), *changed)

    def _finished(self, host: int, step: StepDone) -> None:
        self.done.setdefault(step.tick, {})[step.agent_id] = step.result
        self.running.discard(step.agent_id)
        self.in_flight[host] -= 1
        self.next[step.agent_id] = step.tick + 1
        self.waiting = True

    # -- starting steps ------------------------------------------------------------------

    async def _launch(self) -> None:
        eng = self.eng
        c = eng.clock.tick
        if self.reload is not None and not self.running:
            changed, self.reload = self.reload, None
            await eng.executor.reload(c, eng.clock.now, changed=changed)
        idle = [a for a in self.ids if a not in self.running and self.next[a] < self.end]
        now_ready = [a for a in idle if self.next[a] == c]
        # While a reload waits for the steps in flight, only steps that those ahead may be
        # waiting for (their tick's complete views need them) start.
        held = self.reload is not None and not any(self.next[a] > c for a in self.running)
        if now_ready and not held:
            await self._start(c, now_ready, self._canon(), final=True)
        if self.reload is not None:
            self.waiting = False  # nothing starts early before the reload
            return
        if not self.declares or not self.waiting:
            return
        early = [a for a in idle if c < self.next[a] < c + self.max_lead]
        if not early:
            self.waiting = False
            return
        if time.perf_counter() < self.wave_at + self.wave_gap:
            return  # the next wave is due later (``run`` waits no longer than that)
        self.waiting = False
        for tick, (ready, views) in self._wave(early).items():
            await self._start(tick, ready, views, final=False)

    def _wave(self, early: list[str]) -> dict[int, tuple[list[str], dict[str, EnvView]]]:
        """Fork the modules, apply every finished step's intents tick by tick, and find
        which of ``early`` may start with the views so made."""
        eng = self.eng
        began = time.perf_counter()
        c = eng.clock.tick
        by_tick: dict[int, list[str]] = {}
        for a in early:
            by_tick.setdefault(self.next[a], []).append(a)
        modules = {name: m.fork() for name, m in eng.modules.items()}
        clock = copy.copy(eng.clock)
        out: dict[int, tuple[list[str], dict[str, EnvView]]] = {}
        for t in range(c, max(by_tick)):
            intents = sorted(
                (i for r in self.done.get(t, {}).values() for i in r.intents),
                key=lambda i: i.sort_key,
            )
            for name, mod in modules.items():
                mod.apply([i for i in intents if i.module == name], clock)
            for mod in modules.values():
                mod.tick_events(clock)
            clock.advance()
            waiting = by_tick.get(t + 1)
            if not waiting:
                continue
            finished = self.done.get(t, {})
            ready = [a for a in waiting if self._free(a, modules.values(), finished)]
            if ready:
                out[t + 1] = (ready, {name: m.view(clock) for name, m in modules.items()})
        self.wave_at = time.perf_counter()
        self.wave_gap = (self.wave_at - began) / _WAVE_SHARE
        return out

    @staticmethod
    def _free(aid: str, modules: Any, finished: dict[str, TickResult]) -> bool:
        """Whether every agent ``aid`` depends on has finished the previous tick."""
        for mod in modules:
            deps = mod.depends_on(aid)
            if deps is ALL:
                return False
            assert isinstance(deps, frozenset)
            if any(b != aid and b not in finished for b in deps):
                return False
        return True

    async def _start(
        self, tick: int, agents: list[str], views: dict[str, EnvView], *, final: bool
    ) -> None:
        eng = self.eng
        first = tick == self.c0
        by_host: dict[int, list[str]] = {}
        for a in agents:
            by_host.setdefault(self.host_of[a], []).append(a)
            self.running.add(a)
            self.in_flight[self.host_of[a]] += 1
        await eng.executor.start_steps(
            TickInput(
                tick=tick,
                time=eng.clock.time_at(tick),
                views=views,
                messages=self.messages if first else {},
                final=final,
                refresh_skills=self.hot_reload,
            ),
            by_host,
        )
