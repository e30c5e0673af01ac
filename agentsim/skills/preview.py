"""What an experiment's agents would see of skills, before any run: ``ExperimentSkills``.

``agentsim.run.world.experiment_skills(config)`` builds it as a run builds its skills (the
same folders, disabled lists, MCP servers fetched through the same client and cache, and the
``SkillSpace`` the run's hosts share); ``agentsim skills list|show --experiment FILE`` prints
it. For each skill it answers where it comes from (``origin``), what it may do (``trust``)
and which groups' agents are offered it (``offers``); for each group, the catalog its agents
start with (``catalog``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from agentsim.errors import SkillNotFoundError
from agentsim.skills.catalog import RenderedCatalog
from agentsim.skills.mcp import McpServer, McpSkillDescriptor
from agentsim.skills.registry import SkillDescriptor, SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime
from agentsim.skills.space import SkillSpace

__all__ = ["ExperimentSkills", "GroupSkillLists"]


@dataclass(frozen=True, slots=True)
class GroupSkillLists:
    """One agent group's ``skills:`` lists, as its agents get them."""

    group: str
    default: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperimentSkills:
    """The skills of an experiment as its run would register them: ``registry`` (holding the
    connections to its MCP servers: ``close()`` it, or use ``with``), the ``space`` its
    agents share, its agent groups and its MCP servers."""

    experiment: str
    registry: SkillRegistry
    space: SkillSpace
    groups: tuple[GroupSkillLists, ...]
    servers: tuple[McpServer, ...] = ()

    def close(self) -> None:
        """End the connections to the MCP servers."""
        self.registry.close()

    def __enter__(self) -> ExperimentSkills:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def server_of(self, desc: SkillDescriptor) -> McpServer | None:
        """The configured server that served ``desc``, or None (a folder skill)."""
        if not isinstance(desc, McpSkillDescriptor):
            return None
        return next((s for s in self.servers if s.namespace == desc.namespace), None)

    def origin(self, desc: SkillDescriptor) -> dict[str, Any]:
        """Where ``desc`` comes from: ``{"kind": "folder", "path": ...}``, or ``{"kind":
        "mcp", "server": "skills.mcp.<i>", "url": ..., "command": ..., "uri": ...}``."""
        server = self.server_of(desc)
        if server is None or not isinstance(desc, McpSkillDescriptor):
            return {"kind": "folder", "path": desc.path}
        return {
            "kind": "mcp",
            "server": server.field,
            "url": server.url,
            "command": list(server.command) or None,
            "uri": desc.uri,
        }

    def trust(self, desc: SkillDescriptor) -> dict[str, Any]:
        """What ``desc`` may do in a run, as the run's ``SkillSpace`` decides it: ``trusted``
        (its ``!`cmd``` lines run: a trusted namespace, never an MCP server's skill),
        ``scripts`` (``none``: it has no script or hook; ``allowed``; ``refused``: an MCP
        skill whose server entry lacks ``scripts: true``), the ``isolation`` they run under
        (None unless allowed) and, when refused, why."""
        has_scripts = desc.manifest.script is not None or bool(desc.hooks)
        refusal = self.space.script_refusal(desc) if has_scripts else None
        scripts = "allowed" if refusal is None else "refused"
        if not has_scripts:
            scripts = "none"
        return {
            "trusted": self.space.runs_commands(desc),
            "scripts": scripts,
            "isolation": self.space.isolation(desc) if scripts == "allowed" else None,
            "refusal": refusal,
        }

    def _runtime(self, group: GroupSkillLists) -> AgentSkillRuntime:
        # Read only: nothing is activated or run, so its workspace is never written.
        return AgentSkillRuntime(
            self.space,
            agent_id=f"{group.group}-preview",
            workspace_root=Path(tempfile.gettempdir()),
            disabled=group.disabled,
        )

    def offers(self) -> dict[str, dict[str, Any]]:
        """Skill id -> which groups' agents are offered it (``offered_to``), which groups
        disable it (``disabled_for``), which activate it at the start (``default_for``), and
        why the run offers it to nobody (``unavailable``: a requirement the run does not
        meet), or None."""
        descs = self.registry.list_all()
        res = self.space.resolved(self.space.view)
        out: dict[str, dict[str, Any]] = {
            d.skill_id: {
                "offered_to": [],
                "disabled_for": [],
                "default_for": [],
                "unavailable": res.unmet.get(d.skill_id),
            }
            for d in descs
        }
        for group in self.groups:
            runtime = self._runtime(group)
            visible = {d.skill_id for d in runtime.visible()}
            for sid, entry in out.items():
                if sid in visible:
                    entry["offered_to"].append(group.group)
                elif entry["unavailable"] is None:
                    entry["disabled_for"].append(group.group)
            for name in group.default:
                try:
                    sid = self.registry.resolve(name).skill_id
                except SkillNotFoundError:  # a run of the experiment refuses it at its start
                    continue
                out[sid]["default_for"].append(group.group)
        return out

    def catalogs(self) -> Mapping[str, tuple[int, RenderedCatalog]]:
        """Group -> (how many skills its agents are offered, the ``<available_skills>``
        catalog they start with, before any skill is active)."""
        out: dict[str, tuple[int, RenderedCatalog]] = {}
        for group in self.groups:
            runtime = self._runtime(group)
            out[group.group] = (len(runtime.visible()), runtime.catalog())
        return out
