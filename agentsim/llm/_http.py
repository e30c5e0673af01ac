"""A lean HTTP/1.1 keep-alive client on asyncio, for one origin (scheme, host, port).

Why not aiohttp: at a few thousand requests per second its CPU per request (~300 µs on the
development machine) made the client, not the model server, the bottleneck of a run (see
docs/architecture.md, section llm/). This client speaks exactly what a chat-completions call
needs: one request at a time per connection, a pool of idle keep-alive connections (most
recently used first), answers framed by ``Content-Length``, ``Transfer-Encoding: chunked`` or
the end of the connection, ``Connection: close``, 1xx interim answers skipped, TLS through an
``ssl.SSLContext``, and one deadline per exchange covering connect, send and receive.

It raises only ``HTTPConnectionError`` (refused, reset, closed before the answer was
complete: worth a retry), ``HTTPProtocolError`` (not an HTTP answer), ``HTTPCertificateError``
and ``TimeoutError``; ``agentsim.llm.openai`` translates them into ``agentsim.errors``.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

__all__ = [
    "Exchange",
    "Gate",
    "HTTPCertificateError",
    "HTTPConnectionError",
    "HTTPPool",
    "HTTPProtocolError",
    "HTTPReply",
]

# A server that sends this much without ending its header block is not speaking HTTP to us.
_MAX_HEAD = 64 * 1024
# Read size. asyncio's plain Protocol path calls sock.recv(256 KiB), and allocating (then
# shrinking) a 256 KiB bytes object per read costs ~16 µs on Linux (glibc serves it with
# mmap/munmap), more than the rest of reading an answer; a BufferedProtocol reads into one
# reused buffer instead.
_READ_SIZE = 64 * 1024
# Answers handed to their waiting tasks per loop iteration (see HTTPPool._hand_over).
_DELIVER_BATCH = 8
_CHUNKED = -2
_UNTIL_CLOSE = -3
_new_tuple = tuple.__new__
# Parsed answer heads remembered per pool (see _Connection._parse): a server sends the same
# head again and again, but for its Content-Length and, once a second, its Date.
_MAX_HEADS = 256


class HTTPConnectionError(ConnectionError):
    """The connection could not be opened, or ended before the answer was complete."""


class HTTPProtocolError(Exception):
    """The peer answered something that is not HTTP/1.x."""


class HTTPCertificateError(Exception):
    """The server's TLS certificate did not verify: a configuration problem, not worth a retry."""


class HTTPReply(NamedTuple):
    """One complete answer. Header names are lower-case; repeated headers are joined.

    A named tuple, not a frozen dataclass: one is made per request, and a tuple is built
    in C (a frozen dataclass pays an ``object.__setattr__`` per field)."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes


def _ip_literal(host: str, port: int) -> list[tuple[int, Any]] | None:
    """``host`` as a connectable address if it is an IP address (no resolution needed)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return [(family, (host, port))]
    return None


# A parsed answer head: (status, reason, headers, keep_alive, length), ``length`` being the
# body size, or ``_CHUNKED`` / ``_UNTIL_CLOSE``. A plain tuple, shared by every answer with
# the same head (its headers are a read-only mapping).
_Head = tuple[int, str, Mapping[str, str], bool, int]


def _parse_head(block: bytes) -> _Head:
    """The status line and headers of an answer (the bytes before the empty line)."""
    status_line, _, rest = block.decode("latin-1").partition("\r\n")
    code = status_line[9:12]
    if (
        status_line[:7] != "HTTP/1."
        or status_line[8:9] != " "
        or not code.isdigit()
        or status_line[12:13] not in (" ", "")
    ):
        raise HTTPProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    if rest:
        for line in rest.split("\r\n"):
            name, sep, value = line.partition(":")
            if not sep:
                raise HTTPProtocolError(f"malformed header line: {line[:80]!r}")
            key = name.strip().lower()
            if key in headers:
                headers[key] = f"{headers[key]}, {value.strip()}"
            else:
                headers[key] = value.strip()
    status = int(code)
    http11 = status_line[7] == "1"
    connection = headers.get("connection")
    if connection is None:
        keep_alive = http11
    else:
        connection = connection.lower()
        keep_alive = "close" not in connection and (http11 or "keep-alive" in connection)
    length = headers.get("content-length")
    encoding = headers.get("transfer-encoding")
    if status in (204, 304):
        size = 0
    elif encoding is not None and "chunked" in encoding.lower():
        size = _CHUNKED
    elif length is None:
        size = _UNTIL_CLOSE
    elif length.isdigit():
        size = int(length)
    else:
        raise HTTPProtocolError(f"bad Content-Length: {length[:40]!r}")
    return (status, status_line[13:].strip(), MappingProxyType(headers), keep_alive, size)


class Gate(Protocol):
    """What ``HTTPPool.submit`` needs of a limiter's permit (``agentsim.llm.limiter.Permit``):
    ``start(on_ready)`` calls ``on_ready()`` when the request may go; ``release()`` ends it."""

    def start(self, on_ready: Callable[[], object]) -> None: ...

    def release(self) -> None: ...


class Exchange:
    """One request: waits for its turn, goes out on a connection, ends in an answer or an
    error. Its ``future`` gives the ``HTTPReply``, or None: "your turn came, but no
    connection was idle: open one with ``HTTPPool.send_on_new``". The gate is released once,
    as soon as the exchange is over: from the I/O callback that read the answer, so that the
    freed slot can send the next request before any task runs. ``abandon()`` (idempotent,
    a no-op once answered) drops a request its task no longer waits for."""

    __slots__ = ("_gate", "conn", "data", "deadline", "future", "pool")

    def __init__(self, pool: HTTPPool, data: bytes, gate: Gate | None) -> None:
        self.pool = pool
        self.data = data
        self._gate = gate
        self.future: asyncio.Future[HTTPReply | None] = pool.loop.create_future()
        self.conn: _Connection | None = None
        self.deadline = 0.0

    def start(self) -> None:
        """Its turn has come: send it on an idle connection, or wake its task to open one."""
        if self.future.done():
            return  # its task gave up meanwhile
        pool = self.pool
        self.deadline = pool.loop.time() + pool.timeout
        idle = pool._idle
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be closed
            if conn.usable:
                self.send(conn)
                return
        if pool.closed:
            self.future.set_exception(HTTPConnectionError("the connection pool is closed"))
        else:
            self.future.set_result(None)

    # The exchange is its own on_ready callback: no bound method per request, and no extra
    # frame on the path from a freed slot to the next request.
    __call__ = start

    def send(self, conn: _Connection) -> None:
        self.conn = conn
        conn.exchange = self
        conn.write(self.data)
        pool = self.pool
        conn.deadline = deadline = self.deadline
        if pool._timer is None or deadline < pool._timer_at:
            pool._watch(deadline)

    def finish(self, reply: HTTPReply | None, exc: BaseException | None = None) -> None:
        self.conn = None
        if exc is None:
            # Handed to the task later (see HTTPPool._hand_over): I/O first.
            pool = self.pool
            pool._answers.append((self.future, reply))
            if not pool._delivering:
                pool._delivering = True
                pool.loop.call_soon(pool._hand_over)
        elif not self.future.done():
            self.future.set_exception(exc)
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.release()

    def abandon(self) -> None:
        """Its task stops waiting (cancelled, or failed before sending)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.exchange = None
            conn.abort()  # its answer may still come: never hand the connection out again
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.release()


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive connection; carries one exchange at a time."""

    def __init__(self, pool: HTTPPool) -> None:
        self._pool = pool
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self.exchange: Exchange | None = None
        self._head: _Head | None = None
        self._chunks: list[bytes] = []
        self.usable = False
        self.deadline = 0.0  # of the exchange in flight

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.usable = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        self._transport = None
        self._pool._forget(self)
        reason = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection"
        self._fail(HTTPConnectionError(f"{reason} before the answer was complete"))

    def eof_received(self) -> bool:
        self.usable = False
        head = self._head
        if self.exchange is not None and head is not None and head[4] == _UNTIL_CLOSE:
            self._complete(bytes(self._buf))
        return False  # let the transport close itself; connection_lost fails any exchange

    def get_buffer(self, sizehint: int) -> memoryview:
        # Shared by the pool's connections: asyncio fills it and calls buffer_updated at once.
        return self._pool.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self.exchange is None:
            # Nothing asked for: a keep-alive connection must stay silent between answers.
            self.abort()
            return
        self._buf += self._pool.read_buffer[:nbytes]
        try:
            self._parse()
        except HTTPProtocolError as exc:
            self._fail(exc)
            self.abort()

    # -- requests ------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        assert self._transport is not None
        self._head = None
        self._transport.write(data)

    def expire(self) -> None:
        """The exchange's deadline passed: fail it and drop the connection."""
        self._fail(TimeoutError())
        self.abort()

    def abort(self) -> None:
        self.usable = False
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        self.usable = False
        if self._transport is not None:
            self._transport.close()

    # -- parsing -------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        head = self._head
        while head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise HTTPProtocolError(f"no end of headers in the first {_MAX_HEAD} bytes")
                return
            block = bytes(buf[:end])
            del buf[: end + 4]
            # Parsing a head costs more than the rest of reading an answer, and a server
            # sends the same few heads again and again: each is parsed once per pool.
            heads = self._pool.heads
            head = heads.get(block)
            if head is None:
                head = _parse_head(block)
                if len(heads) >= _MAX_HEADS:
                    heads.clear()
                heads[block] = head
            if 100 <= head[0] < 200:
                head = None  # an interim answer (100 Continue, 103 Early Hints): skip it
            else:
                self._head = head
                self._chunks = []
        length = head[4]
        if length >= 0:
            if len(buf) >= length:
                if len(buf) == length:
                    body = bytes(buf)
                    buf.clear()
                else:
                    body = bytes(buf[:length])
                    del buf[:length]
                self._complete(body)
        elif length == _CHUNKED:
            self._parse_chunks()

    def _parse_chunks(self) -> None:
        buf = self._buf
        while True:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                return
            size_text = bytes(buf[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HTTPProtocolError(f"bad chunk size: {size_text[:40]!r}") from None
            if size == 0:
                # The last chunk; its trailers (usually none) end with an empty line.
                trailer_end = buf.find(b"\r\n\r\n", line_end)
                if trailer_end < 0:
                    return
                del buf[: trailer_end + 4]
                self._complete(b"".join(self._chunks))
                return
            if len(buf) < line_end + 2 + size + 2:
                return
            start = line_end + 2
            self._chunks.append(bytes(buf[start : start + size]))
            del buf[: start + size + 2]

    def _complete(self, body: bytes) -> None:
        head, exchange = self._head, self.exchange
        assert head is not None and exchange is not None
        self.exchange = None
        self._head = None
        if self._buf or not head[3]:
            # Extra bytes after the answer, or the server said so: never reuse.
            self.close()
        elif not self._pool.closed:
            # Idle again *before* the exchange releases its slot: the next request in line
            # goes out on this connection, right now.
            self._pool._idle.append(self)
        # tuple.__new__ rather than HTTPReply(...): a named tuple's __new__ is a Python
        # function, and this runs once per answer on the path to the next request.
        exchange.finish(_new_tuple(HTTPReply, (head[0], head[1], head[2], body)))

    def _fail(self, exc: BaseException) -> None:
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.finish(None, exc)


class HTTPPool:
    """Keep-alive connections to one origin, bound to the event loop that created it.

    ``submit`` queues a complete request (head and body, already encoded) behind an optional
    ``Gate`` (a limiter's permit) and returns its ``Exchange``; ``timeout`` (seconds) bounds
    each exchange from its turn on, connecting included.
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.loop = loop
        self._ssl = ssl_context
        self._addresses: list[tuple[int, Any]] | None = _ip_literal(host, port)
        self._resolving = asyncio.Lock()
        self.read_buffer = memoryview(bytearray(_READ_SIZE))
        self.heads: dict[bytes, _Head] = {}
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        # One timer, at the earliest deadline of the exchanges in flight, rather than one
        # per request (a heap push and a cancelled handle each): every exchange gets the
        # same timeout, so the ones sent later fall due later, and the timer only needs
        # moving when it fires.
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._answers: deque[tuple[asyncio.Future[HTTPReply | None], HTTPReply | None]] = deque()
        self._delivering = False
        self.closed = False

    def submit(self, data: bytes, gate: Gate | None = None) -> Exchange:
        """Queue one request (head and body, encoded): it goes out when ``gate`` lets it,
        at once without one. Await ``exchange.future``; see ``Exchange``."""
        exchange = Exchange(self, data, gate)
        if gate is None:
            exchange.start()
        else:
            gate.start(exchange)
        return exchange

    async def send_on_new(self, exchange: Exchange) -> HTTPReply:
        """Open a connection for ``exchange`` (its turn came with none idle) and send it."""
        conn = await self._open(exchange.deadline)
        exchange.future = self.loop.create_future()
        exchange.send(conn)
        reply = await exchange.future
        assert reply is not None
        return reply

    async def _open(self, deadline: float) -> _Connection:
        try:
            async with asyncio.timeout_at(deadline):
                conn = await self._connect()
        except TimeoutError:
            raise
        except ssl.SSLCertVerificationError as exc:
            raise HTTPCertificateError(str(exc)) from None
        except OSError as exc:  # refused, reset, unreachable, TLS handshake failure, ...
            raise HTTPConnectionError(f"{type(exc).__name__}: {exc}") from None
        if self.closed:
            conn.abort()
            raise HTTPConnectionError("the connection pool is closed")
        self._all.add(conn)
        return conn

    async def _connect(self) -> _Connection:
        loop = self.loop
        addresses = self._addresses
        if addresses is None:
            # Resolved once per pool, not once per connection (loop.create_connection asks
            # getaddrinfo, in a thread, for each of what may be hundreds of connections).
            async with self._resolving:
                if self._addresses is None:
                    infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
                    self._addresses = [(family, address) for family, _, _, _, address in infos]
                addresses = self._addresses
        error: OSError = OSError(f"no address found for {self.host!r}")
        for family, address in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                await loop.sock_connect(sock, address)
            except OSError as exc:
                sock.close()
                error = exc  # refused on this address: try the next one
                continue
            except BaseException:
                sock.close()
                raise
            _, conn = await loop.create_connection(
                lambda: _Connection(self),
                sock=sock,
                ssl=self._ssl,
                server_hostname=self.host if self._ssl is not None else None,
            )
            return conn
        self._addresses = None  # resolve again next time
        raise error

    def _forget(self, conn: _Connection) -> None:
        self._all.discard(conn)

    # -- delivering answers --------------------------------------------------------------

    # Sending comes before reading. Waking every task whose answer arrived would queue all
    # their JSON decoding ahead of the next I/O callbacks, and the requests those callbacks
    # send (see _Connection._complete) would leave later and later in a burst. So answers
    # (Exchange.finish) are handed over a few per loop iteration: I/O first, decoding in the
    # gaps.

    def _hand_over(self) -> None:
        answers = self._answers
        for _ in range(min(len(answers), _DELIVER_BATCH)):
            future, reply = answers.popleft()
            if not future.done():
                future.set_result(reply)
        if answers:
            self.loop.call_soon(self._hand_over)
        else:
            self._delivering = False

    # -- deadlines -----------------------------------------------------------------------

    def _watch(self, deadline: float) -> None:
        """An exchange falls due before the timer (or there is none): move the timer."""
        # (Earlier than the timer only after opening a connection: the exchange's deadline
        # was set before.)
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = self.loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._timer = None
        now = self.loop.time()
        earliest = None
        for conn in list(self._all):
            if conn.exchange is None:
                continue
            if conn.deadline <= now:
                conn.expire()
            elif earliest is None or conn.deadline < earliest:
                earliest = conn.deadline
        if earliest is not None and not self.closed:
            self._timer_at = earliest
            self._timer = self.loop.call_at(earliest, self._expire)

    def close(self) -> None:
        """Close every connection (idempotent). Exchanges in flight fail."""
        self.closed = True
        self._idle.clear()
        conns, self._all = self._all, set()
        if self.loop.is_closed():
            return  # nothing can run there any more; the sockets go with the transports
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for conn in conns:
            conn.abort()
