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

import argparse
import asyncio
import collections
import contextlib
import json
import os
import selectors
import signal
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from json.encoder import encode_basestring_ascii as _quote
from pathlib import Path
from typing import Any, Literal

__all__ = ["Fault", "OpenAITestServer", "RecordedRequest", "spawn_test_server", "usage_for"]

_PATH = "/v1/chat/completions"
_CLOSE = "Connection: close\r\n"
# Reads go into one reused buffer (a BufferedProtocol): asyncio's plain Protocol path
# allocates a 256 KiB bytes object per read, which costs more than answering the request.
_READ_SIZE = 64 * 1024
_OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
# Requests worked on per loop iteration (see OpenAITestServer._receive).
_WORK_BATCH = 8
# The loop's timers wake at millisecond resolution, rounded up: waking half a tick early and
# sending what falls due within half a tick makes answers fall due at latency +- 0.5 ms, so
# that the mean latency is the one asked for rather than ~0.5 ms more.
_HALF_TICK = 0.0005


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
    return len(json.dumps(messages)) // 4, max(1, len(content) // 4)


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


# The placeholder answer of a request received but not worked on yet.
_IN_WORK = _Response(status=0, body=b"")


class OpenAITestServer:
    """An OpenAI-compatible server bound to 127.0.0.1 (port 0 picks a free port).

    ``latency`` delays every answer. ``record=False`` keeps no request bodies (benchmarks).
    HTTP/1.1 with keep-alive; request bodies need a ``Content-Length`` (every OpenAI client
    sends one), otherwise the answer is 411. ``ssl_context`` serves HTTPS instead (tests of
    the client's TLS path bring their own certificate).

    It is built to outrun the clients it tests (well over 5,000 answers/s with 50 ms
    latency on one core): reads into one shared buffer, answers assembled from
    pre-encoded bytes, and one timer for all answers that fall due in arrival order.
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
        self._server: asyncio.Server | None = None
        self._conns: set[_Connection] = set()
        self._completion_id = 0
        self.read_buffer = memoryview(bytearray(_READ_SIZE))
        self._due: collections.deque[tuple[float, _Connection, _Response]] = collections.deque()
        self._due_timer: asyncio.TimerHandle | None = None
        self._tick_time: float | None = None
        self._inbox: collections.deque[tuple[_Connection, bytes, bytes, float]] = (
            collections.deque()
        )
        self._working = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), "127.0.0.1", self._port, backlog=1024, ssl=self._ssl
        )
        self._port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for conn in list(self._conns):
            conn.abort()
        if self._due_timer is not None:
            self._due_timer.cancel()
            self._due_timer = None
        self._due.clear()
        self._inbox.clear()
        await server.wait_closed()

    async def __aenter__(self) -> OpenAITestServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

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
            # One clock reading per loop iteration: every request read in this iteration
            # arrived when the loop woke up for it, however long parsing the ones before it
            # took. So ``latency`` is counted from arrival, as a real server's would be,
            # and not from when this server got round to it.
            loop = asyncio.get_running_loop()
            now = self._tick_time = loop.time()
            loop.call_soon(self._next_tick)
        c.arrivals.append(now)
        c.in_flight += 1
        if c.in_flight > c.max_in_flight:
            c.max_in_flight = c.in_flight
        return now

    def _next_tick(self) -> None:
        self._tick_time = None

    def _receive(self, conn: _Connection, head: bytes, raw: bytes) -> None:
        # Reading comes before working. A burst of requests is first all read and stamped
        # (cheap), and the work of answering them (parsing the head, JSON) is done a few per
        # loop iteration in between, so that a request's arrival time is not pushed back by
        # the work on the requests read before it, and answers falling due go out on time.
        self._inbox.append((conn, head, raw, self._arrive()))
        if not self._working:
            self._working = True
            asyncio.get_running_loop().call_soon(self._work)

    def _work(self) -> None:
        inbox = self._inbox
        for _ in range(min(len(inbox), _WORK_BATCH)):
            conn, head, raw, arrived = inbox.popleft()
            parsed = _parse_head(head)
            if parsed is None:
                conn.reject_in_work(_error(400, "malformed HTTP request"))
                continue
            method, target, version, headers = parsed
            conn.close_after = (
                headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
            )
            path = target.split("?", 1)[0]
            conn.answer(self._answer(method, path, headers, raw, arrived), arrived)
        if inbox:
            asyncio.get_running_loop().call_soon(self._work)
        else:
            self._working = False

    def _done(self) -> None:
        self._c.in_flight -= 1

    def _answer(
        self, method: str, path: str, headers: Mapping[str, str], raw: bytes, arrived: float
    ) -> _Response:
        fault = self._faults.popleft() if self._faults else None
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
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
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = str(fault.retry_after)
            text = fault.message or f"scripted status {fault.status_code}"
            return _error(fault.status_code, text, headers=headers, delay=delay)
        if fault is not None and fault.kind == "reply":
            return _Response(status=200, body=json.dumps(fault.body).encode(), delay=delay)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "the body must be a JSON object with a 'messages' list")
        content = _echo(body["messages"])
        usage = usage_for(body["messages"], content)
        return _Response(
            status=200,
            body=self._completion(body, content, usage),
            delay=delay,
            in_order=fault is None,
            usage=usage,
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
            self._due_timer = loop.call_at(when - _HALF_TICK, self._fire)

    def _fire(self) -> None:
        self._due_timer = None
        due = self._due
        loop = asyncio.get_running_loop()
        now = loop.time()
        while due:
            when, conn, response = due[0]
            if when > now + _HALF_TICK:
                self._due_timer = loop.call_at(when - _HALF_TICK, self._fire)
                return
            due.popleft()
            if conn.pending is response:  # else: the connection was lost meanwhile
                conn.finish(response)


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


def _error(
    status: int, message: str, *, headers: Mapping[str, str] | None = None, delay: float = 0.0
) -> _Response:
    payload = {"error": {"message": message, "type": "test_server", "code": status}}
    return _Response(
        status=status, body=json.dumps(payload).encode(), headers=headers or {}, delay=delay
    )


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive HTTP/1.1 connection. Requests are answered one at a time, in order
    (what HTTP/1.1 requires); a delayed answer waits in the server's queue (or, for a delay
    fault, on its own timer), not in a task."""

    def __init__(self, server: OpenAITestServer) -> None:
        self._server = server
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._busy = False
        self.close_after = False
        self.pending: _Response | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
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
            self._server._done()

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
        head = bytes(buf[:end])
        # Only what frames the request is read here, on the reading path; the rest of the
        # head is parsed later, with the JSON (OpenAITestServer._work).
        lower = head.lower()
        at = lower.find(b"\r\ncontent-length:")
        if at < 0:
            if b"\r\ntransfer-encoding:" in lower:
                self._reject(_error(411, "send the body with a Content-Length"))
                return
            length = 0
        else:
            stop = lower.find(b"\r\n", at + 17)
            try:
                length = int(lower[at + 17 : stop if stop >= 0 else end])
            except ValueError:
                length = -1
            if length < 0:
                self._reject(_error(400, "malformed HTTP request"))
                return
        if len(buf) < end + 4 + length:
            return
        raw = bytes(buf[end + 4 : end + 4 + length])
        del buf[: end + 4 + length]
        self._busy = True
        self.pending = _IN_WORK
        self._server._receive(self, head, raw)

    def reject_in_work(self, response: _Response) -> None:
        """The request in work turned out malformed: answer it and close."""
        if self.pending is _IN_WORK:
            self.pending = None
            self._server._done()
            self._reject(response)

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
        self._server._done()
        self._busy = False
        if response.drop:
            self.abort()
            return
        if response.usage is not None and self._transport is not None:
            c = self._server._c
            c.served += 1
            c.prompt_tokens += response.usage[0]
            c.completion_tokens += response.usage[1]
        self._write(response, close=self.close_after)
        if not self.close_after and self._buf:
            self._next()

    def _write(self, response: _Response, *, close: bool) -> None:
        if self._transport is None:
            return
        if response.status == 200 and not response.headers and not close:
            self._transport.write(b"%b%d\r\n\r\n%b" % (_OK_HEAD, len(response.body), response.body))
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


@contextlib.contextmanager
def spawn_test_server(*, latency: float = 0.0, startup_timeout: float = 30.0) -> Iterator[str]:
    """Run the server in a child process; yields its ``base_url`` and stops it on exit."""
    # The child must import this very package, installed or not.
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "agentsim.testing.openai_server", "--latency", str(latency)]
    cmd.append("--stop-on-stdin-eof")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = _read_line(proc, startup_timeout)
        yield str(json.loads(line)["base_url"])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - only if the child hangs
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise RuntimeError(
                f"the test server did not start within {timeout} s; run "
                "`python -m agentsim.testing.openai_server` by hand to see why"
            )
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(
            f"the test server exited with code {proc.wait()} before printing its address; run "
            "`python -m agentsim.testing.openai_server` by hand to see why"
        )
    return line


if __name__ == "__main__":
    main()
