"""Do two commits write the same runs? Runs every shipped experiment at several seeds with the
code of a base commit and with the code of this checkout, and compares what a seed fixes:
``events.jsonl`` byte for byte, the counts of ``metrics.json``, every file under ``agents/``
byte for byte, and the rows of the store (traces, prompts, skill records) with their
wall-clock fields left out. Each experiment and seed runs under every ``executor.schedule``
of ``--schedules`` and every ``executor.hosts`` count of ``--hosts`` (all of them by
default): one result per combination. Prints JSON; exits 1 when anything differs.

    python bench/same_outputs.py --base 97fb62c
    python bench/same_outputs.py --base main --seeds 7 11 --ticks 8
    python bench/same_outputs.py --base main --schedules barrier --hosts 3

The base commit is checked out with ``git worktree`` into a temporary folder and imported
through ``PYTHONPATH`` by this same interpreter, so both sides use the same dependencies.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
# metrics.json keys that hold wall-clock time; everything else is a count a seed fixes.
WALL_METRICS = {"wall_seconds", "tick_seconds", "agent_steps_per_s", "tick_seconds_median"}
WALL_METRICS |= {"tick_seconds_max"}
SCHEDULES = ("barrier", "dependencies")
WALL_KEY = re.compile(r"elapsed|_ms$|seconds|latency")


def _without_wall_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_wall_clock(v) for k, v in value.items() if not WALL_KEY.search(k)}
    if isinstance(value, list):
        return [_without_wall_clock(v) for v in value]
    return value


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def fingerprint(run: Path) -> dict[str, str]:
    """One digest per compared part of a run folder."""
    parts: dict[str, str] = {"events.jsonl": _digest((run / "events.jsonl").read_bytes())}
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    counts = {k: v for k, v in metrics.items() if k not in WALL_METRICS}
    parts["metrics.json counts"] = _digest(
        json.dumps(_without_wall_clock(counts), sort_keys=True).encode()
    )
    for path in sorted((run / "agents").rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "AGENT.json":  # names the agent's folder: where the run is
                for where in {str(run.resolve()), str(run)}:
                    data = data.replace(json.dumps(where)[1:-1].encode(), b"<run>")
            parts[str(path.relative_to(run))] = _digest(data)
    for shard in sorted((run / "store").rglob("rows.jsonl.gz")):
        with gzip.open(shard, "rt", encoding="utf-8") as rows:
            kept = [json.dumps(_without_wall_clock(json.loads(line))) for line in rows]
        parts[str(shard.relative_to(run))] = _digest("\n".join(kept).encode())
    return parts


def run_side(
    code: Path,
    experiment: Path,
    seed: int,
    ticks: int | None,
    out: Path,
    *,
    schedule: str,
    hosts: int,
) -> None:
    """Run one experiment with the package found in ``code``, from ``code`` as the cwd."""
    config = yaml.safe_load(experiment.read_text(encoding="utf-8"))
    config["seed"] = seed
    config["executor"] = {**config.get("executor", {}), "schedule": schedule, "hosts": hosts}
    name = f".same-outputs-{experiment.stem}-{seed}-{schedule}-{hosts}.yaml"
    variant = code / "experiments" / name
    variant.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    command = [sys.executable, "-m", "agentsim.cli", "run", str(variant), "--out", str(out)]
    command += ["--json"] + (["--ticks", str(ticks)] if ticks else [])
    try:
        done = subprocess.run(
            command,
            cwd=code,
            env={**os.environ, "PYTHONPATH": str(code)},
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        variant.unlink()
    if done.returncode != 0:
        raise SystemExit(f"{code}: {' '.join(command)} exited {done.returncode}\n{done.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare against")
    parser.add_argument("--seeds", type=int, nargs="*", help="default: each one's own and 1")
    parser.add_argument("--ticks", type=int, help="stop each run after N ticks")
    parser.add_argument(
        "--schedules",
        nargs="+",
        choices=SCHEDULES,
        default=list(SCHEDULES),
        help="executor.schedule values (default: all)",
    )
    parser.add_argument(
        "--hosts", type=int, nargs="+", default=[1, 3], help="executor.hosts values (default: 1 3)"
    )
    args = parser.parse_args()
    started = time.monotonic()
    # Hidden files are variants other benches write there for a moment.
    experiments = sorted(p for p in (ROOT / "experiments").glob("*.yaml") if p.name[0] != ".")
    report: dict[str, Any] = {"base": args.base, "runs": [], "same": True}
    with tempfile.TemporaryDirectory(prefix="same-outputs-") as scratch:
        base = Path(scratch) / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base), args.base],
            check=True,
        )
        try:
            for experiment in experiments:
                own = yaml.safe_load(experiment.read_text(encoding="utf-8")).get("seed", 0)
                for seed, schedule, hosts in itertools.product(
                    args.seeds or sorted({own, 1}), args.schedules, args.hosts
                ):
                    sides = {}
                    for name, code in (("base", base), ("head", ROOT)):
                        out = Path(scratch) / f"{name}-{experiment.stem}-{seed}-{schedule}-{hosts}"
                        run_side(
                            code, experiment, seed, args.ticks, out, schedule=schedule, hosts=hosts
                        )
                        sides[name] = fingerprint(out)
                        shutil.rmtree(out)
                    differ = sorted(
                        part
                        for part in sides["base"].keys() | sides["head"].keys()
                        if sides["base"].get(part) != sides["head"].get(part)
                    )
                    report["runs"].append(
                        {
                            "experiment": experiment.name,
                            "seed": seed,
                            "schedule": schedule,
                            "hosts": hosts,
                            "files_compared": len(sides["head"]),
                            "events_sha": sides["head"]["events.jsonl"],
                            "same": not differ,
                            "differ": differ[:20],
                        }
                    )
                    report["same"] = report["same"] and not differ
                    print(
                        f"{experiment.stem} seed={seed} schedule={schedule} hosts={hosts}: "
                        + ("same" if not differ else f"DIFFER ({len(differ)} parts)"),
                        file=sys.stderr,
                    )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=True
            )
    runs = report["runs"]
    report["total"] = {
        "runs": len(runs),
        "same": sum(1 for r in runs if r["same"]),
        "differ": sum(1 for r in runs if not r["same"]),
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(report, indent=2))
    return 0 if report["same"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
