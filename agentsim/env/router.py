"""Routing ``ask_env(module, action, args)`` to the views of one tick, and building the
built-in modules by name."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agentsim.env.base import EnvAnswer, EnvModule, EnvView
from agentsim.env.city import CityModule
from agentsim.env.social import SocialModule
from agentsim.errors import EnvError

__all__ = ["BUILTIN_MODULES", "EnvRouter", "create_module"]

BUILTIN_MODULES: Mapping[str, type[EnvModule]] = MappingProxyType(
    {CityModule.name: CityModule, SocialModule.name: SocialModule}
)


def create_module(
    name: str,
    options: Mapping[str, Any],
    *,
    seed: int,
    base_dir: Path,
    config_path: str = "",
) -> EnvModule:
    """Build the module ``name`` (a reference: see ``agentsim.env.loader``); a bad reference
    or bad options raise ``ConfigError`` naming ``config_path`` (e.g. ``environment.0``)."""
    from agentsim.env.loader import resolve_module

    where = f"{config_path}.module" if config_path else "module"
    cls = resolve_module(name, base_dir=base_dir, where=where)
    return cls(options, seed=seed, base_dir=base_dir, config_path=config_path)


class EnvRouter:
    """The views of one tick, by module name, behind one ``ask`` entry point. Picklable."""

    __slots__ = ("_views",)

    def __init__(self, modules: Mapping[str, EnvView]) -> None:
        self._views = dict(modules)

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(self._views)

    def _view(self, module: str) -> EnvView:
        view = self._views.get(module)
        if view is None:
            known = ", ".join(self._views) or "none configured"
            raise EnvError(
                f"there is no environment module {module!r} (known: {known}); "
                "pass one of the known modules to ask_env"
            )
        return view

    def ask(
        self, agent_id: str, module: str, action: str, args: Mapping[str, Any], *, seq: int
    ) -> EnvAnswer:
        return self._view(module).query(agent_id, action, args, seq=seq)

    def observe(self, agent_id: str) -> str:
        """Every module's observation of the agent, one per line, in module order."""
        parts = (view.observe(agent_id) for view in self._views.values())
        return "\n".join(p for p in parts if p)

    def facts(self, agent_id: str) -> dict[str, Any]:
        """Every module's facts about the agent (``agent_facts``), merged in module order."""
        out: dict[str, Any] = {}
        for view in self._views.values():
            out.update(view.agent_facts(agent_id))
        return out

    def describe(self) -> dict[str, dict[str, str]]:
        """``{module: {action: doc}}`` for the ``ask_env`` tool's schema and enums."""
        return {name: dict(view.actions()) for name, view in self._views.items()}
