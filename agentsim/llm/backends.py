"""The table of model backends: the name an experiment gives as ``model.backend`` -> how
its model is built. The model builder (``agentsim.llm.models``), the pre-flight, the
interview and (through the names it is given) the config validation all read it.

A backend that calls model servers gives ``server``: the ``ServedModel`` of one server from
the experiment's ``model:`` section, one of its base URLs and the parts every backend shares
(``Served``: the retries, the limiter, the prices and stats). The builder adds the rest: the
limits split between hosts, a ``ServerPool`` over ``base_urls``, record/replay and the
pre-flight. A backend that answers in-process gives ``local`` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentsim.config._sections import BACKENDS as _CONFIG_BACKENDS
from agentsim.config.experiment import ModelConfig
from agentsim.errors import ConfigError
from agentsim.llm.base import ChatModel
from agentsim.llm.limiter import RateLimiter
from agentsim.llm.served import ServedModel, Transport
from agentsim.llm.stats import ModelStats, Prices

__all__ = [
    "BACKENDS",
    "Backend",
    "Served",
    "backend_of",
    "register_backend",
    "unregister_backend",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Served:
    """What each server's model gets whatever its backend."""

    max_retries: int
    limiter: RateLimiter | None = None
    prices: Prices | None = None
    stats: ModelStats | None = None
    # Whether to send a typed survey answer's schema with the request: the backend can
    # (``Backend.response_format``) and ``model.response_format`` is on.
    response_format: bool = False

    def model(self, transport: Transport) -> ServedModel:
        """``transport`` with the retries, the limiter and the stats."""
        return ServedModel(
            transport,
            max_retries=self.max_retries,
            limiter=self.limiter,
            prices=self.prices,
            stats=self.stats,
        )


ServerFactory = Callable[[ModelConfig, str, Served], ServedModel]
LocalFactory = Callable[[ModelConfig, int], ChatModel]


@dataclass(frozen=True, slots=True, kw_only=True)
class Backend:
    """How one backend is built: ``server(cfg, base_url, served)`` for a backend that calls
    model servers (``model`` and ``base_url`` are then required, and the run checks the
    servers before it starts), or ``local(cfg, max_react_turns)`` for one that answers
    in-process.

    ``response_format``: the backend's wire can send a typed survey answer's JSON schema so
    that the server constrains the answer (``agentsim.llm.base.ANSWER_FORMAT``); its
    factory reads ``Served.response_format``, which the builder sets when this is true and
    ``model.response_format`` is on."""

    server: ServerFactory | None = None
    local: LocalFactory | None = None
    response_format: bool = False

    def __post_init__(self) -> None:
        if (self.server is None) == (self.local is None):
            raise ValueError("a Backend needs exactly one of server= or local=")

    @property
    def serves(self) -> bool:
        """Whether the backend calls model servers."""
        return self.server is not None


def _scripted(cfg: ModelConfig, max_react_turns: int) -> ChatModel:
    from agentsim.llm.scripted import ScriptedModel

    return ScriptedModel(max_suggestions=max(1, max_react_turns - 1))


def _openai(cfg: ModelConfig, base_url: str, served: Served) -> ServedModel:
    # Imported here: a scripted run (and a Ray host's start-up) never loads the HTTP stack.
    from agentsim.llm.openai import OpenAIChatModel

    assert cfg.model is not None  # checked by the config
    return OpenAIChatModel(
        model=cfg.model,
        base_url=base_url,
        api_key_env=cfg.api_key_env,
        timeout=cfg.timeout,
        max_retries=served.max_retries,
        limiter=served.limiter,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
        extra_params=cfg.extra_params,
        send_tools=cfg.tool_calls != "text",
        response_format=served.response_format,
        prices=served.prices,
        stats=served.stats,
    )


BACKENDS: dict[str, Backend] = {
    "scripted": Backend(local=_scripted),
    "openai": Backend(server=_openai, response_format=True),
}
"""Every backend, by name. Change it through ``register_backend``, which also tells the
config validation the name."""


def register_backend(name: str, backend: Backend) -> None:
    """Make ``model.backend: <name>`` build ``backend``, in this process (a Ray host builds
    its model in its own process: register there too, e.g. on import of a module both use)."""
    if name in BACKENDS:
        raise ConfigError(
            "model.backend", f"a backend named {name!r} exists already", "choose another name"
        )
    BACKENDS[name] = backend
    _CONFIG_BACKENDS[name] = backend.serves


def unregister_backend(name: str) -> None:
    """Forget a backend that ``register_backend`` added."""
    BACKENDS.pop(name, None)
    _CONFIG_BACKENDS.pop(name, None)


def backend_of(cfg: ModelConfig) -> Backend:
    """The backend the ``model:`` section names (the config checked that it is known)."""
    return BACKENDS[cfg.backend]
