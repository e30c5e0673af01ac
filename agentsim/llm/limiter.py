"""Client-side limits for a model server: concurrency, requests/minute and tokens/minute.

One ``RateLimiter`` is shared by every agent of a process (and may be shared by several
model objects pointing at the same server). It holds no asyncio primitive tied to a loop:
its state is plain numbers behind a ``threading.Lock``, and each waiting ``Permit`` belongs
to *its own* running loop, which is told with ``call_soon_threadsafe`` when the releaser
runs in another loop. So it works under whichever loop is running, also several at once.

Two ways in. ``async with limiter.acquire(n) as permit:`` waits in the calling task. The
callback form, ``permit.start(on_ready)`` ... ``permit.release()``, is what the HTTP client
uses: when a request ends, the slot it frees goes straight to the next waiting permit, whose
``on_ready`` runs *inside* the release (same loop), so the next request is written to the
connection that just became idle without waking any task first. Under load this keeps the
requests leaving as fast as answers come back (docs/architecture.md, "Models").

Order: first a concurrency slot, then the rate buckets. A request thus leaves exactly when
the buckets allow it; taking the rate first and then queuing for a slot would let queued
requests leave in a burst when slots free up. Slots are handed out first come, first served.

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
from collections.abc import Callable
from types import TracebackType

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


# Permit states.
_NEW = 0  # not started
_QUEUED = 1  # waiting for a concurrency slot
_RATE = 2  # holds a slot, waiting for its turn in the rate buckets
_ACTIVE = 3  # admitted: the request may go
_DONE = 4  # released (or withdrawn before it was admitted)


class Permit:
    """One request's passage through a ``RateLimiter``; report the tokens really used
    through it.

    ``async with limiter.acquire(n) as permit:`` admits it (waiting as needed) and releases
    it on exit. Lower level, without a task waiting: ``permit.start(on_ready)`` asks for
    admission and calls ``on_ready()`` in the calling loop once admitted (at once when the
    limiter is free); ``permit.release()`` gives the slot back, or withdraws a permit that is
    still waiting. ``release`` is idempotent.
    """

    __slots__ = (
        "_done",
        "_limiter",
        "_loop",
        "_on_ready",
        "_state",
        "_timer",
        "_waiter",
        "estimated_tokens",
    )

    def __init__(self, limiter: RateLimiter, estimated_tokens: int) -> None:
        self._limiter = limiter
        self.estimated_tokens = estimated_tokens
        self._done = False
        self._state = _NEW
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_ready: Callable[[], object] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None

    @property
    def admitted(self) -> bool:
        return self._state == _ACTIVE

    def record_tokens(self, actual: int) -> None:
        """Correct the tokens/minute bucket by the difference to the estimate (once)."""
        if not self._done:
            self._done = True
            self._limiter.record_tokens(actual, estimated=self.estimated_tokens)

    # -- callback form ---------------------------------------------------------------------

    def start(self, on_ready: Callable[[], object]) -> None:
        """Ask for admission; ``on_ready()`` runs in this loop once admitted."""
        if self._state != _NEW:
            raise RuntimeError("Permit.start() called twice; take a new permit per request")
        self._on_ready = on_ready
        self._loop = asyncio.get_running_loop()
        limiter = self._limiter
        with limiter._lock:
            if limiter.max_concurrency is None or (
                limiter._in_flight < limiter.max_concurrency and not limiter._waiters
            ):
                limiter._in_flight = in_flight = limiter._in_flight + 1
                if in_flight > limiter.max_in_flight:
                    limiter.max_in_flight = in_flight
            else:
                self._state = _QUEUED
                limiter._waiters.append(self)
                return
        if limiter._requests is None and limiter._tokens is None:
            self._state = _ACTIVE  # the common case, without the detour through _slot_granted
            on_ready()
        else:
            self._slot_granted()

    def release(self) -> None:
        """Give the slot back, or withdraw the permit if it is still waiting (idempotent)."""
        state, self._state = self._state, _DONE
        limiter = self._limiter
        if state == _ACTIVE:
            limiter._leave()
        elif state == _QUEUED:
            with limiter._lock:
                if self in limiter._waiters:
                    limiter._waiters.remove(self)
                    return
            # Already handed a slot that is on its way from another thread:
            # _slot_granted will pass it on when it arrives.
        elif state == _RATE:
            assert self._timer is not None
            self._timer.cancel()
            self._timer = None
            limiter._give_back(self.estimated_tokens)
            limiter._leave()

    def _slot_granted(self) -> None:
        # Runs in the permit's own loop, holding a concurrency slot.
        if self._state == _DONE:
            self._limiter._leave()  # withdrawn while the slot was on its way: pass it on
            return
        limiter = self._limiter
        if limiter._requests is None and limiter._tokens is None:
            # _admit(), inlined: this is the path from a freed slot to the next request.
            self._state = _ACTIVE
            assert self._on_ready is not None
            self._on_ready()
            return
        wait = limiter._book(self.estimated_tokens)
        if wait <= 0:
            self._admit()
            return
        assert self._loop is not None
        self._state = _RATE
        self._timer = self._loop.call_later(wait, self._admit)

    def _admit(self) -> None:
        self._timer = None
        self._state = _ACTIVE
        assert self._on_ready is not None
        self._on_ready()

    # -- async context manager -------------------------------------------------------------

    async def __aenter__(self) -> Permit:
        self.start(self._wake)
        if self._state == _ACTIVE:
            return self
        assert self._loop is not None
        self._waiter = waiter = self._loop.create_future()
        try:
            await waiter
        except asyncio.CancelledError:
            self.release()  # whatever it held or waited for
            raise
        finally:
            self._waiter = None
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


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
        self._waiters: deque[Permit] = deque()
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

    def acquire(self, estimated_tokens: int = 0) -> Permit:
        """A new permit: ``async with limiter.acquire(n) as permit:`` around one request, or
        ``start`` / ``release`` it (see ``Permit``)."""
        return Permit(self, estimated_tokens)

    def record_tokens(self, actual: int, *, estimated: int) -> None:
        """The request booked ``estimated`` tokens but used ``actual``: settle the difference."""
        if self._tokens is None:
            return
        with self._lock:
            # Taking more than the estimate deepens the debt now; using less gives it back.
            self._tokens.level = min(self._tokens.capacity, self._tokens.level - actual + estimated)

    # -- concurrency ---------------------------------------------------------------------

    def _leave(self) -> None:
        """Free a slot: hand it to the first waiting permit (in_flight unchanged) or drop it."""
        while True:
            with self._lock:
                if not self._waiters:
                    self._in_flight -= 1
                    return
                permit = self._waiters.popleft()
            loop = permit._loop
            assert loop is not None
            try:
                current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                current = None
            if loop is current:
                permit._slot_granted()
                return
            try:
                loop.call_soon_threadsafe(permit._slot_granted)
                return
            except RuntimeError:
                continue  # that loop is closed: its permit is gone; try the next one

    # -- rates ---------------------------------------------------------------------------

    def _book(self, estimated_tokens: int) -> float:
        """Book one request and its tokens; how long to wait before they are available."""
        with self._lock:
            now = time.monotonic()
            wait = 0.0
            if self._requests is not None:
                wait = self._requests.book(1, now)
            if self._tokens is not None:
                wait = max(wait, self._tokens.book(estimated_tokens, now))
        return wait

    def _give_back(self, estimated_tokens: int) -> None:
        with self._lock:
            if self._requests is not None:
                self._requests.give_back(1)
            if self._tokens is not None:
                self._tokens.give_back(estimated_tokens)
