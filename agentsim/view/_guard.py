"""What the viewer refuses before any page is built: the request checks.

Every request: its ``Host`` header must name the address the viewer listens on, or
``localhost``, with the port (``HostGuard``, an ASGI middleware): a web page on another
site that makes its own name resolve to 127.0.0.1 (DNS rebinding) reaches the viewer with
its own name as ``Host`` and is refused, so it can read nothing.

A request that writes or spends (``POST``: an interview is a real model call) must also
(``check_post``): come from the viewer's own page when it comes from a browser (``Origin``
the viewer's origin; ``Sec-Fetch-Site`` not ``cross-site``), carry the session's token
(``X-Agentsim-Token``: made when the viewer starts, given only to its own page, in the
HTML), say ``Content-Type: application/json``, and send a body of at most ``MAX_BODY``
bytes: a ``Content-Length`` over it is refused before anything is read, and a body without
one is read in chunks and refused as soon as it passes the cap.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "MAX_BODY",
    "MAX_QUESTION",
    "TOKEN_HEADER",
    "Allowed",
    "HostGuard",
    "Refused",
    "check_post",
    "new_token",
    "read_json_body",
]

MAX_BODY = 16_384
"""Bytes of a request body the viewer reads at most (an interview question is text)."""
MAX_QUESTION = 2_000
"""Characters of an interview question at most."""
TOKEN_HEADER = "X-Agentsim-Token"
_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
_WILDCARD = ("0.0.0.0", "::", "")


class Refused(Exception):
    """A request the viewer does not serve: ``status`` and a message saying why and what
    to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message}, status_code=self.status)


def _host_name(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass(frozen=True, slots=True)
class Allowed:
    """The ``Host`` values served: ``names`` with ``port`` (any port when None)."""

    names: frozenset[str]
    port: int | None = None
    shown: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def bound(cls, host: str, port: int, extra: Iterable[str] = ()) -> Allowed:
        """The address the viewer listens on and ``localhost``, at ``port``; a wildcard
        address (``0.0.0.0``, ``::``) adds the loopback addresses and ``extra`` names only
        (``--allow-host``): which name a remote browser uses is the user's to say."""
        names = {_host_name(host).lower(), "localhost"}
        if host in _WILDCARD:
            names = set(_LOOPBACK)
        names.update(_host_name(x).lower() for x in extra if x not in _WILDCARD)
        return cls(frozenset(names), port, tuple(sorted(names)))

    @classmethod
    def loopback(cls) -> Allowed:
        """The loopback names at any port (an app not started by ``agentsim view``)."""
        return cls(frozenset(_LOOPBACK), None, _LOOPBACK)

    def admits(self, header: str) -> bool:
        text = header.strip().lower()
        if text.startswith("["):  # an IPv6 address: [::1] or [::1]:port
            end = text.find("]")
            name, rest = text[: end + 1], text[end + 1 :]
            if end < 0 or (rest and not rest.startswith(":")):
                return False
            port = rest[1:]
        else:
            name, _, port = text.partition(":")
        if name not in self.names or (port and not port.isdigit()):
            return False
        if self.port is None:
            return True
        return port == str(self.port) or (not port and self.port == 80)

    def describe(self) -> str:
        where = ", ".join(self.shown)
        return where + (f" (port {self.port})" if self.port is not None else "")


class HostGuard:
    """ASGI middleware: refuses (400) every HTTP request whose ``Host`` is not allowed."""

    def __init__(self, app: ASGIApp, *, allowed: Allowed) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = ""
            for key, value in scope.get("headers", ()):
                if key == b"host":
                    host = value.decode("latin-1")
                    break
            if not self.allowed.admits(host):
                refused = Refused(
                    400,
                    f"Host {host!r} is not served; the viewer answers only to "
                    f"{self.allowed.describe()}: open it by that address "
                    "(agentsim view --allow-host NAME adds a name)",
                )
                await refused.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def new_token() -> str:
    """A new session token (256 random bits)."""
    return secrets.token_urlsafe(32)


def check_post(request: Request, token: str) -> None:
    """Raise ``Refused`` unless ``request`` comes from the viewer's own page (or a client
    that is no browser), with the session's token and a JSON body (see the module)."""
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if origin is not None and origin.lower() not in (f"http://{host}".lower(),):
        raise Refused(
            403,
            f"a request from {origin} is refused: only the viewer's own page "
            f"(http://{host}) may ask for interviews",
        )
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise Refused(403, "a cross-site request is refused: use the viewer's own page")
    given = request.headers.get(TOKEN_HEADER, "")
    if not secrets.compare_digest(given.encode(), token.encode()):
        raise Refused(
            403,
            f"the request has no valid {TOKEN_HEADER} header; the viewer's page sends it "
            "(reload the page after restarting the viewer)",
        )
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/json":
        raise Refused(
            415,
            f"Content-Type {kind or 'none'!r} is refused; send the body as application/json",
        )


async def read_json_body(request: Request, *, limit: int = MAX_BODY) -> Any:
    """The request's JSON body, read up to ``limit`` bytes (``Refused`` 413 past it, 400
    when it is not JSON). A ``Content-Length`` over the cap is refused before reading."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise Refused(400, f"Content-Length {declared!r} is not a byte count")
        if int(declared) > limit:
            raise Refused(
                413, f"the request body of {int(declared):,} bytes is over {limit:,} bytes"
            )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Refused(413, f"the request body is over {limit:,} bytes; send less")
    try:
        return json.loads(bytes(body))
    except ValueError:
        raise Refused(
            400, 'the request body is not JSON; send {"question": "..."} as JSON'
        ) from None
