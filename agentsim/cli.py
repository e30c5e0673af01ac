"""The ``agentsim`` command line.

    agentsim run EXPERIMENT.yaml [--out DIR] [--executor local|ray] [--address A]
                 [--ticks N] [--json] [--trace full|summary|off]
    agentsim run --resume RUN
    agentsim skills list|show|validate|new
    agentsim inspect RUN [--agent ID] [--tick T] [--json]
    agentsim interview RUN --agent ID "question"
    agentsim report RUN

Exit codes: 0 success, 1 a failed run, 2 bad input (the message names the thing, the
problem and the fix), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from agentsim.errors import AgentsimError, ConfigError

__all__ = ["main"]


def _progress_printer(stream: Any) -> Any:
    from agentsim.sim.engine import Progress

    tty = stream.isatty()
    last = [0.0]

    def show(p: Progress) -> None:
        now = time.monotonic()
        if not tty and p.tick != p.total and now - last[0] < 2.0:
            return
        last[0] = now
        width = 24
        filled = int(width * p.tick / max(1, p.total))
        bar = "#" * filled + "-" * (width - filled)
        line = (
            f"[{bar}] tick {p.tick}/{p.total}  {p.steps_per_s:,.0f} agent-steps/s  "
            f"model calls {p.model_calls:,}  tokens {p.tokens:,}  errors {p.errors}"
        )
        stream.write(("\r" + line) if tty else (line + "\n"))
        if tty and p.tick == p.total:
            stream.write("\n")
        stream.flush()

    return show


def _run_dir_for(config: Any, out: str | None) -> Path:
    if out:
        return Path(out)
    run_id = config.output.run_id or (
        f"{config.name}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
    )
    return Path(config.output.dir) / run_id


def _cmd_run(args: argparse.Namespace) -> int:
    from agentsim.sim.config import load_experiment, parse_experiment
    from agentsim.sim.engine import Engine
    from agentsim.sim.workspace import RunWorkspace

    resume = args.resume is not None
    if resume:
        run_dir = Path(args.resume)
        ws = RunWorkspace.open_existing(run_dir)
        manifest = ws.read_manifest()
        if manifest.get("status") == "completed":
            raise ConfigError("--resume", f"run {run_dir} already completed; nothing to resume")
        base = Path(manifest.get("source_dir", "."))
        config = parse_experiment(
            (run_dir / "config.yaml").read_text("utf-8"),
            source=str(run_dir / "config.yaml"),
            base_dir=base,
        )
    else:
        if args.experiment is None:
            raise ConfigError(
                "EXPERIMENT",
                "no experiment file given",
                "run `agentsim run experiments/daily-mobility.yaml`",
            )
        config = load_experiment(Path(args.experiment))
        if args.executor or args.address:
            ex = config.executor.model_copy(
                update={
                    k: v
                    for k, v in (("kind", args.executor), ("address", args.address))
                    if v is not None
                }
            )
            config = config.model_copy(update={"executor": ex})
        run_dir = _run_dir_for(config, args.out)
    executor = _make_executor(config)
    stop = threading.Event()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        sys.stderr.write("\ninterrupt: stopping at the end of this tick (Ctrl-C again to abort)\n")

    previous = signal.signal(signal.SIGINT, on_sigint)
    progress = None if args.json else _progress_printer(sys.stderr)
    engine = Engine(
        config,
        run_dir=run_dir,
        executor=executor,
        progress=progress,
        stop=stop,
        max_ticks=args.ticks,
        trace=args.trace,
    )
    try:
        summary = asyncio.run(engine.run(resume=resume))
    finally:
        signal.signal(signal.SIGINT, previous)
    out = {
        "run_id": summary.run_id,
        "run_dir": str(summary.run_dir),
        "status": summary.status,
        "ticks": summary.ticks,
        "agents": summary.agents,
        "metrics": summary.metrics,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        m = summary.metrics
        print(
            f"{summary.status}: {summary.run_dir}  ticks={summary.ticks} agents={summary.agents} "
            f"agent-steps={m.get('agent_steps', 0)} model-calls={m.get('model_calls', 0)} "
            f"errors={m.get('errors', 0)}"
        )
        if summary.status == "interrupted":
            print(f"resume with: agentsim run --resume {summary.run_dir}")
    return 130 if summary.status == "interrupted" else 0


def _make_executor(config: Any) -> Any:
    if config.executor.kind == "ray":
        from agentsim.sim.ray_executor import RayExecutor

        return RayExecutor(address=config.executor.address)
    from agentsim.sim.executors import LocalExecutor

    return LocalExecutor()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentsim", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an experiment YAML file")
    run.add_argument("experiment", nargs="?", help="experiment YAML file")
    run.add_argument("--out", help="the run folder (default: output.dir/<name>-<timestamp>)")
    run.add_argument("--executor", choices=["local", "ray"])
    run.add_argument("--address", help="Ray cluster address (default: start a local one)")
    run.add_argument("--ticks", type=int, help="stop after N ticks")
    run.add_argument("--resume", metavar="RUN", help="continue a run from its last checkpoint")
    run.add_argument("--json", action="store_true", help="print a JSON summary")
    run.add_argument("--trace", choices=["full", "summary", "off"], default="full")
    run.set_defaults(func=_cmd_run)
    import importlib

    for module, fn in (
        ("agentsim.skills.cli", "add_skills_commands"),
        ("agentsim.inspect.cli", "add_inspect_commands"),
    ):
        try:
            getattr(importlib.import_module(module), fn)(sub)
        except ImportError:  # pragma: no cover - during development only
            pass
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except AgentsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("aborted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
