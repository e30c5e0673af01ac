"""``gather_eager``: run many coroutines concurrently, starting each one in place.

A host steps thousands of agents per tick. Most steps (scripted model, replayed cache,
in-process scripts) never suspend, and wrapping each in an asyncio Task would cost more
than the step's own bookkeeping: a Task, a loop round trip and, with a timeout, a timer
each. Here every coroutine first runs in place until it completes or first suspends; only
the ones that suspend become tasks (under the timeout, if one is given). Coroutines start in
input order, as tasks created in a loop would, and results come back in input order.

A coroutine that never suspends cannot be interrupted by a timeout in any case: asyncio
timeouts act only at an ``await``. So the timeout counts from the first suspension.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator, Iterable
from typing import Any, TypeVar

__all__ = ["gather_eager"]

T = TypeVar("T")


async def gather_eager(
    coros: Iterable[Coroutine[Any, Any, T]],
    *,
    on_error: Callable[[int, Exception], T],
    suspended_timeout: float | None = None,
) -> list[T]:
    """Results of ``coros`` in order; an ``Exception`` raised by the i-th coroutine (or a
    ``TimeoutError`` when it runs on for ``suspended_timeout`` seconds after its first
    suspension) becomes
    ``on_error(i, exc)``. ``BaseException``s that are not ``Exception``s (cancellation,
    KeyboardInterrupt) propagate."""
    results: list[Any] = []
    suspended: list[tuple[int, Coroutine[Any, Any, T], Any]] = []
    for i, coro in enumerate(coros):
        try:
            first = coro.send(None)
        except StopIteration as done:
            results.append(done.value)
            continue
        except Exception as exc:
            results.append(on_error(i, exc))
            continue
        suspended.append((i, coro, first))
        results.append(None)
    if suspended:
        async with asyncio.TaskGroup() as tg:
            tasks = [
                (i, tg.create_task(_finish(i, coro, first, on_error, suspended_timeout)))
                for i, coro, first in suspended
            ]
        for i, task in tasks:
            results[i] = task.result()
    return results


async def _finish(
    index: int,
    coro: Coroutine[Any, Any, T],
    first: Any,
    on_error: Callable[[int, Exception], T],
    limit: float | None,
) -> T:
    try:
        async with asyncio.timeout(limit):
            result: T = await _Resume(coro, first)
        return result
    except Exception as exc:
        return on_error(index, exc)


class _Resume:
    """Awaitable that drives a coroutine which already ran up to its first suspension.

    ``first`` is what the coroutine yielded then (the future it waits for); from here on
    this object passes values and exceptions (a cancellation, say) between the task and the
    coroutine exactly as ``await`` would have."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self._coro, self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    value = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as done:
                    return done.value
