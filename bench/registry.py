"""Benchmark of the skill registry: cold scan, refresh, memory and pickle size.

Generates N skills (~1.5 KB SKILL.md, a script and a references file each) in a temporary
folder and prints one JSON object with medians over several repeats (milliseconds, bytes).

    python bench/registry.py [--sizes 100,1000] [--repeats 7]

``cold_scan_ms``: a new ``SkillRegistry`` scanning the root (files in the OS page cache).
``refresh_unchanged_ms``: ``refresh()`` when nothing changed. ``refresh_10_edited_ms``:
``refresh()`` after 10 SKILL.md files were edited (the edits are not timed). Each figure
comes with its CPU time (``*_cpu_ms``), which a busy machine disturbs less than wall time.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import platform
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from agentsim.skills import SkillRegistry

_BODY_PARAGRAPH = (
    "When the agent has to decide where to go next, list the candidate places with their "
    "distance, opening hours and how crowded they were at the last visit. Prefer places "
    "that fit the agent's schedule and budget, and explain the choice in one sentence.\n\n"
)

TARGETS = {"cold_scan_ms": {"1000": 150}, "refresh_unchanged_ms": {"1000": 10}}


def _skill_md(name: str, i: int) -> str:
    module = name.replace("-", "_")
    front = (
        "---\n"
        f"name: {name}\n"
        f"description: Use when the agent plans a route between places in the city (variant "
        f"{i}); weighs distance, opening hours and crowding, and returns a short plan.\n"
        f"script: scripts/{module}.py\n"
        "hooks:\n"
        f"  pre_step: scripts/{module}.py\n"
        f'version: "1.{i}.0"\n'
        f"tags: [mobility-{i % 7}, planning]\n"
        f"timeout: {5 + i % 4}\n"
        f"isolation: {('inline', 'thread', 'process')[i % 3]}\n"
        "status: active\n"
        "---\n"
    )
    body = f"# {name}\n\n"
    while len(front) + len(body) < 1500:
        body += _BODY_PARAGRAPH
    return front + body


def generate(root: Path, n: int) -> None:
    for i in range(n):
        name = f"skill-{i:05d}"
        folder = root / name
        (folder / "scripts").mkdir(parents=True)
        (folder / "references").mkdir()
        (folder / "SKILL.md").write_text(_skill_md(name, i), encoding="utf-8")
        module = name.replace("-", "_")
        (folder / "scripts" / f"{module}.py").write_text(
            "def entrypoint(argv, ctx):\n    return 'ok'\n", encoding="utf-8"
        )
        (folder / "references" / "notes.md").write_text("Notes.\n", encoding="utf-8")


def _median_ms(
    fn: Callable[[], object], repeats: int, setup: Callable[[], None] | None = None
) -> tuple[float, float]:
    """Median wall time and median CPU time of this process, in ms. On a shared machine
    the CPU figure shows what the work costs when other processes take turns on the cores."""
    wall, cpu = [], []
    for _ in range(repeats):
        if setup is not None:
            setup()
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return round(statistics.median(wall), 3), round(statistics.median(cpu), 3)


def bench_size(n: int, repeats: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "skills"
        generate(root, n)

        def cold() -> SkillRegistry:
            reg = SkillRegistry()
            reg.scan_builtin(root)
            return reg

        reg = cold()  # also warms the OS page cache: we measure the registry, not the disk
        assert len(reg.list_all()) == n and not reg.diagnostics, reg.diagnostics[:3]
        result: dict[str, object] = {"n": n}
        result["cold_scan_ms"], result["cold_scan_cpu_ms"] = _median_ms(cold, repeats)

        def unchanged() -> None:
            assert not reg.refresh().any

        result["refresh_unchanged_ms"], result["refresh_unchanged_cpu_ms"] = _median_ms(
            unchanged, repeats
        )

        counter = [0]

        def edit_ten() -> None:
            counter[0] += 1
            for i in range(10):
                md = root / f"skill-{i:05d}" / "SKILL.md"
                md.write_text(md.read_text(encoding="utf-8") + f"\nedit {counter[0]}\n")

        def refresh_edited() -> None:
            assert len(reg.refresh().changed) == 10

        result["refresh_10_edited_ms"], result["refresh_10_edited_cpu_ms"] = _median_ms(
            refresh_edited, repeats, setup=edit_ten
        )

        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        held = cold()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        result["memory_bytes_per_skill"] = round((after - before) / n)
        result["pickle_bytes_per_skill"] = round(len(pickle.dumps(held)) / n)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    out = {
        "benchmark": "skill registry",
        "load_average_at_start": os.getloadavg()[0],
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "repeats": args.repeats,
        "statistic": "median",
        "results": [bench_size(n, args.repeats) for n in sizes],
        "targets": TARGETS,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
