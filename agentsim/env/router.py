"""Routing ``ask_env(module, action, args)`` to the views of one tick, and building the
built-in modules by name."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
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
    """The views of one tick, by module name, behind one ``ask`` entry point. Picklable.

    ``final``, given when the views were built before every agent's previous tick was
    applied (``executor.schedule: dependencies``), waits for the tick's complete views:
    ``aask`` uses them for actions marked ``reads_all``."""

    __slots__ = ("_final", "_views")

    def __init__(
        self,
        modules: Mapping[str, EnvView],
        *,
        final: Callable[[], Awaitable[Mapping[str, EnvView]]] | None = None,
    ) -> None:
        self._views = dict(modules)
        self._final = final

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

    async def aask(
        self, agent_id: str, module: str, action: str, args: Mapping[str, Any], *, seq: int
    ) -> EnvAnswer:
        """``ask``, but an action that reads what every agent wrote waits for the tick's
        complete views first (when these are not them)."""
        view = self._view(module)
        if self._final is not None and any(a.reads_all and a.name == action for a in view.ACTIONS):
            self._views = dict(await self._final())
            self._final = None
            view = self._view(module)
        return view.query(agent_id, action, args, seq=seq)

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
