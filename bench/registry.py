"""Benchmark of the skill registry: cold scan, refresh, memory and catalog rendering.

Generates N skills (~1.5 KB SKILL.md, a script and a references file each) in a temp dir
and prints one JSON object with medians over several repeats (milliseconds / bytes).

    python bench/registry.py [--sizes 100,1000,10000] [--repeats 7]

``cold_scan_ms`` is the target's figure: a first scan as the registry does it (shared with
a forked helper from 400 folders on); ``cold_scan_one_process_ms`` is the same scan with
``AGENTSIM_SCAN_SPLIT=0``, measured in turn with it. CPU figures add the helper's CPU time.
``refresh_unchanged_ms`` is taken once the root is older than ``RACY_NS`` (a simulation's
steady state); ``refresh_unchanged_recent_root_ms`` just after the scan, when the root is
still listed on every refresh.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import platform
import resource
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import escape

from agentsim.skills import SkillDescriptor, SkillRegistry
from agentsim.skills._scan import RACY_NS

_BODY_PARAGRAPH = (
    "When the agent has to decide where to go next, list the candidate places with their "
    "distance, opening hours and how crowded they were at the last visit. Prefer places "
    "that fit the agent's schedule and budget, and explain the choice in one sentence.\n\n"
)


def _skill_md(name: str, i: int, *, unique: bool = False) -> str:
    """``unique``: no frontmatter line repeats from one skill to the next (except the
    three-valued isolation), so the scan's per-scan line memo cannot help."""
    module = name.replace("-", "_")
    shared = (
        f'version: "1.{i}.0"\ntags: [mobility-{i}, planning]\ntimeout: {5 + i}\n'
        f"isolation: {('inline', 'thread', 'process')[i % 3]}\nstatus: active\n"
        if unique
        else 'version: "1.0.0"\ntags: [mobility, planning]\ntimeout: 5\n'
        "isolation: inline\nstatus: active\n"
    )
    front = (
        "---\n"
        f"name: {name}\n"
        f"description: Use when the agent plans a route between places in the city (variant "
        f"{i}); weighs distance, opening hours and crowding, and returns a short plan.\n"
        f"script: scripts/{module}.py\n"
        "hooks:\n"
        f"  pre_step: scripts/{module}.py\n"
        f"{shared}"
        "---\n"
    )
    body = f"# {name}\n\n"
    while len(front) + len(body) < 1500:
        body += _BODY_PARAGRAPH
    return front + body


def generate(root: Path, n: int, *, unique: bool = False) -> None:
    for i in range(n):
        name = f"skill-{i:05d}"
        folder = root / name
        (folder / "scripts").mkdir(parents=True)
        (folder / "references").mkdir()
        (folder / "SKILL.md").write_text(_skill_md(name, i, unique=unique), encoding="utf-8")
        module = name.replace("-", "_")
        (folder / "scripts" / f"{module}.py").write_text(
            "def entrypoint(argv, ctx):\n    return 'ok'\n", encoding="utf-8"
        )
        (folder / "references" / "notes.md").write_text("Notes.\n", encoding="utf-8")


def render_catalog(skills: tuple[SkillDescriptor, ...]) -> str:
    """Baseline renderer: a plain <available_skills> list of name + description."""
    parts = ["<available_skills>"]
    for d in skills:
        parts.append(
            f"<skill><name>{escape(d.name)}</name>"
            f"<description>{escape(d.description)}</description></skill>"
        )
    parts.append("</available_skills>")
    return "\n".join(parts)


def _cpu_s() -> float:
    """CPU time of this process and of its reaped children (a split scan's helper)."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _median_ms(
    fn: Callable[[], object], repeats: int, setup: Callable[[], None] | None = None
) -> tuple[float, float]:
    """Median wall-clock and median CPU time (this process and its helper), in ms. The CPU
    figure shows what a scan costs in all; wall time is what the caller waits."""
    wall, cpu = [], []
    for _ in range(repeats):
        if setup is not None:
            setup()
        gc.collect()
        c0, t0 = _cpu_s(), time.perf_counter()
        fn()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((_cpu_s() - c0) * 1e3)
    return round(statistics.median(wall), 3), round(statistics.median(cpu), 3)


def _interleaved(
    fns: dict[str, Callable[[], object]], repeats: int
) -> dict[str, tuple[float, float]]:
    """``_median_ms`` of several functions run in turn within each repeat, so that a
    machine that changes speed mid-run (this one does) slows all of them alike."""
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            gc.collect()
            c0, t0 = _cpu_s(), time.perf_counter()
            fn()
            wall[name].append((time.perf_counter() - t0) * 1e3)
            cpu[name].append((_cpu_s() - c0) * 1e3)
    return {
        name: (round(statistics.median(wall[name]), 3), round(statistics.median(cpu[name]), 3))
        for name in fns
    }


def _one_process(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with the scan kept in this process (``AGENTSIM_SCAN_SPLIT=0``)."""

    def run() -> object:
        os.environ["AGENTSIM_SCAN_SPLIT"] = "0"
        try:
            return fn()
        finally:
            del os.environ["AGENTSIM_SCAN_SPLIT"]

    return run


def bench_size(n: int, repeats: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "skills"
        generate(root, n)

        def cold() -> SkillRegistry:
            reg = SkillRegistry()
            reg.scan_builtin(root)
            return reg

        cold()  # warm the OS page cache: we measure parsing, not the disk
        result: dict[str, object] = {"n": n}
        result["cold_scan_ms"], result["cold_scan_cpu_ms"] = _median_ms(cold, repeats)
        result["cold_scan_one_process_ms"], result["cold_scan_one_process_cpu_ms"] = _median_ms(
            _one_process(cold), repeats
        )

        reg = cold()
        assert len(reg.list_all()) == n, reg.diagnostics[:3]
        # A root changed less than RACY_NS ago is listed again on every refresh; the target
        # is about a simulation's steady state, so wait that window out (and report both).
        result["refresh_unchanged_recent_root_ms"] = _median_ms(reg.refresh, repeats)[0]
        age_ns = time.time_ns() - max(root.stat().st_mtime_ns, root.stat().st_ctime_ns)
        time.sleep(max(0.0, (RACY_NS - age_ns) / 1e9) + 0.05)
        result["refresh_unchanged_ms"], result["refresh_unchanged_cpu_ms"] = _median_ms(
            reg.refresh, repeats
        )

        counter = [0]

        def edit_ten() -> None:
            counter[0] += 1
            for i in range(10):
                md = root / f"skill-{i:05d}" / "SKILL.md"
                text = md.read_text(encoding="utf-8")
                md.write_text(text + f"\nedit {counter[0]}\n", encoding="utf-8")

        def refresh_changed() -> None:
            res = reg.refresh()
            assert len(res.changed) == 10, res

        result["refresh_10_edited_ms"], result["refresh_10_edited_cpu_ms"] = _median_ms(
            refresh_changed, repeats, setup=edit_ten
        )

        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        held = cold()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        result["memory_bytes_per_skill"] = round((after - before) / n)
        result["pickle_bytes_per_skill"] = round(len(pickle.dumps(held)) / n)

        view = held.view(None)
        result["catalog_render_ms"], result["catalog_render_cpu_ms"] = _median_ms(
            lambda: render_catalog(view.list_all()), max(repeats, 21)
        )
        if n <= 1000:
            # A separate figure, not the target's: frontmatters with no line in common.
            other = Path(tmp) / "unique"
            generate(other, n, unique=True)

            def cold_unique() -> None:
                SkillRegistry().scan_builtin(other)

            cold_unique()
            result["cold_scan_unique_lines_ms"], result["cold_scan_unique_lines_cpu_ms"] = (
                _median_ms(cold_unique, repeats)
            )
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
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
        "targets": {
            "cold_scan_ms": {"1000": 40, "10000": 400},
            "refresh_unchanged_ms": {"1000": 5},
            "refresh_10_edited_ms": {"1000": 10},
            "memory_bytes_per_skill": 1536,
            "catalog_render_ms": {"1000": 2},
        },
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
