"""What the agents of one process share about skills: ``SkillSpace``.

The registry view (swapped on hot reload), the script runner, the catalog indexes and
their render cache, JSON-schema validators, and the settings (budget, trusted namespaces,
the allow-listed environment). ``AgentSkillRuntime`` (in ``runtime.py``) is the small
per-agent part that refers to it.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import jsonschema

from agentsim._tokens import estimate_tokens
from agentsim.skills.catalog import (
    CatalogIndex,
    RenderedCatalog,
    RunProvides,
    hidden_note,
    render_catalog,
    unmet_requirements,
)
from agentsim.skills.context import safe_env
from agentsim.skills.mcp import McpSkillDescriptor
from agentsim.skills.scripts.runner import Isolation, ScriptRunner

if TYPE_CHECKING:
    from agentsim.skills.registry import SkillDescriptor

__all__ = ["AGENT_NAMESPACE", "SkillSpace", "SkillView"]

AGENT_NAMESPACE = "agent"
"""The namespace of the skills in an agent's own ``custom/skills``: anything a script run for
that agent may have written, so never run with less than ``process`` isolation unless
trusted (see ``SkillSpace.isolation``)."""

_CATALOG_CACHE_SIZE = 1024
_HIDDEN_CACHE_SIZE = 256
_FRAME_SLACK = 64  # tokens for the catalog frame and the "omitted" note


class SkillView(Protocol):
    """The read API shared by a registry snapshot and an agent-scoped overlay."""

    @property
    def generation(self) -> int: ...
    def list_all(self) -> Sequence[SkillDescriptor]: ...
    def get(self, skill_id: str) -> SkillDescriptor: ...
    def read_skill_doc(self, skill_id: str) -> str: ...
    def read_skill_file(self, skill_id: str, relative_path: str) -> str: ...


class _Resolved:
    """Name/id resolution tables for one view; built once per view generation. ``unmet``:
    the skills whose requirements the run does not meet (id -> why), ``note`` the catalog's
    line about them."""

    __slots__ = ("by_handle", "by_id", "descriptors", "index", "note", "unmet")

    def __init__(
        self, descriptors: Sequence[SkillDescriptor], provides: RunProvides | None = None
    ) -> None:
        self.descriptors = {d.skill_id: d for d in descriptors}
        self.index = CatalogIndex.build(descriptors)
        self.by_handle = {e.handle: e.skill_id for e in self.index.entries}
        self.by_id = {e.skill_id: e.handle for e in self.index.entries}
        self.unmet = unmet_requirements(descriptors, provides) if provides else {}
        self.note = hidden_note(self.unmet, self.by_id)


class SkillSpace:
    """Everything about skills that the agents of one process share."""

    def __init__(
        self,
        view: SkillView,
        *,
        runner: ScriptRunner | None = None,
        catalog_budget_tokens: int = 2000,
        trusted_namespaces: Iterable[str] = ("built-in",),
        command_timeout: float = 5.0,
        hook_output_cap: int = 2000,
        environ: Mapping[str, str] | None = None,
        env_modules: Collection[str] | None = None,
    ) -> None:
        # None when no run is known (a bare space): requirements on modules and tools are
        # then not checked.
        self.provides = None if env_modules is None else RunProvides.for_modules(env_modules)
        self.runner = runner or ScriptRunner()
        self.catalog_budget_tokens = catalog_budget_tokens
        self.trusted_namespaces = frozenset(trusted_namespaces)
        self.command_timeout = command_timeout
        self.hook_output_cap = hook_output_cap
        self.env = safe_env(environ)
        self._view = view
        self._shared: tuple[SkillView, int, _Resolved] | None = None
        # Catalogs of the shared view by (resolution, situation, active, hidden), least
        # recently used dropped first. lru_cache's bookkeeping is thread-safe, where a
        # hand-kept OrderedDict could lose a key between a get and a move_to_end.
        self._cached_catalog = functools.lru_cache(maxsize=_CATALOG_CACHE_SIZE)(self._render)
        # Keyed by the schema object's id, holding the schema so that the id stays unique:
        # agents' own skills share ids (agent@x) but not schemas.
        self._validators: dict[tuple[int, str], tuple[object, Any]] = {}
        # (resolution, disabled names) -> hidden ids: agents of a group share one tuple of
        # disabled names, so a set-up of many agents computes this once per group.
        self._cached_hidden = functools.lru_cache(maxsize=_HIDDEN_CACHE_SIZE)(self._hide)

    @property
    def view(self) -> SkillView:
        return self._view

    def isolation(self, desc: SkillDescriptor) -> Isolation:
        """How ``desc``'s scripts and hooks run: as it declares, except that a skill found
        in an agent's own workspace (namespace ``agent``; a script of the run may have
        written it) runs under ``process`` isolation whatever it declares, unless the
        experiment trusts that namespace (``skills.trusted_namespaces``)."""
        if desc.namespace == AGENT_NAMESPACE and AGENT_NAMESPACE not in self.trusted_namespaces:
            return "process"
        if isinstance(desc, McpSkillDescriptor):
            return "process"  # served by an MCP server: untrusted, whatever it declares
        return desc.manifest.isolation

    def runs_commands(self, desc: SkillDescriptor) -> bool:
        """Whether the ``!`cmd``` lines of ``desc``'s body run: its namespace is trusted,
        and it is not a skill an MCP server served (those never run commands)."""
        return desc.namespace in self.trusted_namespaces and not isinstance(
            desc, McpSkillDescriptor
        )

    def script_refusal(self, desc: SkillDescriptor) -> str | None:
        """Why ``desc``'s scripts and hooks may not run here, or None: a skill an MCP
        server served runs them only where the experiment allows it for that server."""
        if isinstance(desc, McpSkillDescriptor) and not desc.scripts_allowed:
            return (
                f"skill {desc.skill_id} comes from an MCP server, and this experiment does not "
                f"let that server's scripts run (scripts: true on its skills.mcp entry allows "
                "them, under process isolation)"
            )
        return None

    def swap_view(self, view: SkillView) -> None:
        """Install a refreshed registry snapshot; agents see it from their next call on."""
        self._view = view
        self._shared = None
        self._cached_catalog.cache_clear()
        self._validators.clear()

    def resolved(self, view: SkillView) -> _Resolved:
        """Resolution tables of the shared view (rebuilt when its generation moves)."""
        hit = self._shared
        if hit is not None and hit[0] is view and hit[1] == view.generation:
            return hit[2]
        res = _Resolved(view.list_all(), self.provides)
        if view is self._view:
            self._shared = (view, view.generation, res)
        return res

    def catalog(
        self,
        res: _Resolved,
        *,
        situation: str,
        active: tuple[str, ...],
        hidden: frozenset[str],
        cache: bool = True,
    ) -> RenderedCatalog:
        """The catalog of ``res`` for one agent; cached for the shared view only, so that
        one agent's own skills can never reach another agent's prompt."""
        if self.fits(res, active):
            situation = ""  # everything fits: relevance cannot change the result
        if cache:
            return self._cached_catalog(res, situation, active, hidden)
        return self._render(res, situation, active, hidden)

    def _render(
        self, res: _Resolved, situation: str, active: tuple[str, ...], hidden: frozenset[str]
    ) -> RenderedCatalog:
        return render_catalog(
            res.index,
            budget_tokens=self.catalog_budget_tokens,
            query=situation,
            active=active,
            hidden=hidden,
            note=res.note,
        )

    def hidden_ids(self, res: _Resolved, disabled: tuple[str, ...]) -> frozenset[str]:
        """Ids of the skills that ``disabled`` names hide in ``res`` (a name hides every
        skill of that name, an id or handle the one skill), and of those whose requirements
        the run does not meet."""
        return self._cached_hidden(res, disabled)

    def _hide(self, res: _Resolved, disabled: tuple[str, ...]) -> frozenset[str]:
        hidden: set[str] = set(res.unmet)
        for name in disabled:
            if name in res.descriptors:
                hidden.add(name)
            hidden.update(sid for sid, d in res.descriptors.items() if d.manifest.name == name)
            sid = res.by_handle.get(name)
            if sid is not None:
                hidden.add(sid)
        return frozenset(hidden)

    def fits(self, res: _Resolved, active: Sequence[str]) -> bool:
        """Whether every skill of ``res`` fits the budget (relevance then plays no part)."""
        used = res.index.total_tokens + 4 * len(active) + _FRAME_SLACK
        return used + estimate_tokens(res.note) <= self.catalog_budget_tokens

    def validator(self, desc: SkillDescriptor, which: str) -> Any:
        """A JSON Schema validator for the skill's ``input``/``output`` schema, or None."""
        schema = desc.manifest.input_schema if which == "input" else desc.manifest.output_schema
        if schema is None:
            return None
        key = (id(schema), which)
        hit = self._validators.get(key)
        if hit is None or hit[0] is not schema:
            cls = jsonschema.validators.validator_for(schema)
            hit = self._validators[key] = (schema, cls(schema))
        return hit[1]
