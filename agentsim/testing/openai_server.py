"""A real OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benchmarks.

``OpenAITestServer`` is a small HTTP/1.1 server on asyncio that answers
``POST /v1/chat/completions`` with a deterministic assistant message, and can be scripted to
misbehave for the next requests::

    async with OpenAITestServer(latency=0.01) as srv:
        srv.enqueue(Fault.status(429, retry_after=0.2), Fault.drop())
        model = OpenAIChatModel(model="m", base_url=srv.base_url)
        ...
        assert srv.max_in_flight <= 8

The default answer echoes the last user message (``"echo: ..."``) with usage
``prompt_tokens = len(json.dumps(messages)) // 4`` and ``completion_tokens =
max(1, len(content) // 4)`` (see ``usage_for``), so tests can check sums by hand.

For benchmarks, run it in its own process so that it does not share the client's loop:
``python -m agentsim.testing.openai_server --port 0 --latency 0.05`` prints
``{"base_url": ...}`` on one line and serves until it is terminated; or use
``spawn_test_server(latency=0.05)``, a context manager doing exactly that.
"""

from __future__ import annotations

import _json
import argparse
import asyncio
import collections
import json
import platform
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Literal

from agentsim.testing._launch import spawn_test_server
from agentsim.testing._wire import (
    _ABI,
    _SO_TIMESTAMPNS,
    _TIMESPEC,
    _error,
    _Head,
    _read_head,
    _Response,
    _Socket,
    _Transport,
)

__all__ = ["Fault", "OpenAITestServer", "RecordedRequest", "spawn_test_server", "usage_for"]

_PATH = "/v1/chat/completions"
_CLOSE = "Connection: close\r\n"
# Reads go into one reused buffer: asyncio's plain Protocol path allocates a 256 KiB bytes
# object per read, which costs more than answering the request.
_READ_SIZE = 64 * 1024
_OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
# Requests worked on per loop iteration (see OpenAITestServer._receive).
_WORK_BATCH = 8
# The loop's timers wake at millisecond resolution, rounded up. Answers leave up to half a
# tick before they fall due (latency +- 0.5 ms), and how far ahead is tuned every _TUNE
# answers so that on average they leave when they fall due (see OpenAITestServer._fire).
_HALF_TICK = 0.0005
_TUNE = 64
# Parsed request heads remembered (clients send the same head but for its Content-Length).
_MAX_HEADS = 256
# Connections accepted per wake-up of the listening socket.
_ACCEPT_BATCH = 256
# The C encoder of json.dumps(x) (ensure_ascii, ", " and ": "), built once and called directly:
# json.dumps builds one, behind two Python frames, on every call. No check for circular
# references: what it encodes here comes from json.loads.
_ENCODE = _json.make_encoder(
    None, json.JSONEncoder().default, _quote, None, ": ", ", ", False, False, True
)
_DECODER = json.JSONDecoder()
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """One scripted behaviour, applied to one request. Build with the class methods."""

    kind: Literal["status", "delay", "drop", "reply"]
    status_code: int = 200
    retry_after: float | str | None = None
    message: str = ""
    seconds: float = 0.0
    body: Mapping[str, Any] | None = None

    @classmethod
    def status(
        cls, code: int, *, retry_after: float | str | None = None, message: str = ""
    ) -> Fault:
        """Answer with HTTP ``code`` and an OpenAI-style error body. ``retry_after`` is sent
        as the ``Retry-After`` header: seconds, or a string (e.g. an HTTP date) as is."""
        return cls(kind="status", status_code=code, retry_after=retry_after, message=message)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Wait ``seconds`` (on top of the server's latency), then answer normally."""
        return cls(kind="delay", seconds=seconds)

    @classmethod
    def drop(cls) -> Fault:
        """Close the connection without answering."""
        return cls(kind="drop")

    @classmethod
    def reply(cls, body: Mapping[str, Any]) -> Fault:
        """Answer 200 with this exact JSON body (a completion, or anything else)."""
        return cls(kind="reply", body=body)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """One request as the server saw it. Header names are lower-case (HTTP header names are
    case-insensitive); ``body`` is the parsed JSON, or None if it was not JSON; ``arrived`` is
    the loop's clock (``time.monotonic()`` for the default loop)."""

    path: str
    headers: Mapping[str, str]
    body: Any
    arrived: float
    fault: Fault | None = None


def usage_for(messages: Sequence[Any], content: str) -> tuple[int, int]:
    """The (prompt_tokens, completion_tokens) the server reports for a default answer."""
    # len(json.dumps(messages)) // 4, through the encoder json.dumps uses.
    return len("".join(_ENCODE(messages, 0))) // 4, max(1, len(content) // 4)


def _load(raw: bytes) -> Any:
    """``json.loads(raw)``, or None if it is not JSON; on the usual path (UTF-8, an object)
    without json.loads' wrappers (an encoding guess and two regex scans)."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        text = ""
    try:
        if text[:1] == "{":
            body, end = _SCAN(text, 0)
            if end == len(text) or not text[end:].strip():
                return body
        return json.loads(raw)
    except (ValueError, StopIteration):  # (the scanner's "no value here")
        return None


def _echo(messages: Sequence[Any]) -> str:
    for msg in reversed(messages):
        if isinstance(msg, dict) and msg.get("role") == "user":
            return f"echo: {str(msg.get('content'))[:200]}"
    return "echo: (no user message)"


@dataclass(slots=True, kw_only=True)
class _Counters:
    in_flight: int = 0
    max_in_flight: int = 0
    connections: int = 0
    served: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    arrivals: list[float] = field(default_factory=list)


# The placeholder answer of a request received but not worked on yet.
_IN_WORK = _Response(status=0, body=b"")


class OpenAITestServer:
    """An OpenAI-compatible server bound to 127.0.0.1 (port 0 picks a free port).

    ``latency`` delays every answer, counted from the request's arrival: on Linux the time
    the kernel received it (``SO_TIMESTAMPNS``), so that the server's own work, or the CPU it
    shares with the client under test, does not add to the latency it simulates; elsewhere,
    and with TLS, the loop iteration that read it. ``record=False`` keeps no request bodies
    (benchmarks). HTTP/1.1 with keep-alive; request bodies need a ``Content-Length`` (every
    OpenAI client sends one), otherwise the answer is 411. ``ssl_context`` serves HTTPS
    instead (tests of the client's TLS path bring their own certificate).

    It is built to outrun the clients it tests (well over 5,000 answers/s with 50 ms
    latency on one core): reads into one shared buffer, request heads parsed once, answers
    made in advance, and one timer for all answers that fall due in arrival order.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        latency: float = 0.0,
        record: bool = True,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.latency = latency
        self.record = record
        self._port = port
        self._ssl = ssl_context
        self._faults: collections.deque[Fault] = collections.deque()
        self.requests: list[RecordedRequest] = []
        self._c = _Counters()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._listener: socket.socket | None = None
        self._conns: set[_Connection] = set()
        self._completion_id = 0
        self.read_buffer = memoryview(bytearray(_READ_SIZE))
        self._read_buffers = [self.read_buffer]
        self._anc_size = 0  # room for the kernel's time stamp in a read (see start)
        self._heads: dict[bytes, _Head] = {}
        self._due: collections.deque[tuple[float, _Connection, _Response]] = collections.deque()
        self._due_timer: asyncio.TimerHandle | None = None
        self._ahead = _HALF_TICK  # how early an answer may leave (see _fire)
        self._late = 0.0  # sum of how late the answers sent since the last tuning left
        self._sent = 0
        self._tick_time: float | None = None
        self._clock_offset = 0.0  # the loop's clock minus the wall clock, this iteration
        self._received: bytes | None = None  # the kernel's time stamp of the read in progress
        self._inbox: collections.deque[tuple[_Connection, _Head, bytes, float]] = (
            collections.deque()
        )
        self._working = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        # Plain TCP on Linux: the server's own sockets (_Socket), for the kernel's receive
        # times; otherwise asyncio's transports, with the loop's clock as arrival time.
        if self._ssl is not None or sys.platform != "linux" or platform.machine() not in _ABI:
            self._server = await loop.create_server(
                lambda: _Connection(self), "127.0.0.1", self._port, backlog=1024, ssl=self._ssl
            )
            self._port = int(self._server.sockets[0].getsockname()[1])
            return
        self._anc_size = socket.CMSG_SPACE(_TIMESPEC.size)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self._port))
            listener.listen(1024)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._port = int(listener.getsockname()[1])
        loop.add_reader(listener.fileno(), self._accept)

    async def close(self) -> None:
        server, self._server = self._server, None
        listener, self._listener = self._listener, None
        if server is None and listener is None:
            return
        if server is not None:
            server.close()
        if listener is not None:
            assert self._loop is not None
            self._loop.remove_reader(listener.fileno())
            listener.close()
        for conn in list(self._conns):
            conn.abort()
        if self._due_timer is not None:
            self._due_timer.cancel()
            self._due_timer = None
        self._due.clear()
        self._inbox.clear()
        if server is not None:
            await server.wait_closed()
        else:
            await asyncio.sleep(0)  # the aborted sockets close in the next loop iteration

    async def __aenter__(self) -> OpenAITestServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _accept(self) -> None:
        assert self._listener is not None and self._loop is not None
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # pragma: no cover - out of file descriptors, say
                # Leave the rest in the backlog for a while rather than spin on it.
                fd = self._listener.fileno()
                self._loop.remove_reader(fd)
                self._loop.call_later(0.1, self._loop.add_reader, fd, self._accept)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            _Socket(self, sock, _Connection(self))

    # -- inspection ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        """What to pass as ``base_url`` to an OpenAI-compatible client."""
        scheme = "https" if self._ssl is not None else "http"
        return f"{scheme}://127.0.0.1:{self._port}/v1"

    @property
    def max_in_flight(self) -> int:
        """The most requests the server was handling at once."""
        return self._c.max_in_flight

    @property
    def in_flight(self) -> int:
        """Requests received and not answered yet."""
        return self._c.in_flight

    @property
    def connections_accepted(self) -> int:
        """Connections accepted so far (keep-alive clients open few)."""
        return self._c.connections

    @property
    def served(self) -> int:
        """Default (echo) answers sent."""
        return self._c.served

    @property
    def prompt_tokens(self) -> int:
        """Sum of ``prompt_tokens`` over the default answers sent."""
        return self._c.prompt_tokens

    @property
    def completion_tokens(self) -> int:
        """Sum of ``completion_tokens`` over the default answers sent."""
        return self._c.completion_tokens

    @property
    def arrivals(self) -> list[float]:
        """Arrival times of every request, in order (the loop's clock, ``time.monotonic()``
        by default; kept even if ``record=False``)."""
        return list(self._c.arrivals)

    def enqueue(self, *faults: Fault) -> None:
        """Apply these behaviours, in order, to the next requests (one each)."""
        self._faults.extend(faults)

    @property
    def pending_faults(self) -> int:
        return len(self._faults)

    # -- handling ------------------------------------------------------------------------

    def _arrive(self) -> float:
        c = self._c
        now = self._tick_time
        if now is None:
            # One clock reading per loop iteration: without the kernel's time stamp, every
            # request read in this iteration arrived when the loop woke up for it, however
            # long parsing the ones before it took.
            loop = asyncio.get_running_loop()
            now = self._tick_time = loop.time()
            self._clock_offset = now - time.time()
            loop.call_soon(self._next_tick)
        arrived = now
        received = self._received
        if received is not None and len(received) == _TIMESPEC.size:
            # When the kernel received it, on the loop's clock. (Out by more than a second:
            # the wall clock was set meanwhile; keep the loop's reading.)
            sec, nsec = _TIMESPEC.unpack(received)
            stamp = sec + nsec * 1e-9 + self._clock_offset
            if now - 1.0 < stamp < now + 1.0:
                arrived = stamp
        c.arrivals.append(arrived)
        c.in_flight += 1
        if c.in_flight > c.max_in_flight:
            c.max_in_flight = c.in_flight
        return arrived

    def _next_tick(self) -> None:
        self._tick_time = None

    def _receive(self, conn: _Connection, head: _Head, raw: bytes) -> None:
        # Reading comes before working. A burst of requests is first all read and stamped
        # (cheap), and the work of answering them (JSON) is done a few per loop iteration in
        # between, so that answers falling due go out on time.
        self._inbox.append((conn, head, raw, self._arrive()))
        if not self._working:
            self._working = True
            asyncio.get_running_loop().call_soon(self._work)

    def _work(self) -> None:
        inbox = self._inbox
        for _ in range(min(len(inbox), _WORK_BATCH)):
            conn, head, raw, arrived = inbox.popleft()
            conn.close_after = head[3]
            conn.answer(self._answer(head, raw, arrived), arrived)
        if inbox:
            asyncio.get_running_loop().call_soon(self._work)
        else:
            self._working = False

    def _answer(self, head: _Head, raw: bytes, arrived: float) -> _Response:
        _, method, path, _, headers = head
        fault = self._faults.popleft() if self._faults else None
        body = _load(raw)
        if self.record:
            self.requests.append(
                RecordedRequest(path=path, headers=headers, body=body, arrived=arrived, fault=fault)
            )
        if method != "POST" or path != _PATH:
            return _error(404, f"no route {method} {path}; POST {_PATH}")
        if fault is not None and fault.kind == "drop":
            return _Response(status=0, body=b"", drop=True)
        delay = self.latency + (fault.seconds if fault is not None else 0.0)
        if fault is not None and fault.kind == "status":
            extra = {}
            if fault.retry_after is not None:
                extra["Retry-After"] = str(fault.retry_after)
            text = fault.message or f"scripted status {fault.status_code}"
            return _error(fault.status_code, text, headers=extra, delay=delay)
        if fault is not None and fault.kind == "reply":
            return _Response(status=200, body=json.dumps(fault.body).encode(), delay=delay)
        messages = body.get("messages") if type(body) is dict else None
        if type(messages) is not list:
            return _error(400, "the body must be a JSON object with a 'messages' list")
        content = _echo(messages)
        usage = usage_for(messages, content)
        data = self._completion(body, content, usage)
        return _Response(
            status=200,
            body=data,
            delay=delay,
            in_order=fault is None,
            usage=usage,
            wire=b"%b%d\r\n\r\n%b" % (_OK_HEAD, len(data), data),
        )

    def _completion(self, body: dict[str, Any], content: str, usage: tuple[int, int]) -> bytes:
        prompt, completion = usage
        self._completion_id += 1
        model = body.get("model", "")
        model_json = _quote(model) if isinstance(model, str) else json.dumps(model)
        # The answer's shape is fixed: fill in a template rather than dumping a dict.
        return (
            f'{{"id": "chatcmpl-{self._completion_id}", "object": "chat.completion", '
            f'"created": 0, "model": {model_json}, "choices": '
            f'[{{"index": 0, "message": {{"role": "assistant", "content": {_quote(content)}}}'
            f', "finish_reason": "stop"}}], "usage": {{"prompt_tokens": {prompt}, '
            f'"completion_tokens": {completion}, "total_tokens": {prompt + completion}}}}}'
        ).encode()

    # -- answers that fall due -------------------------------------------------------------

    def _schedule(self, conn: _Connection, response: _Response, arrived: float) -> None:
        loop = asyncio.get_running_loop()
        when = arrived + response.delay
        if not response.in_order:
            conn.timer = loop.call_at(when, conn.finish, response)
            return
        due = self._due
        if due and when < due[-1][0]:  # the latency was lowered meanwhile: keep the order
            conn.timer = loop.call_at(when, conn.finish, response)
            return
        due.append((when, conn, response))
        if self._due_timer is None:
            self._due_timer = loop.call_at(when - self._ahead, self._fire)

    def _fire(self) -> None:
        # A timer set for t wakes the loop at t + U(0, 1 ms). Woken ``ahead`` early, the
        # server sends what falls due within ``ahead``: a lone answer then leaves on average
        # 0.5 ms - ahead late, while in a dense run of answers (a burst, an idle server) the
        # ones sent with the first leave early, on average by ``ahead`` - 0.25 ms. Neither
        # ``ahead`` suits both, so it is tuned on the lateness measured: answers leave, on
        # average, when they fall due, and never more than half a tick early.
        self._due_timer = None
        due = self._due
        loop = asyncio.get_running_loop()
        now = loop.time()
        ahead = self._ahead
        while due:
            when, conn, response = due[0]
            if when > now + ahead:
                self._due_timer = loop.call_at(when - ahead, self._fire)
                break
            due.popleft()
            if conn.pending is response:  # else: the connection was lost meanwhile
                self._late += now - when
                self._sent += 1
                conn.finish(response)
        if self._sent >= _TUNE:
            self._ahead = min(_HALF_TICK, max(0.0, ahead + self._late / self._sent))
            self._late = 0.0
            self._sent = 0


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive HTTP/1.1 connection. Requests are answered one at a time, in order
    (what HTTP/1.1 requires); a delayed answer waits in the server's queue (or, for a delay
    fault, on its own timer), not in a task."""

    def __init__(self, server: OpenAITestServer) -> None:
        self._server = server
        self._buf = bytearray()
        self._transport: _Transport | None = None
        self._busy = False
        self.close_after = False
        self.pending: _Response | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._server._conns.add(self)
        self._server._c.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._conns.discard(self)
        self._transport = None
        if self.pending is not None:
            self.pending = None
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            self._server._c.in_flight -= 1

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def get_buffer(self, sizehint: int) -> memoryview:
        # Shared by all connections: asyncio fills it and calls buffer_updated at once.
        return self._server.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._buf += self._server.read_buffer[:nbytes]
        if not self._busy:
            self._next()

    def _next(self) -> None:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return
        block = bytes(buf[:end])
        # A client sends the same head again and again, but for its Content-Length: each is
        # parsed once. Only what frames the request is needed here; the JSON comes later.
        heads = self._server._heads
        head = heads.get(block)
        if head is None:
            parsed = _read_head(block)
            if isinstance(parsed, _Response):
                self._reject(parsed)
                return
            if len(heads) >= _MAX_HEADS:
                heads.clear()
            heads[block] = head = parsed
        stop = end + 4 + head[0]
        if len(buf) < stop:
            return
        raw = bytes(buf[end + 4 : stop])
        del buf[:stop]
        self._busy = True
        self.pending = _IN_WORK
        self._server._receive(self, head, raw)

    def answer(self, response: _Response, arrived: float) -> None:
        """The answer to the request in work is ready: send it now or when it falls due."""
        if self.pending is not _IN_WORK:
            return  # the connection was lost meanwhile
        self.pending = response
        if response.delay > 0:
            self._server._schedule(self, response, arrived)
        else:
            self.finish(response)

    def _reject(self, response: _Response) -> None:
        self._busy = True  # parse nothing more from a connection being closed
        self._write(response, close=True)

    def finish(self, response: _Response) -> None:
        self.timer = None
        self.pending = None
        c = self._server._c
        c.in_flight -= 1
        self._busy = False
        if response.drop:
            self.abort()
            return
        if response.usage is not None and self._transport is not None:
            c.served += 1
            c.prompt_tokens += response.usage[0]
            c.completion_tokens += response.usage[1]
        self._write(response, close=self.close_after)
        if not self.close_after and self._buf:
            self._next()

    def _write(self, response: _Response, *, close: bool) -> None:
        if self._transport is None:
            return
        if response.wire and not close:
            self._transport.write(response.wire)
            return
        try:
            reason = HTTPStatus(response.status).phrase
        except ValueError:
            reason = "Unknown"
        extra = "".join(f"{k}: {v}\r\n" for k, v in response.headers.items())
        head = (
            f"HTTP/1.1 {response.status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(response.body)}\r\n{extra}"
            f"{_CLOSE if close else ''}\r\n"
        )
        self._transport.write(head.encode("latin-1") + response.body)
        if close:
            self._transport.close()


# -- running in a separate process ------------------------------------------------------


async def _serve(port: int, latency: float, *, stop_on_eof: bool) -> None:
    async with OpenAITestServer(port=port, latency=latency, record=False) as srv:
        print(json.dumps({"base_url": srv.base_url, "port": srv.port}), flush=True)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        if stop_on_eof:
            # A daemon thread, so that a blocked read never holds up the exit.
            def watch_stdin() -> None:
                sys.stdin.read()
                loop.call_soon_threadsafe(stop.set)

            threading.Thread(target=watch_stdin, daemon=True).start()
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m agentsim.testing.openai_server",
        description="Serve a fake OpenAI chat-completions API on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer")
    parser.add_argument(
        "--stop-on-stdin-eof",
        action="store_true",
        help="exit when stdin closes (so a parent that dies never leaves the server behind)",
    )
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.port, args.latency, stop_on_eof=args.stop_on_stdin_eof))


if __name__ == "__main__":
    main()
