"""How much of a run's prompts an inference server's prefix cache can serve. Prints JSON.

    python bench/prefix_cache.py [--agents 2000] [--ticks 3] [--capacity 500000]
                                 [--concurrency 64] [--code PATH]

The experiment is ``experiments/daily-mobility.yaml`` scaled to ``--agents`` (the groups keep
their shares), ``--ticks`` ticks of its first ``run`` step, ``backend: openai`` against the
test server answering what the offline scripted model would. Every request, in the order the
server received it, is rendered as a chat template does (system message, then the tool
schemas, then the other messages; ``agentsim.testing.prefix_cache.render_chat``), cut into
tokens by that module's deterministic tokenizer, and replayed through two block prefix
caches like vLLM's automatic prefix caching (16-token blocks, chained hashes, least recently
used out): one of ``--capacity`` tokens and one without a bound.

Reported, per call: prompt tokens by part (``shared``: the system message and the tools;
``agent``: the agent's own part that opens its first user message; ``turn``: the rest), the
cached share of prompt tokens for each cache, and the tokens left to prefill. Also how many
tokens two agents' first requests have in common (``common_prefix_tokens``): with the first
request of the run (any agent) and with the first request of the agent's group.

``--code PATH`` runs the agentsim of another checkout (e.g. one of ``main``) with the cache
code of this one, to compare layouts in one session.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from _mobility import daily_mobility

ROOT = Path(__file__).resolve().parents[1]


def _load_cache_module() -> Any:
    """This checkout's prefix-cache code, whichever agentsim runs the experiment."""
    path = ROOT / "agentsim" / "testing" / "prefix_cache.py"
    spec = importlib.util.spec_from_file_location("_bench_prefix_cache", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _experiment(agents: int, ticks: int, concurrency: int, base_url: str, out: Path) -> str:
    return yaml.safe_dump(
        daily_mobility(agents, ticks, concurrency, base_url, out), sort_keys=False
    )


class _Replay:
    """Sees every request as the server does, in arrival order."""

    def __init__(self, pc: Any, capacity: int) -> None:
        self.pc = pc
        self.caches = {"bounded": pc.PrefixCache(capacity), "unbounded": pc.PrefixCache(None)}
        self.parts = {"shared": 0, "agent": 0, "turn": 0}
        self.calls = 0
        self.chars = 0
        # calls, tokens left to prefill (bounded cache, unbounded), by kind of call
        self.kinds = {"first_of_step": [0, 0, 0], "later_in_step": [0, 0, 0]}
        self.first_of_run: list[str] | None = None
        self.first_of_group: dict[str, list[str]] = {}
        self.common_run: list[int] = []
        self.common_group: list[int] = []
        self.lock = threading.Lock()

    def see(self, messages: list[dict[str, Any]], tools: list[Any]) -> None:
        pc = self.pc
        system = [m for m in messages[:1] if m.get("role") == "system"]
        text = pc.render_chat(messages, tools)
        shared_end = len(pc.render_chat(system, tools)) - len("<|start|>assistant\n")
        first_user = next((m for m in messages if m.get("role") == "user"), None)
        agent_len = 0
        if first_user is not None:
            content = str(first_user.get("content") or "")
            cut = content.find("<observation>")
            agent_len = len("<|start|>user\n") + cut if cut > 0 else 0
        agent_end = shared_end + agent_len
        shared = pc.tokenize(text[:shared_end])
        agent = pc.tokenize(text[shared_end:agent_end])
        turn = pc.tokenize(text[agent_end:])
        tokens = shared + agent + turn
        with self.lock:
            self.calls += 1
            self.chars += len(text)
            self.parts["shared"] += len(shared)
            self.parts["agent"] += len(agent)
            self.parts["turn"] += len(turn)
            first = len(messages) == 2  # an agent's first call of a step
            kind = "first_of_step" if first else "later_in_step"
            self.kinds[kind][0] += 1
            for name, cache in self.caches.items():
                self.kinds[kind][1 if name == "bounded" else 2] += len(tokens) - cache.serve(tokens)
            if first:
                self._common(text, tokens)

    def _common(self, text: str, tokens: list[str]) -> None:
        i = text.find('"group": "')
        group = text[i + 10 : text.find('"', i + 10)] if i >= 0 else ""
        if self.first_of_run is None:
            self.first_of_run = tokens
        else:
            self.common_run.append(_common_prefix(self.first_of_run, tokens))
        mine = self.first_of_group.get(group)
        if mine is None:
            self.first_of_group[group] = tokens
        else:
            self.common_group.append(_common_prefix(mine, tokens))


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _run(args: argparse.Namespace, tmp: Path, pc: Any) -> dict[str, Any]:
    from agentsim.config.experiment import parse_experiment
    from agentsim.hosts.local import LocalExecutor
    from agentsim.run.engine import Engine
    from agentsim.testing import OpenAITestServer
    from agentsim.testing.answers import scripted_answer

    replay = _Replay(pc, args.capacity)

    async def answer(request: Any) -> Any:
        replay.see([dict(m) for m in request.messages], list(request.tools))
        return await scripted_answer(request)

    with OpenAITestServer(answer=answer, record=False) as srv:
        text = _experiment(args.agents, args.ticks, args.concurrency, srv.base_url, tmp / "ws")
        cfg = parse_experiment(text, base_dir=ROOT / "experiments", environ={})
        engine = Engine(cfg, run_dir=tmp / "run", executor=LocalExecutor(), stop=threading.Event())
        t0 = time.monotonic()
        asyncio.run(engine.run())
        wall = time.monotonic() - t0
    calls = replay.calls
    prompt = sum(replay.parts.values())
    out: dict[str, Any] = {
        "agents": args.agents,
        "ticks": args.ticks,
        "calls": calls,
        "wall_s": round(wall, 1),
        "prompt_tokens_per_call": round(prompt / calls, 1),
        "chars_per_token": round(replay.chars / prompt, 2),
        "prompt_tokens_per_call_by_part": {k: round(v / calls, 1) for k, v in replay.parts.items()},
        "common_prefix_tokens": {
            "with_run_first_median": statistics.median(replay.common_run or [0]),
            "with_group_first_median": statistics.median(replay.common_group or [0]),
        },
    }
    out["left_to_prefill_by_kind"] = {
        kind: {
            "calls": n,
            "bounded_per_call": round(bounded / n) if n else 0,
            "unbounded_per_call": round(unbounded / n) if n else 0,
        }
        for kind, (n, bounded, unbounded) in replay.kinds.items()
    }
    for name, cache in replay.caches.items():
        st = cache.stats()
        out[f"cache_{name}"] = {
            "capacity_tokens": st["capacity_tokens"],
            "cached_share": st["cached_share"],
            "left_to_prefill_per_call": round((st["prompt_tokens"] - st["cached_tokens"]) / calls),
            "evicted_blocks": st["evicted_blocks"],
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=2000)
    p.add_argument("--ticks", type=int, default=3)
    p.add_argument("--capacity", type=int, default=500_000, help="tokens of the bounded cache")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--code", type=Path, default=ROOT, help="the agentsim checkout to run")
    args = p.parse_args()
    pc = _load_cache_module()
    sys.path.insert(0, str(args.code.resolve()))
    tmp = Path(tempfile.mkdtemp(prefix="agentsim-prefix-"))
    try:
        out = _run(args, tmp, pc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["tokenizer"] = "agentsim.testing.prefix_cache.tokenize"
    import agentsim

    out["code"] = str(Path(agentsim.__file__).parent.parent)
    out["load_average_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
