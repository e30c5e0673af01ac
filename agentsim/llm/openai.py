"""``OpenAIChatModel``: any OpenAI-compatible chat-completions server (vLLM, Ollama,
llama.cpp server, OpenAI) over ``aiohttp`` (why aiohttp: ``agentsim.llm._clients``).

The HTTP client brings what users expect of one: proxies from the environment
(``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``), TLS verified against certifi's bundle (or
``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), keep-alive connections and timeouts. This module is
the wire format only (``OpenAIWire``): the request body, the answer, and the translation of
every failure into ``agentsim.errors`` (here, and nowhere else). The retries, the limiter
and the usage accounting are ``ServedModel``'s (``agentsim.llm.served``), as for any backend.

Worth another try (``Retry``): 429, 500, 502, 503, 504, dropped or refused connections,
timeouts, and an answer that is not a chat completion (not JSON, wrong shape).

The API key is read from the environment variable named by ``api_key_env`` and is never part
of ``repr``, an error message, a log line or a pickle (a pickled model re-reads the variable
in the process that unpickles it).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import aiohttp

from agentsim.errors import (
    ConfigError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
)
from agentsim.llm._clients import HTTPClients
from agentsim.llm._openai_format import error_text, http_fix, parse_completion, parse_retry_after
from agentsim.llm.base import ANSWER_FORMAT, Message, ToolSchema
from agentsim.llm.limiter import RateLimiter
from agentsim.llm.served import Answer, Retry, RetryPolicy, ServedModel, Transport
from agentsim.llm.stats import ModelStats, Prices

__all__ = [
    "MAX_RESPONSE_BYTES",
    "RETRY_STATUSES",
    "OpenAIChatModel",
    "OpenAIWire",
    "parse_completion",
]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RESPONSE_BYTES = 16 * 2**20
"""The largest answer read (16 MiB: a completion of a million tokens is about 4 MiB); a
larger one is refused as it arrives, never buffered whole."""
_JSON = {"Content-Type": "application/json"}
_RESERVED = frozenset({"model", "messages", "tools", "tool_choice", "seed", "stream"})


class _Reply(NamedTuple):
    """An HTTP answer, read whole."""

    status: int
    reason: str
    retry_after: str | None
    content: bytes


class _TooLarge(Exception):
    """An answer over the size cap (``size``: the bytes seen or announced)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class OpenAIWire(Transport):
    """One OpenAI-compatible server: ``{base_url}/chat/completions`` for the calls,
    ``GET {base_url}/models`` and a one-token completion for the pre-flight.

    Each event loop that calls it gets its own HTTP session (a session's connections belong
    to the loop that opened them; see ``agentsim.llm._clients``); ``aclose()`` closes them
    all."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_params: Mapping[str, Any] | None = None,
        send_tools: bool = True,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        response_format: bool = True,
    ) -> None:
        if not model:
            raise ConfigError("model", "the model name is empty", "set it to the served model")
        _check_base_url(base_url)
        if not timeout > 0:
            raise ConfigError("timeout", f"must be > 0 seconds, got {timeout!r}")
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
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_params: Mapping[str, Any] = extra
        # False for servers without tool support (``model.tool_calls: text``): the tools
        # are then described in the system message, and the body carries none.
        self.send_tools = send_tools
        # Whether a typed survey answer's schema goes with the request as
        # ``response_format`` (``model.response_format: false`` for servers that refuse it).
        self.response_format = response_format
        self.max_response_bytes = max_response_bytes
        self.__key = _read_key(api_key_env)
        self.server = self.base_url
        self.where = f"model {model!r} at {self.base_url}"
        headers = {"User-Agent": "agentsim", "Accept": "application/json"}
        if self.__key:
            headers["Authorization"] = f"Bearer {self.__key}"
        self._http = HTTPClients(headers=headers, timeout=timeout)
        self._url = f"{self.base_url}/chat/completions"

    def __repr__(self) -> str:
        return (
            f"OpenAIWire(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        # Ship the configuration, never the key: the receiving process reads its own env.
        return (_rebuild_wire, (self._config(),))

    def _config(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "timeout": self.timeout,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "extra_params": dict(self.extra_params),
            "send_tools": self.send_tools,
            "max_response_bytes": self.max_response_bytes,
            "response_format": self.response_format,
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
        if tools and self.send_tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        form = ANSWER_FORMAT.get() if self.response_format else None
        if form is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": dict(form)}
        body.update(self.request_params)
        return body

    def encode(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, seed: int
    ) -> bytes:
        body = self.build_request(messages, tools, seed=seed)
        return json.dumps(body, ensure_ascii=False).encode()

    def estimate_tokens(self, body: bytes) -> int:
        # ~4 bytes per token is the usual rule of thumb; the tpm bucket is settled after.
        return len(body) // 4 + (self.max_tokens or 0)

    def max_completion_tokens(self) -> int:
        # The server stops at max_tokens; a little slack for servers that count the end.
        if self.max_tokens is None:
            return super().max_completion_tokens()
        return 2 * self.max_tokens + 64

    async def aclose(self) -> None:
        """Close the HTTP sessions of every loop that used this server (idempotent)."""
        await self._http.aclose()

    # -- the call ------------------------------------------------------------------------

    async def send(self, body: bytes) -> Answer:
        return self._read(await self._post(body))

    async def _post(self, data: bytes) -> _Reply:
        try:
            async with self._http.session().post(self._url, data=data, headers=_JSON) as r:
                return _Reply(
                    r.status, r.reason or "", r.headers.get("Retry-After"), await self._body(r)
                )
        except _TooLarge as exc:
            raise Retry(self._too_large(exc.size), malformed=True) from None
        except TimeoutError:
            raise Retry(
                ModelTimeoutError(
                    f"{self.where}: no answer within {self.timeout} s; raise model.timeout "
                    "or check that the server is not overloaded"
                )
            ) from None
        except (
            aiohttp.ClientConnectionError,
            aiohttp.ClientPayloadError,  # the answer was cut off before its end
            aiohttp.ClientHttpProxyError,
        ) as exc:
            raise self._transport_error(exc) from None
        except aiohttp.ClientError as exc:  # e.g. a malformed status line or header
            raise ModelResponseError(
                f"{self.where}: unreadable HTTP answer ({exc}); check that base_url points "
                "at an OpenAI-compatible API"
            ) from None

    async def _body(self, response: aiohttp.ClientResponse) -> bytes:
        """The answer's body, read as it arrives; ``_TooLarge`` past ``max_response_bytes``
        (told by Content-Length before a byte is read, when the server sends it)."""
        cap = self.max_response_bytes
        declared = response.content_length
        if declared is not None and declared > cap:
            raise _TooLarge(declared)
        parts: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(1 << 16):
            size += len(chunk)
            if size > cap:
                raise _TooLarge(size)
            parts.append(chunk)
        return b"".join(parts)

    def _too_large(self, size: int) -> ModelResponseError:
        return ModelResponseError(
            f"{self.where}: the answer is larger than {self.max_response_bytes:,} bytes "
            f"(at least {size:,}); check that base_url points at an OpenAI-compatible API "
            "and that the server's max_tokens is sane"
        )

    def _transport_error(self, exc: aiohttp.ClientError) -> Retry | ModelError:
        """A failure below HTTP: what to raise, and whether it is worth another try."""
        where = self.where
        if _is_certificate_error(exc):
            return ModelError(
                f"{where}: the server's TLS certificate is not trusted ({exc}); check "
                "base_url, or point SSL_CERT_FILE at the CA bundle that signed it"
            )
        if isinstance(exc, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
            return ModelError(
                f"{where}: the proxy refused the connection ({exc}); check HTTPS_PROXY / "
                "HTTP_PROXY, or list the server's host in NO_PROXY"
            )
        # Refused, reset, or dropped before or in the middle of the answer.
        detail = str(exc) or type(exc).__name__
        return Retry(
            ModelError(
                f"{where}: connection failed ({detail}); check that the server is running "
                "and base_url is right"
            )
        )

    def _read(self, response: _Reply) -> Answer:
        """The completion in an answer; ``Retry`` or a ``ModelError`` if there is none."""
        status = response.status
        if status != 200:
            detail = self._scrub(error_text(response.content))
            error = ModelHTTPError(
                f"{self.where}: HTTP {status} {response.reason}: {detail}; " + http_fix(status)
            )
            if status in RETRY_STATUSES:
                raise Retry(error, wait=parse_retry_after(response.retry_after))
            raise error
        try:
            payload = json.loads(response.content)
        except ValueError:
            snippet = self._scrub(response.content[:200].decode("utf-8", "replace"))
            raise Retry(
                ModelResponseError(
                    f"{self.where}: the answer is not JSON ({snippet!r}); check that base_url "
                    "points at an OpenAI-compatible API (usually ending in /v1)"
                ),
                malformed=True,
            ) from None
        try:
            completion = parse_completion(payload, default_model=self.model, where=self.where)
        except ModelResponseError as exc:
            raise Retry(exc, malformed=True) from None
        return Answer(completion, isinstance(payload.get("usage"), Mapping))

    def _scrub(self, text: str) -> str:
        # A misbehaving proxy may echo the request headers back: never let the key through.
        return text.replace(self.__key, "***") if self.__key else text

    # -- pre-flight ----------------------------------------------------------------------

    async def preflight(self, retry: RetryPolicy) -> None:
        """Check, before a run writes anything, that the server answers, accepts the key and
        serves the model: ``GET /models``, or a one-token completion where the server has no
        model list. Raises a ``ModelError`` that names what to fix."""
        response = await self._preflight_request("GET", "/models", None, retry)
        if response.status in (401, 403):
            raise self._key_refused(response)
        served = _model_ids(response) if response.status == 200 else None
        if served is not None and self.model not in served:
            listed = ", ".join(sorted(served)[:20]) or "none"
            raise ModelError(
                f"pre-flight: the server at {self.base_url} does not serve model "
                f"{self.model!r} (it serves: {listed}); set model.model to one of those"
            )
        # A model list proves little (a catch-all page may look like one): one tiny chat
        # completion, read as the run will read every answer, does.
        await self._preflight_chat(retry)

    async def _preflight_chat(self, retry: RetryPolicy) -> None:
        body = {"model": self.model, "messages": [{"role": "user", "content": "ping"}]}
        response = await self._preflight_request(
            "POST", "/chat/completions", {**body, "max_tokens": 1}, retry
        )
        status = response.status
        if status == 200:
            try:
                parse_completion(
                    json.loads(response.content), default_model=self.model, where=self.where
                )
            except (ValueError, ModelResponseError):
                snippet = self._scrub(response.content[:120].decode("utf-8", "replace"))
                raise ModelResponseError(
                    f"pre-flight: {self.base_url} answered a one-token chat request with "
                    f"HTTP 200 but not a chat completion ({snippet!r}); check that base_url "
                    "is an OpenAI-compatible API root (usually ending in /v1)"
                ) from None
            return
        if status in (401, 403):
            raise self._key_refused(response)
        detail = self._scrub(error_text(response.content))
        if status in (400, 404):
            raise ModelHTTPError(
                f"pre-flight: {self.base_url} refused a one-token request for model "
                f"{self.model!r} (HTTP {status}: {detail}); check model.model, and that "
                "base_url is the API root (usually ending in /v1)"
            )
        raise ModelHTTPError(
            f"pre-flight: {self.base_url} answered HTTP {status} ({detail}); {http_fix(status)}"
        )

    async def _preflight_request(
        self, method: str, path: str, body: Mapping[str, Any] | None, retry: RetryPolicy
    ) -> _Reply:
        """One pre-flight request; a busy server (429, 5xx) is given the usual retries, an
        unreachable one is reported at once."""
        attempt = 0
        while True:
            attempt += 1
            try:
                session = self._http.session()
                async with session.request(method, f"{self.base_url}{path}", json=body) as r:
                    response = _Reply(
                        r.status, r.reason or "", r.headers.get("Retry-After"), await self._body(r)
                    )
            except _TooLarge as exc:
                raise ModelResponseError(f"pre-flight: {self._too_large(exc.size)}") from None
            except (TimeoutError, aiohttp.ClientError) as exc:
                detail = str(exc) or type(exc).__name__
                raise ModelError(
                    f"pre-flight: cannot reach the model server at {self.base_url} ({detail}); "
                    "start the server or fix model.base_url (behind a proxy: check "
                    "HTTPS_PROXY / HTTP_PROXY / NO_PROXY)"
                ) from None
            if response.status not in RETRY_STATUSES or attempt > retry.max_retries:
                return response
            wait = parse_retry_after(response.retry_after)
            await asyncio.sleep(retry.delay(attempt, wait))

    def _key_refused(self, response: _Reply) -> ModelHTTPError:
        detail = self._scrub(error_text(response.content))
        if self.api_key_env is None:
            fix = "the server wants an API key: set model.api_key_env to the variable holding it"
        else:
            fix = f"check the key in ${self.api_key_env} (a valid key, with access to the model)"
        return ModelHTTPError(
            f"pre-flight: {self.base_url} refused the API key (HTTP {response.status}: "
            f"{detail}); {fix}"
        )


class OpenAIChatModel(ServedModel):
    """A ``ChatModel`` speaking the OpenAI chat-completions API: ``ServedModel`` (retries,
    limiter, stats) over an ``OpenAIWire``.

    ``base_url`` is the API root, as for the official client (``http://127.0.0.1:8000/v1``);
    requests go to ``{base_url}/chat/completions``. ``api_key_env`` names the environment
    variable holding the key; ``None`` sends no ``Authorization`` header (local servers).
    ``extra_params`` are added to every request body (e.g. ``top_p``). ``send_tools=False``
    leaves the tool schemas out of the body (servers without tool support).
    ``response_format=False`` never sends a typed survey answer's schema (servers that
    refuse ``response_format``). ``rng_seed`` seeds the
    backoff jitter (tests). ``stats`` collects usage, retries, errors, latency and (with
    ``prices``) cost.

    Pickling ships the configuration only: the receiving process reads the key from its own
    environment and starts with a fresh ``stats`` and no limiter (both are per process).
    """

    transport: OpenAIWire

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
        send_tools: bool = True,
        prices: Prices | None = None,
        stats: ModelStats | None = None,
        rng_seed: int | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        response_format: bool = True,
    ) -> None:
        wire = OpenAIWire(
            model=model,
            base_url=base_url,
            api_key_env=api_key_env,
            timeout=timeout,
            temperature=temperature,
            max_tokens=max_tokens,
            extra_params=extra_params,
            send_tools=send_tools,
            max_response_bytes=max_response_bytes,
            response_format=response_format,
        )
        super().__init__(
            wire,
            max_retries=max_retries,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            limiter=limiter,
            prices=prices,
            stats=stats,
            rng_seed=rng_seed,
        )
        self.model = wire.model
        self.base_url = wire.base_url
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_params = wire.extra_params
        self._http = wire._http

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
            **self.transport._config(),
            "max_retries": self.max_retries,
            "backoff_base": self.backoff_base,
            "backoff_max": self.backoff_max,
            "prices": self.prices,
            "rng_seed": self.retry.rng_seed,
        }

    @property
    def request_params(self) -> dict[str, Any]:
        """The sampling parameters sent with every request (part of a cache key)."""
        return self.transport.request_params

    def build_request(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> dict[str, Any]:
        """The JSON body sent for this request (no headers, so no key)."""
        return self.transport.build_request(messages, tools, seed=seed)

    async def aclose(self) -> None:
        """Close the HTTP sessions of every loop that used this model (idempotent)."""
        await self.transport.aclose()


def _model_ids(response: _Reply) -> set[str] | None:
    """The ids of a ``GET /models`` answer, or None if it is not a model list."""
    try:
        data = json.loads(response.content).get("data")
    except (ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    return {str(m["id"]) for m in data if isinstance(m, Mapping) and "id" in m}


def _is_certificate_error(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return True
        cause = cause.__cause__ or cause.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _rebuild(config: dict[str, Any]) -> OpenAIChatModel:
    return OpenAIChatModel(**config)


def _rebuild_wire(config: dict[str, Any]) -> OpenAIWire:
    return OpenAIWire(**config)


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
        raise ConfigError(
            "model.api_key_env",
            f"the API key variable {env} is not set (or is empty)",
            f"export {env}=<your key> in the shell that starts the run, or set "
            "api_key_env: null for a local server that needs no key",
        )
    return key
