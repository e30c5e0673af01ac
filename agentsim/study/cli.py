"""``agentsim study``: run a study of arms and replicates, or resume one.

    agentsim study STUDY.yaml [--out DIR]
    agentsim study --resume STUDY_DIR
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
    "written); 3 every run complete, some with problems over their limits; 130 interrupted "
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
    return parser


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

    if args.resume is not None:
        if args.study is not None or args.out is not None:
            raise ConfigError(
                "--resume",
                "takes the study folder alone",
                f"run `agentsim study --resume {args.resume}` (the folder holds the study file)",
            )
        result = resume_study(Path(args.resume))
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
