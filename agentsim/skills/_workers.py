"""Worker threads for script code the run must be able to walk away from.

Private to ``agentsim.skills``. ``run_in_thread(call, limit=...)`` runs ``call()`` on a
daemon worker thread and raises ``TimeoutError`` when it has not returned ``limit`` seconds
after it *started* (waiting for a free worker does not count against the script).

Python cannot kill a thread: a call that times out keeps its worker until it returns on its
own, and its result is discarded. The pool therefore writes such a worker off (it exits once
its call returns) and starts a replacement, so stragglers never starve later calls. Workers
are daemon threads, so a script that never returns cannot keep the process from exiting;
they are reused between calls because starting a thread per call costs more than most hook
calls themselves.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["MAX_WORKERS", "run_in_thread"]

T = TypeVar("T")

MAX_WORKERS = 8
"""Workers running calls at once, not counting those written off after a timeout. Few: the
calls are mostly Python code that holds the GIL, so more workers mostly take turns with each
other and with the event loop that feeds them; a few still let file I/O overlap."""


class _Job(Generic[T]):
    """One call, the context to run it in, and the future (of the caller's loop) that
    reports on it."""

    __slots__ = (
        "abandoned",
        "call",
        "context",
        "done",
        "finished",
        "loop",
        "running",
        "started_at",
        "timer",
        "written_off",
    )

    def __init__(
        self,
        call: Callable[[], T],
        context: contextvars.Context,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.call = call
        self.context = context
        self.loop = loop
        self.done: asyncio.Future[T] = loop.create_future()
        self.started_at: float | None = None  # time.monotonic() when a worker took it
        self.timer: asyncio.TimerHandle | None = None  # checks the limit (see _check)
        # Guarded by the pool's lock.
        self.running = False
        self.finished = False
        self.abandoned = False
        self.written_off = False


def _resolve(future: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if future.done():
        return  # the caller gave up (timeout or cancellation): discard
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)


def _report(
    job: _Job[Any], future: asyncio.Future[Any], value: Any, exc: BaseException | None
) -> None:
    try:
        job.loop.call_soon_threadsafe(_resolve, future, value, exc)
    except RuntimeError:  # pragma: no cover - the caller's loop has closed
        pass


class _Pool:
    def __init__(self, max_workers: int) -> None:
        self._jobs: queue.SimpleQueue[_Job[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._max = max_workers
        # Guarded by the lock: workers not written off, those waiting for a job, and jobs
        # not yet taken by a worker.
        self._live = 0
        self._idle = 0
        self._pending = 0

    def _need_worker(self) -> bool:
        """Called with the lock held: start a worker if queued jobs outnumber idle ones."""
        if self._pending > self._idle and self._live < self._max:
            self._live += 1
            return True
        return False

    def _spawn(self) -> None:
        threading.Thread(target=self._work, name="agentsim-script", daemon=True).start()

    def submit(self, job: _Job[Any]) -> None:
        with self._lock:
            self._pending += 1
            spawn = self._need_worker()
        self._jobs.put(job)
        if spawn:
            self._spawn()

    def abandon(self, job: _Job[Any]) -> None:
        """The caller stopped waiting: skip the job, or write its worker off and replace it."""
        with self._lock:
            if job.finished or job.abandoned:
                return
            job.abandoned = True
            spawn = False
            if job.running:
                job.written_off = True
                self._live -= 1
                spawn = self._need_worker()
        if spawn:
            self._spawn()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
                self._pending -= 1
                skip = job.abandoned
                job.running = not skip
            if skip:
                continue
            job.started_at = time.monotonic()
            value: Any = None
            err: BaseException | None = None
            try:
                value = job.context.run(job.call)
            except BaseException as exc:  # delivered to (and re-raised in) the caller
                err = exc
            _report(job, job.done, value, err)
            with self._lock:
                job.finished = True
                if job.written_off:
                    return  # a replacement has taken our place


_pool = _Pool(MAX_WORKERS)


async def run_in_thread(call: Callable[[], T], *, limit: float) -> T:
    """``call()`` on a worker thread, in a copy of the caller's context. Its exceptions are
    re-raised here; ``TimeoutError`` when it runs longer than ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    job: _Job[T] = _Job(call, contextvars.copy_context(), loop)
    _pool.submit(job)
    if not math.isinf(limit):
        job.timer = loop.call_later(limit, _check, job, limit)
    try:
        return await job.done
    except asyncio.CancelledError:  # our caller was cancelled, and so is the call
        _pool.abandon(job)
        raise
    finally:
        if job.timer is not None:
            job.timer.cancel()


def _check(job: _Job[Any], limit: float) -> None:
    """On the caller's loop, once the call could have run ``limit`` seconds: fail it if it
    has, else look again when it will have (time waiting for a worker is not the script's)."""
    if job.done.done():
        return
    started = job.started_at
    left = limit if started is None else started + limit - time.monotonic()
    if left > 0:
        job.timer = job.loop.call_later(left, _check, job, limit)
        return
    _pool.abandon(job)
    job.done.set_exception(TimeoutError())
