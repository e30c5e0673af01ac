"""Running a study: its runs (arm x replicate) as ordinary runs in ``STUDY_DIR/runs/<id>/``.

Each run is a child process (``child_main``, fed one JSON job line on stdin) that builds
the run's ``Engine`` and runs it on the executor the base experiment names. Child processes
rather than engines in this process, because a run's failure must not reach the others: a
crash, a skill script that calls ``os._exit`` or exhausts memory, a fault in a native
library, takes down its own process only, and the study marks that run ``failed`` and goes
on. They also use every core (the engine holds the GIL while it builds
prompts), and each run keeps the stop handling of ``agentsim run`` (a signal stops it at the
end of a tick, with a checkpoint).

The study process keeps ``manifest.json`` (written atomically at every change of state),
starts at most ``concurrency`` runs at once, and starts a fork (an arm with ``from_tick``)
when its parent (the control's run of the same replicate) has its checkpoint at that tick:
the parent is asked to checkpoint there (``Engine(checkpoint_at=...)``), and the fork copies
the history before it instead of running it again (``agentsim.run.fork``).

A child whose study process dies sees its stdin close and stops at the end of its tick, as
on Ctrl-C, so no run outlives its study.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TextIO

import yaml

from agentsim._atomic import atomic_write_text
from agentsim.errors import AgentsimError, ConfigError, RunError
from agentsim.run.budget import BUDGET_EXIT_CODE
from agentsim.study.budget import (
    RunSpending,
    budget_with_sets,
    check_budget,
    inherited_by,
    run_ticks,
    share,
    spent_by,
)
from agentsim.study.spec import PlannedRun, Study, describe_budget, load_study

__all__ = [
    "FORMAT",
    "STATES",
    "StudyResult",
    "child_main",
    "resume_study",
    "run_study",
]

FORMAT = 1
STATES = ("pending", "running", "complete", "failed", "stopped")
_LOCK = "study.lock"
_POLL = 0.2  # seconds between looks for a parent's checkpoint
_PROGRESS_EVERY = 2.0  # seconds between progress lines of one run
_CHILD = "import sys; from agentsim.study.runner import child_main; sys.exit(child_main())"


@dataclass(slots=True, kw_only=True)
class StudyResult:
    """How a study invocation ended: its folder, each run's state, and why runs failed."""

    study_dir: Path
    states: dict[str, str]
    reasons: dict[str, str] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    signal: int | None = None
    budget_stop: str | None = None  # why the study stopped on its budget

    @property
    def state(self) -> str:
        """``complete``, ``failed`` (some run failed), or ``stopped``."""
        if self.budget_stop is not None:
            return "stopped"
        if self.signal is not None or "stopped" in self.states.values():
            return "stopped"
        if "failed" in self.states.values():
            return "failed"
        if all(s == "complete" for s in self.states.values()):
            return "complete"
        return "stopped"


# -- the study folder ---------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _run_row(run: PlannedRun, state: str) -> dict[str, Any]:
    return {
        "id": run.id,
        "arm": run.arm,
        "replicate": run.replicate,
        "seed": run.seed,
        "sample": run.sample,
        "dir": run.dir,
        "config_hash": run.config.config_hash(),
        "fork_of": (
            {"run": run.fork_of[0], "tick": run.fork_of[1]} if run.fork_of is not None else None
        ),
        "state": state,
    }


def new_manifest(study: Study, source_dir: Path) -> dict[str, Any]:
    """The manifest of a study about to start: every run pending."""
    spec = study.spec
    return {
        "format": FORMAT,
        "name": spec.name,
        "experiment": spec.experiment,
        "control": spec.control_name,
        "arms": [{"name": a.name, "from_tick": a.from_tick} for a in spec.arms],
        "measures": [m.as_dict() for m in spec.measures],
        "concurrency": spec.concurrency,
        "budget": describe_budget(spec.budget),
        # Where ``experiment`` is relative to (the study file's folder), for --resume.
        "source_dir": str(source_dir.resolve()),
        "state": "pending",
        "started": _now(),
        "ended": None,
        "runs": [_run_row(r, "pending") for r in study.runs],
    }


class _StudyLock:
    """One study process per study folder: an ``flock`` on ``study.lock``, dropped by the
    kernel when the process ends."""

    def __init__(self, root: Path) -> None:
        self._handle: IO[str] | None = open(root / _LOCK, "a+", encoding="utf-8")  # noqa: SIM115
        try:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._handle.seek(0)
            holder = self._handle.read().strip() or "another process"
            self._handle.close()
            self._handle = None
            raise RunError(
                f"study folder {root} is in use by process {holder}; wait for it to end, or "
                f"stop it and then resume with `agentsim study --resume {root}`"
            ) from None
        self._handle.seek(0)
        self._handle.truncate()
        self._handle.write(f"{os.getpid()}\n")
        self._handle.flush()

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _default_dir(study: Study) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return Path(study.base.output.dir) / f"study-{study.spec.name}-{stamp}"


def run_study(
    path: Path, *, out: Path | None = None, progress: TextIO | None = None
) -> StudyResult:
    """Start the study in file ``path`` (``agentsim study STUDY.yaml [--out DIR]``).

    Everything that can reject the study (the file, the base experiment, every arm's
    experiment, the model server) is checked before the folder is made."""
    study = load_study(Path(path))
    study_dir = Path(out) if out is not None else _default_dir(study)
    if study_dir.exists() and (not study_dir.is_dir() or any(study_dir.iterdir())):
        raise RunError(
            f"study folder {study_dir} already exists and is not empty; choose another --out, "
            f"or resume it with `agentsim study --resume {study_dir}`"
        )
    asyncio.run(_preflight(study))
    try:
        study_dir.mkdir(parents=True, exist_ok=True)
        (study_dir / "runs").mkdir(exist_ok=True)
        (study_dir / "logs").mkdir(exist_ok=True)
    except OSError as exc:
        raise RunError(
            f"cannot create the study folder {study_dir}: {exc.strerror or exc}; choose a "
            "folder this user can write with --out"
        ) from None
    lock = _StudyLock(study_dir)
    try:
        # The study file as given, byte for byte (what the study was asked to be).
        tmp = study_dir / f".study.yaml.tmp-{os.getpid()}"
        tmp.write_bytes(study.raw)
        os.replace(tmp, study_dir / "study.yaml")
        manifest = new_manifest(study, study.path.parent)
        atomic_write_text(study_dir / "manifest.json", json.dumps(manifest, indent=2) + "\n")
        runner = _Runner(study, study_dir, manifest, progress or sys.stderr)
        return asyncio.run(runner.run())
    finally:
        lock.release()


def resume_study(
    study_dir: Path, *, progress: TextIO | None = None, budget_sets: list[str] | None = None
) -> StudyResult:
    """Go on with the study in ``study_dir`` (``agentsim study --resume STUDY_DIR``):
    complete runs are kept, runs stopped or killed mid-way resume from their last
    checkpoint (as ``agentsim run --resume``), failed ones are tried again from theirs,
    pending ones start. ``budget_sets`` (``--set budget.KEY=VALUE``) changes the study's
    budget (kept in the manifest)."""
    study_dir = Path(study_dir)
    mpath = study_dir / "manifest.json"
    if not mpath.is_file() or not (study_dir / "study.yaml").is_file():
        raise ConfigError(
            "--resume",
            f"{study_dir} is not a study folder (no manifest.json and study.yaml)",
            "give the folder `agentsim study` made (its --out)",
        )
    try:
        manifest = json.loads(mpath.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            "--resume", f"{mpath} cannot be read: {exc}", "restore it from a backup"
        ) from None
    if manifest.get("format") != FORMAT:
        raise ConfigError(
            "--resume",
            f"{mpath} has format {manifest.get('format')!r}; this agentsim writes {FORMAT}",
            "resume it with the agentsim version that started it",
        )
    lock = _StudyLock(study_dir)
    try:
        study = load_study(study_dir / "study.yaml", base_dir=Path(manifest.get("source_dir", ".")))
        rows = {row["id"]: row for row in manifest.get("runs", [])}
        for run in study.runs:
            row = rows.get(run.id)
            if row is None or row.get("config_hash") != run.config.config_hash():
                raise ConfigError(
                    "--resume",
                    f"run {run.id}'s experiment is not the one the study started with (its "
                    "base experiment or the study file changed since)",
                    f"restore the base experiment {study.base_path} as it was, or start a "
                    "new study with --out",
                )
        asyncio.run(_preflight(study))
        (study_dir / "logs").mkdir(exist_ok=True)
        (study_dir / "runs").mkdir(exist_ok=True)
        manifest["runs"] = [
            {**_run_row(r, rows[r.id].get("state", "pending")), **_kept(rows[r.id])}
            for r in study.runs
        ]
        manifest["ended"] = None
        if budget_sets:
            manifest["budget"] = budget_with_sets(manifest.get("budget"), budget_sets)
        manifest.pop("budget_stop", None)
        runner = _Runner(study, study_dir, manifest, progress or sys.stderr, resumed=True)
        return asyncio.run(runner.run())
    finally:
        lock.release()


def _kept(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a run's row keeps across a resume besides its state: ``lost``, what its
    attempts before its first checkpoint spent (their folders are gone)."""
    lost = row.get("lost")
    return {"lost": dict(lost)} if isinstance(lost, dict) else {}


async def _preflight(study: Study) -> None:
    """Check each model the runs use once, before the first run starts (the runs then
    skip their own check)."""
    from agentsim.llm.preflight import preflight_model

    seen: set[str] = set()
    for run in study.runs:
        for name, model in run.config.used_models().items():
            key = model.model_dump_json()
            if key in seen:
                continue
            seen.add(key)
            await preflight_model(model, run_dir=Path(study.base.output.dir), name=name)


# -- the runner ---------------------------------------------------------------------------


class _Runner:
    def __init__(
        self,
        study: Study,
        study_dir: Path,
        manifest: dict[str, Any],
        stream: TextIO,
        *,
        resumed: bool = False,
    ) -> None:
        self.study = study
        self.dir = study_dir
        self.manifest = manifest
        self.stream = stream
        self.resumed = resumed
        self.states: dict[str, str] = {r["id"]: r["state"] for r in manifest["runs"]}
        self.reasons: dict[str, str] = {}
        self.problems: dict[str, list[str]] = {}
        self.children: dict[str, asyncio.subprocess.Process] = {}
        self.stopping = False
        self.signal: int | None = None
        self.changed = asyncio.Event()
        self._last_line: dict[str, float] = {}
        # The study's budget (the manifest's: a resume's --set may have raised it), what
        # the runs under way were given of it, and why it stopped the study.
        given = manifest.get("budget")
        self.budget = check_budget(given, "budget") if given else None
        self.granted: dict[str, dict[str, float]] = {}
        self.budget_stop: str | None = None
        self._t0 = time.monotonic()
        self._seconds_before = float(manifest.get("wall_seconds", 0.0))
        # Run id -> what its attempts killed before their first checkpoint spent (their
        # folders were removed to start again): the manifest keeps it, the budget counts it.
        self.lost: dict[str, RunSpending] = {
            r["id"]: RunSpending(
                tokens=float(r["lost"].get("tokens", 0)), money=float(r["lost"].get("money", 0))
            )
            for r in manifest["runs"]
            if isinstance(r.get("lost"), dict)
        }

    # -- state ----------------------------------------------------------------------------

    def _write(self) -> None:
        # The study's clock so far: a study process killed (its wall time spent) and
        # resumed goes on from the last write, not from its previous invocation's end.
        self.manifest["wall_seconds"] = round(self._study_seconds(), 3)
        for row in self.manifest["runs"]:
            row["state"] = self.states[row["id"]]
            for key, source in (("reason", self.reasons), ("problems", self.problems)):
                if row["id"] in source:
                    row[key] = source[row["id"]]
                else:
                    row.pop(key, None)
            if row["id"] in self.lost:
                lost = self.lost[row["id"]]
                row["lost"] = {"tokens": int(lost.tokens), "money": round(lost.money, 6)}
        atomic_write_text(self.dir / "manifest.json", json.dumps(self.manifest, indent=2) + "\n")

    def _set(self, run_id: str, state: str, reason: str | None = None) -> None:
        self.states[run_id] = state
        if reason is not None:
            self.reasons[run_id] = reason
        elif state in ("running", "complete"):
            self.reasons.pop(run_id, None)
        self._write()
        self.changed.set()
        if state != "running":
            done = sum(s == "complete" for s in self.states.values())
            why = f": {reason}" if reason and state != "complete" else ""
            self._say(f"{run_id} {state}{why} ({done}/{len(self.states)} runs complete)")

    def _say(self, line: str) -> None:
        self.stream.write(f"study {self.study.spec.name}: {line}\n")
        self.stream.flush()

    # -- the whole study ------------------------------------------------------------------

    async def run(self) -> StudyResult:
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
        self.manifest["state"] = "running"
        self._write()
        todo = [r for r in self.study.runs if self.states[r.id] != "complete"]
        for run in todo:  # what an earlier invocation left them in is history now
            self.states[run.id] = "pending"
        kept = len(self.study.runs) - len(todo)
        self._say(
            f"{len(self.study.runs)} runs in {self.dir}"
            + (f" ({kept} complete kept)" if self.resumed else "")
            + f", {self.study.spec.concurrency} at once"
        )
        sem = asyncio.Semaphore(self.study.spec.concurrency)
        try:
            # Parents first: a fork waits for its parent's checkpoint outside the semaphore.
            async with asyncio.TaskGroup() as tg:
                for run in todo:
                    tg.create_task(self._one(run, sem))
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            for run_id, state in self.states.items():
                if state == "running":  # only after an abort: the child was killed
                    self.states[run_id] = "stopped"
            result = StudyResult(
                study_dir=self.dir,
                states=dict(self.states),
                reasons=dict(self.reasons),
                problems=dict(self.problems),
                signal=self.signal,
                budget_stop=self.budget_stop,
            )
            self.manifest["state"] = result.state
            self.manifest["ended"] = _now()
            self.manifest["wall_seconds"] = round(self._study_seconds(), 3)
            if self.budget_stop is not None:
                self.manifest["budget_stop"] = self.budget_stop
            self._write()
        return result

    def _on_signal(self, signum: int) -> None:
        if self.stopping:  # a second signal: stop now (the runs resume from checkpoints)
            self._say("stopping now: killing the runs under way")
            for proc in self.children.values():
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            return
        self.stopping = True
        self.signal = signum
        what = "interrupt" if signum == signal.SIGINT else "terminated (SIGTERM)"
        self._say(
            f"{what}: the runs under way stop at the end of their tick with a checkpoint "
            "(again to stop at once)"
        )
        for proc in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        self.changed.set()

    # -- one run --------------------------------------------------------------------------

    async def _one(self, run: PlannedRun, sem: asyncio.Semaphore) -> None:
        try:
            await self._start_one(run, sem)
        except Exception as exc:  # one run's trouble (its folder, its process) is its own
            self._set(run.id, "failed", f"{type(exc).__name__}: {exc}")

    async def _start_one(self, run: PlannedRun, sem: asyncio.Semaphore) -> None:
        if run.fork_of is not None and not await self._parent_ready(run):
            return
        async with sem:
            if self.stopping or self.budget_stop is not None:
                return
            mode = self._mode(run)
            if mode == "complete":
                self._set(run.id, "complete")
                return
            budget = self._grant(run)
            if self.budget_stop is not None:
                return
            self._set(run.id, "running")
            self._say(f"{run.id} starts ({mode})")
            try:
                state, reason = await self._child(run, mode, budget)
            finally:
                self.granted.pop(run.id, None)
            if state == "stopped" and reason is not None and reason.startswith("budget"):
                self._stop_on_budget(f"run {run.id}: {reason}")
            self._set(run.id, state, reason)

    # -- the study's budget ---------------------------------------------------------------

    def _study_seconds(self) -> float:
        return self._seconds_before + time.monotonic() - self._t0

    def _stop_on_budget(self, why: str) -> None:
        if self.budget_stop is None:
            self.budget_stop = why
            self._say(f"budget: {why}; no further run starts (the runs under way finish)")
            self.changed.set()

    def _grant(self, run: PlannedRun) -> dict[str, Any] | None:
        """The budget ``run`` starts with (``agentsim.study.budget``), or None without a
        study budget; sets ``budget_stop`` when nothing is left for it."""
        if self.budget is None:
            return None
        others = [r for r in self.study.runs if r.id != run.id and r.id not in self.granted]
        # What runs' attempts before their first checkpoint spent: no run folder has it.
        spent = [spent_by(self.dir, r) for r in others] + list(self.lost.values())
        reserved = {
            k: sum(g.get(k, 0.0) for g in self.granted.values()) for k in ("tokens", "money")
        }
        waiting = [
            r
            for r in self.study.runs
            if r.id == run.id or (self.states[r.id] == "pending" and r.id not in self.granted)
        ]
        grant = share(
            self.budget,
            run=run,
            own=spent_by(self.dir, run),
            inherited=(inherited := inherited_by(self.dir, run)),
            others_spent=RunSpending(
                tokens=sum(s.tokens for s in spent), money=sum(s.money for s in spent)
            ),
            reserved=reserved,
            waiting_ticks=sum(run_ticks(r) for r in waiting),
            study_seconds=self._study_seconds(),
        )
        if grant.empty is not None:
            self._stop_on_budget(
                f"budget.{grant.empty} of the study is spent; {run.id} and the runs after it "
                f"did not start (raise it: agentsim study --resume {self.dir} --set "
                f"budget.{grant.empty}=...)"
            )
            return None
        # What this run may still spend is held back from the others while it runs.
        base = {"tokens": inherited.tokens, "money": inherited.money}
        self.granted[run.id] = {
            k: float(v) - base[k] for k, v in grant.budget.items() if k in ("tokens", "money")
        }
        return grant.budget

    async def _parent_ready(self, run: PlannedRun) -> bool:
        """Wait until the parent's checkpoint at the fork's tick exists; False (the fork
        marked failed, or left as it was on a stop) if it never will."""
        assert run.fork_of is not None
        parent, tick = run.fork_of
        cp = self.dir / "runs" / parent / "checkpoints" / f"tick-{tick:08d}" / "engine.json"
        while not cp.is_file():
            if self.stopping or self.budget_stop is not None:
                return False
            state = self.states[parent]
            if state in ("failed", "complete", "stopped") and not cp.is_file():
                if state == "stopped":
                    return False
                why = "failed" if state == "failed" else "completed"
                self._set(
                    run.id,
                    "failed",
                    f"its parent run {parent} {why} without a checkpoint at tick {tick}",
                )
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), _POLL)
        return True

    def _mode(self, run: PlannedRun) -> str:
        """``start``, ``fork``, ``resume`` or ``complete``, from what the run folder holds."""
        rdir = self.dir / run.dir
        mpath = rdir / "manifest.json"
        if mpath.is_file():
            try:
                status = str(json.loads(mpath.read_text("utf-8")).get("status"))
            except (OSError, ValueError):
                status = ""
            if status.startswith("completed"):
                return "complete"
            cps = rdir / "checkpoints"
            if cps.is_dir() and any(p.name.startswith("tick-") for p in cps.iterdir()):
                return "resume"
        if rdir.exists():
            # Killed before its first checkpoint: nothing there a resume could use. What it
            # spent stays spent: the manifest keeps it before the folder goes.
            self._keep_lost(run)
            shutil.rmtree(rdir)
        return "fork" if run.fork_of is not None else "start"

    def _keep_lost(self, run: PlannedRun) -> None:
        """Add what ``run``'s folder says it spent (``spent_by``) to its ``lost`` in the
        manifest, written before the folder is removed (a kill in between counts it twice,
        never not at all)."""
        spent = spent_by(self.dir, run)
        if not spent.tokens and not spent.money:
            return
        was = self.lost.get(run.id, RunSpending())
        self.lost[run.id] = RunSpending(
            tokens=was.tokens + spent.tokens, money=was.money + spent.money
        )
        self._write()
        self._say(
            f"{run.id} starts again from its beginning; what its last attempt spent stays "
            f"counted ({int(spent.tokens):,} tokens"
            + (f", cost {spent.money:,.4f}" if spent.money else "")
            + ")"
        )

    def _job(
        self, run: PlannedRun, mode: str, budget: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        cfg = run.config
        data = cfg.resolved_dict()
        if budget is not None:  # its share of the study's budget (config_hash leaves it out)
            data["budget"] = dict(budget)
        return {
            "run_dir": str((self.dir / run.dir).absolute()),
            "config": yaml.safe_dump(data, sort_keys=False),
            "source": f"{self.study.path} (run {run.id})",
            "base_dir": str(cfg.source_dir.absolute()),
            "mode": mode,
            "fork": (
                {
                    "run": str((self.dir / "runs" / run.fork_of[0]).absolute()),
                    "tick": run.fork_of[1],
                }
                if run.fork_of is not None
                else None
            ),
            "checkpoint_at": list(run.checkpoint_at),
            "sample": run.sample or 0,
        }

    async def _child(
        self, run: PlannedRun, mode: str, budget: Mapping[str, Any] | None = None
    ) -> tuple[str, str | None]:
        log_path = self.dir / "logs" / f"{run.id}.log"
        log = await asyncio.to_thread(open, log_path, "ab")
        with log:
            log.write(f"--- {_now()} {mode}\n".encode())
            log.flush()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _CHILD,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                # Its own session: a Ctrl-C at the terminal reaches the study only, which
                # passes one SIGTERM on (two signals would abort the run).
                start_new_session=True,
            )
        self.children[run.id] = proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps(self._job(run, mode, budget)) + "\n").encode())
        with contextlib.suppress(ConnectionError):  # it died at once: its exit code says why
            await proc.stdin.drain()
        if self.stopping:  # the signal came while the child started
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        end: dict[str, Any] = {}
        while line := await proc.stdout.readline():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "tick" in msg:
                self._progress(run.id, msg)
            else:
                end = msg
        rc = await proc.wait()
        self.children.pop(run.id, None)
        proc.stdin.close()
        if rc in (0, 3):
            if end.get("problems"):
                self.problems[run.id] = list(end["problems"])
            return "complete", None
        if rc == BUDGET_EXIT_CODE:
            return "stopped", f"budget: {end.get('reason') or 'its share of the budget is spent'}"
        if rc in (130, 143) or (rc < 0 and self.stopping):
            return "stopped", end.get("reason") or "stopped by a signal; resume the study"
        reason = end.get("reason") or end.get("error")
        if not reason:
            reason = (
                f"its process ended with signal {-rc}" if rc < 0 else f"exit code {rc}"
            ) + f" ({_tail(log_path)})"
        return "failed", f"{reason}; see {log_path}"

    def _progress(self, run_id: str, msg: Mapping[str, Any]) -> None:
        now = time.monotonic()
        last = self._last_line.get(run_id, 0.0)
        if now - last < _PROGRESS_EVERY and msg.get("tick") != msg.get("total"):
            return
        self._last_line[run_id] = now
        self._write()  # the study's clock, at most every _PROGRESS_EVERY seconds per run
        done = sum(s == "complete" for s in self.states.values())
        self._say(
            f"{run_id} tick {msg.get('tick')}/{msg.get('total')} "
            f"({done}/{len(self.states)} runs complete)"
        )


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text("utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return " | ".join(text[-lines:]) or "empty log"


# -- the child ----------------------------------------------------------------------------


def child_main() -> int:
    """One run of a study, in this process: the job is one JSON line on stdin (see
    ``_Runner._job``); progress and the outcome go to stdout as JSON lines; the exit code is
    ``agentsim run``'s. stdin closing (the study process died) stops the run like Ctrl-C."""
    from agentsim.config.experiment import parse_experiment
    from agentsim.run.engine import ENGINE_STATE, Engine
    from agentsim.run.fork import check_shared, open_fork

    job = json.loads(sys.stdin.readline())
    stop = threading.Event()
    signals: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        signals.append(signum)
        engine.stop_cause = "SIGTERM" if signum == signal.SIGTERM else None
        stop.set()

    def watch_stdin() -> None:
        while sys.stdin.readline():
            pass
        stop.set()

    def tell(msg: Mapping[str, Any]) -> None:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    last_tick = [-1]

    def progress(p: Any) -> None:
        if p.tick != last_tick[0]:
            last_tick[0] = p.tick
            tell({"tick": p.tick, "total": p.total})

    try:
        config = parse_experiment(
            job["config"], source=job["source"], base_dir=Path(job["base_dir"]), environ={}
        )
        fork = None
        if job["mode"] == "fork":
            fork = open_fork(
                Path(job["fork"]["run"]), int(job["fork"]["tick"]), engine_keys=ENGINE_STATE
            )
            check_shared(fork, config)
        from agentsim.hosts import executor_for

        engine = Engine(
            config,
            run_dir=Path(job["run_dir"]),
            executor=executor_for(config),
            progress=progress,
            stop=stop,
            fork=fork,
            checkpoint_at=job["checkpoint_at"],
            sample=int(job["sample"]),
            notice=lambda line: print(f"warning: {line}", file=sys.stderr, flush=True),
        )
        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        threading.Thread(target=watch_stdin, name="study-stdin", daemon=True).start()
        try:
            summary = asyncio.run(engine.run(resume=job["mode"] == "resume"))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    except AgentsimError as exc:
        tell({"error": str(exc)})
        return exc.exit_code
    except KeyboardInterrupt:
        tell({"reason": "aborted by a second signal; resume the study"})
        return 130
    tell(
        {
            "status": summary.status,
            "reason": summary.reason,
            "problems": list(summary.problems),
        }
    )
    if summary.status == "interrupted":
        return 143 if signals[:1] == [signal.SIGTERM] or not signals else 130
    if summary.budget_stop:
        return BUDGET_EXIT_CODE
    if summary.status != "completed" and not summary.status.startswith("completed"):
        return 1
    return 3 if summary.problems else 0
