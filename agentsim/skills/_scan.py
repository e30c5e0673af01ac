"""Scanning one skills root into descriptors: the registry's hot path.

A root is scanned with ``os.scandir``; for each sub-folder holding ``SKILL.md`` the file is
``lstat``-ed and, unless its (mtime_ns, size) is unchanged since the previous scan, read
and parsed (frontmatter only: the body is never kept). Bad skills become diagnostics.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsim.skills._frontmatter import (
    MAX_SKILL_MD_BYTES,
    Diagnostic,
    decode_skill_md,
    read_frontmatter,
    too_big,
)
from agentsim.skills._validate import check_fields, check_skill_files

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
    """A registered skill: everything but its body, which is read on activation."""

    skill_id: str
    name: str
    namespace: str
    description: str
    path: str
    script: str | None = None
    hooks: tuple[tuple[str, str], ...] = ()
    tags: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    timeout: float | None = None
    isolation: str = "inline"
    status: str = "active"
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    idempotent: bool = False
    retries: int = 0
    version: str | None = None
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, str] | None = None
    allowed_tools: tuple[str, ...] | None = None
    body_line: int = 1

    def hook_script(self, hook_type: str) -> str | None:
        """The relative script declared for ``hook_type``, or None."""
        for kind, rel in self.hooks:
            if kind == hook_type:
                return rel
        return None

    def script_path(self, rel: str | None = None) -> Path:
        """Absolute path of ``rel`` (default: the skill's ``script``) inside the skill."""
        target = rel if rel is not None else self.script
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
        return {
            "skill_id": self.skill_id,
            "name": self.name,
            "namespace": self.namespace,
            "description": self.description,
            "path": self.path,
            "script": self.script,
            "hooks": dict(self.hooks),
            "tags": list(self.tags),
            "requires": list(self.requires),
            "timeout": self.timeout,
            "isolation": self.isolation,
            "status": self.status,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "idempotent": self.idempotent,
            "retries": self.retries,
            "version": self.version,
            "license": self.license,
            "compatibility": self.compatibility,
            "metadata": self.metadata,
            "allowed_tools": list(self.allowed_tools) if self.allowed_tools is not None else None,
        }


# (mtime_ns, size, descriptor or None, diagnostics) of one SKILL.md. A plain tuple: there
# are tens of thousands of these in a pickled registry.
Entry = tuple[int, int, SkillDescriptor | None, tuple[Diagnostic, ...]]


@dataclass(frozen=True, slots=True, kw_only=True)
class RootScan:
    """One scanned root: its entries by folder name (sorted) and root-level diagnostics."""

    root: str
    namespace: str
    entries: dict[str, Entry]
    diagnostics: tuple[Diagnostic, ...] = ()


def _descriptor(
    fields: dict[str, Any], *, namespace: str, folder: str, body_line: int
) -> SkillDescriptor:
    name = fields["name"]
    hooks = fields.get("hooks")
    return SkillDescriptor(
        skill_id=sys.intern(f"{namespace}@{name}"),
        name=name,
        namespace=namespace,
        description=fields["description"],
        path=folder,
        script=fields.get("script"),
        hooks=tuple(hooks.items()) if hooks else (),
        tags=fields.get("tags", ()),
        requires=fields.get("requires", ()),
        timeout=fields.get("timeout"),
        isolation=fields.get("isolation", "inline"),
        status=fields.get("status", "active"),
        input_schema=fields.get("input_schema"),
        output_schema=fields.get("output_schema"),
        idempotent=fields.get("idempotent", False),
        retries=fields.get("retries", 0),
        version=fields.get("version"),
        license=fields.get("license"),
        compatibility=fields.get("compatibility"),
        metadata=fields.get("metadata"),
        allowed_tools=fields.get("allowed_tools"),
        body_line=body_line,
    )


def load_entry(folder: str, name: str, namespace: str, mtime_ns: int, size: int) -> Entry:
    """Read and check one skill folder; never raises."""
    source = os.path.join(folder, "SKILL.md")
    if size > MAX_SKILL_MD_BYTES:
        return (mtime_ns, size, None, (too_big(source, size),))
    try:
        with open(source, "rb") as fh:
            raw = fh.read(MAX_SKILL_MD_BYTES + 1)
    except OSError as exc:
        problem = exc.strerror or type(exc).__name__
        diag = Diagnostic(file=source, line=1, message=f"cannot read SKILL.md ({problem})")
        return (mtime_ns, size, None, (diag,))
    text, diags = decode_skill_md(raw, source=source)
    if text is None:
        return (mtime_ns, size, None, tuple(diags))
    front = read_frontmatter(text, source=source)
    diags.extend(front.diagnostics)
    if front.data is None:
        return (mtime_ns, size, None, tuple(diags))
    fields, problems = check_fields(
        front.data,
        key_lines=front.key_lines,
        fm_line=front.fm_line,
        source=source,
        folder_name=name,
    )
    diags.extend(problems)
    if fields is None:
        return (mtime_ns, size, None, tuple(diags))
    if "script" in fields or "hooks" in fields:
        missing = check_skill_files(
            folder, fields, key_lines=front.key_lines, fm_line=front.fm_line, source=source
        )
        if missing:
            diags.extend(missing)
            return (mtime_ns, size, None, tuple(diags))
    desc = _descriptor(fields, namespace=namespace, folder=folder, body_line=front.body_line)
    return (mtime_ns, size, desc, tuple(diags))


def _leaves(path: str, real_root: str) -> bool:
    real = os.path.realpath(path)
    return not (real == real_root or real.startswith(real_root + os.sep))


def scan_root(
    root: str, namespace: str, previous: RootScan | None = None
) -> tuple[RootScan, list[str], list[str], list[str]]:
    """Scan ``root``; reuse ``previous`` entries whose SKILL.md did not change.

    Returns the new scan and the folder names added, changed and removed. An entry that
    failed before is always re-checked: its fix may be a new script file, which does not
    touch SKILL.md.
    """
    namespace = sys.intern(namespace)
    old = previous.entries if previous is not None else {}
    try:
        with os.scandir(root) as it:
            found = sorted((e for e in it if e.name[0] not in "._"), key=lambda e: e.name)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            message = f"skills folder {root!r} does not exist; create it or fix the path"
        else:
            message = f"cannot list skills folder {root!r} ({exc.strerror}); check its permissions"
        diag = Diagnostic(file=root, line=0, message=message, severity="warning")
        scan = RootScan(root=root, namespace=namespace, entries={}, diagnostics=(diag,))
        return scan, [], [], sorted(old)
    entries: dict[str, Entry] = {}
    root_diags: list[Diagnostic] = []
    added: list[str] = []
    changed: list[str] = []
    real_root: str | None = None
    sep = os.sep
    for entry in found:
        name = entry.name
        folder = entry.path
        md = folder + sep + "SKILL.md"
        try:
            if entry.is_symlink():
                real_root = real_root or os.path.realpath(root)
                if _leaves(folder, real_root):
                    root_diags.append(_skipped_link(folder))
                    continue
                if not entry.is_dir():
                    continue
            elif not entry.is_dir(follow_symlinks=False):
                continue
            st = os.lstat(md)
            if stat.S_ISLNK(st.st_mode):
                real_root = real_root or os.path.realpath(root)
                if _leaves(md, real_root):
                    root_diags.append(_skipped_link(md))
                    continue
                st = os.stat(md)
        except OSError:
            continue  # no SKILL.md (or it vanished meanwhile): not a skill folder
        mtime_ns = st.st_mtime_ns
        size = st.st_size
        prev = old.get(name)
        if prev is not None and prev[0] == mtime_ns and prev[1] == size and prev[2] is not None:
            entries[name] = prev
            continue
        name = sys.intern(name)
        new = load_entry(folder, name, namespace, mtime_ns, size)
        entries[name] = new
        if prev is None:
            added.append(name)
        elif new != prev:
            changed.append(name)
    removed = [name for name in old if name not in entries]
    scan = RootScan(root=root, namespace=namespace, entries=entries, diagnostics=tuple(root_diags))
    return scan, added, changed, removed


def _skipped_link(path: str) -> Diagnostic:
    return Diagnostic(
        file=path,
        line=0,
        severity="warning",
        message="skipped: this symlink leaves the skills root; copy the skill into the "
        "root instead of linking it",
    )
