"""RateLimiter: concurrency bound, token buckets, cancellation, several event loops."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from agentsim.llm.limiter import RateLimiter


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"rpm": -1.0}, "rpm"),
        ({"tpm": 0}, "tpm"),
        ({"rpm": 60, "request_burst": 0}, "request_burst"),
        ({"tpm": 60, "token_burst": -5}, "token_burst"),
    ],
    ids=["concurrency", "rpm", "tpm", "request-burst", "token-burst"],
)
def test_limits_must_be_positive(kw: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=rf"RateLimiter {name} must be > 0 .*use None"):
        RateLimiter(**kw)  # type: ignore[arg-type]


def test_default_bursts_are_one_second_of_rate() -> None:
    lim = RateLimiter(rpm=600, tpm=120_000)
    assert lim.request_burst == 10 and lim.token_burst == 2000
    assert RateLimiter(rpm=6).request_burst == 1  # at least one request
    assert RateLimiter().request_burst is None and RateLimiter().token_burst is None
    assert "max_concurrency=None" in repr(RateLimiter())


async def test_concurrency_is_never_exceeded_and_waiters_go_in_order() -> None:
    lim = RateLimiter(max_concurrency=3)
    gate = asyncio.Event()
    entered: list[int] = []

    async def worker(i: int) -> None:
        async with lim.acquire():
            entered.append(i)
            assert lim.in_flight <= 3
            await gate.wait()

    async with asyncio.TaskGroup() as tg:
        for i in range(10):
            tg.create_task(worker(i))
        for _ in range(5):
            await asyncio.sleep(0)
        assert entered == [0, 1, 2] and lim.in_flight == 3
        gate.set()
    assert entered == list(range(10))
    assert lim.max_in_flight == 3 and lim.in_flight == 0


async def test_cancelled_waiter_does_not_leak_a_slot() -> None:
    lim = RateLimiter(max_concurrency=1)
    release = asyncio.Event()

    async def holder() -> None:
        async with lim.acquire():
            await release.wait()

    async def waiter() -> None:
        async with lim.acquire():
            pass

    hold = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await hold
    assert lim.in_flight == 0
    async with lim.acquire():  # the slot is free again
        assert lim.in_flight == 1


async def test_waiter_cancelled_after_being_handed_the_slot() -> None:
    lim = RateLimiter(max_concurrency=1)
    entered = asyncio.Event()

    async def waiter() -> None:
        async with lim.acquire():
            entered.set()

    async with lim.acquire():
        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
    # Leaving handed the slot to the waiter; cancel it before it could run.
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not entered.is_set() and lim.in_flight == 0


async def test_request_rate_stays_within_burst_plus_rate() -> None:
    # rpm = 1200 is 20 requests/s; burst 2: 12 requests need (12 - 2) / 20 = 0.5 s.
    lim = RateLimiter(rpm=1200, request_burst=2)
    times: list[float] = []

    async def one() -> None:
        async with lim.acquire():
            times.append(time.monotonic())

    start = time.monotonic()
    async with asyncio.TaskGroup() as tg:
        for _ in range(12):
            tg.create_task(one())
    times.sort()
    assert times[-1] - start >= 0.45
    for i, t0 in enumerate(times):
        for j in range(i, len(times)):
            window = times[j] - t0
            # j - i + 1 requests in `window` seconds: never above burst + rate * window.
            assert j - i + 1 <= 2 + 20 * window + 1e-6 + 20 * 0.01


async def test_token_rate_and_correction_by_actual_usage() -> None:
    # 600 tokens/min = 10 tokens/s with a burst of 100: a second 100-token request would
    # wait 10 s unless the first reports that it used nothing.
    lim = RateLimiter(tpm=600, token_burst=100)
    async with lim.acquire(100) as permit:
        permit.record_tokens(0)
        permit.record_tokens(500)  # only the first report counts
    async with asyncio.timeout(1.0), lim.acquire(100) as permit:
        permit.record_tokens(100)
    assert lim.token_burst == 100


async def test_request_larger_than_the_token_burst_is_admitted_when_full() -> None:
    lim = RateLimiter(tpm=60_000, token_burst=50)
    async with asyncio.timeout(1.0), lim.acquire(5_000):
        pass
    # It left the bucket in debt: the next request waits for the refill (5 s here).
    lim.record_tokens(0, estimated=5_000)
    async with asyncio.timeout(1.0), lim.acquire(10):
        pass


async def test_cancelled_rate_wait_gives_its_booking_back() -> None:
    # 10 requests/s and 100 tokens/s, bursts of 1 request and 10 tokens.
    lim = RateLimiter(rpm=600, request_burst=1, tpm=6000, token_burst=10)
    async with lim.acquire(10):
        pass
    task = asyncio.create_task(lim.acquire(10).__aenter__())
    await asyncio.sleep(0.01)  # it is now sleeping for its turn (about 0.1 s)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lim.in_flight == 0
    # The cancelled booking was returned: the next request waits ~0.09 s, not ~0.19 s.
    start = time.monotonic()
    async with lim.acquire(10):
        pass
    assert time.monotonic() - start < 0.15


def test_one_limiter_shared_by_loops_in_two_threads() -> None:
    lim = RateLimiter(max_concurrency=2)
    errors: list[BaseException] = []

    async def burst() -> None:
        async def one() -> None:
            async with lim.acquire():
                assert lim.in_flight <= 2
                await asyncio.sleep(0.001)

        async with asyncio.TaskGroup() as tg:
            for _ in range(40):
                tg.create_task(one())

    def run() -> None:
        try:
            asyncio.run(burst())
        except BaseException as exc:  # reported to the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    assert lim.max_in_flight == 2 and lim.in_flight == 0


async def test_record_tokens_without_a_token_limit_is_a_no_op() -> None:
    lim = RateLimiter(rpm=6000)
    async with lim.acquire(10) as permit:
        permit.record_tokens(10_000)
    assert lim.token_burst is None and lim.in_flight == 0


def test_limiter_outlives_its_first_loop() -> None:
    lim = RateLimiter(max_concurrency=1, rpm=6000)

    async def use() -> int:
        async with lim.acquire(1):
            return lim.in_flight

    assert asyncio.run(use()) == 1
    assert asyncio.run(use()) == 1
    assert lim.in_flight == 0


# -- the callback form: start / release ------------------------------------------------------


async def test_start_admits_at_once_and_release_is_idempotent() -> None:
    lim = RateLimiter(max_concurrency=2)
    calls: list[str] = []
    permit = lim.acquire(5)
    permit.start(lambda: calls.append("go"))
    assert calls == ["go"] and permit.admitted and lim.in_flight == 1
    permit.release()
    permit.release()
    assert lim.in_flight == 0 and not permit.admitted
    with pytest.raises(RuntimeError, match=r"Permit.start\(\) called twice; take a new permit"):
        permit.start(lambda: None)


async def test_release_hands_the_slot_over_inside_the_call() -> None:
    # The next permit's callback runs before release() returns: no task has to wake first.
    lim = RateLimiter(max_concurrency=1)
    order: list[str] = []
    first, second, third = lim.acquire(), lim.acquire(), lim.acquire()
    first.start(lambda: order.append("first"))
    second.start(lambda: order.append("second"))
    third.start(lambda: order.append("third"))
    assert order == ["first"] and lim.in_flight == 1
    third.release()  # withdrawn while waiting: never admitted
    first.release()
    assert order == ["first", "second"] and lim.in_flight == 1
    second.release()
    assert order == ["first", "second"] and lim.in_flight == 0


async def test_callback_waits_for_its_rate_turn_and_can_withdraw() -> None:
    # 10 requests/s, burst 1: the second permit is admitted ~0.1 s after the first.
    lim = RateLimiter(rpm=600, request_burst=1)
    admitted = asyncio.Event()
    lim.acquire().start(lambda: None)
    waiting = lim.acquire()
    waiting.start(admitted.set)
    assert not waiting.admitted and lim.in_flight == 2  # it holds its slot while it waits
    withdrawn = lim.acquire()
    withdrawn.start(lambda: pytest.fail("a withdrawn permit must not be admitted"))
    withdrawn.release()  # gives its booking back: it does not delay the others
    start = time.monotonic()
    await asyncio.wait_for(admitted.wait(), 1.0)
    assert 0.03 < time.monotonic() - start < 0.15 and waiting.admitted


def test_waiter_of_a_closed_loop_is_skipped() -> None:
    lim = RateLimiter(max_concurrency=1)
    holder, orphan = lim.acquire(), lim.acquire()

    async def start(permit: Any) -> None:
        permit.start(lambda: None)

    asyncio.run(start(holder))
    asyncio.run(start(orphan))  # queued; then its loop ends
    assert not orphan.admitted
    asyncio.run(asyncio.sleep(0))  # any other loop
    holder.release()  # the orphan's loop is closed: the slot is simply freed
    assert lim.in_flight == 0


def test_slot_on_its_way_to_a_withdrawn_permit_is_passed_on() -> None:
    lim = RateLimiter(max_concurrency=1)
    other_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=other_loop.run_forever, daemon=True)
    thread.start()
    admitted: list[str] = []

    async def start(permit: Any, name: str) -> None:
        permit.start(lambda: admitted.append(name))

    try:
        with asyncio.Runner() as runner:
            holder, remote, last = lim.acquire(), lim.acquire(), lim.acquire()
            runner.run(start(holder, "holder"))
            asyncio.run_coroutine_threadsafe(start(remote, "remote"), other_loop).result(5)
            runner.run(start(last, "last"))
            # Block the other loop, so that the slot handed to `remote` arrives there only
            # after `remote` has withdrawn.
            gate = threading.Event()
            other_loop.call_soon_threadsafe(gate.wait, 5)
            other_loop.call_soon_threadsafe(remote.release)
            holder.release()  # the slot is now on its way to `remote`
            gate.set()
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0.01), other_loop).result(5)
            runner.run(asyncio.sleep(0))  # `remote` passed the slot on to `last`, here
            assert admitted == ["holder", "last"] and lim.in_flight == 1
            last.release()
            assert lim.in_flight == 0
    finally:
        other_loop.call_soon_threadsafe(other_loop.stop)
        thread.join(5)
        other_loop.close()
