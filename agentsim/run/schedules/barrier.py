"""``executor.schedule: barrier``: every agent steps a tick, then the engine completes it.

Each tick: check the skill folders (hot reload), start every agent's step with the tick's
views, collect them all, and hand the tick to the engine.
"""

from __future__ import annotations

import time

from agentsim.hosts.protocol import TickInput
from agentsim.run.schedules import Stepping

__all__ = ["Barrier"]


class Barrier:
    async def run_ticks(self, engine: Stepping, n: int) -> int:
        hot_reload = engine.config.skills.hot_reload
        for ran in range(1, n + 1):
            t0 = time.perf_counter()
            run_events, changed = engine.refresh_skills() if hot_reload else ([], None)
            await engine.executor.start_steps(
                TickInput(
                    tick=engine.clock.tick,
                    time=engine.clock.now,
                    views=engine.views(),
                    messages=engine.take_messages(),
                    # Every host brings all its agents up to the skill folders, each tick.
                    reload_skills=hot_reload,
                    skills_changed=changed or (),
                )
            )
            done = await engine.executor.collect(wait_all=True)
            done.sort(key=lambda d: d.agent_id)
            engine.complete_tick([d.result for d in done], run_events, t0)
            if engine.should_stop():
                return ran
        return n
