"""Client-side limits for a model server: concurrency, requests/minute and tokens/minute.

One ``RateLimiter`` is shared by every agent of a process (and may be shared by several
model objects pointing at the same server). It holds no asyncio primitive tied to a loop:
its state is plain numbers behind a ``threading.Lock``, and a waiter parks on a future of
*its own* running loop, which is woken with ``call_soon_threadsafe`` when the waker runs in
another loop. So it works under whichever loop is running, also several at once.

Order inside ``acquire``: first a concurrency slot, then the rate buckets. A request thus
leaves exactly when the buckets allow it; taking the rate first and then queuing for a slot
would let queued requests leave in a burst when slots free up.

Rates are token buckets. Each bucket starts full and holds at most its *burst*:
``request_burst`` requests (default: one second's worth of ``rpm``, at least 1) and
``token_burst`` tokens (default: one second's worth of ``tpm``). Over any window of ``w``
seconds at most ``burst + rate * w`` requests (tokens) are admitted. Waiting is by
reservation: each request books its place in the bucket when it asks, so waiters sleep once
for exactly their turn instead of all waking to race for each refill. A request larger than
the token burst is admitted when the bucket is full and leaves it in debt, so that it can
never wait forever.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["Permit", "RateLimiter"]


class _Bucket:
    """A token bucket whose level may go negative (booked but not yet refilled)."""

    __slots__ = ("capacity", "level", "rate", "stamp")

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

    def give_back(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


class Permit:
    """Handed out by ``RateLimiter.acquire``; report the tokens really used through it."""

    __slots__ = ("_done", "_limiter", "estimated_tokens")

    def __init__(self, limiter: RateLimiter, estimated_tokens: int) -> None:
        self._limiter = limiter
        self.estimated_tokens = estimated_tokens
        self._done = False

    def record_tokens(self, actual: int) -> None:
        """Correct the tokens/minute bucket by the difference to the estimate (once)."""
        if not self._done:
            self._done = True
            self._limiter.record_tokens(actual, estimated=self.estimated_tokens)


class RateLimiter:
    """Bounds in-flight requests and smooths requests/minute and tokens/minute.

    ``None`` disables a limit. ``max_in_flight`` records the most requests ever inside
    ``acquire`` at once (tests and metrics read it).
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
        self._waiters: deque[asyncio.Future[None]] = deque()
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
    def request_burst(self) -> float | None:
        return self._requests.capacity if self._requests else None

    @property
    def token_burst(self) -> float | None:
        return self._tokens.capacity if self._tokens else None

    @asynccontextmanager
    async def acquire(self, estimated_tokens: int = 0) -> AsyncIterator[Permit]:
        """``async with limiter.acquire(n) as permit:`` around one request."""
        await self._enter()
        try:
            await self._wait_rate(estimated_tokens)
            yield Permit(self, estimated_tokens)
        finally:
            self._leave()

    def record_tokens(self, actual: int, *, estimated: int) -> None:
        """The request booked ``estimated`` tokens but used ``actual``: settle the difference."""
        if self._tokens is None:
            return
        with self._lock:
            # Taking more than the estimate deepens the debt now; using less gives it back.
            self._tokens.level = min(self._tokens.capacity, self._tokens.level - actual + estimated)

    # -- concurrency ---------------------------------------------------------------------

    async def _enter(self) -> None:
        with self._lock:
            if self.max_concurrency is None or (
                self._in_flight < self.max_concurrency and not self._waiters
            ):
                self._take_slot()
                return
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
        try:
            # The waker hands its slot over (in_flight unchanged) before resolving us.
            await fut
        except asyncio.CancelledError:
            with self._lock:
                if fut in self._waiters:
                    self._waiters.remove(fut)
                    raise
            if fut.done() and not fut.cancelled():
                self._leave()  # the slot reached us just before the cancellation
            # else: a wake-up is on its way to our loop and will pass the slot on.
            raise

    def _take_slot(self) -> None:
        self._in_flight += 1
        if self._in_flight > self.max_in_flight:
            self.max_in_flight = self._in_flight

    def _leave(self) -> None:
        with self._lock:
            while self._waiters:
                fut = self._waiters.popleft()
                if fut.done():
                    continue
                loop = fut.get_loop()
                # Always called from a coroutine or from _wake, so a loop is running.
                if loop is asyncio.get_running_loop():
                    fut.set_result(None)
                    return
                try:
                    loop.call_soon_threadsafe(self._wake, fut)
                    return
                except RuntimeError:
                    continue  # that loop is closed: its waiter is gone
            self._in_flight -= 1

    def _wake(self, fut: asyncio.Future[None]) -> None:
        if fut.done():
            self._leave()  # cancelled meanwhile: pass the slot to the next waiter
        else:
            fut.set_result(None)

    # -- rates ---------------------------------------------------------------------------

    async def _wait_rate(self, estimated_tokens: int) -> None:
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
            with self._lock:
                if self._requests is not None:
                    self._requests.give_back(1)
                if self._tokens is not None:
                    self._tokens.give_back(estimated_tokens)
            raise
