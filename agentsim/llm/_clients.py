"""The ``aiohttp.ClientSession`` of one model in each event loop that calls it.

A session's connections belong to the event loop that opened them, so each loop that calls
the model gets its own session, opened lazily. Why aiohttp and not httpx: the client's CPU
per call decides how many calls one core can drive, and bench/cpu_per_call.py measures,
side by side against the same server (64 requests in flight, ~2,000-token prompts), about
0.7 ms per call through one aiohttp session against 1.4 ms through httpx (its connection
pool probes every idle connection on each request, through several layers). See
docs/performance.md for the figures.

What users expect of an HTTP client is kept: proxies from the environment (``HTTP_PROXY``,
``HTTPS_PROXY``, ``NO_PROXY``, and ``~/.netrc`` proxy credentials), TLS verified against
certifi's bundle or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, keep-alive connections, and one
deadline per request.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import threading
from collections.abc import Mapping

import aiohttp
import certifi

__all__ = ["HTTPClients", "tls_context"]


def tls_context() -> ssl.SSLContext:
    """Verify servers against ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set, else certifi's
    bundle (what pip, requests and httpx do)."""
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if cafile is None and capath is None:
        cafile = certifi.where()
    return ssl.create_default_context(cafile=cafile, capath=capath)


class HTTPClients:
    """Opens a session lazily in the running loop; ``aclose()`` closes those of every loop.

    The model's limiter bounds the requests in flight, so the connection pool has no limit
    of its own (no second queue)."""

    def __init__(self, *, headers: Mapping[str, str], timeout: float) -> None:
        self._headers = dict(headers)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._by_loop: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._tls is None:
            self._tls = tls_context()  # read when the first connection opens, then shared
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=self._tls),
            headers=self._headers,
            timeout=self._timeout,
            trust_env=True,
            # The body goes out as prepared; answers are read whole and parsed by us.
            auto_decompress=True,
            raise_for_status=False,
        )

    def session(self) -> aiohttp.ClientSession:
        """The running loop's session."""
        loop = asyncio.get_running_loop()
        found = self._by_loop.get(loop)
        if found is not None and not found.closed:
            return found
        with self._lock:
            found = self._by_loop.get(loop)
            if found is None or found.closed:
                # Forget the sessions of loops that have ended: nothing can use them again,
                # and a closed loop cannot close their sockets (detached, the session itself
                # does not complain; the sockets close when collected).
                for ended in [other for other in self._by_loop if other.is_closed()]:
                    self._by_loop.pop(ended).detach()
                found = self._by_loop[loop] = self._open()
        return found

    async def aclose(self) -> None:
        """Close the sessions of every loop (idempotent). Those of a loop still running in
        another thread are closed there."""
        with self._lock:
            by_loop, self._by_loop = self._by_loop, {}
        current = asyncio.get_running_loop()
        for loop, session in by_loop.items():
            if loop is current:
                await session.close()
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(session.close(), loop)
            else:
                session.detach()
