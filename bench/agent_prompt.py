"""Prompt size of one agent over a long run; prints one JSON object.

    python bench/agent_prompt.py [--steps 500] [--cap 1500]

One agent with the built-in skills steps ``--steps`` times against the offline scripted
model and the social module; every step also receives a message, so memory grows without
end on disk. Reported: the prompt-token estimate of each step's first request (system +
user, what the cap applies to) and the largest single request the model saw (later turns of
a step add tool results), as max / median / last, against ``prompt_cap_tokens``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class _Measured:
    """Delegates to the scripted model and keeps each request's prompt-token count."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.prompt_tokens: list[int] = []

    async def complete(
        self, messages: Sequence[Any], tools: Sequence[Any] = (), *, seed: int = 0
    ) -> Any:
        out = await self.inner.complete(messages, tools, seed=seed)
        self.prompt_tokens.append(out.usage.prompt_tokens)
        return out


async def run(steps: int, cap: int) -> dict[str, Any]:
    from agentsim.agent.agent import Agent, AgentSettings, StepInputs
    from agentsim.env import AgentInfo, SimClock, SocialModule
    from agentsim.env.router import EnvRouter
    from agentsim.llm.scripted import ScriptedModel
    from agentsim.skills.registry import SkillRegistry
    from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace

    reg = SkillRegistry()
    reg.scan_builtin(ROOT / "skills")
    clock = SimClock(datetime(2026, 3, 2, 6, 0), timedelta(minutes=15))
    social = SocialModule({}, seed=1, base_dir=ROOT)
    social.setup([AgentInfo(agent_id=f"a{i}", group="g", profile={}) for i in range(5)])
    settings = AgentSettings(prompt_cap_tokens=cap, trace="summary")
    model = _Measured(ScriptedModel(activation_rate=0.35))
    with tempfile.TemporaryDirectory() as d:
        ws = Path(d) / "a0"
        ws.mkdir()
        rt = AgentSkillRuntime(SkillSpace(reg.snapshot()), agent_id="a0", workspace_root=ws)
        agent = Agent(
            agent_id="a0",
            group="g",
            profile={"occupation": "nurse", "interests": ["running", "cafes"]},
            persona="Ana, 34, a nurse who likes running and cafes.",
            workspace=ws,
            skills=rt,
        )
        first: list[int] = []
        biggest: list[int] = []
        rows: list[str] = []  # the agent's store rows (its trace goes there, not to a file)
        for tick in range(steps):
            now = clock.time_at(tick)
            router = EnvRouter({"social": social.view(clock)})
            agent.remember(tick=tick, time=now.isoformat(), kind="message", text="hi " * 30)
            before = len(model.prompt_tokens)
            await agent.step(
                StepInputs(tick=tick, time=now, env=router).for_agent(),
                model=model,
                settings=settings,
                seed=tick,
            )
            rows.extend(agent.flush())
            biggest.append(max(model.prompt_tokens[before:], default=0))
        for line in rows:
            r = json.loads(line)
            if r["kind"] == "trace" and "prompt_tokens_est" in r["data"]:
                first.append(r["data"]["prompt_tokens_est"])
        memory_lines = sum(1 for _ in (ws / "memory.jsonl").open())
    return {
        "steps": steps,
        "prompt_cap_tokens": cap,
        "first_request_tokens": {
            "max": max(first),
            "median": statistics.median(first),
            "last": first[-1],
        },
        "largest_request_tokens": {
            "max": max(biggest),
            "median": statistics.median(biggest),
            "last": biggest[-1],
        },
        "under_cap": max(first) <= cap,
        "memory_lines_on_disk": memory_lines,
        "active_skills": list(agent.skills.active),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--cap", type=int, default=6000)
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(run(args.steps, args.cap)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
