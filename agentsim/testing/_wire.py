"""The wire side of the test server (``openai_server``): HTTP/1.1 request heads, error
answers, and the plain-socket transport that reads the kernel's receive time of each request.

Kept apart from the server's logic (faults, latency, usage) so that each stays readable.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agentsim.testing.openai_server import OpenAITestServer, _Connection

# Linux's SO_TIMESTAMPNS (also its SCM_ type), which Python's socket module does not name:
# the value of the generic ABI that these machines use (alpha, parisc and sparc differ).
_SO_TIMESTAMPNS = 35
_ABI = frozenset(
    {"x86_64", "aarch64", "arm64", "i386", "i686", "armv7l", "riscv64", "s390x", "ppc64le"}
)
_TIMESPEC = struct.Struct("@ll")


@dataclass(slots=True, kw_only=True)
class _Response:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False
    # True when ``delay`` is exactly the server's latency: such answers fall due in arrival
    # order, so one queue and one timer serve them all (no heap push per request).
    in_order: bool = False
    usage: tuple[int, int] | None = None  # (prompt, completion) of a default answer
    # The whole answer, made in advance, for a connection that stays open (default answers).
    wire: bytes = b""


# What a request head says: (body length, method, path without query, close the connection
# after answering, headers with lower-case names).
_Head = tuple[int, str, str, bool, Mapping[str, str]]


class _Transport(Protocol):
    """What a connection needs of an asyncio transport or of a ``_Socket``."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]] | None:
    """(method, target, version, headers with lower-case names), or None if malformed."""
    request_line, _, rest = head.decode("latin-1").partition("\r\n")
    parts = request_line.split(" ", 2)
    if len(parts) != 3:
        return None
    headers: dict[str, str] = {}
    for line in rest.split("\r\n") if rest else ():
        # No space is allowed between a header's name and its colon (RFC 9112).
        name, sep, value = line.partition(":")
        if not sep:
            return None
        headers[name.lower()] = value.strip()
    return parts[0], parts[1], parts[2], headers


def _read_head(head: bytes) -> _Head | _Response:
    """What a request head says, or the error to answer before closing the connection."""
    parsed = _parse_head(head)
    if parsed is None:
        return _error(400, "malformed HTTP request")
    method, target, version, headers = parsed
    length_text = headers.get("content-length")
    if length_text is None:
        if "transfer-encoding" in headers:
            return _error(411, "send the body with a Content-Length")
        length = 0
    else:
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        if length < 0:
            return _error(400, "malformed HTTP request")
    close = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
    return length, method, target.split("?", 1)[0], close, MappingProxyType(headers)


def _error(
    status: int, message: str, *, headers: Mapping[str, str] | None = None, delay: float = 0.0
) -> _Response:
    payload = {"error": {"message": message, "type": "test_server", "code": status}}
    return _Response(
        status=status, body=json.dumps(payload).encode(), headers=headers or {}, delay=delay
    )


class _Socket:
    """A plain TCP connection driven by the loop's reader callback, in place of an asyncio
    transport: it reads with ``recvmsg_into``, which also gives the time at which the kernel
    received the bytes (``SO_TIMESTAMPNS``); see ``OpenAITestServer``. Writes go straight to
    the socket; what it does not take waits for the socket to be writable."""

    __slots__ = ("_closing", "_conn", "_fd", "_gone", "_out", "_server", "_sock")

    def __init__(self, server: OpenAITestServer, sock: socket.socket, conn: _Connection) -> None:
        self._server = server
        self._sock = sock
        self._conn = conn
        self._fd = sock.fileno()
        self._out = bytearray()
        self._closing = False
        self._gone = False
        assert server._loop is not None
        server._loop.add_reader(self._fd, self._readable)
        conn.connection_made(self)

    def _readable(self) -> None:
        server = self._server
        try:
            nbytes, ancdata, _, _ = self._sock.recvmsg_into(server._read_buffers, server._anc_size)
        except (BlockingIOError, InterruptedError):  # pragma: no cover - a spurious wake-up
            return
        except OSError as exc:
            self._lose(exc)
            return
        if not nbytes:
            self._lose(None)
            return
        if ancdata:
            server._received = ancdata[0][2]
        try:
            self._conn.buffer_updated(nbytes)
        finally:
            server._received = None

    def write(self, data: bytes) -> None:
        if self._gone:
            return
        if self._out:
            self._out += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lose(exc)
            return
        if sent < len(data):
            self._out += data[sent:]
            assert self._server._loop is not None
            self._server._loop.add_writer(self._fd, self._writable)

    def _writable(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):  # pragma: no cover - a spurious wake-up
            return
        except OSError as exc:
            self._lose(exc)
            return
        del self._out[:sent]
        if not self._out:
            assert self._server._loop is not None
            self._server._loop.remove_writer(self._fd)
            if self._closing:
                self._lose(None)

    def close(self) -> None:
        """Close once what was written has gone out."""
        if self._out:
            self._closing = True
            assert self._server._loop is not None
            self._server._loop.remove_reader(self._fd)
        else:
            self._lose(None)

    def abort(self) -> None:
        self._lose(None)

    def _lose(self, exc: Exception | None) -> None:
        if self._gone:
            return
        self._gone = True
        loop = self._server._loop
        assert loop is not None
        loop.remove_reader(self._fd)
        loop.remove_writer(self._fd)
        self._out.clear()
        # As an asyncio transport does: the connection hears of it from the loop, not from
        # inside the call that lost it.
        loop.call_soon(self._closed, exc)

    def _closed(self, exc: Exception | None) -> None:
        self._sock.close()
        self._conn.connection_lost(exc)
