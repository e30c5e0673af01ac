"""Peak memory per added agent: a daily-mobility run's peak RSS at two sizes. Prints JSON.

    python bench/memory.py [--agents 2000 20000] [--ticks 4] [--repeats 1]
                           [--schedules dependencies barrier] [--base COMMIT ...]
    python bench/memory.py --base 97fb62c --repeats 3
    python bench/memory.py --profile 1000 4000 --schedules dependencies

The experiment is ``experiments/daily-mobility.yaml`` as each side ships it (scripted model,
offline), scaled to each ``--agents`` size (the groups keep their shares) and cut to one
``run`` of ``--ticks`` ticks, under each ``executor.schedule`` of ``--schedules``. Every run is
``agentsim run`` in a fresh child process; its peak RSS is the child's own ``ru_maxrss``
(``os.wait4``), so one run's peak never hides another's. ``kb_per_agent`` is the rise of the
peak between the smallest and the largest size over the agents added.

``--base COMMIT`` (repeatable) measures those commits too, in the same invocation: each is
checked out with ``git worktree`` into a temporary folder and run by this same interpreter
through ``PYTHONPATH``. Each repeat runs every side at every size in turn (alternating, so
that all meet the same machine load), and the medians are reported. A commit older than
``executor.schedule`` runs its only schedule, reported under ``barrier``.

``--profile SMALL LARGE`` answers where the bytes go instead: each side runs in-process under
``tracemalloc`` at both sizes, snapshots are taken every tick's end and the one with the most
traced bytes is kept; the difference between the sizes, grouped by file and line, divided by
the agents added, is printed as bytes per added agent (the largest first).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _variant(code: Path, agents: int, ticks: int, schedule: str | None) -> Path:
    """Write the scaled experiment beside the side's own, so that its relative paths hold."""
    doc: dict[str, Any] = yaml.safe_load(
        (code / "experiments" / "daily-mobility.yaml").read_text(encoding="utf-8")
    )
    groups = doc["agents"]
    total = sum(g["count"] for g in groups)
    for g in groups:
        g["count"] = g["count"] * agents // total
    groups[0]["count"] += agents - sum(g["count"] for g in groups)
    doc["workflow"] = [{"run": {"ticks": ticks}}]
    if schedule is not None:
        doc["executor"] = {**doc.get("executor", {}), "schedule": schedule}
    path = code / "experiments" / f".memory-{os.getpid()}-{agents}-{schedule}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _has_schedules(code: Path) -> bool:
    """Whether this side knows ``executor.schedule`` (added in 262ba09)."""
    return any("max_lead" in p.read_text(encoding="utf-8") for p in code.glob("agentsim/**/*.py"))


def peak_rss_kb(code: Path, agents: int, ticks: int, schedule: str | None, out: Path) -> int:
    """Run one case with the package in ``code`` in a child process; its peak RSS in KB."""
    variant = _variant(code, agents, ticks, schedule)
    command = [sys.executable, "-m", "agentsim.cli", "run", str(variant)]
    command += ["--out", str(out), "--json"]
    try:
        proc = subprocess.Popen(
            command,
            cwd=code,
            env={**os.environ, "PYTHONPATH": str(code)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        err = proc.stderr.read()  # read before waiting: a full pipe would block the child
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        variant.unlink()
    if proc.returncode != 0:
        raise SystemExit(f"{code}: {' '.join(command)} exited {proc.returncode}\n{err.decode()}")
    return int(usage.ru_maxrss)  # KB on Linux


def _profile_child(agents: int, ticks: int, schedule: str | None, out: str, top: int) -> None:
    """In the child: run the case under tracemalloc; print the fullest tick-end snapshot's
    bytes by file:line as JSON."""
    import threading
    import tracemalloc

    tracemalloc.start(1)
    code = Path.cwd()
    variant = _variant(code, agents, ticks, schedule)
    snaps: list[tuple[int, Any]] = []
    done = threading.Event()

    def sample() -> None:
        # Every second, keep the snapshot with the most traced bytes: the run's peak within a
        # second's resolution, whatever the commit's module layout.
        while not done.wait(1.0):
            current, _ = tracemalloc.get_traced_memory()
            if not snaps or current > snaps[0][0]:
                snap = tracemalloc.take_snapshot()
                snaps[:] = [(current, snap)]

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        from agentsim.cli import main

        code_rc = main(["run", str(variant), "--out", out, "--json"])
    finally:
        done.set()
        sampler.join()
        variant.unlink()
    assert code_rc in (0, None), code_rc
    _, peak = tracemalloc.get_traced_memory()
    current, snap = snaps[0]
    by_line: dict[str, int] = {}
    for stat in snap.statistics("lineno"):
        frame = stat.traceback[0]
        name = frame.filename
        for cut in (str(code) + "/", "/site-packages/", "/lib/python"):
            if cut in name:
                name = name.split(cut, 1)[1]
                break
        by_line[f"{name}:{frame.lineno}"] = stat.size
    print(json.dumps({"traced_at_snapshot": current, "traced_peak": peak, "by_line": by_line}))


def _profile(code: Path, agents: int, ticks: int, schedule: str | None, out: Path) -> Any:
    command = [sys.executable, str(Path(__file__).resolve()), "--_profile-child", str(agents)]
    command += ["--ticks", str(ticks), "--_out", str(out)]
    command += ["--schedules", schedule or "-"]
    done = subprocess.run(
        command,
        cwd=code,
        env={**os.environ, "PYTHONPATH": str(code)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{code}: profile exited {done.returncode}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs=2, default=[2000, 20000])
    parser.add_argument("--ticks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--schedules", nargs="+", default=["dependencies", "barrier"])
    parser.add_argument("--base", action="append", default=[], help="a commit to measure too")
    parser.add_argument("--profile", type=int, nargs=2, metavar=("SMALL", "LARGE"))
    parser.add_argument("--top", type=int, default=25, help="--profile: lines shown")
    parser.add_argument("--_profile-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._profile_child is not None:
        schedule = None if args.schedules[0] == "-" else args.schedules[0]
        _profile_child(args._profile_child, args.ticks, schedule, args._out, args.top)
        return 0
    report: dict[str, Any] = {"ticks": args.ticks, "load_average_start": os.getloadavg()[0]}
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="memory-")))
        sides: dict[str, Path] = {}
        for commit in args.base:
            where = scratch / f"base-{len(sides)}"
            git = ["git", "-C", str(ROOT), "worktree"]
            subprocess.run([*git, "add", "-q", "--detach", str(where), commit], check=True)
            stack.callback(subprocess.run, [*git, "remove", "--force", str(where)], check=True)
            sides[commit] = where
        sides["head"] = ROOT
        # (side, schedule as reported, schedule as written or None for a side without any)
        cases = []
        for name, code in sides.items():
            if _has_schedules(code):
                cases += [(name, s, s) for s in args.schedules]
            elif "barrier" in args.schedules:
                cases.append((name, "barrier", None))
        if args.profile:
            small, large = args.profile
            report["profile"] = {}
            for name, label, schedule in cases:
                runs = [
                    _profile(
                        sides[name], n, args.ticks, schedule, scratch / f"p-{name}-{label}-{n}"
                    )
                    for n in (small, large)
                ]
                added = large - small
                lines = runs[0]["by_line"].keys() | runs[1]["by_line"].keys()
                per = {
                    line: (runs[1]["by_line"].get(line, 0) - runs[0]["by_line"].get(line, 0))
                    / added
                    for line in lines
                }
                ranked = sorted(per.items(), key=lambda kv: -kv[1])[: args.top]
                report["profile"][f"{name} {label}"] = {
                    "traced_bytes_per_agent": round(
                        (runs[1]["traced_at_snapshot"] - runs[0]["traced_at_snapshot"]) / added
                    ),
                    "traced_peak_bytes_per_agent": round(
                        (runs[1]["traced_peak"] - runs[0]["traced_peak"]) / added
                    ),
                    "top_bytes_per_agent": {line: round(b) for line, b in ranked},
                }
            print(json.dumps(report, indent=1))
            return 0
        peaks: dict[tuple[str, str, int], list[int]] = {}
        for repeat in range(args.repeats):
            for name, label, schedule in cases:
                for n in args.agents:
                    out = scratch / f"run-{name}-{label}-{n}-{repeat}"
                    t = time.monotonic()
                    kb = peak_rss_kb(sides[name], n, args.ticks, schedule, out)
                    peaks.setdefault((name, label, n), []).append(kb)
                    print(
                        f"{name} {label} {n} agents: {kb / 1024:.1f} MB "
                        f"in {time.monotonic() - t:.1f} s",
                        file=sys.stderr,
                    )
                    subprocess.run(["rm", "-rf", str(out)], check=True)
        small, large = args.agents
        report["agents"] = args.agents
        report["sides"] = {}
        for name, label, _ in cases:
            a, b = peaks[(name, label, small)], peaks[(name, label, large)]
            per_agent = [(y - x) / (large - small) for x, y in zip(a, b, strict=True)]
            report["sides"][f"{name} {label}"] = {
                "peak_mb_median": [
                    round(statistics.median(a) / 1024, 1),
                    round(statistics.median(b) / 1024, 1),
                ],
                "kb_per_agent_each": [round(x, 2) for x in per_agent],
                "kb_per_agent": round(statistics.median(per_agent), 2),
            }
        report["load_average_end"] = os.getloadavg()[0]
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
