"""Running skill scripts: the per-process module cache, the three tiers and isolation.

Tiers, tried in order for each script file:

``entrypoint``
    The module defines ``entrypoint(argv, ctx)`` (sync or ``async``); it is imported once
    per process per ``(path, mtime_ns, size)`` and called in-process, shared by every agent.
``wrapper``
    The file is a plain script: its code runs as ``__main__`` in a fresh namespace with
    ``sys.argv`` set and ``sys.stdout`` captured. Those are process globals, so wrapper
    calls are serialised behind one ``threading.Lock`` (valid in any loop or thread).
``subprocess``
    The module cannot be imported (syntax error, missing dependency, a sibling import that
    only resolves when run as a script): ``python script.py argv...`` runs with
    cwd = the agent's workspace and the context's scrubbed ``env``.

The runner never mutates ``sys.path``: a script that imports a sibling module therefore
lands in the subprocess tier, where Python puts the script's folder on the path itself.

Isolation ``inline`` (the fast path) calls the script in the caller's thread and loop;
``thread`` and ``process`` enforce the timeout hard. An inline call that overruns its
timeout is reported as timed out and the script moves to ``thread`` for later calls.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import PurePath
from typing import Any, Literal, cast

from agentsim.errors import SkillError
from agentsim.skills._modcache import (
    CACHE,
    LOAD_LOCK,
    WRAPPER_LOCK,
    Entry,
    NeedsSubprocess,
    load,
    run_main,
    run_main_locked,
)
from agentsim.skills._outcome import (
    Outcome,
    ScriptResult,
    Tier,
    _ResultDraft,
    cap_text,
    fast_result,
    outcome_from_exception,
    outcome_from_value,
)
from agentsim.skills._proc import call_in_child, run_as_script, run_in_thread
from agentsim.skills.context import _CURRENT, SkillScriptContext

__all__ = ["TIMEOUT_EXIT_CODE", "Isolation", "ScriptResult", "ScriptRunner", "Tier"]

Isolation = Literal["inline", "thread", "process"]

TIMEOUT_EXIT_CODE = 124
"""``exit_code`` of a call that timed out (the convention of coreutils ``timeout``)."""

_START_FAILED_EXIT_CODE = 127
_STRENGTH: dict[str, int] = {"inline": 0, "thread": 1, "process": 2}
_ESCALATE_TO: Isolation = "thread"


_perf = time.perf_counter
_stat = os.stat
_new = object.__new__


class ScriptRunner:
    """Runs skill scripts for every agent of this process. One runner per host is enough.

    ``output_cap`` bounds ``output`` and ``error`` (in characters), ``default_timeout`` is
    used when a call gives none, ``python`` is the interpreter of the subprocess tier and of
    ``process`` isolation.
    """

    def __init__(
        self,
        *,
        output_cap: int = 16_000,
        default_timeout: float = 30.0,
        python: str = sys.executable,
        check_every_call: bool = True,
    ) -> None:
        """``check_every_call=False`` is the host mode: a script file is stat'ed at most once
        between two ``new_tick()`` calls, so an edit is seen from the next tick on (the same
        rule as skill hot reload) and a tick of many agents pays one stat per script."""
        if output_cap < 1:
            raise SkillError(f"ScriptRunner output_cap={output_cap} must be >= 1; pass a cap")
        if not default_timeout > 0:
            raise SkillError(
                f"ScriptRunner default_timeout={default_timeout} must be > 0 seconds; "
                "pass a positive timeout (math.inf for none)"
            )
        self.output_cap = output_cap
        self.default_timeout = default_timeout
        self.python = python
        self._paths: dict[str, str] = {}
        self._check_every_call = check_every_call
        self._checked: dict[str, Entry] = {}  # host mode: entries validated this tick
        # Script argument (as given) -> (resolved path, entry) of inline sync entrypoints: the
        # hot path's only lookup. Host mode empties it every tick; otherwise each hit is
        # re-validated by one stat.
        self._hot: dict[object, tuple[str, Entry, Callable[..., Any]]] = {}
        self._hot_calls = 0  # successful hot-path calls, counted apart to skip a dict update
        self._escalated: dict[str, Isolation] = {}
        self._imports = 0
        self._calls: dict[str, int] = {"entrypoint": 0, "wrapper": 0, "subprocess": 0}
        self._escalations = 0
        self._timeouts = 0
        self._errors = 0

    # -- public ---------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters of this runner, plus ``module_count``: scripts cached in this process."""
        return {
            "imports": self._imports,
            "calls_entrypoint": self._calls["entrypoint"] + self._hot_calls,
            "calls_wrapper": self._calls["wrapper"],
            "calls_subprocess": self._calls["subprocess"],
            "escalations": self._escalations,
            "timeouts": self._timeouts,
            "errors": self._errors,
            "module_count": len(CACHE),
        }

    def new_tick(self) -> None:
        """Host mode: scripts are stat'ed again on their next call (see ``__init__``)."""
        self._checked.clear()
        self._hot.clear()

    def escalated(self, script: str | os.PathLike[str]) -> Isolation | None:
        """The isolation a script was moved to after an inline overrun, if any."""
        return self._escalated.get(self._resolve(os.fspath(script)))

    async def run(
        self,
        script: str | os.PathLike[str],
        argv: Sequence[str],
        ctx: SkillScriptContext,
        *,
        isolation: Isolation = "inline",
        timeout: float | None = None,  # noqa: ASYNC109 - the contract's name; enforced inside
    ) -> ScriptResult:
        """Run ``script`` for the agent described by ``ctx``; always returns a result.

        Only ``KeyboardInterrupt`` and ``asyncio.CancelledError`` (and other
        ``BaseException`` subclasses that are not ``SystemExit``) propagate.
        """
        if isolation == "inline":
            result = self._hot_call(script, argv, ctx, timeout)
            if result is not None:
                return result
        start = _perf()
        prepared = self._prepare(script, isolation, start)
        if isinstance(prepared, ScriptResult):
            return prepared
        path, entry, isolation = prepared
        limit = self.default_timeout if timeout is None else timeout
        if entry.tier == "subprocess":
            return await self._run_subprocess(path, entry, argv, ctx, limit, start, isolation)
        if isolation == "inline":
            if entry.fn is None:
                return await self._inline_wrapper(path, entry, argv, ctx, limit, start)
            if entry.is_async:
                return await self._inline_async(path, entry, argv, ctx, limit, start)
            return self._inline_sync(path, entry, argv, ctx, limit, start, _perf())
        if isolation == "thread":
            return await self._in_thread(path, entry, argv, ctx, limit, start)
        return await self._in_process(path, entry, argv, ctx, limit, start)

    def run_now(
        self,
        script: str | os.PathLike[str],
        argv: Sequence[str],
        ctx: SkillScriptContext,
        *,
        timeout: float | None = None,
    ) -> ScriptResult | None:
        """The inline fast path as a plain call, without a coroutine: the result of an inline
        call of a sync entrypoint, or None when the call needs the event loop (a plain or
        async script, a subprocess, an escalated isolation) — then ``await run(...)``."""
        result = self._hot_call(script, argv, ctx, timeout)
        if result is not None:
            return result
        start = _perf()
        prepared = self._prepare(script, "inline", start)
        if isinstance(prepared, ScriptResult):
            return prepared
        path, entry, isolation = prepared
        if isolation != "inline" or entry.tier == "subprocess" or entry.fn is None:
            return None
        if entry.is_async:
            return None
        limit = self.default_timeout if timeout is None else timeout
        return self._inline_sync(path, entry, argv, ctx, limit, start, _perf())

    def _hot_call(
        self,
        script: str | os.PathLike[str],
        argv: Sequence[str],
        ctx: SkillScriptContext,
        timeout: float | None,
    ) -> ScriptResult | None:
        """The inline call of a sync entrypoint seen before; None, having run nothing, for
        any other script.

        The hot path of the package (every hook and tool call of every agent), flattened on
        purpose: a dict lookup, one stat unless in host mode, the contextvar, the call and a
        result built without the dataclass ``__init__`` (~1 µs over the bare call, where
        each extra method call would add ~0.1 µs). Anything unusual goes to ``_settle``.
        """
        start = _perf()
        try:
            hot = self._hot.get(script)
        except TypeError:  # an unhashable path-like: never hot
            return None
        if hot is None:
            return None
        path, entry, fn = hot
        if self._check_every_call:
            try:
                st = _stat(path)
            except OSError:
                return None
            if st.st_mtime_ns != entry.mtime_ns or st.st_size != entry.size:
                return None
        limit = self.default_timeout if timeout is None else timeout
        token = _CURRENT.set(ctx)
        try:
            value = fn(list(argv), ctx)
        except (Exception, SystemExit) as exc:
            outcome = outcome_from_exception(exc, self.output_cap)
            return self._settle(path, outcome, limit, start, start)
        finally:
            _CURRENT.reset(token)
        now = _perf()
        if type(value) is str and len(value) <= self.output_cap and now - start <= limit:
            self._hot_calls += 1
            result = _new(_ResultDraft)
            result.ok = True
            result.output = value
            result.exit_code = 0
            result.error = None
            result.elapsed = now - start
            result.tier = "entrypoint"
            result.timed_out = False
            result.isolation = "inline"
            result.truncated = False
            result.__class__ = ScriptResult
            return result  # type: ignore[no-any-return]
        return self._settle(path, outcome_from_value(value, self.output_cap), limit, start, start)

    def _prepare(
        self, script: str | os.PathLike[str], isolation: Isolation, start: float
    ) -> tuple[str, Entry, Isolation] | ScriptResult:
        """Resolve the path, load or validate the module, settle the isolation."""
        raw = os.fspath(script)
        path = self._paths.get(raw)
        if path is None:
            path = self._resolve(raw)
        entry = None if self._check_every_call else self._checked.get(path)
        if entry is None:
            try:
                st = os.stat(path)
            except OSError as exc:
                return self._missing(path, exc, start, isolation)
            entry = CACHE.get(path)
            if entry is None or entry.mtime_ns != st.st_mtime_ns or entry.size != st.st_size:
                entry = self._reload(path, st.st_mtime_ns, st.st_size)
            if not self._check_every_call:
                self._checked[path] = entry
        if isolation != "inline" and isolation not in _STRENGTH:
            raise SkillError(
                f"isolation {isolation!r} for script {path} is not one of inline, thread, "
                "process; fix the skill's `isolation` field"
            )
        requested = isolation
        if self._escalated:
            stronger = self._escalated.get(path)
            if stronger is not None and _STRENGTH[stronger] > _STRENGTH[isolation]:
                isolation = stronger
        # A relative path depends on the cwd: never hot.
        if requested == "inline" and isinstance(script, str | PurePath) and os.path.isabs(raw):
            if isolation == "inline" and entry.fn is not None and not entry.is_async:
                self._hot[script] = (path, entry, entry.fn)
            else:  # e.g. edited into a plain script: drop the stale entry
                self._hot.pop(script, None)
        return path, entry, isolation

    # -- cache ----------------------------------------------------------------------------

    def _resolve(self, raw: str) -> str:
        resolved = os.path.realpath(raw)
        if os.path.isabs(raw):  # a relative path depends on the cwd: never memoise it
            self._paths[raw] = resolved
        return resolved

    def _reload(self, path: str, mtime_ns: int, size: int) -> Entry:
        with LOAD_LOCK:
            entry = CACHE.get(path)  # another thread may have loaded it meanwhile
            if entry is None or entry.mtime_ns != mtime_ns or entry.size != size:
                entry = load(path, mtime_ns, size)
                CACHE[path] = entry
                self._imports += 1
        return entry

    # -- results --------------------------------------------------------------------------

    def _cap(self, text: str, dropped: int = 0) -> tuple[str, bool]:
        return cap_text(text, self.output_cap, dropped)

    def _finish(self, outcome: Outcome, start: float, tier: Tier, isolation: str) -> ScriptResult:
        self._calls[tier] += 1
        if not outcome.ok:
            self._errors += 1
        return fast_result(
            outcome.ok,
            outcome.output,
            outcome.exit_code,
            outcome.error,
            time.perf_counter() - start,
            tier,
            isolation,
            outcome.truncated,
        )

    def _timed_out(
        self, path: str, limit: float, start: float, tier: Tier, isolation: str, note: str = ""
    ) -> ScriptResult:
        self._timeouts += 1
        self._errors += 1
        self._calls[tier] += 1
        elapsed = time.perf_counter() - start
        return ScriptResult(
            ok=False,
            output="",
            exit_code=TIMEOUT_EXIT_CODE,
            error=f"script {path} timed out after {limit:g}s under {isolation} isolation"
            f"{note}; raise the skill's timeout or make the script faster",
            elapsed=elapsed,
            tier=tier,
            timed_out=True,
            isolation=isolation,
        )

    def _overrun(
        self, path: str, limit: float, start: float, tier: Tier, outcome: Outcome
    ) -> ScriptResult:
        # A sync inline call cannot be interrupted: report it and protect later calls.
        self._escalated[path] = _ESCALATE_TO
        self._escalations += 1
        self._hot = {key: hot for key, hot in self._hot.items() if hot[0] != path}
        result = self._timed_out(
            path,
            limit,
            start,
            tier,
            "inline",
            f" (ran {time.perf_counter() - start:.3f}s); later calls of this script run "
            f"with {_ESCALATE_TO} isolation, which enforces the timeout",
        )
        return replace(result, output=outcome.output, truncated=outcome.truncated)

    def _missing(self, path: str, exc: OSError, start: float, isolation: str) -> ScriptResult:
        self._errors += 1
        return ScriptResult(
            ok=False,
            output="",
            exit_code=_START_FAILED_EXIT_CODE,
            error=f"script {path} cannot be read ({exc.strerror or exc}); check the skill's "
            "script path",
            elapsed=time.perf_counter() - start,
            tier="entrypoint",
            isolation=isolation,
        )

    # -- inline ---------------------------------------------------------------------------

    def _inline_sync(
        self,
        path: str,
        entry: Entry,
        argv: Sequence[str],
        ctx: SkillScriptContext,
        limit: float,
        start: float,
        called: float,
    ) -> ScriptResult:
        """One sync call on the first use of a script (``_hot_call`` serves later ones).

        The overrun check counts from ``called``, so a slow first import is not held against
        the call."""
        fn = cast("Callable[..., Any]", entry.fn)
        token = _CURRENT.set(ctx)
        try:
            value = fn(list(argv), ctx)
        except (Exception, SystemExit) as exc:
            outcome = outcome_from_exception(exc, self.output_cap)
        else:
            outcome = outcome_from_value(value, self.output_cap)
        finally:
            _CURRENT.reset(token)
        return self._settle(path, outcome, limit, start, called)

    def _settle(
        self, path: str, outcome: Outcome, limit: float, start: float, called: float
    ) -> ScriptResult:
        """The result of a finished inline sync call, reported as an overrun if it was one."""
        if _perf() - called > limit:
            return self._overrun(path, limit, start, "entrypoint", outcome)
        return self._finish(outcome, start, "entrypoint", "inline")

    async def _inline_async(
        self,
        path: str,
        entry: Entry,
        argv: Sequence[str],
        ctx: SkillScriptContext,
        limit: float,
        start: float,
    ) -> ScriptResult:
        """An async entrypoint awaited in the caller's loop, cancelled at the deadline."""
        fn = cast("Callable[..., Any]", entry.fn)
        token = _CURRENT.set(ctx)
        called = time.perf_counter()
        deadline = asyncio.timeout(None if math.isinf(limit) else limit)
        try:
            async with deadline:
                value = await fn(list(argv), ctx)
        except TimeoutError as exc:
            if deadline.expired():
                timed_out = Outcome(ok=False, output="", exit_code=TIMEOUT_EXIT_CODE, error=None)
                return self._overrun(path, limit, start, "entrypoint", timed_out)
            outcome = outcome_from_exception(exc, self.output_cap)  # the script's own
        except (Exception, SystemExit) as exc:
            outcome = outcome_from_exception(exc, self.output_cap)
        else:
            outcome = outcome_from_value(value, self.output_cap)
        finally:
            _CURRENT.reset(token)
        # A coroutine that blocks without awaiting cannot be cancelled: check as for sync.
        if time.perf_counter() - called > limit:
            return self._overrun(path, limit, start, "entrypoint", outcome)
        return self._finish(outcome, start, "entrypoint", "inline")

    async def _inline_wrapper(
        self,
        path: str,
        entry: Entry,
        argv: Sequence[str],
        ctx: SkillScriptContext,
        limit: float,
        start: float,
    ) -> ScriptResult:
        try:
            if WRAPPER_LOCK.acquire(blocking=False):
                try:
                    outcome = run_main(path, entry, argv, ctx, self.output_cap)
                finally:
                    WRAPPER_LOCK.release()
            else:
                # Held by another thread or loop: wait in a worker, never block this loop.
                outcome = await asyncio.to_thread(
                    run_main_locked, path, entry, argv, ctx, self.output_cap
                )
        except NeedsSubprocess as exc:
            demoted = self._demote(path, entry, str(exc))
            return await self._run_subprocess(path, demoted, argv, ctx, limit, start, "inline")
        # Only the script's own run counts: waiting for the wrapper lock is not its fault.
        if outcome.ran > limit:
            return self._overrun(path, limit, start, "wrapper", outcome)
        return self._finish(outcome, start, "wrapper", "inline")

    def _demote(self, path: str, entry: Entry, reason: str) -> Entry:
        demoted = replace(entry, tier="subprocess", code=None, reason=reason)
        with LOAD_LOCK:
            if CACHE.get(path) is entry:
                CACHE[path] = demoted
        return demoted

    # -- thread ---------------------------------------------------------------------------

    def _call_blocking(
        self, path: str, entry: Entry, argv: Sequence[str], ctx: SkillScriptContext
    ) -> Outcome:
        """One call on a worker thread; async entrypoints get their own event loop."""
        if entry.fn is None:
            return run_main_locked(path, entry, argv, ctx, self.output_cap)
        fn = entry.fn
        token = _CURRENT.set(ctx)
        try:
            if entry.is_async:

                async def main() -> Any:
                    return await fn(list(argv), ctx)

                value = asyncio.run(main())
            else:
                value = fn(list(argv), ctx)
        except (Exception, SystemExit) as exc:
            return outcome_from_exception(exc, self.output_cap)
        finally:
            _CURRENT.reset(token)
        return outcome_from_value(value, self.output_cap)

    async def _in_thread(
        self,
        path: str,
        entry: Entry,
        argv: Sequence[str],
        ctx: SkillScriptContext,
        limit: float,
        start: float,
    ) -> ScriptResult:
        """Run on a fresh daemon thread and stop waiting after ``limit`` seconds (see
        ``run_in_thread``). A plain (wrapper-tier) script that hangs also keeps the wrapper
        lock, and so stalls every later wrapper call: give such scripts ``process`` isolation.
        """
        name = f"agentsim-script:{os.path.basename(path)}:{ctx.agent_id}"
        tier = entry.tier
        try:
            outcome = await run_in_thread(
                functools.partial(self._call_blocking, path, entry, argv, ctx),
                limit=limit,
                name=name,
            )
        except NeedsSubprocess as exc:
            demoted = self._demote(path, entry, str(exc))
            return await self._run_subprocess(path, demoted, argv, ctx, limit, start, "thread")
        if outcome is None:
            return self._timed_out(path, limit, start, tier, "thread")
        return self._finish(outcome, start, tier, "thread")

    # -- process / subprocess ---------------------------------------------------------------

    async def _in_process(
        self,
        path: str,
        entry: Entry,
        argv: Sequence[str],
        ctx: SkillScriptContext,
        limit: float,
        start: float,
    ) -> ScriptResult:
        """Run in a fresh ``python -m agentsim.skills._child``; killed on timeout."""
        try:
            got = await call_in_child(
                self.python,
                path,
                argv,
                ctx,
                output_cap=self.output_cap,
                limit=limit,
                tier=entry.tier,
            )
        except OSError as exc:
            return self._start_failed(path, ctx, exc, start, entry.tier, "process")
        if got is None:
            return self._timed_out(path, limit, start, entry.tier, "process")
        outcome, tier = got
        return self._finish(outcome, start, tier, "process")

    async def _run_subprocess(
        self,
        path: str,
        entry: Entry,
        argv: Sequence[str],
        ctx: SkillScriptContext,
        limit: float,
        start: float,
        isolation: str,
    ) -> ScriptResult:
        try:
            outcome = await run_as_script(
                self.python, path, argv, ctx, output_cap=self.output_cap, limit=limit
            )
        except OSError as exc:
            return self._start_failed(path, ctx, exc, start, "subprocess", isolation)
        if outcome is None:
            return self._timed_out(path, limit, start, "subprocess", isolation)
        return self._finish(outcome, start, "subprocess", isolation)

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
        return self._finish(outcome, start, tier, isolation)
