"""``gather_eager``: in-order results, tasks only for coroutines that suspend, errors and
timeouts turned into values, cancellation passed through."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

import pytest

from agentsim._aio import gather_eager


def _error(i: int, exc: Exception) -> str:
    return f"{i}: {type(exc).__name__}: {exc}"


async def test_results_keep_input_order_whatever_suspends() -> None:
    started: list[int] = []

    async def job(i: int) -> str:
        started.append(i)
        if i % 2:
            await asyncio.sleep(0.01 * (5 - i))  # later odd jobs finish first
        return f"job {i}"

    out = await gather_eager((job(i) for i in range(5)), on_error=_error)
    assert out == [f"job {i}" for i in range(5)]
    assert started == [0, 1, 2, 3, 4]  # started in order, each in place


async def test_only_suspending_coroutines_become_tasks() -> None:
    async def sync_job() -> int:
        return len(asyncio.all_tasks())

    # Nothing suspends: every job runs inside the caller's task, none is created.
    assert await gather_eager((sync_job() for _ in range(3)), on_error=_error) == [1, 1, 1]


async def test_errors_and_timeouts_become_values() -> None:
    async def fails_at_once() -> str:
        raise ValueError("bad input")

    async def fails_later() -> str:
        await asyncio.sleep(0)
        raise RuntimeError("broke after suspending")

    async def hangs() -> str:
        await asyncio.Event().wait()
        return "never"

    async def fine() -> str:
        await asyncio.sleep(0)
        return "fine"

    out = await gather_eager(
        [fails_at_once(), fails_later(), hangs(), fine()],
        on_error=_error,
        suspended_timeout=0.05,
    )
    assert out == [
        "0: ValueError: bad input",
        "1: RuntimeError: broke after suspending",
        "2: TimeoutError: ",
        "fine",
    ]


async def test_a_suspended_coroutine_sees_values_and_exceptions_sent_to_it() -> None:
    got: list[object] = []

    async def waits() -> str:
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_result, "value")
        got.append(await fut)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            got.append("cancelled")
            raise
        return "never"

    task = asyncio.create_task(gather_eager([waits()], on_error=_error))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert got == ["value", "cancelled"]


async def test_a_coroutine_that_absorbs_its_timeout_returns_its_value() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "gave up waiting"
        return "never"

    out = await gather_eager([stubborn()], on_error=_error, suspended_timeout=0.01)
    assert out == ["gave up waiting"]


class _Pause:
    """An awaitable that suspends once, with no event loop involved."""

    def __await__(self) -> Generator[str, None, None]:
        yield "paused"


def test_closing_the_driver_closes_the_coroutine() -> None:
    from agentsim._aio import _Resume

    async def waits() -> None:
        await _Pause()

    coro = waits()
    first = coro.send(None)
    driver = _Resume(coro, first).__await__()
    assert next(driver) == "paused"
    driver.close()
    assert coro.cr_frame is None  # closed, not left suspended
