"""The world of a run, built from its experiment: agents, environment, skills, settings.

The engine, ``agentsim interview`` and the viewer's world page all build it here, so an
interview sees the agents, modules and catalog the run had (a copy of this set-up in the
interview once drifted: it offered skills the run had hidden).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentsim.agent.agent import AgentSettings
from agentsim.config.experiment import ExperimentConfig
from agentsim.config.profiles import AgentSpec, resolve_agents
from agentsim.env import create_module
from agentsim.env.base import AgentInfo, EnvModule
from agentsim.errors import ConfigError
from agentsim.events import EVENTS, EventType
from agentsim.hosts.host import SkillSources
from agentsim.hosts.protocol import build_registry, build_space
from agentsim.skills.mcp import McpServer
from agentsim.skills.preview import ExperimentSkills, GroupSkillLists
from agentsim.skills.scan import builtin_skills_dir

__all__ = [
    "DEFAULT_CUSTOM_SKILLS",
    "World",
    "build_world",
    "custom_skill_roots",
    "declared_events",
    "experiment_skills",
    "skill_sources",
]

DEFAULT_CUSTOM_SKILLS = "custom/skills"
"""Searched in every run when it exists (beside the YAML, else in the working folder, as any
relative path): dropping a skill there is enough."""


@dataclass(frozen=True, slots=True, kw_only=True)
class World:
    """What a run of one experiment is made of before its first tick. The modules are the
    live (mutable) environment state: set up with the agents, not yet restored."""

    agents: tuple[AgentSpec, ...]
    modules: Mapping[str, EnvModule]
    skills: SkillSources
    settings: AgentSettings
    # Every event type the run may log: the runtime's and its modules' own.
    events: Mapping[str, EventType] = field(default_factory=lambda: EVENTS)


def custom_skill_roots(config: ExperimentConfig, *, check: bool = True) -> tuple[str, ...]:
    """The custom skill folders of ``config``: each ``skills.paths`` entry, then
    ``custom/skills`` when it exists and is not listed. With ``check``, an entry that is not
    a folder raises ``ConfigError`` naming ``skills.paths.<i>``."""
    roots: list[str] = []
    for i, raw in enumerate(config.skills.paths):
        path = config.resolve_path(raw)
        if check and not path.is_dir():
            what = "is not a folder" if path.exists() else "does not exist"
            raise ConfigError(
                f"skills.paths.{i}",
                f"skills folder {raw!r} {what} (looked for {path})",
                "create it, fix the path, or remove the entry",
            )
        roots.append(str(path.absolute()))  # hosts may run in another folder (Ray)
    default = config.resolve_path(DEFAULT_CUSTOM_SKILLS).absolute()
    known = {os.path.realpath(r) for r in roots}
    if default.is_dir() and os.path.realpath(default) not in known:
        roots.append(str(default))
    return tuple(roots)


def skill_sources(
    config: ExperimentConfig, modules: Mapping[str, EnvModule], *, check: bool = False
) -> SkillSources:
    """Where a run of ``config`` with the environment ``modules`` finds its skills (``check``:
    see ``custom_skill_roots``)."""
    cfg = config.skills
    builtin = builtin_skills_dir() if cfg.builtin else None
    return SkillSources(
        builtin=str(builtin) if builtin else None,
        custom=custom_skill_roots(config, check=check),
        env=tuple((str(d), n) for n, m in modules.items() if (d := m.skills_dir()) is not None),
        catalog_budget_tokens=cfg.catalog_budget_tokens,
        trusted_namespaces=cfg.trusted_namespaces,
        modules=tuple(sorted(modules)),
        mcp=tuple(
            McpServer(
                namespace=server.namespace,
                url=server.url,
                command=server.command or (),
                scripts=server.scripts,
                timeout=server.timeout,
                field=f"skills.mcp.{i}",
            )
            for i, server in enumerate(cfg.mcp)
        ),
        mcp_cache=str(config.resolve_path(cfg.mcp_cache).absolute()) if cfg.mcp_cache else None,
    )


def build_world(
    config: ExperimentConfig, *, trace: str = "full", check_paths: bool = False
) -> World:
    """The agents of ``config``, its environment modules (set up with those agents, as
    before a first tick), where its skills come from, and the agents' step settings
    (``trace`` as the run records it). Bad module options raise ``ConfigError`` naming
    ``environment.<i>``; with ``check_paths`` (a new run) so does a ``skills.paths`` entry
    that is not a folder."""
    agents = tuple(resolve_agents(config))
    modules: dict[str, EnvModule] = {}
    for i, m in enumerate(config.environment):
        modules[m.name] = create_module(
            m.module,
            m.options,
            seed=config.seed,
            base_dir=config.source_dir,
            config_path=f"environment.{i}",
        )
    infos = [AgentInfo(agent_id=a.agent_id, group=a.group, profile=a.profile) for a in agents]
    for mod in modules.values():
        mod.setup(infos)
    settings = AgentSettings(
        max_react_turns=config.agent.max_react_turns,
        max_hook_retries=config.agent.max_hook_retries,
        memory_prompt_tokens=config.agent.memory_prompt_tokens,
        prompt_cap_tokens=config.agent.prompt_cap_tokens,
        trace=trace,
    )
    return World(
        agents=agents,
        modules=modules,
        skills=skill_sources(config, modules, check=check_paths),
        settings=settings,
        events=declared_events(modules),
    )


def experiment_skills(config: ExperimentConfig) -> ExperimentSkills:
    """The skills a run of ``config`` would register and offer its agents, built as the run
    builds them (its world's skill sources, the registry with each MCP server listed and its
    files fetched into the same cache, the space its hosts share). Raises ``ConfigError`` as
    the run's start does: a ``skills.paths`` entry that is not a folder, an MCP server that
    cannot be used (naming ``skills.mcp.<i>``). Close the result (``with``) to end the
    connections to its servers."""
    world = build_world(config, trace="off", check_paths=True)
    registry = build_registry(world.skills)
    return ExperimentSkills(
        experiment=config.source,
        registry=registry,
        space=build_space(world.skills, registry),
        groups=tuple(
            GroupSkillLists(g.group, g.skills.default, g.skills.disabled) for g in config.agents
        ),
        servers=world.skills.mcp,
    )


def declared_events(modules: Mapping[str, EnvModule]) -> Mapping[str, EventType]:
    """``agentsim.events.EVENTS`` and the modules' own event types; a module that declares
    a type already declared is a ``ConfigError`` naming both."""
    declared: dict[str, EventType] = dict(EVENTS)
    owner = dict.fromkeys(EVENTS, "agentsim.events")
    for i, (name, mod) in enumerate(modules.items()):
        for event in type(mod).EVENTS:
            if event.name in declared:
                raise ConfigError(
                    f"environment.{i}.module",
                    f"module {name!r} declares event type {event.name!r}, which "
                    f"{owner[event.name]} declares already",
                    f"give the module's event types names of their own (e.g. prefixed {name}_)",
                )
            declared[event.name] = event
            owner[event.name] = f"module {name!r}"
    return declared
