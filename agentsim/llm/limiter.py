"""Client-side limits for a model server: concurrency, requests/minute and tokens/minute.

Use it around one model request::

    async with limiter.acquire(estimated_tokens) as permit:
        answer = await send(request)
        permit.record_tokens(answer.usage.total_tokens)

One ``RateLimiter`` is shared by every agent of a process and may be used from several
event loops (one per thread): its state is plain numbers behind a ``threading.Lock``, and a
task waiting for a slot waits on a future of its own loop, which the releaser resolves with
``call_soon_threadsafe``.

Order: first a concurrency slot, then the rate buckets. A request thus leaves exactly when
the buckets allow it; taking the rate first and then queuing for a slot would let queued
requests leave in a burst when slots free up.

Who gets a freed slot: the waiting request whose task has asked this limiter the fewest
times, and among equals the one that asked first. A simulation steps each agent in a task
of its own, so an agent's first call of a step goes before another agent's third: every
step of a tick moves forward together, and the tick does not end with a few long steps
making their last calls one after the other while most slots sit idle. Tasks that make one
request each are served first come, first served.

Rates are token buckets. Each bucket starts full and holds at most its *burst*:
``request_burst`` requests (default: one second's worth of ``rpm``, at least 1) and
``token_burst`` tokens (default: one second's worth of ``tpm``). Each request books its
place when it asks (the level may go below zero) and sleeps once for its turn. A request
larger than the token burst is admitted when the bucket is full and leaves it in debt, so
that it never waits forever. Tokens are booked by estimate and settled by what the server
reports: a request that used more than estimated deepens the debt, and the next requests
wait for it to be repaid (a settlement never leaves more than a minute's worth of debt, and
a negative count keeps the estimate booked).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar

__all__ = ["Permit", "RateLimiter"]

# How many requests the running task has asked for, per limiter. A task runs in a copy of
# the context it was created in, so each task (each agent step) starts from its creator's
# counts and its own requests never change another task's.
_ASKED: ContextVar[dict[int, int]] = ContextVar("agentsim_limiter_asked")


class _Bucket:
    """A token bucket whose level may go negative (booked but not yet refilled)."""

    def __init__(self, *, rate_per_s: float, capacity: float) -> None:
        self.rate = rate_per_s
        self.capacity = capacity
        self.level = capacity
        self.stamp = time.monotonic()

    def book(self, amount: float, now: float) -> float:
        """Take ``amount`` and return how long to wait before it is really available."""
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        need = min(amount, self.capacity)
        wait = max(0.0, (need - self.level) / self.rate)
        self.level -= amount
        return wait

    def settle(self, amount: float, now: float) -> None:
        """Give ``amount`` back (negative: take more), never above the capacity.

        The refill up to ``now`` is counted first, capped: a bucket that was full while a
        request was in flight must not credit that time against the request's debt."""
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        # One request's settlement never puts the bucket more than a minute of its rate in
        # debt: a count no server could mean (10**12 tokens) must not stop the run for good.
        self.level = max(-60.0 * self.rate, min(self.capacity, self.level + amount))


class Permit:
    """One admitted request; tell it the tokens the request really used."""

    def __init__(self, limiter: RateLimiter, estimated_tokens: int) -> None:
        self._limiter = limiter
        self.estimated_tokens = estimated_tokens
        self._settled = False

    def record_tokens(self, actual: int) -> None:
        """Correct the tokens/minute bucket by the difference to the estimate (once)."""
        if not self._settled:
            self._settled = True
            self._limiter.record_tokens(actual, estimated=self.estimated_tokens)


class RateLimiter:
    """Bounds in-flight requests and smooths requests/minute and tokens/minute.

    ``None`` disables a limit. ``max_in_flight`` records the most requests ever admitted
    at once (tests and metrics read it).
    """

    def __init__(
        self,
        *,
        max_concurrency: int | None = None,
        rpm: float | None = None,
        tpm: float | None = None,
        request_burst: float | None = None,
        token_burst: float | None = None,
    ) -> None:
        for name, value in (
            ("max_concurrency", max_concurrency),
            ("rpm", rpm),
            ("tpm", tpm),
            ("request_burst", request_burst),
            ("token_burst", token_burst),
        ):
            if value is not None and not value > 0:
                raise ValueError(
                    f"RateLimiter {name} must be > 0 (got {value!r}); use None for no limit"
                )
        self.max_concurrency = max_concurrency
        self.rpm = rpm
        self.tpm = tpm
        self._lock = threading.Lock()
        self._in_flight = 0
        self.max_in_flight = 0
        # (requests the task asked before, arrival number, future): a heap, fewest first.
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()
        self._requests: _Bucket | None = None
        self._tokens: _Bucket | None = None
        if rpm is not None:
            burst = request_burst if request_burst is not None else max(1.0, rpm / 60.0)
            self._requests = _Bucket(rate_per_s=rpm / 60.0, capacity=burst)
        if tpm is not None:
            burst = token_burst if token_burst is not None else max(1.0, tpm / 60.0)
            self._tokens = _Bucket(rate_per_s=tpm / 60.0, capacity=burst)

    def __repr__(self) -> str:
        return (
            f"RateLimiter(max_concurrency={self.max_concurrency}, rpm={self.rpm}, "
            f"tpm={self.tpm}, in_flight={self._in_flight})"
        )

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Requests waiting for a concurrency slot."""
        return len(self._waiters)

    @property
    def request_burst(self) -> float | None:
        return self._requests.capacity if self._requests else None

    @property
    def token_burst(self) -> float | None:
        return self._tokens.capacity if self._tokens else None

    @contextlib.asynccontextmanager
    async def acquire(self, estimated_tokens: int = 0) -> AsyncIterator[Permit]:
        """Wait for a slot and the request's turn in the rate buckets; free the slot on
        exit. ``estimated_tokens`` is booked in the tokens/minute bucket."""
        await self._take_slot()
        try:
            await self._wait_for_rate(estimated_tokens)
            yield Permit(self, estimated_tokens)
        finally:
            self._free_slot()

    def record_tokens(self, actual: int, *, estimated: int) -> None:
        """A request booked ``estimated`` tokens but used ``actual``: settle the difference."""
        if self._tokens is None:
            return
        with self._lock:
            # A negative count means nothing: the estimate stays booked.
            used = actual if actual >= 0 else estimated
            self._tokens.settle(estimated - used, time.monotonic())

    # -- concurrency ---------------------------------------------------------------------

    def _count_request(self) -> int:
        """Requests the running task asked this limiter for before this one."""
        asked = _ASKED.get(None)
        before = asked.get(id(self), 0) if asked is not None else 0
        # A new dict, not an update: the dict may be shared with the task's creator.
        _ASKED.set({**(asked or {}), id(self): before + 1})
        return before

    async def _take_slot(self) -> None:
        rank = self._count_request()
        with self._lock:
            if self.max_concurrency is None or (
                self._in_flight < self.max_concurrency and not self._waiters
            ):
                self._in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self._in_flight)
                return
            waiter = asyncio.get_running_loop().create_future()
            entry = (rank, next(self._arrivals), waiter)
            heapq.heappush(self._waiters, entry)
        try:
            await waiter  # resolved by _hand_over: the slot is ours
        except asyncio.CancelledError:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)
                    heapq.heapify(self._waiters)
                    raise
            if not waiter.cancelled():
                self._free_slot()  # handed over, then cancelled before it woke up
            # Otherwise the hand-over is on its way and passes the slot on (_hand_over).
            raise

    def _free_slot(self) -> None:
        """Hand the slot to the next waiter, in its own loop, or give it back."""
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        while True:
            with self._lock:
                if not self._waiters:
                    self._in_flight -= 1
                    return
                _, _, waiter = heapq.heappop(self._waiters)
            loop = waiter.get_loop()
            if loop is current:
                # The waiter's loop is this thread's: no need to wake it through its
                # self-pipe (a system call per hand-over, most of the limiter's CPU).
                loop.call_soon(self._hand_over, waiter)
                return
            try:
                loop.call_soon_threadsafe(self._hand_over, waiter)
                return
            except RuntimeError:
                continue  # that loop is closed, and its waiter with it: try the next one

    def _hand_over(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # cancelled while the slot was on its way
            self._free_slot()
        else:
            waiter.set_result(None)

    # -- rates ---------------------------------------------------------------------------

    async def _wait_for_rate(self, estimated_tokens: int) -> None:
        if self._requests is None and self._tokens is None:
            return
        with self._lock:
            now = time.monotonic()
            wait = 0.0
            if self._requests is not None:
                wait = self._requests.book(1, now)
            if self._tokens is not None:
                wait = max(wait, self._tokens.book(estimated_tokens, now))
        if wait <= 0:
            return
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            with self._lock:  # the booking was never used: give it back
                now = time.monotonic()
                if self._requests is not None:
                    self._requests.settle(1, now)
                if self._tokens is not None:
                    self._tokens.settle(estimated_tokens, now)
            raise
