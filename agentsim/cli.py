"""The ``agentsim`` command line.

    agentsim run EXPERIMENT.yaml [--out DIR] [--executor local|ray] [--address A]
                 [--ticks N] [--json] [--trace full|summary|off]
    agentsim run --estimate [--then-run] EXPERIMENT.yaml [--json]
    agentsim run --resume RUN [--set budget.KEY=VALUE ...]
    agentsim run --fork RUN --at TICK [EXPERIMENT.yaml] [--set KEY=VALUE ...] [--out DIR]
    agentsim study STUDY.yaml [--out DIR] [--estimate] | agentsim study --resume STUDY_DIR
    agentsim study report STUDY_DIR [--out DIR]
    agentsim skills list|show|validate|new  (list / show [--experiment EXPERIMENT.yaml])
    agentsim inspect RUN [--agent ID] [--tick T] [--json]
    agentsim interview RUN --agent ID "question"
    agentsim report RUN
    agentsim view [WORKSPACE_OR_RUN] [--host H] [--port N]

The exit codes and their meanings are listed once, in ``_EXIT_CODES``; ``agentsim --help`` and
``agentsim run --help`` show them.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from agentsim.errors import AgentsimError, ConfigError, visible

if TYPE_CHECKING:
    from agentsim.run.engine import Progress
    from agentsim.skills.preview import ExperimentSkills

__all__ = ["main"]

# The one list of exit codes: code -> (its meaning in the main help, in `agentsim run --help`).
_EXIT_CODES = {
    0: ("success", "the run completed (or stopped after --ticks)"),
    1: (
        "a failed run",
        "the run failed, or stopped after model.max_consecutive_failures failed model calls "
        "in a row (a checkpoint is written and the resume command printed)",
    ),
    2: (
        "bad input or a model server that fails the pre-flight check (the message names the "
        "thing, the problem and the fix)",
        "bad input, or the model server failed the pre-flight check (nothing is written)",
    ),
    3: (
        "a run that completed with problems: more than model.max_degraded_share of its steps "
        "degraded, or more than agent.max_error_share of its steps, "
        "agent.max_hook_failure_share of its hook calls or agent.max_script_failure_share of "
        "its script calls failed, more than agent.max_tool_failure_share of its tool calls "
        "were refused or failed, or more than agent.max_unfinished_share of its steps ended "
        "without finish",
        "the run completed with problems: more than model.max_degraded_share of its steps "
        "degraded, or more than agent.max_error_share of its steps, "
        "agent.max_hook_failure_share of its hook calls or agent.max_script_failure_share of "
        "its script calls failed, more than agent.max_tool_failure_share of its tool calls "
        "were refused or failed, or more than agent.max_unfinished_share of its steps ended "
        "without finish",
    ),
    4: (
        "a run stopped by its budget",
        "the run stopped before passing its budget: (budget.tokens, budget.money or "
        "budget.wall_time), with a checkpoint; raise the budget and resume (--resume RUN "
        "--set budget.tokens=N)",
    ),
    130: ("interrupted", "interrupted"),
    143: (
        "terminated (SIGTERM)",
        "terminated by SIGTERM (e.g. `docker stop`): stopped at the end of a tick with a "
        "checkpoint, like Ctrl-C",
    ),
    141: ("the output pipe closed (e.g. `| head`)", "the output pipe closed"),
}


def _exit_codes(*, of_run: bool) -> str:
    """The exit-code sentence of the main help, or (``of_run``) of ``agentsim run --help``."""
    meanings = (f"{code} {texts[of_run]}" for code, texts in _EXIT_CODES.items())
    return "Exit codes: " + ("; " if of_run else ", ").join(meanings) + "."


class _ProgressLine:
    """The run's progress on ``stream``: one line redrawn in place on a terminal, a line
    every two seconds otherwise. It counts to the ticks this invocation will run (``--ticks``
    and resume included) and shows the elapsed time and an estimate of the time left."""

    def __init__(self, stream: TextIO, *, max_ticks: int | None) -> None:
        from agentsim.skills.scripts.inprocess import unwrapped

        self._stream = stream = unwrapped(stream)
        self._tty = stream.isatty()
        self._max_ticks = max_ticks
        self._started = time.monotonic()
        self._first: tuple[int, float] | None = None  # (tick before the first, when it ended)
        self._last_print = 0.0
        self._open_line = False
        self._drawn = 0

    @property
    def stream(self) -> TextIO:
        """Where the line is drawn (stderr when the run started)."""
        return self._stream

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = (p.tick - 1, now)
        start_tick, first_at = self._first
        total = p.total if self._max_ticks is None else min(p.total, start_tick + self._max_ticks)
        finished = p.tick >= total and (p.survey is None or p.answered >= p.asked)
        if not self._tty and not finished and now - self._last_print < 2.0:
            return
        self._last_print = now
        done, left = p.tick - start_tick, max(0, total - p.tick)
        # The first tick also paid for start-up; later ticks give the steadier pace.
        per_tick = (now - first_at) / (done - 1) if done > 1 else now - self._started
        width = 24
        filled = int(width * p.tick / max(1, total))
        bar = "#" * filled + "-" * (width - filled)
        doing = (
            f"{p.survey} {p.answered}/{p.asked}"
            if p.survey
            else f"{p.steps_per_s:,.0f} agent-steps/s"
        )
        line = (
            f"[{bar}] tick {p.tick}/{total}{_lead(p.fastest)}  {doing}  "
            f"model calls {p.model_calls:,}  tokens {p.tokens:,}  "
            f"{_problems(p.errors, p.degraded, p.gate_retries, p.skills_broken)}"
            f"{_unfinished(p.unfinished, p.tool_failures)}  "
            f"elapsed {_clock(now - self._started)}  left ~{_clock(per_tick * left)}"
        )
        if self._tty:
            # Padded to the last line's length: a shorter line must not leave its tail behind.
            self._stream.write("\r" + line.ljust(self._drawn))
            self._drawn = len(line)
            self._open_line = True
            if finished:
                self.end()
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def end(self) -> None:
        """Finish a line left open on the terminal, so that what follows starts on its own."""
        if self._open_line:
            self._stream.write("\n")
            self._stream.flush()
            self._open_line = False


def _lead(fastest: int | None) -> str:
    """The fastest agent's tick, when agents do not all stand at the slowest one's."""
    return "" if fastest is None else f" (fastest {fastest})"


def _notice(progress: _ProgressLine | None, line: str) -> None:
    """A loading problem on stderr, on a line of its own (not inside the progress line): on
    the progress line's own stream, taken when the run started, so that no stream a skill
    script's print capture put on ``sys.stderr`` meanwhile can take it."""
    from agentsim.skills.scripts.inprocess import unwrapped

    stream = unwrapped(sys.stderr)
    if progress is not None:
        progress.end()
        stream = progress.stream
    print(f"warning: {line}", file=stream, flush=True)


def _unfinished(unfinished: int, tool_failures: int) -> str:
    """The progress line's counts of steps without finish and of tool calls that failed."""
    text = f"  steps without finish {unfinished:,}" if unfinished else ""
    return text + (f"  tool calls refused/failed {tool_failures:,}" if tool_failures else "")


def _problems(errors: int, degraded: int, gate_retries: int, broken: int = 0) -> str:
    """The progress line's problem counts: degraded steps are each one failed model call."""
    text = f"errors {errors:,}"
    if degraded:
        text += f" (degraded steps / failed model calls {degraded:,})"
    if gate_retries:
        text += f"  gate retries {gate_retries:,}"
    if broken:
        text += f"  skills broken by edits {broken:,}"
    return text


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _whole(noun: str, example: str) -> Callable[[str], int]:
    """An option's type: a whole number >= 1 of ``noun``; the error gives ``example``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(
                f"{text} is not a whole number of {noun} >= 1; give e.g. {example}"
            )
        return value

    return parse


def _at_tick(text: str) -> int:
    """``--at``: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"{text} is not a tick >= 0; give a checkpoint's tick, e.g. --at 4"
        )
    return value


def _run_dir_for(config: Any, out: str | None) -> Path:
    if out:
        return Path(out)
    run_id = config.output.run_id or (
        f"{config.name}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
    )
    return Path(config.output.dir) / run_id


def _cmd_run(args: argparse.Namespace) -> int:
    from agentsim.config.experiment import load_experiment, parse_experiment
    from agentsim.run.engine import Engine
    from agentsim.run.workspace import RunLock, RunWorkspace

    resume = args.resume is not None
    fork = None
    sample = 0  # a study's sampled replicate keeps its model seeds when resumed alone
    if args.at is not None and args.fork is None:
        raise ConfigError("--at", "needs --fork RUN", "add --fork RUN (the run to fork)")
    if args.sets and args.fork is None and not resume:
        raise ConfigError(
            "--set", "only amends a fork", "use it with --fork RUN --at TICK, or edit the YAML"
        )
    if args.then_run and not args.estimate:
        raise ConfigError("--then-run", "needs --estimate", "add --estimate")
    if args.estimate and (resume or args.fork is not None):
        raise ConfigError(
            "--estimate",
            "estimates a new run of an experiment file, not a resume or a fork",
            "give the experiment file: agentsim run --estimate EXPERIMENT.yaml",
        )
    if args.fork is not None:
        from agentsim.run.engine import ENGINE_STATE
        from agentsim.run.fork import fork_config, open_fork

        if resume:
            raise ConfigError("--fork", "cannot be combined with --resume", "give one of them")
        if args.at is None:
            raise ConfigError(
                "--at", "--fork needs the tick to start from", "add --at TICK (a checkpoint's)"
            )
        fork = open_fork(Path(args.fork), args.at, engine_keys=ENGINE_STATE)
        exp = Path(args.experiment) if args.experiment else None
        config = fork_config(fork, experiment=exp, sets=args.sets)
        run_dir = (
            Path(args.out)
            if args.out
            else fork.parent.with_name(f"{fork.parent.name}-fork-{args.at}")
        )
        RunLock.check_free(run_dir)
    elif resume:
        run_dir = Path(args.resume)
        # Read only: the engine takes the folder's lock when it starts writing.
        ws = RunWorkspace.open_existing(run_dir, lock=False)
        RunLock.check_free(run_dir)
        manifest = ws.read_manifest()
        sample = int(manifest.get("sample") or 0)
        if str(manifest.get("status")).startswith("completed"):
            raise ConfigError("--resume", f"run {run_dir} already completed; nothing to resume")
        base = Path(manifest.get("source_dir", "."))
        text = (run_dir / "config.yaml").read_text("utf-8")
        if args.sets:
            text = _budget_sets(run_dir, text, args.sets)
        config = parse_experiment(text, source=str(run_dir / "config.yaml"), base_dir=base)
        if args.sets:  # the raised budget stays the run's for its later resumes
            from agentsim.run.workspace import atomic_write_text

            atomic_write_text(run_dir / "config.yaml", text)
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
        if args.estimate and not args.then_run:
            return _print_estimate(config, args)
        run_dir = _run_dir_for(config, args.out)
        RunLock.check_free(run_dir)
    estimate = None
    if args.estimate or (config.budget is not None and not resume and fork is None):
        # A budget projects the run's first tick from an estimate, and every run started
        # with one reports the estimate's error at its end (``estimate.json``).
        estimate = _make_estimate(config, args, show=args.estimate)
    from agentsim.hosts import executor_for

    executor = executor_for(config)
    stop = threading.Event()
    signals: list[int] = []  # the signals that asked the run to stop, in order

    def on_stop_signal(signum: int, frame: FrameType | None) -> None:
        # SIGTERM (schedulers, `docker stop`) is Ctrl-C without a keyboard: the run stops
        # at the end of its tick, checkpoints and says so; a second signal aborts.
        if stop.is_set():
            raise KeyboardInterrupt
        signals.append(signum)
        engine.stop_cause = "SIGTERM" if signum == signal.SIGTERM else None
        stop.set()
        again = "Ctrl-C" if signum == signal.SIGINT else "another signal"
        what = "interrupt" if signum == signal.SIGINT else "terminated (SIGTERM)"
        sys.stderr.write(f"\n{what}: stopping at the end of this tick ({again} to abort)\n")

    progress = None if args.json else _ProgressLine(sys.stderr, max_ticks=args.ticks)
    engine = Engine(
        config,
        run_dir=run_dir,
        executor=executor,
        progress=progress,
        stop=stop,
        max_ticks=args.ticks,
        trace=args.trace,
        preflight=not args.no_preflight,
        capacity_check=not args.skip_capacity_check,
        fork=fork,
        notice=functools.partial(_notice, progress),
        sample=sample,
        estimate=estimate,
    )
    previous = {sig: signal.signal(sig, on_stop_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = asyncio.run(engine.run(resume=resume))
    except AgentsimError as exc:
        if not engine.reason or str(exc) not in engine.reason:
            raise
        # The reason says where the run was when the error came (the manifest's words).
        print(f"error: {engine.reason}", file=sys.stderr)
        return exc.exit_code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if progress is not None:
            progress.end()
    out = {
        "run_id": summary.run_id,
        "run_dir": str(summary.run_dir),
        "status": summary.status,
        "ticks": summary.ticks,
        "agents": summary.agents,
        "metrics": summary.metrics,
    }
    if summary.reason:
        out["reason"] = summary.reason
    if summary.problems:
        out["problems"] = summary.problems
    from agentsim.run.behaviour import behaviour_lines

    out["behaviour"] = behaviour_lines(summary.metrics)
    if summary.parent:
        out["parent"] = summary.parent
    if summary.budget_stop:
        out["budget_stop"] = summary.budget_stop
    if summary.estimate:
        out["estimate"] = summary.estimate
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print_summary(summary)
    if summary.status == "interrupted":
        return 143 if signals[:1] == [signal.SIGTERM] else 130
    if summary.status == "failed":
        return 1
    if summary.budget_stop:
        from agentsim.run.budget import BUDGET_EXIT_CODE

        print(f"error: {summary.reason} (exit code {BUDGET_EXIT_CODE})", file=sys.stderr)
        return BUDGET_EXIT_CODE
    if summary.too_degraded:
        print(
            f"error: {summary.degraded_share:.0%} of the agent steps degraded (their model "
            f"call failed after its retries), more than model.max_degraded_share="
            f"{summary.max_degraded_share:g}; check the model server and the run's "
            "agent_degraded events (exit code 3)",
            file=sys.stderr,
        )
    others = [p for p in summary.problems if "model.max_degraded_share" not in p]
    for problem in others:
        print(
            f"error: {problem}; see `agentsim inspect {summary.run_dir}` (exit code 3)",
            file=sys.stderr,
        )
    return 3 if summary.problems else 0


def _print_summary(summary: Any) -> None:
    """The summary lines: every problem counted (see ``agentsim.run.problems``), then what
    the agents did (``agentsim.run.behaviour``)."""
    from agentsim.run.behaviour import behaviour_lines

    m = summary.metrics
    print(
        f"{summary.status}: {summary.run_dir}  ticks={summary.ticks} agents={summary.agents} "
        f"agent-steps={m.get('agent_steps', 0)} model-calls={m.get('model_calls', 0)} "
        f"prompt-tokens={m.get('prompt_tokens', 0)} "
        f"(cached {m.get('cached_prompt_tokens', 0)}) "
        f"(gate retries {m.get('gate_retries', 0)}) errors={m.get('errors', 0)}"
    )
    recovered = m.get("recovered_calls", 0)
    if recovered:
        by_model = m.get("model", {}).get("by_model", {})
        each = ", ".join(
            f"{name} {b.get('recovered_calls', 0):,}"
            for name, b in by_model.items()
            if b.get("recovered_calls")
        )
        print(
            f"  tool calls written as text and run: {recovered:,}"
            + (f" (by model: {each})" if each else "")
        )
    found = {k: n for k, n in m.get("problems", {}).items() if n}
    # What the agents' steps and tool calls did wrong, though no event says it is an error.
    outcomes, calls = m.get("outcomes") or {}, m.get("tool_calls") or {}
    found.update(
        (f"steps {o}", outcomes[o]) for o in ("answered", "out_of_turns") if outcomes.get(o)
    )
    found.update((f"tool calls {r}", calls[r]) for r in ("refused", "failed") if calls.get(r))
    if found:
        print("  problems: " + ", ".join(f"{k} {n:,}" for k, n in found.items()))
    cut = m.get("script_truncated") or {}
    if cut:  # not errors: the agent got the output's start and a marker of what was cut
        each = ", ".join(f"{skill} {n:,}" for skill, n in cut.items())
        print(f"  script output truncated at the runner's cap: {sum(cut.values()):,} ({each})")
    for line in behaviour_lines(m):  # what the agents did, before where to look next
        print(line)
    if summary.parent:
        p = summary.parent
        print(f"  forked from: {p['run']} at tick {p['tick']}")
    if summary.done:
        print("  ran: " + "; ".join(summary.done))
    from agentsim.run.budget import lost_line

    lost = lost_line(m.get("spending") or {})
    if lost:
        print(f"  thrown away by resumes: {lost}")
    if summary.estimate:
        from agentsim.run.estimate import error_line

        print("  " + error_line(summary.estimate))
    if summary.problems:
        print("  problems over their limits: " + "; ".join(summary.problems))
    if summary.reason:
        print(f"  stopped: {summary.reason}")
    run = summary.run_dir
    if summary.status in ("interrupted", "failed", "stopped"):
        print(f"resume with: agentsim run --resume {run}")
    print(f"next: agentsim inspect {run}  |  agentsim report {run}  |  agentsim view {run}")


def _budget_sets(run_dir: Path, text: str, sets: Sequence[str]) -> str:
    """A resumed run's ``config.yaml`` with ``--set budget.KEY=VALUE`` applied (nothing
    else may change on a resume: the checkpoint was made with the rest)."""
    import yaml

    from agentsim.config._yaml import read_yaml_mapping
    from agentsim.run.fork import apply_sets

    for item in sets:
        if not item.startswith("budget."):
            raise ConfigError(
                "--set",
                f"{item.partition('=')[0]!r} cannot change on a resume: the run's checkpoint "
                "was made with it; only budget.tokens, budget.money and budget.wall_time can",
                "fork the run instead (agentsim run --fork RUN --at TICK --set ...)",
            )
    data = read_yaml_mapping(text, source=str(run_dir / "config.yaml"))
    data.setdefault("budget", {})
    return yaml.safe_dump(apply_sets(data, sets), sort_keys=False)


def _make_estimate(config: Any, args: argparse.Namespace, *, show: bool) -> Any:
    """The pilot's estimate of ``config``'s run: the table on stdout when asked for
    (``--estimate --then-run``), else one line on stderr."""
    from agentsim.run.estimate import estimate, render

    est = estimate(
        config,
        agents=args.pilot_agents,
        ticks=args.pilot_ticks,
        preflight=not args.no_preflight,
    )
    if show and not args.json:
        print(render(est), flush=True)
    elif not args.json:
        cost = f", cost {est.cost:,.4f}" if est.priced else ""
        print(
            f"estimate: {est.calls:,} model calls, {est.tokens:,} tokens{cost}, "
            f"~{_clock(est.wall_seconds)} (pilot: {est.pilot.get('calls', 0):,} calls; "
            f"kept in the run folder's estimate.json)",
            file=sys.stderr,
            flush=True,
        )
    return est


def _print_estimate(config: Any, args: argparse.Namespace) -> int:
    """``agentsim run --estimate``: the estimate, and no run folder."""
    est = _make_estimate(config, args, show=True)
    if args.json:
        print(json.dumps(est.to_dict(), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentsim",
        description="Run large multi-agent LLM simulations whose agents load skills lazily, "
        "and inspect their runs.",
        epilog=f"{_exit_codes(of_run=False)} "
        "Run 'agentsim COMMAND --help' for the options of a command.",
    )
    parser.add_argument(
        "--version", action="version", version=f"agentsim {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    run = sub.add_parser(
        "run",
        help="run an experiment YAML file",
        description="Run an experiment, or resume an interrupted run from its last checkpoint.",
        epilog=_exit_codes(of_run=True),
    )
    run.add_argument("experiment", nargs="?", help="the experiment YAML file")
    run.add_argument(
        "--out", metavar="DIR", help="the run folder (default: output.dir/<name>-<timestamp>)"
    )
    run.add_argument(
        "--executor",
        choices=["local", "ray"],
        help="where agents run: in this process, or on Ray hosts (default: executor.kind)",
    )
    run.add_argument(
        "--address",
        help="Ray cluster address (default: RAY_ADDRESS, else start a local cluster of this "
        "run's own)",
    )
    run.add_argument(
        "--ticks",
        type=_whole("ticks", "--ticks 10"),
        metavar="N",
        help="stop after N ticks (N >= 1)",
    )
    run.add_argument("--resume", metavar="RUN", help="continue a run from its last checkpoint")
    run.add_argument(
        "--fork",
        metavar="RUN",
        help="start a new run from RUN's checkpoint at --at TICK: the ticks before it are "
        "copied, the rest runs with EXPERIMENT.yaml (default: RUN's config) and --set",
    )
    run.add_argument(
        "--at", type=_at_tick, metavar="TICK", help="the checkpoint tick --fork starts from"
    )
    run.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="amend the fork's config: a dotted path (workflow.3.intervene.args.text) and a "
        "YAML value; repeat for more. With --resume only budget.* (raise a budget)",
    )
    run.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the request that checks the model server (reachable, key accepted, model "
        "served) before anything is written",
    )
    run.add_argument(
        "--skip-capacity-check",
        action="store_true",
        help="start even if the agents look too many for this machine's free memory or the "
        "run folder's free disk (the estimate uses measured per-agent figures)",
    )
    run.add_argument(
        "--estimate",
        action="store_true",
        help="print the run's expected model calls, tokens, cost and wall time, from a pilot "
        "of a few agent-steps in a temporary folder, and write no run folder",
    )
    run.add_argument(
        "--then-run",
        action="store_true",
        help="with --estimate: then run, keeping the estimate in the run folder "
        "(estimate.json); the summary gives its error",
    )
    run.add_argument(
        "--pilot-agents",
        type=_whole("agents", "--pilot-agents 8"),
        default=8,
        metavar="N",
        help="agents the estimate's pilot steps (default 8)",
    )
    run.add_argument(
        "--pilot-ticks",
        type=_whole("ticks", "--pilot-ticks 3"),
        default=3,
        metavar="N",
        help="ticks the estimate's pilot runs (default 3)",
    )
    run.add_argument(
        "--json", action="store_true", help="print a JSON summary and no progress line"
    )
    run.add_argument(
        "--trace",
        choices=["full", "summary", "off"],
        default="full",
        help="what an agent's trace records per step: full (prompts, hook outputs), "
        "summary or off (default: full)",
    )
    run.set_defaults(func=_cmd_run)
    from agentsim.env.cli import add_env_commands
    from agentsim.inspect.cli import add_inspect_commands
    from agentsim.skills.cli import add_skills_commands
    from agentsim.view.cli import add_view_command

    add_skills_commands(sub, experiment=_experiment_skills)
    add_env_commands(sub)
    add_inspect_commands(sub)
    add_view_command(sub)
    from agentsim.study.cli import add_study_command

    add_study_command(sub)
    return parser


def _experiment_skills(path: str) -> ExperimentSkills:
    """``agentsim skills list|show --experiment FILE``: its skills, as its run builds them."""
    from agentsim.config.experiment import load_experiment
    from agentsim.run.world import experiment_skills

    return experiment_skills(load_experiment(Path(path)))


def _version() -> str:
    from agentsim import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["study"]:
        # `agentsim study` parses its own arguments: its sub-commands have options of their own.
        from agentsim.study.cli import main as study_main

        return _guarded(study_main, argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return _guarded(args.func, args)


def _guarded(func: Any, arg: Any) -> int:
    """Run a command; our errors become their message and exit code."""
    try:
        code: int = func(arg)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the exit
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    except ConfigError as exc:  # its text may quote a server's or a file's (untrusted)
        print(f"error: {visible(str(exc))}", file=sys.stderr)
        return 2
    except AgentsimError as exc:
        print(f"error: {visible(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("aborted", file=sys.stderr)
        return 130
    return code


def _quiet_stdout() -> None:
    """After the reader of our output went away (``| head``): send what is still buffered
    to /dev/null, so that the interpreter's last flush raises no second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
