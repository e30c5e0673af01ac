"""``agentsim study``: run a study of arms and replicates, or resume one.

    agentsim study STUDY.yaml [--out DIR]
    agentsim study STUDY.yaml --estimate [--json]
    agentsim study --resume STUDY_DIR [--set budget.KEY=VALUE ...]
    agentsim study report STUDY_DIR [--out DIR]

The command parses its own arguments (``agentsim.cli`` hands it everything after
``study``), so that a sub-command with options of its own plugs in with one line in
``SUBCOMMANDS`` (``"report": agentsim.study.compare.main``); an option of the study itself
(``--estimate``) is one more ``add_argument`` and a branch in ``main``.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from agentsim.errors import ConfigError

__all__ = ["SUBCOMMANDS", "add_study_command", "build_parser", "main"]


def _report(argv: list[str]) -> int:
    from agentsim.study.compare import main as report_main

    return report_main(argv)


SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {"report": _report}
"""``agentsim study NAME ...``: NAME -> a function of the remaining arguments."""

_EPILOG = (
    "Exit codes: 0 every run complete; 1 a run failed (the manifest and the message name it; "
    "the others went on); 2 bad input (a bad study file or base experiment: nothing is "
    "written); 3 every run complete, some with problems over their limits; 4 stopped on the "
    "study's budget (the runs under way finished within their share; --resume with --set "
    "budget.KEY=VALUE goes on); 130 interrupted "
    "and 143 terminated (SIGTERM): the runs under way stopped at the end of a tick with a "
    "checkpoint, and --resume goes on."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentsim study",
        description="Run a study: every arm of a base experiment for every replicate, as "
        "ordinary runs in one folder with a manifest, at most `concurrency` at once; arms "
        "with from_tick are forks of the control's run (the shared ticks run once). See "
        "docs/studies.md.",
        epilog=_EPILOG,
    )
    parser.add_argument("study", nargs="?", metavar="STUDY.yaml", help="the study file")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="the study folder (default: the base's output.dir/study-<name>-<timestamp>)",
    )
    parser.add_argument(
        "--resume",
        metavar="STUDY_DIR",
        help="go on with a stopped or killed study: complete runs are kept, the others "
        "resume from their checkpoints or start",
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="print the study's calls, tokens, cost and wall time from a pilot per arm, "
        "and run nothing",
    )
    parser.add_argument("--json", action="store_true", help="with --estimate: print JSON")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="budget.KEY=VALUE",
        help="with --resume: change the study's budget (tokens, money, wall_time)",
    )
    return parser


def _estimate(path: Path, as_json: bool) -> int:
    import json

    from agentsim.study.budget import estimate_study
    from agentsim.study.spec import load_study

    study = load_study(path)
    est = estimate_study(study)
    if as_json:
        print(json.dumps(est, indent=2))
        return 0
    print(f"study {study.spec.name}: estimate from one pilot per arm (docs/models.md, Estimates)")
    print(
        f"{'arm':<16}{'runs':>5}{'calls':>10}{'prompt tok':>12}{'cached':>10}{'out tok':>10}"
        f"{'cost':>10}{'run time':>10}"
    )
    for name, arm in est["arms"].items():
        e = arm["each"]
        n = arm["runs"]
        print(
            f"{name:<16}{n:>5}{e['calls'] * n:>10.0f}{e['prompt_tokens'] * n:>12.0f}"
            f"{e['cached_tokens'] * n:>10.0f}{e['output_tokens'] * n:>10.0f}"
            f"{(e['cost'] or 0) * n:>10.4f}{e['wall_seconds'] * n:>9.0f}s"
        )
    t = est["total"]
    print(
        f"{'total':<16}{sum(a['runs'] for a in est['arms'].values()):>5}{t['calls']:>10.0f}"
        f"{t['prompt_tokens']:>12.0f}{t['cached_tokens']:>10.0f}{t['output_tokens']:>10.0f}"
        f"{t['cost']:>10.4f}{t['run_seconds']:>9.0f}s"
    )
    print(
        f"wall time at concurrency {study.spec.concurrency}: about {t['wall_seconds']:.0f}s "
        "(the runs' time over the concurrency)"
    )
    return 0


def add_study_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """List ``study`` among the commands; ``agentsim.cli.main`` passes its arguments to
    ``main`` before its own parser sees them."""
    sub.add_parser(
        "study",
        help="run a study: arms x replicates of an experiment, with forks for shared ticks",
        add_help=False,
    )


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]](argv[1:])
    args = build_parser().parse_args(argv)
    from agentsim.study.runner import resume_study, run_study

    if args.sets and args.resume is None:
        raise ConfigError(
            "--set", "only changes a resumed study's budget", "use it with --resume STUDY_DIR"
        )
    if args.estimate:
        if args.study is None or args.resume is not None:
            raise ConfigError(
                "--estimate", "takes a study file", "run `agentsim study STUDY.yaml --estimate`"
            )
        return _estimate(Path(args.study), args.json)
    if args.resume is not None:
        if args.study is not None or args.out is not None:
            raise ConfigError(
                "--resume",
                "takes the study folder alone",
                f"run `agentsim study --resume {args.resume}` (the folder holds the study file)",
            )
        result = resume_study(Path(args.resume), budget_sets=args.sets)
    elif args.study is None:
        raise ConfigError(
            "STUDY",
            "no study file given",
            "run `agentsim study experiments/studies/rumour.yaml`, or --resume STUDY_DIR",
        )
    else:
        result = run_study(Path(args.study), out=Path(args.out) if args.out else None)
    where = result.study_dir
    done = sum(s == "complete" for s in result.states.values())
    print(f"{result.state}: {where}  runs={len(result.states)} complete={done}")
    for run_id, reason in sorted(result.reasons.items()):
        if result.states.get(run_id) == "failed":
            print(f"error: run {run_id} failed: {reason}", file=sys.stderr)
    if result.budget_stop is not None:
        print(f"error: {result.budget_stop} (exit code 4)", file=sys.stderr)
        print(
            f"the study stopped on its budget; raise it and go on: agentsim study --resume "
            f"{where} --set budget.KEY=VALUE",
            file=sys.stderr,
        )
        return 4
    if result.state == "stopped":
        print(f"resume with: agentsim study --resume {where}")
        return 143 if result.signal == signal.SIGTERM else 130
    if result.state == "failed":
        print(
            f"error: {sum(s == 'failed' for s in result.states.values())} run(s) failed, the "
            f"others went on; fix the cause and go on with `agentsim study --resume {where}`",
            file=sys.stderr,
        )
        return 1
    for run_id, problems in sorted(result.problems.items()):
        for problem in problems:
            print(f"error: run {run_id}: {problem} (exit code 3)", file=sys.stderr)
    print(f"next: agentsim inspect {where}/runs/<id>  |  agentsim report {where}/runs/<id>")
    return 3 if result.problems else 0
