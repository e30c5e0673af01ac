"""Scanning one skills root into descriptors, and re-scanning it on refresh.

A root is listed with ``os.scandir``; every sub-folder holding a ``SKILL.md`` is read with
``manifest.read_skill``. Each entry keeps a stamp: the stat of its ``SKILL.md`` and of the
scripts it declares. A refresh lists the root again (so added and removed folders show),
stats each ``SKILL.md`` and declared script, and reads again only the skills whose stamp
moved. Nothing here raises on a bad folder: problems are diagnostics.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsim.skills._frontmatter import Diagnostic, cannot_read
from agentsim.skills.manifest import SkillFile, SkillManifest, read_skill

__all__ = ["NAMESPACE_ORDER", "Entry", "RootScan", "SkillDescriptor", "namespace_rank", "scan_root"]

NAMESPACE_ORDER = ("agent", "custom", "built-in")
"""Precedence of namespaces for bare names; ``env:<module>`` namespaces come last."""


def namespace_rank(namespace: str) -> int:
    try:
        return NAMESPACE_ORDER.index(namespace)
    except ValueError:
        return len(NAMESPACE_ORDER)


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillDescriptor:
    """A registered skill: where it is, under which id, and its parsed frontmatter.

    The body is not kept: it is read on activation. The frontmatter fields are readable
    directly on the descriptor (``desc.timeout`` is ``desc.manifest.timeout``).
    """

    skill_id: str
    namespace: str
    path: str
    manifest: SkillManifest = field(hash=False)  # holds dicts: hashed by id and path
    body_line: int = 1

    @classmethod
    def create(
        cls, namespace: str, path: str, manifest: SkillManifest, body_line: int = 1
    ) -> SkillDescriptor:
        return cls(
            skill_id=f"{namespace}@{manifest.name}",
            namespace=namespace,
            path=path,
            manifest=manifest,
            body_line=body_line,
        )

    # The frontmatter fields, read through. ``isolation`` and ``status`` are typed ``str``
    # as before, so that callers' casts to the literal types stay meaningful.

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def description(self) -> str:
        return self.manifest.description

    @property
    def script(self) -> str | None:
        return self.manifest.script

    @property
    def tags(self) -> tuple[str, ...]:
        return self.manifest.tags

    @property
    def requires(self) -> tuple[str, ...]:
        return self.manifest.requires

    @property
    def timeout(self) -> float | None:
        return self.manifest.timeout

    @property
    def isolation(self) -> str:
        return self.manifest.isolation

    @property
    def status(self) -> str:
        return self.manifest.status

    @property
    def input_schema(self) -> dict[str, Any] | None:
        return self.manifest.input_schema

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return self.manifest.output_schema

    @property
    def idempotent(self) -> bool:
        return self.manifest.idempotent

    @property
    def retries(self) -> int:
        return self.manifest.retries

    @property
    def version(self) -> str | None:
        return self.manifest.version

    @property
    def license(self) -> str | None:
        return self.manifest.license

    @property
    def compatibility(self) -> str | None:
        return self.manifest.compatibility

    @property
    def metadata(self) -> dict[str, str] | None:
        return self.manifest.metadata

    @property
    def allowed_tools(self) -> tuple[str, ...] | None:
        return self.manifest.allowed_tools

    @property
    def hooks(self) -> tuple[tuple[str, str], ...]:
        """(hook type, relative script) of every declared hook, pre_step first."""
        return tuple((kind, rel) for kind, rel in self.manifest.hooks if rel is not None)

    def hook_script(self, hook_type: str) -> str | None:
        """The relative script declared for ``hook_type``, or None."""
        rel: str | None = getattr(self.manifest.hooks, hook_type, None)
        return rel

    def script_path(self, rel: str | None = None) -> Path:
        """Absolute path of ``rel`` (default: the skill's ``script``) inside the skill."""
        target = rel if rel is not None else self.manifest.script
        if target is None:
            raise ValueError(
                f"skill {self.skill_id!r} declares no script; pass the relative path of one"
            )
        return Path(self.path, target)

    @property
    def skill_md(self) -> str:
        return os.path.join(self.path, "SKILL.md")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (used by ``agentsim skills list --json``)."""
        fields = self.manifest.model_dump(mode="json", exclude={"extra", "hooks"})
        return {
            "skill_id": self.skill_id,
            "namespace": self.namespace,
            "path": self.path,
            **fields,
            "hooks": dict(self.hooks),
        }


Stamp = tuple[tuple[int, ...] | None, ...]
"""How a skill's files looked when it was read: SKILL.md first, then each declared script."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One skill folder of a root: its descriptor (None when it is broken) and problems."""

    stamp: Stamp
    scripts: tuple[str, ...]
    skill: SkillDescriptor | None
    diagnostics: tuple[Diagnostic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RootScan:
    """One scanned root: its entries by folder name (sorted) and root-level diagnostics."""

    root: str
    namespace: str
    entries: dict[str, Entry]
    diagnostics: tuple[Diagnostic, ...] = ()

    def all_diagnostics(self) -> list[Diagnostic]:
        """The root's and its entries' diagnostics, in folder order."""
        found = [*self.diagnostics]
        for entry in self.entries.values():
            found += entry.diagnostics
        return sorted(found, key=lambda d: d.file)  # stable: a file's lines stay in order


def _file_stamp(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _script_stamps(folder: str, scripts: tuple[str, ...]) -> Stamp:
    out: list[tuple[int, ...] | None] = []
    for rel in scripts:
        try:
            out.append(_file_stamp(os.stat(os.path.join(folder, rel))))
        except OSError:
            out.append(None)
    return tuple(out)


def _entry(folder: str, namespace: str, md_stamp: tuple[int, ...] | None) -> Entry:
    """Read the skill in ``folder`` (whose SKILL.md exists) into an entry."""
    md = os.path.join(folder, "SKILL.md")
    got: SkillFile = read_skill(md)
    read_stamp = _file_stamp(got.stat) if got.stat is not None else md_stamp
    parsed = got.parsed
    skill = None
    if parsed.manifest is not None:
        skill = SkillDescriptor.create(namespace, folder, parsed.manifest, parsed.body_line)
    return Entry(
        stamp=(read_stamp, *_script_stamps(folder, got.scripts)),
        scripts=got.scripts,
        skill=skill,
        diagnostics=parsed.diagnostics,
    )


def _leaves(path: str, real_root: str) -> bool:
    real = os.path.realpath(path)
    return not (real == real_root or real.startswith(real_root + os.sep))


def _skipped_link(path: str) -> Diagnostic:
    return Diagnostic(
        file=path,
        line=0,
        severity="warning",
        message="skipped: this symlink leaves the skills root; copy the skill into the "
        "root instead of linking it",
    )


def _broken_folder(path: str, exc: OSError) -> Diagnostic:
    return Diagnostic(
        file=path,
        line=0,
        severity="warning",
        message=f"skipped: cannot open this skill folder ({exc.strerror}); fix or remove the "
        "symlink",
    )


class _Walk:
    """One pass over a root: the entries found and the root-level diagnostics."""

    def __init__(self, root: str, namespace: str, old: dict[str, Entry]) -> None:
        self.root = root
        self.namespace = namespace
        self.old = old
        self.real_root = os.path.realpath(root)
        self.entries: dict[str, Entry] = {}
        self.diagnostics: list[Diagnostic] = []

    def visit(self, item: os.DirEntry[str]) -> None:
        name, folder = item.name, item.path
        if name[0] in "._":
            return
        if item.is_symlink():
            if _leaves(folder, self.real_root):
                self.diagnostics.append(_skipped_link(folder))
                return
            try:
                if not stat.S_ISDIR(os.stat(folder).st_mode):
                    return
            except OSError as exc:  # a loop, or a link to nothing
                self.diagnostics.append(_broken_folder(folder, exc))
                return
        elif not item.is_dir(follow_symlinks=False):
            return
        md = os.path.join(folder, "SKILL.md")
        try:
            st = os.lstat(md)
        except (FileNotFoundError, NotADirectoryError):
            return  # a plain folder, not a skill
        except OSError as exc:
            self.entries[name] = Entry(
                stamp=(None,), scripts=(), skill=None, diagnostics=(cannot_read(md, exc),)
            )
            return
        md_stamp: tuple[int, ...] | None = _file_stamp(st)
        if stat.S_ISLNK(st.st_mode):
            if _leaves(md, self.real_root):
                self.diagnostics.append(_skipped_link(md))
                return
            try:  # a link's own stat says nothing of the file it reaches
                md_stamp = _file_stamp(os.stat(md))
            except OSError:
                md_stamp = None
        prev = self.old.get(name)
        if prev is not None and prev.stamp == (md_stamp, *_script_stamps(folder, prev.scripts)):
            self.entries[name] = prev
        else:
            self.entries[name] = _entry(folder, self.namespace, md_stamp)


def scan_root(
    root: str, namespace: str, previous: RootScan | None = None
) -> tuple[RootScan, list[str], list[str], list[str]]:
    """Scan ``root``, reusing the ``previous`` entries whose files did not change.

    Returns the new scan and the folder names whose skill was added, changed and removed.
    """
    old = previous.entries if previous is not None else {}
    walk = _Walk(root, namespace, old)
    try:
        with os.scandir(root) as listing:
            items = sorted(listing, key=lambda item: item.name)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            message = f"skills folder {root!r} does not exist; create it or fix the path"
        else:
            fix = {
                errno.ENOTDIR: "pass a folder of skills",
                errno.ELOOP: "a symlink on the way loops back on itself; fix the path",
            }.get(exc.errno or 0, "check its permissions")
            message = f"cannot list skills folder {root!r} ({exc.strerror}); {fix}"
        diag = Diagnostic(file=root, line=0, message=message, severity="warning")
        scan = RootScan(root=root, namespace=namespace, entries={}, diagnostics=(diag,))
        return scan, [], [], list(old)
    for item in items:
        walk.visit(item)
    entries = walk.entries
    added = [name for name in entries if name not in old]
    # A rewritten SKILL.md counts as changed even if only its body moved: the body is
    # read on activation, and whoever refreshes wants to hear that the skill was re-read.
    changed = [name for name, e in entries.items() if name in old and e is not old[name]]
    removed = [name for name in old if name not in entries]
    scan = RootScan(
        root=root, namespace=namespace, entries=entries, diagnostics=tuple(walk.diagnostics)
    )
    return scan, added, changed, removed
