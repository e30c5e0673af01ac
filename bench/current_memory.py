"""What hooks reading current files cost: memory writes per tick; prints one JSON object.

    python bench/current_memory.py [--agents 2000] [--ticks 8] [--repeats 5]

An agent with a pre_step hook writes its waiting ``memory.jsonl`` lines before the hook
runs (``Agent.write_memory``), so the hook reads current files whatever
``output.flush_every`` says; an agent without one waits for the host's flush. Each simulated
tick gives every agent two memory entries (a message, an action), as a step does, through
the real ``Memory`` and ``append_lines``:

- ``batched_us``: per agent and tick, writing every ``--flush-every`` ticks (no hooks);
- ``before_hook_us``: per agent and tick, writing before each step's hook (every tick);
- ``ratio``: the second over the first, measured in the same run (medians of the repeats).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from agentsim.agent.memory import Memory, append_lines


def _one(root: Path, agents: int, ticks: int, every: int) -> float:
    """Seconds per agent and tick of ``ticks`` ticks writing every ``every`` ticks."""
    folders = [root / f"a-{i:06d}" for i in range(agents)]
    for f in folders:
        f.mkdir(parents=True, exist_ok=True)
    memories = [Memory() for _ in folders]
    t0 = time.perf_counter()
    for tick in range(ticks):
        for mem, folder in zip(memories, folders, strict=True):
            mem.add(
                tick=tick, time="2026-03-02T09:00:00", kind="message", text="The park is closed."
            )
            mem.add(tick=tick, time="2026-03-02T09:00:00", kind="action", text="walked to cafe-2")
            if (tick + 1) % every == 0:
                lines = mem.drain()
                if lines:
                    append_lines(folder / "memory.jsonl", lines)
    return (time.perf_counter() - t0) / (agents * ticks)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=int, default=2000)
    p.add_argument("--ticks", type=int, default=8)
    p.add_argument("--flush-every", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    batched, before = [], []
    for r in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            batched.append(_one(root / f"b{r}", args.agents, args.ticks, args.flush_every))
            before.append(_one(root / f"h{r}", args.agents, args.ticks, 1))
    b, h = statistics.median(batched), statistics.median(before)
    print(
        json.dumps(
            {
                "agents": args.agents,
                "ticks": args.ticks,
                "flush_every": args.flush_every,
                "repeats": args.repeats,
                "batched_us": round(b * 1e6, 2),
                "before_hook_us": round(h * 1e6, 2),
                "ratio": round(h / b, 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
