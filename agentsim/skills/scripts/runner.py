"""Running skill scripts: which scripts may run, the three tiers, isolation and timeouts.

A script is one of its skill's own ``.py`` files (resolved, it must stay inside
``ctx.skill_dir``). Tiers, tried in order:

``entrypoint``
    The module defines ``entrypoint(argv, ctx)`` or ``entrypoint(argv)`` (sync or
    ``async``; the arity is read once, at import); it is imported once per process (see
    ``inprocess``: a package per scripts folder, so sibling modules import with
    ``from . import util``) and called in-process, shared by every agent.
``wrapper``
    A plain script under ``process`` isolation: its code runs as ``__main__`` in the
    isolation process (cwd the agent's workspace, environment the call's, ``sys.argv`` set);
    what it prints is its output.
``hook``
    A lifecycle hook call (``run(..., hook="pre_step")``) to a script that defines a function
    of that name: the function (sync or ``async``, no parameters) is called instead, isolated
    and timed like an entrypoint; it reads its payload with ``agentsim.skills.hooks
    .hook_context()``. Without such a function the hook is an ordinary call with
    ``--args-json PAYLOAD``.
``subprocess``
    A plain script in any other isolation, or a module that cannot be imported (syntax
    error, missing dependency, an absolute sibling import): ``python script.py argv...``
    with cwd = the agent's workspace and ``ctx.env`` as its whole environment. Plain scripts
    never run inside the host: the working folder and ``os.environ`` are process globals
    that every other call (and the host itself) would see changed.

Isolation and what a timeout can stop:

``inline``
    Async entrypoints run as a task of their own in the caller's loop, cancelled at the
    deadline (a coroutine that blocks without awaiting cannot be cut: it is reported as timed
    out once it returns). Sync code runs on a worker thread that the caller stops waiting
    for at the deadline; the thread itself cannot be killed and runs on in the background.
``thread``
    Everything on a worker thread (async entrypoints on a loop of their own): the caller
    always gets its answer at the deadline.
``process``
    A fresh Python process (``child``) imports and runs the script; its process group is
    killed at the deadline. The host never imports the script.

A script whose calls overrun their timeout ``quarantine_after`` times is quarantined: its
later calls fail at once (``quarantined=True``) until its folder's files change, and its calls
already waiting or running are abandoned at that moment (threads not yet started never start,
tasks are cancelled, processes killed), so a hanging script costs a tick one timeout however
many agents call it.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from agentsim._paths import is_inside
from agentsim.errors import SkillError
from agentsim.skills import measures
from agentsim.skills.context import SkillScriptContext, call_env, safe_env
from agentsim.skills.hooks import hook_caller
from agentsim.skills.measures import Measure
from agentsim.skills.scripts.child import run_in_child
from agentsim.skills.scripts.inprocess import (
    CACHE,
    FolderStamp,
    LoadedScript,
    NeedsSubprocess,
    Outcome,
    Stopped,
    Tier,
    call_async,
    call_in_thread,
    folder_lock,
    load,
    run_in_thread,
    stamp_of,
)

__all__ = [
    "REFUSED_EXIT_CODE",
    "TIMEOUT_EXIT_CODE",
    "Isolation",
    "Quarantined",
    "ScriptResult",
    "ScriptRunner",
    "Tier",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptResult:
    """The outcome of one script call. A failing script is a result, never an exception.

    ``tier`` is how the script ran and ``isolation`` how it was isolated. ``output`` is what
    the script returned (or, for a plain script, printed), cut to the runner's cap when
    ``truncated``. ``log`` holds what an entrypoint printed (and any script's stderr when it
    succeeded), capped as well: it belongs in the trace, never on the terminal.
    ``timed_out`` marks a call stopped (or walked away from) at its timeout;
    ``quarantined`` a call refused, or the overrun that got the script quarantined;
    ``refused`` a call that never ran (the script is not one of its skill's, quarantined,
    or its skill is not active, has no such script or was given input its schema refuses).
    """

    ok: bool
    output: str
    exit_code: int
    error: str | None
    elapsed: float
    tier: Tier
    timed_out: bool = False
    isolation: str = "inline"
    truncated: bool = False
    log: str = ""
    quarantined: bool = False
    measures: tuple[Measure, ...] = ()
    # Refused before it ran: not a script of its skill, quarantined, not active, bad input.
    refused: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict, for traces."""
        return asdict(self)


Isolation = Literal["inline", "thread", "process"]
_ISOLATIONS = ("inline", "thread", "process")

TIMEOUT_EXIT_CODE = 124
"""``exit_code`` of a call that timed out (the convention of coreutils ``timeout``)."""
REFUSED_EXIT_CODE = 126
"""``exit_code`` of a script that may not run (not a ``.py`` file of its skill)."""
_START_FAILED_EXIT_CODE = 127


@dataclass(frozen=True, slots=True, kw_only=True)
class Quarantined:
    """A script this runner no longer calls, after ``overruns`` timeouts."""

    script: str
    skill_id: str
    overruns: int


@dataclass(slots=True)
class _Flight:
    """The calls of one script now waiting or running, so that a quarantine can end them:
    ``stop`` keeps queued worker-thread jobs from starting; each task maps to its
    ``cancelling()`` count when it began (see ``ScriptRunner.run``)."""

    stop: threading.Event = field(default_factory=threading.Event)
    calls: dict[asyncio.Task[object], int] = field(default_factory=dict)
    aborted: set[asyncio.Task[object]] = field(default_factory=set)


class ScriptRunner:
    """Runs skill scripts for every agent of this process. One runner per host is enough.

    ``output_cap`` bounds ``output``, ``log`` and ``error`` (in characters);
    ``default_timeout`` is used when a call gives none; ``python`` is the interpreter of the
    subprocess tier and of ``process`` isolation; ``quarantine_after`` is the number of
    timeouts after which a script is quarantined. ``check_every_call=False`` is the host
    mode: a script's folder is listed at most once between two ``new_tick()`` calls, so an
    edit is seen from the next tick on (the rule of skill hot reload). ``environ`` is where
    variables a skill declares are read from (default ``os.environ``).
    """

    def __init__(
        self,
        *,
        output_cap: int = 16_000,
        default_timeout: float = 30.0,
        python: str = sys.executable,
        check_every_call: bool = True,
        quarantine_after: int = 3,
        environ: dict[str, str] | None = None,
    ) -> None:
        if output_cap < 1:
            raise SkillError(f"ScriptRunner output_cap={output_cap} must be >= 1; pass a cap")
        if not default_timeout > 0:
            raise SkillError(
                f"ScriptRunner default_timeout={default_timeout} must be > 0 seconds; "
                "pass a positive timeout (math.inf for none)"
            )
        if quarantine_after < 1:
            raise SkillError(
                f"ScriptRunner quarantine_after={quarantine_after} must be >= 1; pass the "
                "number of timeouts after which a script is no longer called"
            )
        self.output_cap = output_cap
        self.default_timeout = default_timeout
        self.python = python
        self.quarantine_after = quarantine_after
        self._environ = environ
        self._check_every_call = check_every_call
        # Host mode, emptied every tick: folders listed and script paths checked this tick.
        self._stamps: dict[str, FolderStamp | None] = {}
        self._located: dict[tuple[str, str], tuple[str, str | None]] = {}
        # script path -> (stamp, skill id, overruns) for the file version that overran
        self._overruns: dict[str, tuple[FolderStamp | None, str, int]] = {}
        self._flights: dict[str, _Flight] = {}
        # Set by the isolation child (one call per process): plain scripts run in-process.
        self.plain_in_process = False
        self._counts = dict.fromkeys(
            ("imports", "entrypoint", "wrapper", "subprocess", "hook", "timeouts", "errors"), 0
        )

    # -- public ---------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters of this runner, plus ``module_count``: scripts cached in this process."""
        c = self._counts
        return {
            "imports": c["imports"],
            "calls_entrypoint": c["entrypoint"],
            "calls_wrapper": c["wrapper"],
            "calls_subprocess": c["subprocess"],
            "calls_hook": c["hook"],
            "timeouts": c["timeouts"],
            "errors": c["errors"],
            "quarantined": len(self.quarantined()),
            "module_count": len(CACHE),
        }

    def new_tick(self) -> None:
        """Host mode: scripts are checked for edits again on their next call."""
        self._stamps.clear()
        self._located.clear()

    def quarantined(self) -> tuple[Quarantined, ...]:
        """The scripts this runner refuses to call, by path."""
        return tuple(
            Quarantined(script=path, skill_id=skill_id, overruns=n)
            for path, (_, skill_id, n) in sorted(self._overruns.items())
            if n >= self.quarantine_after
        )

    async def run(
        self,
        script: str | os.PathLike[str],
        argv: Sequence[str],
        ctx: SkillScriptContext,
        *,
        isolation: Isolation = "inline",
        timeout: float | None = None,  # noqa: ASYNC109 - the contract's name; enforced inside
        env: Iterable[str] = (),
        hook: str | None = None,
        network: bool = False,
    ) -> ScriptResult:
        """Run ``script`` for the agent described by ``ctx``; always returns a result.

        ``network``: under ``process`` isolation, whether the sandboxed script keeps the
        network (the skill's ``network: true``); other isolations run inside the host.

        ``hook`` names the lifecycle hook this call is (``pre_step`` / ``post_step``): a
        function of that name in the script is called instead (the ``hook`` tier).

        ``env`` names the variables the skill declares: they are added to ``ctx.env`` (and
        so to a subprocess's environment) from ``environ``. Only ``KeyboardInterrupt``,
        ``asyncio.CancelledError`` and other ``BaseException`` subclasses that are not
        ``SystemExit`` propagate.
        """
        if isolation not in _ISOLATIONS:
            raise SkillError(
                f"isolation {isolation!r} for script {os.fspath(script)} is not one of "
                "inline, thread, process; fix the skill's `isolation` field"
            )
        start = time.perf_counter()
        limit = self.default_timeout if timeout is None else timeout
        raw = os.fspath(script)
        path, refusal = self._locate(raw, ctx)
        if refusal is not None:
            return replace(self._fail(refusal, REFUSED_EXIT_CODE, start, isolation), refused=True)
        try:
            stamp = self._stamp(path)
        except OSError as exc:
            stamp = None
            problem = exc.strerror or str(exc)
        else:
            problem = "No such file or directory"
        if stamp is None:
            return self._fail(
                f"script {raw} cannot be read ({problem}); check the skill's script path",
                _START_FAILED_EXIT_CODE,
                start,
                isolation,
            )
        declared = tuple(env)
        source = os.environ if self._environ is None else self._environ
        ctx = call_env(ctx, safe_env(source, allow=(), declared=declared) if declared else {})
        refused = self._refuse_quarantined(path, stamp, start, isolation)
        if refused is not None:
            return refused
        flight = self._flights.get(path)
        if flight is None:
            flight = self._flights[path] = _Flight()
        task = asyncio.current_task()
        if task is not None:
            flight.calls[task] = task.cancelling()
        try:
            result = await self._dispatch(
                path, stamp, argv, ctx, isolation, limit, start, flight, hook, network
            )
        except asyncio.CancelledError:
            # Ours (the script was quarantined meanwhile) or our caller's: only ours is
            # turned into a result, as asyncio.timeout() does with its own cancellation.
            if task is None or task not in flight.aborted or task.uncancel() > flight.calls[task]:
                raise
            result = self._abandoned(path, start, isolation)
        except Stopped:
            result = self._abandoned(path, start, isolation)
        finally:
            if task is not None:
                flight.calls.pop(task, None)
                flight.aborted.discard(task)
            if not flight.calls and self._flights.get(path) is flight:
                del self._flights[path]
        return _measured(self._settle(path, stamp, ctx, result))

    # -- dispatch -------------------------------------------------------------------------

    async def _dispatch(
        self,
        path: str,
        stamp: FolderStamp,
        argv: Sequence[str],
        ctx: SkillScriptContext,
        isolation: Isolation,
        limit: float,
        start: float,
        flight: _Flight,
        hook: str | None = None,
        network: bool = False,
    ) -> ScriptResult:
        if isolation == "process":
            return await self._in_child(path, argv, ctx, limit, start, isolation, hook, network)
        try:
            entry = await self._entry(path, stamp, limit)
        except TimeoutError:
            return self._timed_out(path, limit, start, "entrypoint", isolation, " importing it")
        tier: Tier = entry.tier
        fn = entry.hook(hook) if hook is not None else None
        call = hook_caller(fn, hook, argv, ctx) if fn is not None and hook is not None else None
        if call is not None:
            is_async = inspect.iscoroutinefunction(call)
            entry = replace(entry, fn=call, is_async=is_async, takes_ctx=True)
            tier = "hook"
        elif entry.tier == "subprocess" or (entry.tier == "wrapper" and not self.plain_in_process):
            return await self._in_child(path, argv, ctx, limit, start, isolation)
        try:
            if entry.is_async and isolation == "inline" and entry.fn is not None:
                called = time.perf_counter()
                outcome = await call_async(entry, argv, ctx, self.output_cap, limit)
                if time.perf_counter() - called > limit:
                    # A coroutine that blocked without awaiting: it could not be cut.
                    return self._timed_out(
                        path, limit, start, tier, isolation, " (it blocked the event loop)"
                    )
            else:
                outcome = await call_in_thread(
                    path, entry, argv, ctx, self.output_cap, limit, stop=flight.stop
                )
        except TimeoutError:
            return self._timed_out(path, limit, start, tier, isolation)
        except NeedsSubprocess as exc:
            _demote(path, entry, str(exc))
            return await self._in_child(path, argv, ctx, limit, start, isolation)
        return self._result(outcome, start, tier, isolation)

    async def _entry(self, path: str, stamp: FolderStamp, limit: float) -> LoadedScript:
        """The cached entry for this stamp, imported on a worker thread when needed: a
        script's top-level code is as able to hang as its entrypoint."""
        entry = CACHE.get(path)
        if entry is not None and entry.stamp == stamp:
            return entry

        def import_it() -> LoadedScript:
            lock = folder_lock(os.path.dirname(path))
            if not lock.acquire(timeout=-1 if math.isinf(limit) else limit):
                raise TimeoutError  # another import of this folder hangs
            try:
                current = CACHE.get(path)
                if current is not None and current.stamp == stamp:
                    return current
                loaded = CACHE[path] = load(path, stamp)
                self._counts["imports"] += 1
                return loaded
            finally:
                lock.release()

        return await run_in_thread(import_it, limit=limit)

    def _locate(self, raw: str, ctx: SkillScriptContext) -> tuple[str, str | None]:
        if self._check_every_call:
            return _locate(raw, ctx)
        key = (raw, os.fspath(ctx.skill_dir))
        if key not in self._located:
            self._located[key] = _locate(raw, ctx)
        return self._located[key]

    def _stamp(self, path: str) -> FolderStamp | None:
        if self._check_every_call:
            return stamp_of(path)
        if path not in self._stamps:
            self._stamps[path] = stamp_of(path)
        return self._stamps[path]

    async def _in_child(
        self,
        path: str,
        argv: Sequence[str],
        ctx: SkillScriptContext,
        limit: float,
        start: float,
        isolation: Isolation,
        hook: str | None = None,
        network: bool = False,
    ) -> ScriptResult:
        """A fresh Python process, killed on timeout: ``process`` isolation (``python -m
        agentsim.skills.scripts.child`` in the sandbox, which calls ``hook``'s function when
        the script has one) or the subprocess tier (``python script.py``)."""
        isolated = isolation == "process"
        tier: Tier = "entrypoint" if isolated else "subprocess"
        try:
            got = await run_in_child(
                self.python,
                path,
                argv,
                ctx,
                output_cap=self.output_cap,
                limit=limit,
                isolated=isolated,
                hook=hook,
                network=network,
            )
        except OSError as exc:
            return self._start_failed(path, ctx, exc, start, tier, isolation)
        if got is None:
            return self._timed_out(path, limit, start, tier, isolation)
        outcome, tier = got
        return self._result(outcome, start, tier, isolation)

    # -- results and quarantine -----------------------------------------------------------

    def _result(self, outcome: Outcome, start: float, tier: Tier, isolation: str) -> ScriptResult:
        return ScriptResult(
            ok=outcome.ok,
            output=outcome.output,
            exit_code=outcome.exit_code,
            error=outcome.error,
            elapsed=time.perf_counter() - start,
            tier=tier,
            isolation=isolation,
            truncated=outcome.truncated,
            log=outcome.log,
        )

    def _fail(self, error: str, exit_code: int, start: float, isolation: str) -> ScriptResult:
        self._counts["errors"] += 1
        return ScriptResult(
            ok=False,
            output="",
            exit_code=exit_code,
            error=error,
            elapsed=time.perf_counter() - start,
            tier="entrypoint",
            isolation=isolation,
        )

    def _timed_out(
        self, path: str, limit: float, start: float, tier: Tier, isolation: str, note: str = ""
    ) -> ScriptResult:
        stopped = {
            "process": "its process was killed",
            "thread": "its thread was left running in the background",
            "inline": "the call was abandoned",
        }[isolation]
        return ScriptResult(
            ok=False,
            output="",
            exit_code=TIMEOUT_EXIT_CODE,
            error=f"script {path} timed out after {limit:g}s{note} under {isolation} "
            f"isolation ({stopped}); raise the skill's timeout or make the script faster",
            elapsed=time.perf_counter() - start,
            tier=tier,
            timed_out=True,
            isolation=isolation,
        )

    def _start_failed(
        self,
        path: str,
        ctx: SkillScriptContext,
        exc: OSError,
        start: float,
        tier: Tier,
        isolation: str,
    ) -> ScriptResult:
        outcome = Outcome(
            ok=False,
            output="",
            exit_code=_START_FAILED_EXIT_CODE,
            error=f"cannot start a process for script {path} ({exc}); check that the agent "
            f"workspace {ctx.workspace_root} exists and {self.python} is a Python interpreter",
        )
        return self._result(outcome, start, tier, isolation)

    def _refuse_quarantined(
        self, path: str, stamp: FolderStamp, start: float, isolation: str
    ) -> ScriptResult | None:
        known = self._overruns.get(path)
        if known is None:
            return None
        if known[0] != stamp:  # edited since: give it a fresh start
            del self._overruns[path]
            return None
        if known[2] < self.quarantine_after:
            return None
        result = self._fail(
            f"script {path} is quarantined after {known[2]} timeouts; it is not called "
            "again until a file of its folder changes: fix it, or raise the skill's timeout",
            TIMEOUT_EXIT_CODE,
            start,
            isolation,
        )
        return replace(result, quarantined=True, refused=True)

    def _abandoned(self, path: str, start: float, isolation: str) -> ScriptResult:
        """A call of a script quarantined while it waited or ran: not a strike of its own."""
        n = self._overruns[path][2] if path in self._overruns else self.quarantine_after
        return ScriptResult(
            ok=False,
            output="",
            exit_code=TIMEOUT_EXIT_CODE,
            error=f"script {path} was quarantined after {n} timeouts while this call waited "
            "or ran; the call was abandoned (not counted as a timeout of its own): fix the "
            "script, or raise the skill's timeout",
            elapsed=time.perf_counter() - start,
            tier="entrypoint",
            isolation=isolation,
            quarantined=True,
        )

    def _abort(self, path: str) -> None:
        """End the calls of ``path`` still waiting or running (not the caller's own)."""
        flight = self._flights.pop(path, None)
        if flight is None:
            return
        flight.stop.set()
        me = asyncio.current_task()
        for task in flight.calls:
            if task is me or task.done():
                continue
            flight.aborted.add(task)
            loop = task.get_loop()
            if loop is asyncio.get_running_loop():
                task.cancel()
            else:  # pragma: no cover - a runner shared by two event loops at once
                loop.call_soon_threadsafe(task.cancel)

    def _settle(
        self, path: str, stamp: FolderStamp, ctx: SkillScriptContext, result: ScriptResult
    ) -> ScriptResult:
        """Count the call; a timeout may quarantine the script."""
        self._counts[result.tier] += 1
        if not result.ok:
            self._counts["errors"] += 1
        if not result.timed_out:
            return result
        self._counts["timeouts"] += 1
        _, _, n = self._overruns.get(path, (stamp, ctx.skill_id, 0))
        n += 1
        self._overruns[path] = (stamp, ctx.skill_id, n)
        if n < self.quarantine_after:
            return result
        self._abort(path)
        note = (
            f"; script quarantined after {n} timeouts: later calls fail at once until a "
            "file of its folder changes"
        )
        return replace(result, error=f"{result.error}{note}", quarantined=True)


def _locate(raw: str, ctx: SkillScriptContext) -> tuple[str, str | None]:
    """``raw`` resolved, and why it may not run for the skill of ``ctx`` (None: it may)."""
    path = os.path.realpath(raw)
    return path, _refusal(raw, path, ctx)


def _refusal(raw: str, path: str, ctx: SkillScriptContext) -> str | None:
    if not is_inside(path, ctx.skill_dir):
        return (
            f"script {raw} resolves to {path}, outside the folder "
            f"{os.path.realpath(ctx.skill_dir)} of skill "
            f"{ctx.skill_id}; a skill runs only its own scripts (no symlink out of its folder)"
        )
    if not path.endswith(".py"):
        return (
            f"script {raw} of skill {ctx.skill_id} is not a Python file; only a skill's own "
            ".py scripts run (SKILL.md and references are read with read_skill_file)"
        )
    if os.path.exists(path) and not os.path.isfile(path):
        return f"script {raw} of skill {ctx.skill_id} is not a regular file; point it at a .py"
    return None


def _demote(path: str, entry: LoadedScript, reason: str) -> None:
    with folder_lock(os.path.dirname(path)):
        if CACHE.get(path) is entry:
            CACHE[path] = replace(entry, tier="subprocess", code=None, reason=reason)


def _measured(result: ScriptResult) -> ScriptResult:
    """``result`` with the measure lines (``agentsim.skills.measures``) taken out of its
    output and log, and the measures they recorded in ``measures``."""
    if measures.PREFIX not in result.output and measures.PREFIX not in result.log:
        return result  # the common case, without a call
    output, found = measures.split(result.output)
    log, logged = measures.split(result.log)
    if not found and not logged:
        return result
    return replace(result, output=output, log=log, measures=(*found, *logged))
