"""``OpenAIChatModel``: any OpenAI-compatible chat-completions server (vLLM, Ollama,
llama.cpp server, OpenAI) over a lean HTTP/1.1 keep-alive client (``agentsim.llm._http``).

The API key is read once from the environment variable named in the config and lives in
private attributes only (the key and the pre-encoded request head that carries it): it is
never part of ``repr``, of an error message, of a log line or of a pickle (a pickled model
re-reads the variable in the process that unpickles it).

Failures are translated here, at the boundary, into ``agentsim.errors``. Retried: 429, 500,
502, 503, 504, dropped or refused connections and timeouts, with exponential backoff and
full jitter (``uniform(0, min(backoff_max, backoff_base * 2**retry))``), or the server's
``Retry-After`` when it sends one (capped at ``backoff_max``).
"""

from __future__ import annotations

import _json
import asyncio
import email.utils
import json
import logging
import os
import random
import ssl
import time
import urllib.parse
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

from agentsim.errors import (
    ConfigError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
)
from agentsim.llm._http import (
    HTTPCertificateError,
    HTTPConnectionError,
    HTTPPool,
    HTTPProtocolError,
    HTTPReply,
)
from agentsim.llm.base import (
    Completion,
    Message,
    ToolCall,
    ToolSchema,
    Usage,
    make_completion,
    make_usage,
)
from agentsim.llm.limiter import RateLimiter
from agentsim.llm.stats import ModelStats, Prices

__all__ = ["RETRY_STATUSES", "OpenAIChatModel", "parse_completion"]

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_RESERVED = frozenset({"model", "messages", "tools", "tool_choice", "seed", "stream"})
_MAX_ERROR_TEXT = 500
_HTTP_FAILURES = (TimeoutError, HTTPConnectionError, HTTPProtocolError, HTTPCertificateError)
# The C encoder, built once and called directly: json.dumps (and JSONEncoder.encode) build a
# new one, and two Python frames, on every call. The output is json.dumps(body,
# ensure_ascii=False): the request is our own dicts and lists, so no check for circular
# references is needed.
_ENCODE = _json.make_encoder(
    None, json.JSONEncoder().default, _json.encode_basestring, None, ": ", ", ", False, False, True
)
# The C scanner of a JSONDecoder, called directly (see _decode_json).
_DECODER = json.JSONDecoder()
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


class _Retryable(Exception):
    """One failed attempt worth another try; ``wait`` is the server's Retry-After, if any."""

    def __init__(self, final: ModelError, wait: float | None = None) -> None:
        super().__init__(final)
        self.final = final
        self.wait = wait


def _close_with_loop(pool: HTTPPool) -> AsyncGenerator[None, None]:
    # A suspended async generator is closed by the loop's shutdown_asyncgens(), which
    # asyncio.run() and asyncio.Runner call before closing the loop: so a pool created in a
    # loop that ends (a test, one asyncio.run per phase) is closed inside that loop, while it
    # can still close its sockets, without the caller having to call aclose().
    async def guard() -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            pool.close()

    return guard()


@dataclass(frozen=True, slots=True, kw_only=True)
class _HeldPool:
    pool: HTTPPool
    loop: asyncio.AbstractEventLoop
    guard: AsyncGenerator[None, None]

    async def drop(self) -> None:
        current = asyncio.get_running_loop()
        if self.loop is current:
            await self.guard.aclose()
        elif self.loop.is_running():
            # Still serving another thread: close the pool there, in its own loop.
            asyncio.run_coroutine_threadsafe(self.guard.aclose(), self.loop)
        else:
            # Its loop has ended; the guard normally closed the pool already.
            self.pool.close()


class OpenAIChatModel:
    """A ``ChatModel`` speaking the OpenAI chat-completions API.

    ``base_url`` is the API root, as for the official client (``http://127.0.0.1:8000/v1``);
    requests go to ``{base_url}/chat/completions``. ``api_key_env`` names the environment
    variable holding the key; ``None`` sends no ``Authorization`` header (local servers).
    ``extra_params`` are added to every request body (e.g. ``top_p``). ``rng_seed`` seeds the
    backoff jitter (tests). ``stats`` collects usage, retries, errors, latency and (with
    ``prices``) cost. The connection pool is opened lazily in the running loop, re-opened if
    the loop changes, and closed by ``aclose()`` or when its loop ends. ``https`` base URLs
    verify the server against the system's CA store (OpenSSL's ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR`` select another one).

    Pickling ships the configuration only: the receiving process reads the key from its own
    environment and starts with a fresh ``stats`` and no limiter (both are per process).
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        limiter: RateLimiter | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_params: Mapping[str, Any] | None = None,
        prices: Prices | None = None,
        stats: ModelStats | None = None,
        rng_seed: int | None = None,
    ) -> None:
        if not model:
            raise ConfigError("model", "the model name is empty", "set it to the served model")
        _check_base_url(base_url)
        if not timeout > 0:
            raise ConfigError("timeout", f"must be > 0 seconds, got {timeout!r}")
        if max_retries < 0:
            raise ConfigError("max_retries", f"must be >= 0, got {max_retries!r}")
        if backoff_base < 0 or backoff_max < 0:
            raise ConfigError(
                "backoff_base", f"backoff must be >= 0, got {backoff_base!r} / {backoff_max!r}"
            )
        extra = dict(extra_params or {})
        clash = sorted(
            k
            for k in extra
            if k in _RESERVED
            or (k == "temperature" and temperature is not None)
            or (k == "max_tokens" and max_tokens is not None)
        )
        if clash:
            raise ConfigError(
                "extra_params",
                f"sets {', '.join(clash)}, which the model sets itself",
                "use the dedicated options (temperature, max_tokens) and drop the others",
            )
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.limiter = limiter
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_params: Mapping[str, Any] = extra
        self.prices = prices
        self.stats = stats if stats is not None else ModelStats()
        self._rng_seed = rng_seed
        self._rng = random.Random(rng_seed)
        self.__key = _read_key(api_key_env)
        parts = urllib.parse.urlsplit(self.base_url)
        self._tls = parts.scheme == "https"
        self._host = str(parts.hostname)
        self._port = parts.port or (443 if self._tls else 80)
        target = f"{parts.path.rstrip('/')}/chat/completions"
        if parts.query:
            target += f"?{parts.query}"
        auth = f"Authorization: Bearer {self.__key}\r\n" if self.__key else ""
        # Everything but the length is the same for every request: encode it once.
        self.__head = (
            f"POST {target} HTTP/1.1\r\nHost: {parts.netloc.rpartition('@')[2]}\r\n"
            "User-Agent: agentsim\r\nAccept: application/json\r\n"
            f"Content-Type: application/json\r\n{auth}Content-Length: "
        ).encode("latin-1")
        self._ssl_context: ssl.SSLContext | None = None
        self._where = f"model {model!r} at {self.base_url}"
        self._held: _HeldPool | None = None

    def __repr__(self) -> str:
        return (
            f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        # Ship the configuration, never the key: the receiving process reads its own env.
        return (_rebuild, (self._config(),))

    def _config(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "backoff_base": self.backoff_base,
            "backoff_max": self.backoff_max,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "extra_params": dict(self.extra_params),
            "prices": self.prices,
            "rng_seed": self._rng_seed,
        }

    @property
    def request_params(self) -> dict[str, Any]:
        """The sampling parameters sent with every request (part of a cache key)."""
        params = dict(self.extra_params)
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        return params

    def build_request(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> dict[str, Any]:
        """The JSON body sent for this request (no headers, so no key)."""
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "seed": seed}
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        # What request_params holds, without building that dict first.
        if self.extra_params:
            body.update(self.extra_params)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body

    # -- connection pool -----------------------------------------------------------------

    def _pool(self) -> HTTPPool | None:
        """The pool of the running loop, if it has one already (the fast path)."""
        held = self._held
        if held is not None and held.loop is asyncio.get_running_loop() and not held.pool.closed:
            return held.pool
        return None

    async def _new_pool(self) -> HTTPPool:
        loop = asyncio.get_running_loop()
        held, self._held = self._held, None
        if held is not None:
            await held.drop()
        if self._tls and self._ssl_context is None:
            # Loading the CA store takes milliseconds: once per model and process.
            self._ssl_context = ssl.create_default_context()
        pool = HTTPPool(
            host=self._host,
            port=self._port,
            timeout=self.timeout,
            ssl_context=self._ssl_context,
            loop=loop,
        )
        guard = _close_with_loop(pool)
        await anext(guard)
        self._held = _HeldPool(pool=pool, loop=loop, guard=guard)
        return pool

    async def aclose(self) -> None:
        """Close the HTTP connections (idempotent)."""
        held, self._held = self._held, None
        if held is not None:
            await held.drop()

    # -- the call ------------------------------------------------------------------------

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        seed: int = 0,
    ) -> Completion:
        body = self.build_request(messages, tools, seed=seed)
        data = "".join(_ENCODE(body, 0)).encode()
        del body  # not kept alive (and tracked by the GC) while the call waits
        # ~4 bytes per token is the usual rule of thumb; the tpm bucket is corrected after.
        estimate = len(data) // 4 + (self.max_tokens or 0)
        request = b"%b%d\r\n\r\n%b" % (self.__head, len(data), data)
        limiter = self.limiter
        track_tokens = limiter is not None and limiter.tpm is not None
        started = time.perf_counter()
        attempt = 0
        # One flat loop rather than helper coroutines: every await level costs a frame on
        # each of the thousands of calls per second this serves.
        while True:
            attempt += 1
            pool = self._pool() or await self._new_pool()
            permit = None if limiter is None else limiter.acquire(estimate)
            # The limiter's slot is taken and given back by the pool, around the exchange
            # alone: reading the answer happens outside the limit.
            exchange = pool.submit(request, permit)
            try:
                reply = await exchange.future
                if reply is None:
                    reply = await pool.send_on_new(exchange)
                completion = self._read(reply)
            except _HTTP_FAILURES as exc:
                failure = self._translate(exc)
            except _Retryable as exc:
                failure = exc
            except ModelError as exc:
                failure = exc
            else:
                if track_tokens and permit is not None:
                    permit.record_tokens(completion.usage.total_tokens)
                cost = self.prices.cost(completion.usage) if self.prices is not None else 0.0
                self.stats.record_call(completion.usage, time.perf_counter() - started, cost=cost)
                return completion
            finally:
                # A no-op once answered; otherwise (cancelled, failed before sending) it
                # drops the connection the answer may still come on, and frees the slot.
                exchange.abandon()
            if isinstance(failure, ModelError):
                self.stats.record_error()
                failure.attempts = attempt
                raise failure
            if attempt > self.max_retries:
                self.stats.record_error()
                failure.final.attempts = attempt
                raise failure.final from None
            delay = self._backoff(attempt, failure.wait)
            self.stats.record_retry()
            log.info(
                "model %r: attempt %d failed (%s); retrying in %.3f s",
                self.model,
                attempt,
                failure.final.message,
                delay,
            )
            await asyncio.sleep(delay)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(self.backoff_max, max(0.0, retry_after))
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        return self._rng.uniform(0.0, ceiling)

    def _translate(self, exc: Exception) -> _Retryable | ModelError:
        """An HTTP-level failure as the error to raise (or to retry on)."""
        where = self._where
        if isinstance(exc, TimeoutError):
            return _Retryable(
                ModelTimeoutError(
                    f"{where}: no answer within {self.timeout} s; raise the model timeout or "
                    "check that the server is not overloaded"
                )
            )
        if isinstance(exc, HTTPConnectionError):
            # Refused, reset, or dropped before or in the middle of the answer.
            return _Retryable(
                ModelError(
                    f"{where}: connection failed ({exc}); check that the server is running "
                    "and base_url is right"
                )
            )
        if isinstance(exc, HTTPCertificateError):
            return ModelError(
                f"{where}: the server's TLS certificate is not trusted ({exc}); check "
                "base_url, or point SSL_CERT_FILE at the CA bundle that signed it"
            )
        return ModelResponseError(
            f"{where}: unreadable HTTP answer ({exc}); check that base_url points at an "
            "OpenAI-compatible API"
        )

    def _read(self, reply: HTTPReply) -> Completion:
        """The completion in an answer; ``_Retryable`` or a ``ModelError`` if there is none."""
        raw = reply.body
        status = reply.status
        if status != 200:
            detail = self._scrub(_error_text(raw))
            err = ModelHTTPError(
                f"{self._where}: HTTP {status} {reply.reason}: {detail}; " + _http_fix(status)
            )
            if status in RETRY_STATUSES:
                raise _Retryable(err, _parse_retry_after(reply.headers.get("retry-after")))
            raise err
        try:
            payload = _decode_json(raw)
        except ValueError:
            snippet = self._scrub(raw[:200].decode("utf-8", "replace"))
            raise ModelResponseError(
                f"{self._where}: the answer is not JSON ({snippet!r}); check that base_url "
                "points at an OpenAI-compatible API (usually ending in /v1)"
            ) from None
        return parse_completion(payload, default_model=self.model, where=self._where)

    def _scrub(self, text: str) -> str:
        # A misbehaving proxy may echo the request headers back: never let the key through.
        return text.replace(self.__key, "***") if self.__key else text


def parse_completion(
    payload: Any, *, default_model: str = "", where: str = "model server"
) -> Completion:
    """Read an OpenAI chat-completion JSON object; ``ModelResponseError`` if it is not one."""
    # ``type(x) is dict`` first: JSON objects are dicts, and the ABC check costs more than
    # the rest of this function when thousands of answers arrive per second.
    if not (type(payload) is dict or isinstance(payload, Mapping)):
        raise _not_completion(where, f"a JSON {type(payload).__name__}, not an object")
    choices = payload.get("choices")
    if type(choices) is not list or not choices or not _is_object(choices[0]):
        raise _not_completion(where, "no 'choices'")
    choice = choices[0]
    message = choice.get("message")
    if not _is_object(message):
        raise _not_completion(where, "choices[0] has no 'message'")
    content = message.get("content")
    if content is not None and type(content) is not str:
        raise _not_completion(where, f"message.content is a {type(content).__name__}, not a string")
    raw_calls = message.get("tool_calls")
    calls: tuple[ToolCall, ...] = ()
    if raw_calls:
        calls = _parse_tool_calls(raw_calls, where)
    elif raw_calls is not None and type(raw_calls) is not list:
        raise _not_completion(where, "message.tool_calls is not a list")
    usage_raw = payload.get("usage")
    usage = _NO_USAGE
    if _is_object(usage_raw):
        try:
            usage = make_usage(
                int(usage_raw.get("prompt_tokens") or 0),
                int(usage_raw.get("completion_tokens") or 0),
            )
        except (TypeError, ValueError):
            raise _not_completion(where, "usage holds non-integer token counts") from None
    finish = choice.get("finish_reason")
    if type(finish) is not str:
        finish = "tool_calls" if calls else "stop"
    model = payload.get("model")
    return make_completion(
        content, calls, usage, finish, model if type(model) is str and model else default_model
    )


_NO_USAGE = Usage()


def _is_object(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return type(value) is dict or isinstance(value, Mapping)


def _parse_tool_calls(raw_calls: Any, where: str) -> tuple[ToolCall, ...]:
    if type(raw_calls) is not list:
        raise _not_completion(where, "message.tool_calls is not a list")
    calls: list[ToolCall] = []
    for i, raw in enumerate(raw_calls):
        fn = raw.get("function") if _is_object(raw) else None
        if not _is_object(fn) or not isinstance(fn.get("name"), str):
            raise _not_completion(where, f"tool_calls[{i}] has no function name")
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            # Some servers (Ollama's native mode) send the arguments already parsed.
            args = json.dumps(args, ensure_ascii=False)
        call_id = raw.get("id") if isinstance(raw.get("id"), str) else f"call_{i}"
        calls.append(ToolCall(id=call_id, name=fn["name"], arguments=args))
    return tuple(calls)


def _not_completion(where: str, problem: str) -> ModelResponseError:
    return ModelResponseError(
        f"{where}: the answer is not a chat completion ({problem}); check that the server "
        "implements POST /chat/completions"
    )


def _decode_json(raw: bytes) -> Any:
    """``json.loads`` for an answer body, minus the wrappers (encoding guess, two regex
    scans) that cost more than decoding a small answer: servers send UTF-8 (RFC 8259)."""
    text = raw.decode()
    if text[:1] != "{":
        return json.loads(text)  # leading whitespace, or not an object: the general path
    try:
        payload, end = _SCAN(text, 0)
    except StopIteration as exc:  # the scanner's "no value at exc.value" (raw_decode's too)
        raise ValueError(f"expecting a value at {exc.value}") from None
    if end != len(text) and text[end:].strip():
        raise ValueError(f"extra data after the JSON object at {end}")
    return payload


def _rebuild(config: dict[str, Any]) -> OpenAIChatModel:
    return OpenAIChatModel(**config)


def _check_base_url(base_url: str) -> None:
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            "base_url",
            f"{base_url!r} is not an http(s) URL",
            "use the API root of the server, e.g. http://127.0.0.1:8000/v1",
        )


def _read_key(env: str | None) -> str:
    if env is None:
        return ""
    key = os.environ.get(env)
    if not key:
        raise ModelError(
            f"the API key variable {env!r} is not set (or is empty); export {env}=<your key> "
            "in the shell that starts the run, or set api_key_env: null for a local server "
            "that needs no key"
        )
    return key


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _error_text(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    try:
        payload = json.loads(text)
    except ValueError:
        return text[:_MAX_ERROR_TEXT] or "(empty body)"
    if isinstance(payload, Mapping):
        err = payload.get("error")
        if isinstance(err, Mapping) and isinstance(err.get("message"), str):
            return str(err["message"])[:_MAX_ERROR_TEXT]
        if isinstance(err, str):
            return err[:_MAX_ERROR_TEXT]
    return text[:_MAX_ERROR_TEXT]


def _http_fix(status: int) -> str:
    if status in (401, 403):
        return "check the API key variable (api_key_env) and its permissions"
    if status == 404:
        return "check base_url (usually ending in /v1) and the model name"
    if status == 429:
        return "lower max_concurrency / rpm / tpm or raise max_retries"
    if status >= 500:
        return "the server failed; check its logs, or raise max_retries"
    return "check the request parameters (model, tools, extra_params)"
