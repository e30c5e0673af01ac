"""The model check made before a run writes anything (``agentsim run`` does it unless given
``--no-preflight``): the server answers, accepts the key and serves the model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from agentsim.config.experiment import ModelConfig
from agentsim.errors import ModelError, PreflightError
from agentsim.llm.backends import backend_of

__all__ = ["check_model_caches", "needs_preflight", "preflight_model"]


def needs_preflight(cfg: ModelConfig) -> bool:
    """Whether the run may call a model server: a backend that calls servers, unless every
    answer comes from a recording (replay without fallthrough)."""
    replay_only = cfg.cache == "replay" and not cfg.cache_fallthrough
    return backend_of(cfg).serves and not replay_only


async def preflight_model(cfg: ModelConfig, *, run_dir: Path, name: str = "default") -> None:
    """Check the model of ``cfg`` as the run will build it (through its cache, when it has
    one). A missing key variable is a ``ConfigError``; a server that fails the check a
    ``PreflightError`` (exit code 2) naming what to fix."""
    from agentsim.llm.models import build_model, cache_file

    if not needs_preflight(cfg):
        return
    model = build_model(cfg, run_dir=run_dir, cache_file=cache_file(name))
    try:
        await model.preflight()
    except ModelError as exc:
        which = "" if name == "default" else f"model {name!r} (models.{name}): "
        raise PreflightError(f"{which}{exc} (--no-preflight skips this check)") from None
    finally:
        await model.aclose()


def check_model_caches(models: Mapping[str, ModelConfig], *, run_dir: Path) -> None:
    """Check every existing model-cache file the run will open (``agentsim.llm.cache``'s
    ``check_cache_file``): a damaged one is a ``ConfigError`` before anything is written."""
    from agentsim.llm.cache import check_cache_file
    from agentsim.llm.models import cache_file

    for name, cfg in models.items():
        if cfg.cache == "off":
            continue
        path = Path(cfg.cache_path) if cfg.cache_path else run_dir / cache_file(name)
        field = "model.cache_path" if name == "default" else f"models.{name}.cache_path"
        check_cache_file(path, field=field)
