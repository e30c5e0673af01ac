"""``ServedModel``: what every model behind a server gets, whatever its wire format.

A backend implements a ``Transport``: it turns a request into bytes, sends them, reads the
answer and maps each failure to ``agentsim.errors``, raising ``Retry`` around those worth
another try (a timeout, a dropped connection, a busy server, an answer of the wrong shape).
``ServedModel`` wraps a transport with the rest:

- retries with exponential backoff and full jitter (``uniform(0, min(backoff_max,
  backoff_base * 2**n))``), or the server's ``Retry-After`` when it sends one (capped at
  ``backoff_max``); an answer that is not a completion is retried once;
- the ``RateLimiter`` around each attempt (not around a whole retried call), its token
  bucket settled by the usage the server reports;
- ``ModelStats``: calls, usage, cost (with ``prices``), retries, errors, latency.

``ServerPool`` (several servers of one model) and ``CachedModel`` (record/replay) wrap any
``ChatModel``; ``agentsim.llm.backends`` builds the stack from an experiment's ``model:``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Sequence
from typing import NamedTuple

from agentsim.errors import ConfigError, ModelError
from agentsim.llm.base import ChatModel, Completion, Message, ToolSchema, Usage
from agentsim.llm.limiter import RateLimiter
from agentsim.llm.stats import ModelStats, Prices

__all__ = [
    "MAX_COMPLETION_TOKENS",
    "Answer",
    "Retry",
    "RetryPolicy",
    "ServedModel",
    "Transport",
    "believable_usage",
]

MAX_COMPLETION_TOKENS = 1_000_000
"""More completion tokens than any one answer holds, when the request sets no cap."""

# A prompt token stands for at least about one byte of the request; the chat template adds
# a few tokens per message. Twice the body plus this is more than any true count.
_TEMPLATE_TOKENS = 4096


def believable_usage(usage: Usage, *, body_bytes: int, max_completion: int) -> bool:
    """Whether a server's token counts could be true for a request of ``body_bytes``: none
    negative, the cached part within the prompt, the prompt within what the request could
    hold, the completion within ``max_completion``."""
    prompt, completion, cached = (
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cached_prompt_tokens,
    )
    return (
        0 <= cached <= prompt <= 2 * body_bytes + _TEMPLATE_TOKENS
        and 0 <= completion <= max_completion
    )


class Answer(NamedTuple):
    """What a transport read: the completion, and whether the server reported its usage
    (an answer without usage counts zero tokens and is counted in ``usage_missing``)."""

    completion: Completion
    usage_reported: bool = True


class Retry(Exception):
    """A failed attempt worth another try. ``wait``: the server's Retry-After in seconds;
    ``malformed``: the answer was not a completion (retried once only)."""

    def __init__(self, error: ModelError, *, wait: float | None = None, malformed: bool = False):
        super().__init__(error)
        self.error = error
        self.wait = wait
        self.malformed = malformed


class RetryPolicy:
    """How many attempts, and how long to wait between them (the jitter's generator is
    seeded with ``rng_seed``, for tests)."""

    def __init__(
        self,
        *,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        rng_seed: int | None = None,
    ) -> None:
        if max_retries < 0:
            raise ConfigError("max_retries", f"must be >= 0, got {max_retries!r}")
        if backoff_base < 0 or backoff_max < 0:
            raise ConfigError(
                "backoff_base", f"backoff must be >= 0, got {backoff_base!r} / {backoff_max!r}"
            )
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.rng_seed = rng_seed
        self._rng = random.Random(rng_seed)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 1)."""
        if retry_after is not None:
            return min(self.backoff_max, retry_after)
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        return self._rng.uniform(0.0, ceiling)


class Transport:
    """One server of a model, in its wire format. Subclasses implement ``encode`` and
    ``send``; ``estimate_tokens``, ``preflight`` and ``aclose`` have defaults.

    ``server`` names the server (its key in ``ModelStats.servers``); ``where`` starts the
    messages of the retry log."""

    server: str = ""
    where: str = "model"

    def encode(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, seed: int
    ) -> bytes:
        """The request body."""
        raise NotImplementedError

    def estimate_tokens(self, body: bytes) -> int:
        """Tokens the limiter books before the answer says (~4 bytes per token)."""
        return len(body) // 4

    def max_completion_tokens(self) -> int:
        """The most completion tokens one answer can hold (the request's own cap, if it
        sends one); usage above it is not believed."""
        return MAX_COMPLETION_TOKENS

    async def send(self, body: bytes) -> Answer:
        """One attempt: raise ``Retry`` around a ``ModelError`` worth another try, or the
        ``ModelError`` itself when none would help."""
        raise NotImplementedError

    async def preflight(self, retry: RetryPolicy) -> None:
        """Check the server before a run (a busy one may be given ``retry``'s waits)."""
        return None

    async def aclose(self) -> None:
        """Release the connections (idempotent)."""
        return None


class ServedModel(ChatModel):
    """A ``ChatModel`` over a ``Transport``, with retries, the limiter and stats.

    The log lines of its retries go to the logger of the transport's module (each backend's
    own)."""

    def __init__(
        self,
        transport: Transport,
        *,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        limiter: RateLimiter | None = None,
        prices: Prices | None = None,
        stats: ModelStats | None = None,
        rng_seed: int | None = None,
    ) -> None:
        self.retry = RetryPolicy(
            max_retries=max_retries,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            rng_seed=rng_seed,
        )
        self.transport = transport
        self.limiter = limiter
        self.prices = prices
        self.stats = stats if stats is not None else ModelStats()
        self._log = logging.getLogger(type(transport).__module__)

    @property
    def max_retries(self) -> int:
        return self.retry.max_retries

    @property
    def backoff_base(self) -> float:
        return self.retry.backoff_base

    @property
    def backoff_max(self) -> float:
        return self.retry.backoff_max

    @property
    def server(self) -> str:
        return self.transport.server

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        seed: int = 0,
    ) -> Completion:
        transport = self.transport
        body = transport.encode(messages, tools, seed=seed)
        estimate = transport.estimate_tokens(body)
        started = time.perf_counter()
        seen_malformed = False
        attempt = 0
        while True:
            attempt += 1
            try:
                completion = await self._attempt(body, estimate)
            except Retry as failure:
                give_up = attempt > self.retry.max_retries or (failure.malformed and seen_malformed)
                seen_malformed = seen_malformed or failure.malformed
                if give_up:
                    self.stats.record_error()
                    failure.error.attempts = attempt
                    failure.error.retryable = True
                    raise failure.error from None
                delay = self.retry.delay(attempt, failure.wait)
                self.stats.record_retry()
                self._log.info(
                    "%s: attempt %d failed (%s); retrying in %.3f s",
                    transport.where,
                    attempt,
                    failure.error.message,
                    delay,
                )
                await asyncio.sleep(delay)
            except ModelError as error:
                self.stats.record_error()
                error.attempts = attempt
                raise
            else:
                cost = self.prices.cost(completion.usage) if self.prices is not None else 0.0
                self.stats.record_call(completion.usage, time.perf_counter() - started, cost=cost)
                return completion

    async def _attempt(self, body: bytes, estimate: int) -> Completion:
        """One request, inside the limiter when there is one."""
        if self.limiter is None:
            return self._read(await self.transport.send(body), len(body))
        async with self.limiter.acquire(estimate) as permit:
            completion = self._read(await self.transport.send(body), len(body))
            reported = completion.usage.total_tokens
            # No usage in the answer: keep the estimate booked rather than give it all back.
            permit.record_tokens(reported if reported else estimate)
            return completion

    def _read(self, answer: Answer, body_bytes: int) -> Completion:
        completion = answer.completion
        if not answer.usage_reported:
            self.stats.record_missing_usage()
        elif not believable_usage(
            completion.usage,
            body_bytes=body_bytes,
            max_completion=self.transport.max_completion_tokens(),
        ):
            # A server problem, not a cost: counted, never summed, never settled into the
            # limiter (10**12 tokens would stop every later request for good).
            self.stats.record_invalid_usage()
            self._log.warning(
                "%s: unbelievable token usage %s ignored (counted in usage_invalid)",
                self.transport.where,
                completion.usage,
            )
            completion = dataclasses.replace(completion, usage=Usage())
        return completion

    async def preflight(self) -> None:
        await self.transport.preflight(self.retry)

    async def aclose(self) -> None:
        await self.transport.aclose()
