"""Does a budget cost a run its run-ahead? Wall time under ``executor.schedule:
dependencies`` with and without a ``budget:`` that is never reached. Prints JSON.

    python bench/budget_ahead.py [--agents 40] [--ticks 12] [--max-lead 4]
                                 [--low 0.05] [--high 0.5] [--scale 0.2] [--repeats 5]

Every agent's step makes two model calls (a move, then ``finish``), each answered after a
time drawn uniformly from ``[--low, --high]`` seconds times ``--scale`` (the spread of a
real model's answers, scaled down), from a generator seeded by the call (the step's seed and
its turn): every arm meets the same answer times. The model is a ``FunctionModel`` in this
process, the environment the city module.

Each repeat runs every arm (a different one first each time):

- ``free``: no budget;
- ``budget``: ``budget: {tokens: 10^12}``, never reached;
- ``one_tick_at_a_time``: the same budget with the engine put back to starting one tick
  per schedule call (what a budget did before it paid for several ticks at once): a
  barrier at every tick.

``arms`` has each arm's wall times, their median, and the most ticks an agent's call was
ahead of the slowest agent's; ``ratio`` is each arm's median over ``free``'s. Both budgeted
arms check that the run wrote the same ``events.jsonl`` as ``free``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentsim.agent.agent import step_seed  # noqa: E402
from agentsim.config.experiment import BudgetConfig, parse_experiment  # noqa: E402
from agentsim.hosts.local import LocalExecutor  # noqa: E402
from agentsim.run.engine import Engine  # noqa: E402
from agentsim.testing import FunctionModel  # noqa: E402
from agentsim.testing.function_model import ChatRequest, tool_call  # noqa: E402

_YAML = """
name: budget-ahead
seed: 11
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
ticks: {ticks}
agents:
  - group: people
    count: {agents}
    profile: {{template: generic}}
    skills: {{default: [], disabled: [daily-guidance]}}
skills: {{builtin: false}}
model: {{backend: scripted}}
environment:
  - {{module: city}}
executor: {{schedule: dependencies, max_lead: {lead}}}
output: {{dir: ws, formats: [jsonl], checkpoint_every: 0}}
"""

ARMS = ("free", "budget", "one_tick_at_a_time")


class _Model:
    """Two calls a step, each after a seeded answer time; records how far ahead of the
    slowest agent each call is."""

    def __init__(self, args: argparse.Namespace, seed: int) -> None:
        ids = [f"people-{i:05d}" for i in range(args.agents)]
        self.of = {step_seed(seed, a, t): (a, t) for a in ids for t in range(args.ticks)}
        self.low, self.high = args.low * args.scale, args.high * args.scale
        self.finished = dict.fromkeys(ids, 0)
        self.max_lead = 0

    async def __call__(self, request: ChatRequest) -> Any:
        aid, tick = self.of[request.seed]
        turn = len(request.calls)
        self.max_lead = max(self.max_lead, tick - min(self.finished.values()))
        await asyncio.sleep(random.Random(f"{request.seed}-{turn}").uniform(self.low, self.high))
        if turn == 0:
            place = ("cafe-1", "park-1")[(tick + int(aid[-5:])) % 2]
            move = {"module": "city", "action": "move_to", "args": {"place": place}}
            return tool_call("ask_env", move)
        self.finished[aid] = tick + 1
        return tool_call("finish", action=f"tick {tick}")


def _one_run(args: argparse.Namespace, tmp: Path, arm: str) -> dict[str, Any]:
    text = _YAML.format(ticks=args.ticks, agents=args.agents, lead=args.max_lead)
    cfg = parse_experiment(text, base_dir=tmp, environ={})
    if arm != "free":
        cfg = cfg.model_copy(update={"budget": BudgetConfig(tokens=10**12)})
    model = _Model(args, cfg.seed)
    executor = LocalExecutor(model_factory=lambda spec: FunctionModel(model))
    engine = Engine(cfg, run_dir=tmp / arm, executor=executor)
    if arm == "one_tick_at_a_time":
        engine._ticks_paid = lambda most: min(1, most)  # type: ignore[method-assign]
    t0 = time.monotonic()
    summary = asyncio.run(engine.run())
    wall = time.monotonic() - t0
    if summary.status != "completed":
        raise SystemExit(f"{arm}: the run ended {summary.status}: {summary.reason}")
    return {"wall_s": round(wall, 3), "max_lead": model.max_lead}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=40)
    p.add_argument("--ticks", type=int, default=12)
    p.add_argument("--max-lead", type=int, default=4, help="executor.max_lead")
    p.add_argument("--low", type=float, default=0.05, help="shortest answer time (s)")
    p.add_argument("--high", type=float, default=0.5, help="longest answer time (s)")
    p.add_argument("--scale", type=float, default=0.2, help="answer times times this")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    same_events: dict[str, bool] = {}
    for i in range(args.repeats):
        tmp = Path(tempfile.mkdtemp(prefix="agentsim-budget-ahead-"))
        try:
            for arm in ARMS[i % len(ARMS) :] + ARMS[: i % len(ARMS)]:  # each first in turn
                runs[arm].append(_one_run(args, tmp, arm))
            free = (tmp / "free" / "events.jsonl").read_bytes()
            for arm in ARMS[1:]:
                same = (tmp / arm / "events.jsonl").read_bytes() == free
                same_events[arm] = same_events.get(arm, True) and same
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    medians = {arm: statistics.median(r["wall_s"] for r in each) for arm, each in runs.items()}
    out: dict[str, Any] = {
        "agents": args.agents,
        "ticks": args.ticks,
        "max_lead": args.max_lead,
        "answer_s": [round(args.low * args.scale, 4), round(args.high * args.scale, 4)],
        "repeats": args.repeats,
        "arms": {
            arm: {
                "wall_s_each": [r["wall_s"] for r in each],
                "wall_s_median": round(medians[arm], 3),
                "max_lead_seen": max(r["max_lead"] for r in each),
            }
            for arm, each in runs.items()
        },
        "ratio": {arm: round(medians[arm] / medians["free"], 3) for arm in ARMS[1:]},
        "same_events_as_free": same_events,
        "load_average_at_end": os.getloadavg()[0],
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
