"""Calling a cached script inside the host process, so that the run can walk away from it.

Private to ``agentsim.skills.scripts``. Each function runs one call and returns its
``Outcome`` (prints captured into ``log``, or into ``output`` for a plain script), or raises
``TimeoutError`` when the call has not finished within ``limit`` seconds.

- ``call_async``: an async entrypoint, as a task of its own in the caller's loop. At the
  deadline only that task is cancelled, never the caller's; a task that ignores the
  cancellation is left to finish on its own (kept referenced in ``STRAGGLERS``).
- ``call_in_thread``: a sync entrypoint, an async one on an event loop of its own
  (``thread`` isolation), or a plain script, on a daemon worker thread. Python cannot stop a
  thread: past the deadline the caller goes on and the thread runs until it returns.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agentsim.skills._capture import route_to
from agentsim.skills._modcache import WRAPPER_LOCK, Entry, run_main
from agentsim.skills._outcome import (
    CappedWriter,
    Outcome,
    outcome_from_exception,
    outcome_from_value,
)
from agentsim.skills._workers import run_in_thread
from agentsim.skills.context import _CURRENT, SkillScriptContext

__all__ = ["STRAGGLERS", "WrapperBusy", "call_async", "call_in_thread"]

# Tasks cut at their deadline that ignored the cancellation: referenced here so that they
# are not garbage-collected mid-flight, dropped when they end.
STRAGGLERS: set[asyncio.Task[Any]] = set()
# How long a cancelled async script may take to unwind before the caller walks away.
_CANCEL_GRACE = 0.1


class WrapperBusy(Exception):
    """A plain script never started: the plain-script lock stayed held (by another plain
    script) for the whole timeout."""


def _seconds(limit: float) -> float | None:
    return None if math.isinf(limit) else limit


def _with_log(outcome: Outcome, log: CappedWriter) -> Outcome:
    text, _ = log.capped()
    return replace(outcome, log=text) if text else outcome


async def call_async(
    fn: Callable[..., Any], argv: Sequence[str], ctx: SkillScriptContext, cap: int, limit: float
) -> Outcome:
    """Await ``fn(argv, ctx)`` as its own task, in a copy of the caller's context."""
    log = CappedWriter(cap)
    call_context = contextvars.copy_context()
    call_context.run(_bind, ctx, log)
    task = asyncio.get_running_loop().create_task(fn(list(argv), ctx), context=call_context)
    try:
        done, _ = await asyncio.wait({task}, timeout=_seconds(limit))
    except asyncio.CancelledError:
        task.cancel()  # our caller is cancelled: so is its script call
        raise
    if not done:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=_CANCEL_GRACE)
        if not done:
            STRAGGLERS.add(task)
            task.add_done_callback(STRAGGLERS.discard)
        else:
            _ = task.cancelled() or task.exception()  # retrieved: no "never retrieved" warning
        raise TimeoutError
    if task.cancelled():
        outcome = Outcome(
            ok=False,
            output="",
            exit_code=1,
            error="the script's task was cancelled from inside the script",
        )
        return _with_log(outcome, log)
    try:
        value = task.result()
    except (Exception, SystemExit) as exc:
        return _with_log(outcome_from_exception(exc, cap), log)
    return _with_log(outcome_from_value(value, cap), log)


def _bind(ctx: SkillScriptContext, log: CappedWriter) -> None:
    _CURRENT.set(ctx)
    route_to(log, log)


async def call_in_thread(
    path: str,
    entry: Entry,
    argv: Sequence[str],
    ctx: SkillScriptContext,
    cap: int,
    limit: float,
) -> Outcome:
    """Run the call on a worker thread (``_workers.run_in_thread``). Raises ``WrapperBusy`` for
    a plain script that could not get the plain-script lock in time, ``NeedsSubprocess`` for
    one that must run as a real script."""
    if entry.fn is None:
        started, abandoned = threading.Event(), threading.Event()
        try:
            return await run_in_thread(
                lambda: _plain(path, entry, argv, ctx, cap, started, abandoned),
                limit=limit,
            )
        except TimeoutError:
            abandoned.set()
            if not started.is_set():
                raise WrapperBusy from None
            raise
    fn = entry.fn
    is_async = entry.is_async

    def call() -> Outcome:
        log = CappedWriter(cap)
        _bind(ctx, log)  # run_in_thread runs us in a copy of the caller's context
        try:
            value = asyncio.run(fn(list(argv), ctx)) if is_async else fn(list(argv), ctx)
        except (Exception, SystemExit) as exc:
            return _with_log(outcome_from_exception(exc, cap), log)
        return _with_log(outcome_from_value(value, cap), log)

    return await run_in_thread(call, limit=limit)


def _plain(
    path: str,
    entry: Entry,
    argv: Sequence[str],
    ctx: SkillScriptContext,
    cap: int,
    started: threading.Event,
    abandoned: threading.Event,
) -> Outcome:
    with WRAPPER_LOCK:
        if abandoned.is_set():  # the caller gave up while we waited: do not run at all
            return Outcome(ok=False, output="", exit_code=1, error="abandoned")
        started.set()
        return run_main(path, entry, argv, ctx, cap)
