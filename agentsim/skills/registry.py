"""The skill registry: scanned roots -> an immutable snapshot of descriptors.

``SkillRegistry`` starts empty and is filled by ``scan_builtin`` / ``scan_custom`` /
``scan_env_skills``. Every scan and every ``refresh()`` builds a new ``RegistrySnapshot``
and swaps it in with one assignment, so a reader holding ``snapshot()`` never sees a half
update. ``view(agent_dir)`` overlays one agent's own skills (namespace ``agent``).

Ids are ``namespace@name``; the first registration of an id wins and the loser becomes a
diagnostic. ``find_by_name`` and ``list_all`` use the precedence agent, custom, built-in,
then ``env:<module>`` namespaces (alphabetically), then the name.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agentsim.errors import SkillError, SkillNotFoundError
from agentsim.skills.frontmatter import Diagnostic
from agentsim.skills.manifest import HOOK_TYPES
from agentsim.skills.scan import (
    DocCache,
    RootScan,
    SkillDescriptor,
    namespace_rank,
    read_doc,
    read_file,
    scan_root,
)

if TYPE_CHECKING:
    from agentsim.skills.mcp import McpSkillSource, RestoredMcpSource

__all__ = ["RefreshResult", "RegistrySnapshot", "SkillDescriptor", "SkillOverlay", "SkillRegistry"]

_HINT = "run `agentsim skills list` to see the registered skills"


@dataclass(frozen=True, slots=True, kw_only=True)
class RefreshResult:
    """What a scan or refresh changed. ``generation`` only moves when something did."""

    generation: int
    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    # Skills an edit broke since the last refresh: their last good version stays registered
    # (``RegistrySnapshot.broken`` says what is wrong).
    broken: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.added or self.changed or self.removed)


def _in_order(groups: Mapping[str, list[SkillDescriptor]]) -> tuple[SkillDescriptor, ...]:
    """Descriptors in precedence order: namespace rank, namespace, name."""
    ordered: list[SkillDescriptor] = []
    for namespace in sorted(groups, key=lambda ns: (namespace_rank(ns), ns)):
        ordered += sorted(groups[namespace], key=lambda d: d.manifest.name)
    return tuple(ordered)


def _cycles(starts: Iterable[str], known: Mapping[str, SkillDescriptor]) -> list[list[str]]:
    """Every elementary cycle found by a DFS over the ``requires`` graph, once each.
    ``starts`` are the names of skills that require something (no other is on a cycle)."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    for start in sorted(starts):
        if start in state:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = [start]
        state[start] = 1
        while stack:
            node, i = stack[-1]
            deps = known[node].manifest.required_skills
            if i == len(deps):
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            stack[-1] = (node, i + 1)
            dep = deps[i]
            if dep not in known:
                continue
            mark = state.get(dep)
            if mark == 1:
                cycle = path[path.index(dep) :]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    found.append([*cycle, dep])
            elif mark is None:
                state[dep] = 1
                stack.append((dep, 0))
                path.append(dep)
    return found


def _requires_diagnostics(
    descs: Iterable[SkillDescriptor], known: Mapping[str, SkillDescriptor]
) -> list[Diagnostic]:
    needy = [d for d in descs if d.manifest.required_skills]
    diags: list[Diagnostic] = []
    for desc in needy:
        for dep in desc.manifest.required_skills:
            if dep not in known:
                diags.append(
                    Diagnostic(
                        file=desc.skill_md,
                        line=1,
                        severity="warning",
                        message=f"requires {dep!r}, which is not registered; add that skill "
                        "or remove it from requires",
                    )
                )
    for cycle in _cycles([d.manifest.name for d in needy], known):
        first = known[cycle[0]]
        diags.append(
            Diagnostic(
                file=first.skill_md,
                line=1,
                message=f"requires cycle: {' -> '.join(cycle)}; remove one of these "
                "requires entries",
            )
        )
    return diags


class _Reads:
    """The read API shared by snapshots, the registry and agent views."""

    __slots__ = ()

    def _all(self) -> tuple[SkillDescriptor, ...]:
        raise NotImplementedError

    def _by_id(self, skill_id: str) -> SkillDescriptor | None:
        raise NotImplementedError

    def _by_name(self, name: str) -> tuple[SkillDescriptor, ...]:
        raise NotImplementedError

    def _docs(self) -> DocCache:
        raise NotImplementedError

    def list_all(self) -> tuple[SkillDescriptor, ...]:
        """Every visible skill, in precedence order (see the module docstring)."""
        return self._all()

    def _not_found(self, wanted: str) -> SkillNotFoundError:
        everything = self._all()
        ids = [d.skill_id for d in everything]
        exact = [d.skill_id for d in everything if d.manifest.name == wanted]
        close = exact or difflib.get_close_matches(
            wanted, ids + sorted({d.manifest.name for d in everything}), n=3
        )
        return SkillNotFoundError(wanted, close, _HINT)

    def get(self, skill_id: str) -> SkillDescriptor:
        """The skill with this id (``namespace@name``); raises ``SkillNotFoundError``."""
        desc = self._by_id(skill_id)
        if desc is None:
            raise self._not_found(skill_id)
        return desc

    def find_by_name(self, name: str) -> tuple[SkillDescriptor, ...]:
        """All skills named ``name``, highest precedence first; never empty."""
        found = self._by_name(name)
        if not found:
            raise self._not_found(name)
        return found

    def resolve(self, id_or_name: str) -> SkillDescriptor:
        """An id, or a bare name resolved to its highest-precedence skill."""
        if "@" in id_or_name:
            return self.get(id_or_name)
        return self.find_by_name(id_or_name)[0]

    def read_skill_doc(self, skill_id: str) -> str:
        """The Markdown body, cached per process and re-read when SKILL.md changed."""
        return read_doc(self.get(skill_id), self._docs())

    def read_skill_file(self, skill_id: str, relative_path: str) -> str:
        """A text file inside the skill folder; absolute paths, ``..`` and symlinks that
        leave the folder are refused with ``SkillFileError``."""
        return read_file(self.get(skill_id), relative_path)

    def list_hooks(self, hook_type: str) -> tuple[SkillDescriptor, ...]:
        """Skills declaring ``hook_type`` (pre_step / post_step), sorted by id."""
        if hook_type not in HOOK_TYPES:
            raise SkillError(f"unknown hook type {hook_type!r}; use one of {', '.join(HOOK_TYPES)}")
        hooked = [d for d in self._all() if d.hook_script(hook_type) is not None]
        return tuple(sorted(hooked, key=lambda d: d.skill_id))

    def __contains__(self, skill_id: object) -> bool:
        return isinstance(skill_id, str) and self._by_id(skill_id) is not None

    def __len__(self) -> int:
        return len(self._all())


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistrySnapshot(_Reads):
    """An immutable state of the registry; safe to hold while the registry refreshes."""

    generation: int
    scans: tuple[RootScan, ...]
    skills: Mapping[str, SkillDescriptor]
    diagnostics: tuple[Diagnostic, ...]
    docs: DocCache = field(default_factory=DocCache, compare=False, repr=False)
    ordered: tuple[SkillDescriptor, ...] = field(default=(), compare=False, repr=False)
    names: Mapping[str, tuple[SkillDescriptor, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def _all(self) -> tuple[SkillDescriptor, ...]:
        return self.ordered

    def _by_id(self, skill_id: str) -> SkillDescriptor | None:
        return self.skills.get(skill_id)

    def _by_name(self, name: str) -> tuple[SkillDescriptor, ...]:
        return self.names.get(name, ())

    def _docs(self) -> DocCache:
        return self.docs

    def snapshot(self) -> RegistrySnapshot:
        return self

    def shadowed(self) -> dict[str, str]:
        """Skill id -> the id that wins its bare name (same name, higher namespace)."""
        return {d.skill_id: ds[0].skill_id for ds in self.names.values() for d in ds[1:]}

    def refused(self) -> dict[str, Diagnostic]:
        """``namespace@<folder>`` -> the first error of each SKILL.md that is not
        registered in any version (a run leaves these skills out)."""
        out: dict[str, Diagnostic] = {}
        for scan in self.scans:
            for name, entry in scan.refused().items():
                errors = entry.errors or entry.diagnostics
                if errors:
                    out.setdefault(f"{scan.namespace}@{name}", errors[0])
        return out

    def broken(self) -> dict[str, Diagnostic]:
        """Skill id -> the first error of a SKILL.md an edit broke; the last good version
        of the skill stays registered until the file is fixed."""
        out: dict[str, Diagnostic] = {}
        for scan in self.scans:
            for name in scan.broken():
                entry = scan.entries[name]
                assert entry.skill is not None  # a stale entry keeps its last good skill
                errors = entry.errors or entry.diagnostics
                out.setdefault(entry.skill.skill_id, errors[0])
        return out

    def problem_of(self, namespace: str, folder: str) -> Diagnostic | None:
        """The first error of the skill folder ``folder`` in ``namespace``, if it has one."""
        for scan in self.scans:
            entry = scan.entries.get(folder) if scan.namespace == namespace else None
            if entry is not None and entry.errors:
                return entry.errors[0]
        return None

    def view(self, agent_skills_dir: str | os.PathLike[str] | None) -> SkillOverlay:
        """An agent-scoped overlay fixed on this snapshot."""
        return SkillOverlay(self, agent_skills_dir)


def _by_name(ordered: tuple[SkillDescriptor, ...]) -> dict[str, tuple[SkillDescriptor, ...]]:
    names: dict[str, tuple[SkillDescriptor, ...]] = {}
    for desc in ordered:
        names[desc.manifest.name] = (*names.get(desc.manifest.name, ()), desc)
    return names


def _snapshot(
    generation: int,
    scans: tuple[RootScan, ...],
    ordered: tuple[SkillDescriptor, ...],
    diagnostics: tuple[Diagnostic, ...],
    docs: DocCache,
) -> RegistrySnapshot:
    return RegistrySnapshot(
        generation=generation,
        scans=scans,
        skills={d.skill_id: d for d in ordered},
        diagnostics=diagnostics,
        docs=docs,
        ordered=ordered,
        names=_by_name(ordered),
    )


def _collision(loser: SkillDescriptor, winner: SkillDescriptor) -> Diagnostic:
    return Diagnostic(
        file=loser.skill_md,
        line=1,
        severity="warning",
        message=f"name collision: {loser.skill_id} and {winner.skill_id} ({winner.path}) are "
        f"both named {winner.manifest.name!r}; {winner.skill_id} wins the bare name, so call "
        f"this one by its id ({loser.skill_id}) or rename one of them",
    )


def _build(scans: tuple[RootScan, ...], generation: int, docs: DocCache) -> RegistrySnapshot:
    """A snapshot of ``scans``: the first registration of an id wins, later ones are
    reported; ``requires`` that name no skill, and cycles among them, are reported."""
    winners: dict[str, SkillDescriptor] = {}
    groups: dict[str, list[SkillDescriptor]] = {}
    diags: list[Diagnostic] = []
    for scan in scans:
        diags += scan.all_diagnostics()
        group = groups.setdefault(scan.namespace, [])
        for entry in scan.entries.values():
            desc = entry.skill
            if desc is None:
                continue
            first = winners.get(desc.skill_id)
            if first is None:
                winners[desc.skill_id] = desc
                group.append(desc)
                continue
            diags.append(
                Diagnostic(
                    file=desc.skill_md,
                    line=1,
                    message=f"duplicate skill id {desc.skill_id!r}: already registered from "
                    f"{first.path}, so this copy is ignored; rename one of them",
                )
            )
    ordered = _in_order(groups)
    first_by_name: dict[str, SkillDescriptor] = {}
    for desc in ordered:
        winner = first_by_name.setdefault(desc.manifest.name, desc)
        if winner is not desc:
            diags.append(_collision(desc, winner))
    diags.extend(_requires_diagnostics(first_by_name.values(), first_by_name))
    return _snapshot(generation, scans, ordered, tuple(diags), docs)


def _newly_broken(scan: RootScan, prev: RootScan) -> list[str]:
    """Ids of the skills of ``scan`` that an edit broke since ``prev`` (or broke again,
    differently)."""
    out = []
    for name in scan.broken():
        entry, before = scan.entries[name], prev.entries.get(name)
        if before is None or not before.stale or before.diagnostics != entry.diagnostics:
            assert entry.skill is not None
            out.append(entry.skill.skill_id)
    return out


def _prefixed(scan: RootScan, names: list[str]) -> tuple[str, ...]:
    return tuple(f"{scan.namespace}@{name}" for name in names)


class SkillRegistry(_Reads):
    """The registry a process shares. Construct empty, then call the ``scan_*`` methods."""

    __slots__ = ("_snap", "_sources")

    def __init__(self) -> None:
        self._snap = _snapshot(0, (), (), (), DocCache())
        # Roots that are not folders (MCP servers), by namespace; not pickled.
        self._sources: dict[str, McpSkillSource | RestoredMcpSource] = {}

    # -- filling ---------------------------------------------------------------------------

    def _add_root(self, path: str | os.PathLike[str], namespace: str) -> RefreshResult:
        old = self._snap
        scan, added, _, _ = scan_root(os.fspath(path), namespace)
        generation = old.generation + 1
        self._snap = _build((*old.scans, scan), generation, old.docs)
        return RefreshResult(generation=generation, added=_prefixed(scan, added))

    def scan_builtin(self, path: str | os.PathLike[str]) -> RefreshResult:
        """Register every skill under ``path`` as ``built-in@<name>``."""
        return self._add_root(path, "built-in")

    def scan_custom(self, path: str | os.PathLike[str]) -> RefreshResult:
        """Register every skill under ``path`` as ``custom@<name>``."""
        return self._add_root(path, "custom")

    def scan_env_skills(self, skills_dir: str | os.PathLike[str], env_name: str) -> RefreshResult:
        """Register an environment module's skills as ``env:<env_name>@<name>``."""
        if not env_name or "@" in env_name or ":" in env_name:
            raise SkillError(
                f"environment name {env_name!r} cannot be used in a skill id; use a plain "
                "module name such as 'city'"
            )
        return self._add_root(skills_dir, f"env:{env_name}")

    def add_mcp(self, source: McpSkillSource | RestoredMcpSource) -> RefreshResult:
        """Register the skills an MCP server lists as ``<namespace>@<name>`` (see
        ``agentsim.skills.mcp``); a server that cannot be reached raises ``ConfigError``."""
        old = self._snap
        scan, added, _, _ = source.scan()
        self._sources[source.namespace] = source
        generation = old.generation + 1
        self._snap = _build((*old.scans, scan), generation, old.docs)
        return RefreshResult(generation=generation, added=_prefixed(scan, added))

    def close(self) -> None:
        """Close the connections to MCP servers (a stdio server's process ends)."""
        for source in self._sources.values():
            source.close()

    def refresh(self) -> RefreshResult:
        """List every root again and stat each SKILL.md and declared script; re-read only
        what changed; swap in a new snapshot if anything did (the generation moves only
        then)."""
        old = self._snap
        scans: list[RootScan] = []
        added: list[str] = []
        changed: list[str] = []
        removed: list[str] = []
        broken: list[str] = []
        moved = False
        for prev in old.scans:
            source = self._sources.get(prev.namespace)
            if source is not None:
                scan, a, c, r = source.scan(prev)
            else:
                scan, a, c, r = scan_root(prev.root, prev.namespace, prev)
            scans.append(scan)
            added += _prefixed(scan, a)
            changed += _prefixed(scan, c)
            removed += _prefixed(scan, r)
            broken += _newly_broken(scan, prev)
            moved = moved or scan.diagnostics != prev.diagnostics
            moved = moved or any(e is not prev.entries.get(n) for n, e in scan.entries.items())
        if not (added or changed or removed or moved):
            return RefreshResult(generation=old.generation)  # every entry was reused
        generation = old.generation + 1
        self._snap = _build(tuple(scans), generation, old.docs)
        return RefreshResult(
            generation=generation,
            added=tuple(added),
            changed=tuple(changed),
            removed=tuple(removed),
            broken=tuple(broken),
        )

    # -- reading ---------------------------------------------------------------------------

    def snapshot(self) -> RegistrySnapshot:
        """The current immutable state."""
        return self._snap

    def view(self, agent_skills_dir: str | os.PathLike[str] | None) -> SkillOverlay:
        """An overlay with one agent's own skills; it follows this registry's refreshes."""
        return SkillOverlay(self, agent_skills_dir)

    @property
    def generation(self) -> int:
        return self._snap.generation

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return self._snap.diagnostics

    @property
    def roots(self) -> tuple[tuple[str, str], ...]:
        """(namespace, folder) of every scanned root, in scan order."""
        return tuple((s.namespace, s.root) for s in self._snap.scans)

    def _all(self) -> tuple[SkillDescriptor, ...]:
        return self._snap.ordered

    def _by_id(self, skill_id: str) -> SkillDescriptor | None:
        return self._snap.skills.get(skill_id)

    def _by_name(self, name: str) -> tuple[SkillDescriptor, ...]:
        return self._snap.names.get(name, ())

    def _docs(self) -> DocCache:
        return self._snap.docs

    def __getstate__(self) -> RegistrySnapshot:
        return self._snap

    def __setstate__(self, state: RegistrySnapshot) -> None:
        self._snap = state
        self._sources = {}


class SkillOverlay(_Reads):
    """One agent's view: the base skills plus ``agent_skills_dir`` as ``agent@<name>``.

    Nothing of the agent folder reaches the base or any other view. ``refresh()`` rescans
    the agent folder only; the base (a registry) refreshes on its own.
    """

    __slots__ = ("_agent", "_agent_gen", "_base", "_extra_diags", "_names", "_ordered")

    def __init__(
        self,
        base: SkillRegistry | RegistrySnapshot,
        agent_skills_dir: str | os.PathLike[str] | None,
    ) -> None:
        self._base = base
        self._agent: RootScan | None = None
        self._agent_gen = 0
        self._ordered: tuple[SkillDescriptor, ...] = ()
        self._names: dict[str, SkillDescriptor] = {}
        self._extra_diags: tuple[Diagnostic, ...] = ()
        if agent_skills_dir is not None:
            path = os.fspath(agent_skills_dir)
            if os.path.isdir(path):
                self._set(scan_root(path, "agent")[0])
            else:
                # A missing agent folder is normal (most agents have none); it may appear.
                self._agent = RootScan(root=path, namespace="agent", entries={})

    def _set(self, scan: RootScan) -> None:
        self._agent = scan
        descs = [e.skill for e in scan.entries.values() if e.skill is not None]
        self._ordered = tuple(descs)
        self._names = {d.manifest.name: d for d in descs}
        self._extra_diags = tuple(scan.all_diagnostics())

    def refresh(self) -> RefreshResult:
        """Rescan the agent folder (the base is refreshed through its registry)."""
        if self._agent is None:
            return RefreshResult(generation=self.generation)
        if not os.path.isdir(self._agent.root) and not self._agent.entries:
            return RefreshResult(generation=self.generation)
        scan, added, changed, removed = scan_root(self._agent.root, "agent", self._agent)
        if not (added or changed or removed):
            # The same entries; a root diagnostic (a link that leaves) may be new.
            if scan.diagnostics != self._agent.diagnostics:
                self._set(scan)
            return RefreshResult(generation=self.generation)
        self._set(scan)
        self._agent_gen += 1
        return RefreshResult(
            generation=self.generation,
            added=_prefixed(scan, added),
            changed=_prefixed(scan, changed),
            removed=_prefixed(scan, removed),
        )

    def own(self) -> tuple[SkillDescriptor, ...]:
        """The skills of the agent's own folder (namespace ``agent``), in folder order."""
        return self._ordered

    @property
    def agent_skills_dir(self) -> Path | None:
        return Path(self._agent.root) if self._agent is not None else None

    @property
    def generation(self) -> int:
        """Moves whenever the base or the agent folder changes (both only grow)."""
        return self._base.snapshot().generation + self._agent_gen

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        base = self._base.snapshot()
        if not self._ordered:
            return base.diagnostics + self._extra_diags
        known = {n: ds[0] for n, ds in base.names.items()}
        known.update(self._names)
        seen = set(base.diagnostics)
        own = [d for d in _requires_diagnostics(self._ordered, known) if d not in seen]
        return base.diagnostics + self._extra_diags + tuple(own)

    def snapshot(self) -> RegistrySnapshot:
        return self._base.snapshot()

    def _all(self) -> tuple[SkillDescriptor, ...]:
        base = self._base.snapshot().ordered
        return self._ordered + base if self._ordered else base

    def _by_id(self, skill_id: str) -> SkillDescriptor | None:
        if skill_id.startswith("agent@"):
            return self._names.get(skill_id[6:])
        return self._base.snapshot().skills.get(skill_id)

    def _by_name(self, name: str) -> tuple[SkillDescriptor, ...]:
        base = self._base.snapshot().names.get(name, ())
        own = self._names.get(name)
        return (own, *base) if own is not None else base

    def _docs(self) -> DocCache:
        return self._base.snapshot().docs
