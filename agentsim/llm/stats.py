"""Usage and cost accounting for model backends.

``ModelStats`` is mutable and lives in one process; hosts in other processes send
``snapshot()`` dicts to the driver, which folds them in with ``merge()``. Latencies are kept
as a histogram with logarithmic buckets rather than raw samples, so that memory stays constant
over millions of calls and merging snapshots is exact (percentiles are then estimates, within
one bucket width: about 5%).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentsim.llm.base import Usage

__all__ = ["ModelStats", "Prices"]

# Bucket i holds latencies in [_FLOOR * _RATIO**i, _FLOOR * _RATIO**(i+1)); below _FLOOR
# everything falls into bucket 0. 10 µs .. hours in ~400 buckets.
_FLOOR = 1e-5
_RATIO = 1.05
_LOG_RATIO = math.log(_RATIO)


@dataclass(frozen=True, slots=True, kw_only=True)
class Prices:
    """Prices per 1,000 tokens, in whatever currency the user reads them in.

    ``cached_prompt_per_1k`` is the price of a prompt token the server served from its
    prefix cache (hosted APIs bill them at 10-50% of the full price); ``None`` bills them
    at ``prompt_per_1k``."""

    prompt_per_1k: float
    completion_per_1k: float
    cached_prompt_per_1k: float | None = None

    def __post_init__(self) -> None:
        cached = self.cached_prompt_per_1k
        if self.prompt_per_1k < 0 or self.completion_per_1k < 0 or (cached or 0) < 0:
            raise ValueError(
                f"Prices must not be negative (got prompt_per_1k={self.prompt_per_1k}, "
                f"completion_per_1k={self.completion_per_1k}, cached_prompt_per_1k={cached}); "
                "use 0 for a free model"
            )

    def cost(self, usage: Usage) -> float:
        return self.cost_of(
            prompt=usage.prompt_tokens,
            completion=usage.completion_tokens,
            cached_prompt=usage.cached_prompt_tokens,
        )

    def cost_of(self, *, prompt: int, completion: int, cached_prompt: int = 0) -> float:
        """The cost of these token counts (``cached_prompt`` is part of ``prompt``)."""
        cached = min(cached_prompt, prompt)
        per_cached = (
            self.prompt_per_1k if self.cached_prompt_per_1k is None else (self.cached_prompt_per_1k)
        )
        return (
            (prompt - cached) * self.prompt_per_1k
            + cached * per_cached
            + completion * self.completion_per_1k
        ) / 1000.0


def _bucket_mid(index: int) -> float:
    # Geometric midpoint: the estimate is off by at most half a bucket width either way.
    return float(_FLOOR * _RATIO ** (index + 0.5))


class ModelStats:
    """Counters of one process's model calls. Safe to share between loops and threads."""

    __slots__ = (
        "_buckets",
        "_lock",
        "cached_prompt_tokens",
        "calls",
        "completion_tokens",
        "cost",
        "errors",
        "latency_count",
        "latency_max",
        "latency_min",
        "latency_sum",
        "prompt_tokens",
        "recovered_calls",
        "retries",
        "servers",
        "usage_invalid",
        "usage_missing",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.retries = 0
        self.errors = 0
        self.usage_missing = 0
        self.usage_invalid = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_prompt_tokens = 0
        # Tool calls the model wrote as text and the agents ran (``model.tool_calls``).
        self.recovered_calls = 0
        self.cost = 0.0
        self.latency_count = 0
        self.latency_sum = 0.0
        self.latency_min = math.inf
        self.latency_max = 0.0
        self._buckets: dict[int, int] = {}
        # Several servers for one model: each one's own attempts (calls, errors, latency).
        self.servers: dict[str, ModelStats] = {}

    def __repr__(self) -> str:
        return (
            f"ModelStats(calls={self.calls}, retries={self.retries}, errors={self.errors}, "
            f"prompt_tokens={self.prompt_tokens}, completion_tokens={self.completion_tokens}, "
            f"cached_prompt_tokens={self.cached_prompt_tokens}, cost={self.cost:.6g})"
        )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def record_call(self, usage: Usage, latency: float, *, cost: float = 0.0) -> None:
        """One successful call: its usage, wall-clock latency (retries included) and cost."""
        # The bucket (see _FLOOR), computed before taking the lock.
        index = int(math.log(latency / _FLOOR) / _LOG_RATIO) if latency > _FLOOR else 0
        with self._lock:
            self.calls += 1
            self.prompt_tokens += usage.prompt_tokens
            self.completion_tokens += usage.completion_tokens
            self.cached_prompt_tokens += usage.cached_prompt_tokens
            self.cost += cost
            self.latency_count += 1
            self.latency_sum += latency
            if latency < self.latency_min:
                self.latency_min = latency
            if latency > self.latency_max:
                self.latency_max = latency
            buckets = self._buckets
            buckets[index] = buckets.get(index, 0) + 1

    def record_recovered(self, calls: int) -> None:
        """``calls`` tool calls the model wrote as text, which a step read and ran."""
        with self._lock:
            self.recovered_calls += calls

    def record_retry(self) -> None:
        with self._lock:
            self.retries += 1

    def record_missing_usage(self) -> None:
        """An answer without token usage (its tokens are not in the sums)."""
        with self._lock:
            self.usage_missing += 1

    def record_invalid_usage(self) -> None:
        """An answer whose token usage could not be true (negative, or more than the
        request could cost): a server problem; its tokens are not in the sums."""
        with self._lock:
            self.usage_invalid += 1

    def record_error(self) -> None:
        """A call that failed for good (after its retries)."""
        with self._lock:
            self.errors += 1

    def _quantile(self, q: float) -> float | None:
        """Estimated latency quantile ``q`` in [0, 1], or None before the first call (the
        caller holds the lock)."""
        if self.latency_count == 0:
            return None
        rank = q * (self.latency_count - 1)
        seen = 0
        for index in sorted(self._buckets):
            seen += self._buckets[index]
            if seen > rank:
                # Clamp to what was really observed so tiny samples give sane numbers.
                return min(max(_bucket_mid(index), self.latency_min), self.latency_max)
        return self.latency_max  # pragma: no cover - the loop always returns

    def snapshot(self) -> dict[str, Any]:
        """A JSON-serialisable copy of every counter, for ``merge()`` in another process."""
        with self._lock:
            count = self.latency_count
            return {
                "calls": self.calls,
                "retries": self.retries,
                "errors": self.errors,
                "usage_missing": self.usage_missing,
                "usage_invalid": self.usage_invalid,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "cached_prompt_tokens": self.cached_prompt_tokens,
                "recovered_calls": self.recovered_calls,
                "cost": self.cost,
                "latency": {
                    "count": count,
                    "sum": self.latency_sum,
                    "mean": self.latency_sum / count if count else None,
                    "min": self.latency_min if count else None,
                    "max": self.latency_max if count else None,
                    "p50": self._quantile(0.5),
                    "p95": self._quantile(0.95),
                    "p99": self._quantile(0.99),
                    "buckets": {str(k): v for k, v in sorted(self._buckets.items())},
                },
                **(
                    {"servers": {u: s.snapshot() for u, s in sorted(self.servers.items())}}
                    if self.servers
                    else {}
                ),
            }

    def merge(self, other: Mapping[str, Any]) -> None:
        """Add the counters of a ``snapshot()`` taken elsewhere."""
        try:
            latency = other["latency"]
            buckets = {int(k): int(v) for k, v in latency["buckets"].items()}
            counts = {
                name: int(other[name])
                for name in ("calls", "retries", "errors", "prompt_tokens", "completion_tokens")
            }
            usage_missing = int(other.get("usage_missing", 0))
            usage_invalid = int(other.get("usage_invalid", 0))
            cached = int(other.get("cached_prompt_tokens", 0))
            recovered = int(other.get("recovered_calls", 0))
            cost = float(other["cost"])
            lat_count, lat_sum = int(latency["count"]), float(latency["sum"])
            lat_min, lat_max = latency["min"], latency["max"]
            servers = dict(other.get("servers", {}))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(
                f"cannot merge model stats: {exc!r} in the snapshot; pass the dict returned by "
                "ModelStats.snapshot() unchanged"
            ) from None
        with self._lock:
            self.calls += counts["calls"]
            self.retries += counts["retries"]
            self.errors += counts["errors"]
            self.usage_missing += usage_missing
            self.usage_invalid += usage_invalid
            self.prompt_tokens += counts["prompt_tokens"]
            self.completion_tokens += counts["completion_tokens"]
            self.cached_prompt_tokens += cached
            self.recovered_calls += recovered
            self.cost += cost
            if lat_count:
                self.latency_count += lat_count
                self.latency_sum += lat_sum
                self.latency_min = min(self.latency_min, float(lat_min))
                self.latency_max = max(self.latency_max, float(lat_max))
                for index, n in buckets.items():
                    self._buckets[index] = self._buckets.get(index, 0) + n
        for url, part in servers.items():
            self.servers.setdefault(url, ModelStats()).merge(part)
