"""``OpenAIChatModel``: any OpenAI-compatible chat-completions server (vLLM, Ollama,
llama.cpp server, OpenAI) over aiohttp.

The API key is read once from the environment variable named in the config and lives in
one private attribute: it is never part of ``repr``, of an error message, of a log line or of
a pickle (a pickled model re-reads the variable in the process that unpickles it).

Failures are translated here, at the boundary, into ``agentsim.errors``. Retried: 429, 500,
502, 503, 504, dropped or refused connections and timeouts, with exponential backoff and
full jitter (``uniform(0, min(backoff_max, backoff_base * 2**retry))``), or the server's
``Retry-After`` when it sends one (capped at ``backoff_max``).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import random
import time
import urllib.parse
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from agentsim.errors import (
    ConfigError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
)
from agentsim.llm.base import Completion, Message, ToolCall, ToolSchema, Usage
from agentsim.llm.limiter import RateLimiter
from agentsim.llm.stats import ModelStats, Prices

__all__ = ["RETRY_STATUSES", "OpenAIChatModel", "parse_completion"]

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_RESERVED = frozenset({"model", "messages", "tools", "tool_choice", "seed", "stream"})
_MAX_ERROR_TEXT = 500


class _Retryable(Exception):
    """One failed attempt worth another try; ``wait`` is the server's Retry-After, if any."""

    def __init__(self, final: ModelError, wait: float | None = None) -> None:
        super().__init__(final)
        self.final = final
        self.wait = wait


async def _close_with_loop(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    # A suspended async generator is closed by the loop's shutdown_asyncgens(), which
    # asyncio.run() and asyncio.Runner call before closing the loop: so a session created
    # in a loop that ends (a test, one asyncio.run per phase) is closed inside that loop,
    # while it can still close its sockets, without the caller having to call aclose().
    try:
        yield
    finally:
        await session.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class _HeldSession:
    session: aiohttp.ClientSession
    loop: asyncio.AbstractEventLoop
    guard: AsyncGenerator[None, None]

    async def drop(self) -> None:
        current = asyncio.get_running_loop()
        if self.loop is current:
            await self.guard.aclose()
        elif self.loop.is_running():
            # Still serving another thread: close the session there, in its own loop.
            asyncio.run_coroutine_threadsafe(self.guard.aclose(), self.loop)
        else:
            # Its loop has ended; the guard normally closed the session already.
            await self.session.close()


class OpenAIChatModel:
    """A ``ChatModel`` speaking the OpenAI chat-completions API.

    ``base_url`` is the API root, as for the official client (``http://127.0.0.1:8000/v1``);
    requests go to ``{base_url}/chat/completions``. ``api_key_env`` names the environment
    variable holding the key; ``None`` sends no ``Authorization`` header (local servers).
    ``extra_params`` are added to every request body (e.g. ``top_p``). ``rng_seed`` seeds the
    backoff jitter (tests). ``stats`` collects usage, retries, errors, latency and (with
    ``prices``) cost. The HTTP session is opened lazily in the running loop, re-opened if the
    loop changes, and closed by ``aclose()`` or when its loop ends.

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
        self._url = f"{self.base_url}/chat/completions"
        self.__key = _read_key(api_key_env)
        self._headers = {"Content-Type": "application/json"}
        if self.__key:
            self._headers["Authorization"] = f"Bearer {self.__key}"
        self._held: _HeldSession | None = None

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
        body.update(self.request_params)
        return body

    # -- session -------------------------------------------------------------------------

    async def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        held = self._held
        if held is not None and held.loop is loop and not held.session.closed:
            return held.session
        if held is not None:
            self._held = None
            await held.drop()
        limit = 0
        if self.limiter is not None and self.limiter.max_concurrency is not None:
            limit = self.limiter.max_concurrency
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, limit_per_host=0),
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        guard = _close_with_loop(session)
        await anext(guard)
        self._held = _HeldSession(session=session, loop=loop, guard=guard)
        return session

    async def aclose(self) -> None:
        """Close the HTTP session (idempotent)."""
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
        data = json.dumps(body, ensure_ascii=False).encode()
        # ~4 bytes per token is the usual rule of thumb; the tpm bucket is corrected after.
        estimate = len(data) // 4 + (self.max_tokens or 0)
        started = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            try:
                completion = await self._attempt(data, estimate)
            except _Retryable as exc:
                if attempt > self.max_retries:
                    self.stats.record_error()
                    exc.final.attempts = attempt
                    raise exc.final from None
                delay = self._backoff(attempt, exc.wait)
                self.stats.record_retry()
                log.info(
                    "model %r: attempt %d failed (%s); retrying in %.3f s",
                    self.model,
                    attempt,
                    exc.final.message,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            except ModelError as exc:
                self.stats.record_error()
                exc.attempts = attempt
                raise
            cost = self.prices.cost(completion.usage) if self.prices is not None else 0.0
            self.stats.record_call(completion.usage, time.perf_counter() - started, cost=cost)
            return completion

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(self.backoff_max, max(0.0, retry_after))
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        return self._rng.uniform(0.0, ceiling)

    async def _attempt(self, data: bytes, estimate: int) -> Completion:
        session = await self._get_session()
        if self.limiter is None:
            return await self._post(session, data)
        async with self.limiter.acquire(estimate) as permit:
            completion = await self._post(session, data)
            permit.record_tokens(completion.usage.total_tokens)
            return completion

    async def _post(self, session: aiohttp.ClientSession, data: bytes) -> Completion:
        where = f"model {self.model!r} at {self.base_url}"
        try:
            async with session.post(self._url, data=data, headers=self._headers) as resp:
                raw = await resp.read()
                status = resp.status
                retry_after = resp.headers.get("Retry-After")
                reason = resp.reason or ""
        except TimeoutError:
            raise _Retryable(
                ModelTimeoutError(
                    f"{where}: no answer within {self.timeout} s; raise the model timeout or "
                    "check that the server is not overloaded"
                )
            ) from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            # Refused, reset, or dropped before or in the middle of the answer.
            raise _Retryable(
                ModelError(
                    f"{where}: connection failed ({type(exc).__name__}: {exc}); check that "
                    "the server is running and base_url is right"
                )
            ) from None
        except aiohttp.ClientError as exc:
            raise ModelResponseError(
                f"{where}: unreadable HTTP answer ({type(exc).__name__}: {exc}); check that "
                "base_url points at an OpenAI-compatible API"
            ) from None
        if status != 200:
            detail = self._scrub(_error_text(raw))
            err = ModelHTTPError(f"{where}: HTTP {status} {reason}: {detail}; " + _http_fix(status))
            if status in RETRY_STATUSES:
                raise _Retryable(err, _parse_retry_after(retry_after))
            raise err
        try:
            payload = json.loads(raw)
        except ValueError:
            snippet = self._scrub(raw[:200].decode("utf-8", "replace"))
            raise ModelResponseError(
                f"{where}: the answer is not JSON ({snippet!r}); check that base_url points "
                "at an OpenAI-compatible API (usually ending in /v1)"
            ) from None
        return parse_completion(payload, default_model=self.model, where=where)

    def _scrub(self, text: str) -> str:
        # A misbehaving proxy may echo the request headers back: never let the key through.
        return text.replace(self.__key, "***") if self.__key else text


def parse_completion(
    payload: Any, *, default_model: str = "", where: str = "model server"
) -> Completion:
    """Read an OpenAI chat-completion JSON object; ``ModelResponseError`` if it is not one."""

    def bad(problem: str) -> ModelResponseError:
        return ModelResponseError(
            f"{where}: the answer is not a chat completion ({problem}); check that the server "
            "implements POST /chat/completions"
        )

    if not isinstance(payload, Mapping):
        raise bad(f"a JSON {type(payload).__name__}, not an object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise bad("no 'choices'")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise bad("choices[0] has no 'message'")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise bad(f"message.content is a {type(content).__name__}, not a string")
    raw_calls = message.get("tool_calls")
    if raw_calls is None:
        raw_calls = []
    if not isinstance(raw_calls, list):
        raise bad("message.tool_calls is not a list")
    calls: list[ToolCall] = []
    for i, raw in enumerate(raw_calls):
        fn = raw.get("function") if isinstance(raw, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise bad(f"tool_calls[{i}] has no function name")
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            # Some servers (Ollama's native mode) send the arguments already parsed.
            args = json.dumps(args, ensure_ascii=False)
        call_id = raw.get("id") if isinstance(raw.get("id"), str) else f"call_{i}"
        calls.append(ToolCall(id=call_id, name=fn["name"], arguments=args))
    usage_raw = payload.get("usage")
    usage = Usage()
    if isinstance(usage_raw, Mapping):
        try:
            usage = Usage(
                prompt_tokens=int(usage_raw.get("prompt_tokens") or 0),
                completion_tokens=int(usage_raw.get("completion_tokens") or 0),
            )
        except (TypeError, ValueError):
            raise bad("usage holds non-integer token counts") from None
    finish = choices[0].get("finish_reason")
    if not isinstance(finish, str):
        finish = "tool_calls" if calls else "stop"
    model = payload.get("model")
    return Completion(
        content=content,
        tool_calls=tuple(calls),
        usage=usage,
        finish_reason=finish,
        model=model if isinstance(model, str) and model else default_model,
    )


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
