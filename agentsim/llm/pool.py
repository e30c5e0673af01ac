"""``ServerPool``: one model served by several servers (``base_urls``), of any backend.

Each request goes to the server with the fewest requests in flight (ties: the first listed).
A server whose attempt fails in a way worth another try (timeout, refused or dropped
connection, 429/5xx) is taken out for a back-off (``backoff_base * 2**(failures in a row -
1)``, at most ``backoff_max``) and the request goes to another one at once; when every server
is out, the request waits for the first to come back. Nothing is lost: a request fails only
after ``max_retries + len(servers)`` attempts, or at once on an error no server would answer
differently (400, 401: the request's or the key's fault). Every attempt is counted per server
(``ModelStats.servers``: calls, errors, latency); each move to another server is a retry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentsim.errors import ModelError
from agentsim.llm.base import ChatModel, Completion, Message, ToolSchema
from agentsim.llm.served import ServedModel
from agentsim.llm.stats import ModelStats, Prices

__all__ = ["ServerPool"]


@dataclass(slots=True)
class _Server:
    model: ServedModel
    in_flight: int = 0
    failures: int = 0  # in a row
    down_until: float = 0.0


class ServerPool(ChatModel):
    """A ``ChatModel`` over several ``ServedModel`` (one per server, each making one attempt
    per call: the pool retries, on another server). ``stats`` counts the model's calls as
    one model; each server's own attempts are in ``stats.servers[server]`` (for the OpenAI
    backend, the server is its ``base_url``)."""

    def __init__(
        self,
        servers: Sequence[ServedModel],
        *,
        stats: ModelStats | None = None,
        prices: Prices | None = None,
        max_retries: int = 5,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not servers:
            raise ValueError("a server pool needs at least one server")
        self.stats = stats if stats is not None else ModelStats()
        self.prices = prices
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._clock = clock
        self._servers = [_Server(model=m) for m in servers]
        for m in servers:
            self.stats.servers[m.server] = m.stats

    @property
    def base_urls(self) -> tuple[str, ...]:
        return tuple(s.model.server for s in self._servers)

    def __repr__(self) -> str:
        return f"ServerPool(base_urls={list(self.base_urls)!r})"

    def _pick(self) -> tuple[_Server | None, float]:
        """The server with the fewest requests in flight among those not taken out, or
        (None, seconds until the first comes back)."""
        now = self._clock()
        up = [s for s in self._servers if s.down_until <= now]
        if not up:
            return None, min(s.down_until for s in self._servers) - now
        return min(up, key=lambda s: s.in_flight), 0.0

    def _take_out(self, server: _Server) -> None:
        server.failures += 1
        delay = min(self.backoff_max, self.backoff_base * 2 ** (server.failures - 1))
        server.down_until = self._clock() + delay

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        started = time.perf_counter()
        attempts = self.max_retries + len(self._servers)
        for attempt in range(1, attempts + 1):
            server, wait = self._pick()
            while server is None:
                await asyncio.sleep(max(wait, 0.0))
                server, wait = self._pick()
            server.in_flight += 1
            try:
                completion = await server.model.complete(messages, tools, seed=seed)
            except ModelError as error:
                if not error.retryable or attempt == attempts:
                    self.stats.record_error()
                    error.attempts = attempt
                    raise
                self._take_out(server)
                self.stats.record_retry()
                continue
            finally:
                server.in_flight -= 1
            server.failures = 0
            cost = self.prices.cost(completion.usage) if self.prices is not None else 0.0
            self.stats.record_call(completion.usage, time.perf_counter() - started, cost=cost)
            return completion
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    async def preflight(self) -> None:
        """Check every server; the ``ModelError`` of the first that fails names it."""
        for i, server in enumerate(self._servers, start=1):
            try:
                await server.model.preflight()
            except ModelError as exc:
                raise type(exc)(
                    f"server {i} of {len(self._servers)} ({server.model.server}): {exc.message}"
                ) from None

    async def aclose(self) -> None:
        for server in self._servers:
            await server.model.aclose()
