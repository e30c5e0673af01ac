"""The ``httpx.AsyncClient``s of one model: a set per event loop, requests spread over them.

A client's connections belong to the event loop that opened them, so each loop that calls
the model gets its own clients. And each loop gets several small clients rather than one:
the connection pool under an httpx client (httpcore 1.0) walks all its connections several
times per request, probing each idle one with ``poll()``, with a step that is quadratic in
the idle ones. With many connections in one pool that bookkeeping costs more CPU than the
requests. Measured with bench/llm.py's load (256 requests in flight, 50 ms server): one
client per 16 connections spent 1.5 ms of CPU per call, one per 4 connections 0.73 ms;
one client for all 64 requests in flight at 0.25 s latency reached 46 calls/s of an ideal
256. So requests go to the least busy of ``ceil(concurrency / 4)`` clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import ssl
import threading
from collections.abc import Iterator, Mapping

import httpx

__all__ = ["HTTPClients"]

CONNECTIONS_PER_CLIENT = 4


class _LoopClients:
    """The clients of one event loop, with the requests in flight on each."""

    def __init__(self, clients: list[httpx.AsyncClient]) -> None:
        self.clients = clients
        self.busy = [0] * len(clients)

    @contextlib.contextmanager
    def pick(self) -> Iterator[httpx.AsyncClient]:
        i = min(range(len(self.busy)), key=self.busy.__getitem__)
        self.busy[i] += 1
        try:
            yield self.clients[i]
        finally:
            self.busy[i] -= 1

    @property
    def closed(self) -> bool:
        return any(c.is_closed for c in self.clients)

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


class HTTPClients:
    """Opens clients lazily in the running loop; ``aclose()`` closes those of every loop.

    Proxies come from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``,
    ``NO_PROXY``) and TLS is verified against certifi's bundle or ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR``, as httpx does it; the TLS context is built once and shared.
    """

    def __init__(
        self, *, headers: Mapping[str, str], timeout: float, concurrency: int | None
    ) -> None:
        self._headers = dict(headers)
        self._timeout = timeout
        # Without a limiter the concurrency is unknown: assume a moderate 64.
        self.count = max(1, math.ceil((concurrency or 64) / CONNECTIONS_PER_CLIENT))
        self._by_loop: dict[asyncio.AbstractEventLoop, _LoopClients] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None

    def _open(self) -> _LoopClients:
        if self._tls is None:
            self._tls = httpx.create_ssl_context(trust_env=True)
        clients = [
            httpx.AsyncClient(
                headers=self._headers,
                timeout=httpx.Timeout(self._timeout),
                verify=self._tls,
                # The model's limiter bounds concurrency: no second queue in the pool.
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
                trust_env=True,
            )
            for _ in range(self.count)
        ]
        return _LoopClients(clients)

    def for_running_loop(self) -> _LoopClients:
        loop = asyncio.get_running_loop()
        with self._lock:
            found = self._by_loop.get(loop)
            if found is None or found.closed:
                # Forget the clients of loops that have ended: nothing can use them again.
                for ended in [other for other in self._by_loop if other.is_closed()]:
                    del self._by_loop[ended]
                found = self._by_loop[loop] = self._open()
        return found

    @contextlib.contextmanager
    def pick(self) -> Iterator[httpx.AsyncClient]:
        """The least busy client of the running loop, for one request."""
        with self.for_running_loop().pick() as client:
            yield client

    async def aclose(self) -> None:
        """Close the clients of every loop (idempotent). Those of a loop still running in
        another thread are closed there."""
        with self._lock:
            by_loop, self._by_loop = self._by_loop, {}
        current = asyncio.get_running_loop()
        for loop, clients in by_loop.items():
            if loop is current:
                await clients.aclose()
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(clients.aclose(), loop)
