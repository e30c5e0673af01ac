"""RateLimiter: concurrency bound, token buckets, cancellation, several event loops."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentsim.llm.base import Completion, Usage
from agentsim.llm.limiter import RateLimiter
from agentsim.llm.openai import OpenAIChatModel
from agentsim.testing import ChatRequest
from agentsim.testing.openai_server import OpenAITestServer
from tests.unit import helpers


@pytest.fixture
def turns(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the limiter asks for (``asyncio.sleep`` called from limiter.py), in order.
    They still happen: only recorded, so that a test can tell how long a request was made
    to wait apart from how slowly a loaded machine ran it."""
    return helpers.record_sleeps(monkeypatch, file="llm/limiter.py")


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


async def test_task_with_fewer_requests_gets_the_next_slot() -> None:
    # An agent on its second call of a step waits behind agents still on their first.
    lim = RateLimiter(max_concurrency=1)
    gate = asyncio.Event()
    second_call = asyncio.Event()
    entered: list[str] = []

    async def holder() -> None:
        async with lim.acquire():
            entered.append("holder")
            await gate.wait()

    async def veteran() -> None:
        async with lim.acquire():
            entered.append("veteran-1")
        await second_call.wait()
        async with lim.acquire():
            entered.append("veteran-2")

    async def newcomer(name: str) -> None:
        async with lim.acquire():
            entered.append(name)

    async with asyncio.TaskGroup() as tg:
        tg.create_task(veteran())
        await asyncio.sleep(0)
        tg.create_task(holder())
        await asyncio.sleep(0)
        second_call.set()
        for _ in range(3):
            await asyncio.sleep(0)
        assert lim.waiting == 1  # the veteran's second request, first in the queue
        tg.create_task(newcomer("new-1"))
        tg.create_task(newcomer("new-2"))
        for _ in range(3):
            await asyncio.sleep(0)
        assert lim.waiting == 3
        gate.set()
    assert entered == ["veteran-1", "holder", "new-1", "new-2", "veteran-2"]


async def test_a_cancelled_waiter_leaves_the_order_of_the_others() -> None:
    lim = RateLimiter(max_concurrency=1)
    gate = asyncio.Event()
    entered: list[int] = []

    async def worker(i: int) -> None:
        async with lim.acquire():
            entered.append(i)
            await gate.wait()

    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(worker(i)) for i in range(5)]
        for _ in range(3):
            await asyncio.sleep(0)
        tasks[2].cancel()
        await asyncio.sleep(0)
        assert lim.waiting == 3
        gate.set()
    assert entered == [0, 1, 3, 4] and lim.in_flight == 0


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


@pytest.mark.slow
async def test_request_rate_stays_within_burst_plus_rate(turns: list[float]) -> None:
    # rpm = 1200 is 20 requests/s; burst 2: 12 requests need (12 - 2) / 20 = 0.5 s.
    start = time.monotonic()  # before the bucket exists, so before its first refill
    lim = RateLimiter(rpm=1200, request_burst=2)
    times: list[float] = []

    async def one() -> None:
        async with lim.acquire():
            times.append(time.monotonic())

    async with asyncio.TaskGroup() as tg:
        for _ in range(12):
            tg.create_task(one())
    times.sort()
    # The n-th request (n = 1..12) leaves no earlier than its turn, (n - burst) / rate after
    # the bucket was made: never more than burst + rate * t requests by time t. A loaded
    # machine may let a request leave later than its turn, never earlier.
    for n, left in enumerate(times, start=1):
        assert left - start >= (n - 2) / 20 - 1e-3, (n, left - start)
    # Requests past the burst were asked to wait for their turns, none more than 10 / 20 s.
    assert all(0 < wait <= 10 / 20 + 1e-6 for wait in turns)


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


@pytest.mark.slow
async def test_request_larger_than_the_token_burst_is_admitted_and_leaves_debt(
    turns: list[float],
) -> None:
    # 2,000 tokens/s, burst 100: a 1,000-token request goes at once, leaving 900 of debt,
    # which the next request must wait for: (900 + 10) / 2,000 = 0.455 s after the first.
    lim = RateLimiter(tpm=120_000, token_burst=100)
    start = time.monotonic()
    async with lim.acquire(1_000):
        pass
    assert turns == []  # admitted at once
    async with lim.acquire(10):
        left = time.monotonic()
    assert left - start >= 0.455 - 1e-3
    # Asked to wait for the debt alone (less what refilled meanwhile), never more.
    assert len(turns) <= 1 and all(0 < wait <= 0.455 + 1e-6 for wait in turns)


@pytest.mark.parametrize(("used", "slow"), [(510, True), (10, False)], ids=["debt", "as-booked"])
async def test_tokens_used_beyond_the_estimate_delay_the_next_request(
    used: int, slow: bool, turns: list[float]
) -> None:
    # 1,000 tokens/s, burst 100. Booked 10, used 510: the bucket holds at most 100 - 500
    # = -400 tokens and the next request leaves (10 + 400) / 1,000 s after the settlement at
    # the earliest; used as booked, it goes at once.
    lim = RateLimiter(tpm=60_000, token_burst=100)
    async with lim.acquire(10) as permit:
        settled = time.monotonic()  # just before the settlement
        permit.record_tokens(used)
    async with lim.acquire(10):
        left = time.monotonic()
    if slow:
        assert left - settled >= 0.41 - 1e-3
        assert len(turns) <= 1 and all(0 < wait <= 0.42 + 1e-6 for wait in turns)
    else:
        assert turns == []  # never asked to wait


@pytest.mark.slow
async def test_token_debt_reported_by_the_server_slows_the_model() -> None:
    # The server reports 3,000 tokens for a request estimated at ~30: the model settles the
    # difference, and its next call waits for the debt (4,000 tokens/s: ~0.5 s).
    def heavy(request: ChatRequest) -> Completion:
        return Completion(content="ok", usage=Usage(prompt_tokens=2_990, completion_tokens=10))

    async with OpenAITestServer(answer=heavy, timeline=True) as srv:
        limiter = RateLimiter(tpm=240_000, token_burst=1_000)
        model = OpenAIChatModel(model="m", base_url=srv.base_url, limiter=limiter)
        await model.complete([{"role": "user", "content": "hi"}])
        await model.complete([{"role": "user", "content": "hi"}])
        await model.aclose()
        (_, first_answered), (second_arrived, _) = srv.timeline
    # The debt is settled once the first answer is read, after the server sent it; it leaves
    # the bucket at most 1,000 + 30 - 3,000 tokens: the second call leaves 2,000 / 4,000 s
    # later at the earliest, and arrives later still.
    assert second_arrived - first_answered >= 0.45


@pytest.mark.slow
async def test_request_rate_holds_at_the_server() -> None:
    # 20 requests/s with a burst of 2: 8 calls take at least (8 - 2) / 20 = 0.3 s.
    async with OpenAITestServer() as srv:
        started = time.monotonic()  # before the bucket exists, so before its first refill
        limiter = RateLimiter(rpm=1200, request_burst=2, max_concurrency=8)
        model = OpenAIChatModel(model="m", base_url=srv.base_url, limiter=limiter)
        await asyncio.gather(
            *(model.complete([{"role": "user", "content": "x"}]) for _ in range(8))
        )
        elapsed = time.monotonic() - started
        await model.aclose()
    assert elapsed >= 0.28 and srv.served == 8


async def test_cancelled_rate_wait_gives_its_booking_back(turns: list[float]) -> None:
    # 1 request per 10 s and 1 token/s, bursts of 1 request and 10 tokens: after the first,
    # a request waits 10 s for its turn (no stall of a loaded machine comes near that).
    lim = RateLimiter(rpm=6, request_burst=1, tpm=60, token_burst=10)
    async with lim.acquire(10):
        pass

    async def cancelled_in_its_wait() -> None:
        task = asyncio.create_task(lim.acquire(10).__aenter__())
        asked = len(turns)
        while len(turns) == asked:  # until it sleeps for its turn
            assert not task.done()
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lim.in_flight == 0

    await cancelled_in_its_wait()
    # The cancelled booking was returned: the next request waits one turn, not two (20 s).
    await cancelled_in_its_wait()
    assert len(turns) == 2 and all(0 < wait <= 10 + 1e-6 for wait in turns)


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
        t.join(120)  # generous: a loaded machine may run these threads slowly
    assert not any(t.is_alive() for t in threads) and not errors
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


@pytest.mark.slow
async def test_a_slow_request_still_owes_what_it_used_beyond_the_burst() -> None:
    """The bucket was full while the request was in flight: that time refills nothing, so
    the tokens it used beyond its estimate are owed in full when it ends."""
    lim = RateLimiter(tpm=240_000, token_burst=1_000)  # 4,000 tokens/s
    async with lim.acquire(10) as permit:
        await asyncio.sleep(0.6)  # longer than the debt below takes to repay
        start = time.monotonic()  # just before the settlement
        permit.record_tokens(3_010)
    async with lim.acquire(10):
        pass
    assert time.monotonic() - start >= 0.45  # (3,000 - 1,000 + 10) / 4,000 s, less slack
