"""Build the model a host uses from the experiment's ``model:`` section."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from agentsim.config.experiment import ModelConfig
from agentsim.llm.backends import Served, backend_of
from agentsim.llm.base import ChatModel, Completion, Message, ToolSchema, as_chat_model
from agentsim.llm.cache import CachedModel
from agentsim.llm.limiter import RateLimiter
from agentsim.llm.stats import ModelStats, Prices

__all__ = ["build_model", "cache_file"]


def cache_file(name: str) -> str:
    """The run folder's record/replay file of the model ``name`` (``default``: ``model:``)."""
    return "model_cache.sqlite" if name == "default" else f"model_cache-{name}.sqlite"


def build_model(
    cfg: ModelConfig,
    *,
    run_dir: Path,
    hosts: int = 1,
    stats: ModelStats | None = None,
    max_react_turns: int = 4,
    cache_file: str = "model_cache.sqlite",
) -> ChatModel:
    """The model of one host. Limits are split evenly between hosts so that the run as a
    whole respects the configured concurrency and rates."""
    backend = backend_of(cfg)
    inner: ChatModel | None
    if backend.local is not None:
        local = backend.local(cfg, max_react_turns)
        inner = local if stats is None else _Counted(local, stats)
        name = cfg.backend
    else:
        assert backend.server is not None and cfg.model is not None
        assert cfg.base_url or cfg.base_urls  # checked by the config
        limiter = RateLimiter(
            max_concurrency=max(1, cfg.max_concurrency // hosts),
            rpm=cfg.rpm / hosts if cfg.rpm else None,
            tpm=cfg.tpm / hosts if cfg.tpm else None,
        )
        prices = (
            Prices(
                prompt_per_1k=cfg.prices.prompt_per_1k,
                completion_per_1k=cfg.prices.completion_per_1k,
                cached_prompt_per_1k=cfg.prices.cached_prompt_per_1k,
            )
            if cfg.prices
            else None
        )
        # With several servers the pool retries, on another server.
        served = Served(
            max_retries=cfg.max_retries if cfg.base_urls is None else 0,
            limiter=limiter,
            prices=prices,
            stats=stats if cfg.base_urls is None else None,
            response_format=backend.response_format and cfg.response_format,
        )
        servers = [
            backend.server(cfg, url, served) for url in (cfg.base_urls or (cfg.base_url or "",))
        ]
        if cfg.base_urls is None:
            inner = servers[0]
        else:
            from agentsim.llm.pool import ServerPool

            inner = ServerPool(
                servers,
                stats=stats,
                prices=prices,
                max_retries=cfg.max_retries,
                backoff_base=cfg.server_backoff,
                backoff_max=max(cfg.server_backoff, 60.0),
            )
        name = cfg.model
    if cfg.cache == "off":
        return inner
    path = Path(cfg.cache_path) if cfg.cache_path else run_dir / cache_file
    if cfg.cache == "replay" and not cfg.cache_fallthrough:
        inner = None  # replay needs no model at all
    return CachedModel(
        inner,
        path=path,
        mode=cfg.cache,
        fallthrough=cfg.cache_fallthrough,
        model_name=name,
        params={
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
            **cfg.extra_params,  # they change the answers: part of the key
        },
    )


class _Counted(ChatModel):
    """Records the calls of a model that keeps no stats of its own (an in-process one, as
    the scripted model), so that ``metrics.json`` has a model block whatever the backend."""

    def __init__(self, inner: ChatModel, stats: ModelStats) -> None:
        self.inner = inner
        self.stats = stats

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        t0 = time.perf_counter()
        completion = await self.inner.complete(messages, tools, seed=seed)
        self.stats.record_call(completion.usage, time.perf_counter() - t0)
        return completion

    async def preflight(self) -> None:
        await as_chat_model(self.inner).preflight()

    async def aclose(self) -> None:
        await as_chat_model(self.inner).aclose()
