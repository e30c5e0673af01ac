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
from dataclasses import dataclass

from agentsim._paths import is_inside
from agentsim.skills._descriptor import SkillDescriptor
from agentsim.skills._frontmatter import Diagnostic, cannot_read
from agentsim.skills.manifest import SkillFile, read_skill

__all__ = ["NAMESPACE_ORDER", "Entry", "RootScan", "namespace_rank", "scan_root"]

NAMESPACE_ORDER = ("agent", "custom", "built-in")
"""Precedence of namespaces for bare names; ``env:<module>`` namespaces come last."""


def namespace_rank(namespace: str) -> int:
    try:
        return NAMESPACE_ORDER.index(namespace)
    except ValueError:
        return len(NAMESPACE_ORDER)


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
        self.entries: dict[str, Entry] = {}
        self.diagnostics: list[Diagnostic] = []

    def visit(self, item: os.DirEntry[str]) -> None:
        name, folder = item.name, item.path
        if name[0] in "._":
            return
        if item.is_symlink():
            if not is_inside(folder, self.root):
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
        except OSError as exc:  # the folder cannot be searched (its permissions)
            failed = Entry(
                stamp=(None,), scripts=(), skill=None, diagnostics=(cannot_read(md, exc),)
            )
            prev = self.old.get(name)
            self.entries[name] = prev if prev == failed else failed
            return
        md_stamp: tuple[int, ...] | None = _file_stamp(st)
        if stat.S_ISLNK(st.st_mode):
            if not is_inside(md, self.root):
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
