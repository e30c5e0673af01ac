"""Scanning one skills root into descriptors: the registry's hot path.

A root is listed with one ``os.scandir``. On a first scan each sub-folder's ``SKILL.md`` is
opened (``O_NOFOLLOW``), ``fstat``-ed and read in one go; on a refresh it is ``lstat``-ed
first and read again only if its (mtime_ns, size) moved. The frontmatter goes through the
one-pass happy path (``_validate.clean_fields``) and, if that gives up, the careful path
that produces the diagnostics; the body is never kept. All parsing in one scan shares a
``Memo``, which is dropped when the scan ends, so a first scan is always cold.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from operator import attrgetter
from pathlib import Path
from stat import S_ISLNK
from typing import Any, cast

from agentsim._draft import draft_class
from agentsim.skills._fastyaml import Memo
from agentsim.skills._frontmatter import (
    MAX_SKILL_MD_BYTES,
    Diagnostic,
    decode_skill_md,
    read_frontmatter,
    too_big,
)
from agentsim.skills._split import SPLIT_MIN, fork_ok, split_work
from agentsim.skills._validate import (
    check_fields,
    check_skill_files,
    clean_fields,
    skill_files_ok,
)

__all__ = ["NAMESPACE_ORDER", "Entry", "RootScan", "SkillDescriptor", "namespace_rank", "scan_root"]

_FOLLOW_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
# O_NOFOLLOW makes opening a symlinked SKILL.md fail (ELOOP), which spares an lstat per skill
# on the cold path; O_NONBLOCK keeps a FIFO named SKILL.md from blocking the scan.
_NOFOLLOW_FLAGS = _FOLLOW_FLAGS | getattr(os, "O_NOFOLLOW", 0)
_HAS_NOFOLLOW = hasattr(os, "O_NOFOLLOW")
_LINK_ERRNOS = (errno.ELOOP, errno.EMLINK)  # EMLINK: what the BSDs answer instead

_SUFFIX = os.sep + "SKILL.md"
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)

RACY_NS = 2_000_000_000
"""A root whose own timestamps are younger than this is listed again on every refresh."""

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

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Pickled as its field values, restored without ``__init__`` (see ``_restore``).
        return _restore, _FIELD_VALUES(self)

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
    """One scanned root: its entries by folder name (sorted) and root-level diagnostics.

    ``stamp`` is how the root folder itself looked when it was listed (see ``_root_stamp``);
    while it stays the same the root holds the same names, so a refresh skips listing it and
    stats each known ``SKILL.md`` directly. ``others`` are the folders listed then that held
    no ``SKILL.md``: a refresh looks into them again (creating a file inside a folder leaves
    the root's own stamp alone).
    """

    root: str
    namespace: str
    entries: dict[str, Entry]
    diagnostics: tuple[Diagnostic, ...] = ()
    stamp: tuple[int, ...] | None = None
    others: tuple[str, ...] = ()


_Draft = draft_class(SkillDescriptor)
_new = object.__new__


def _restore(
    skill_id: str,
    name: str,
    namespace: str,
    description: str,
    path: str,
    script: str | None,
    hooks: tuple[tuple[str, str], ...],
    tags: tuple[str, ...],
    requires: tuple[str, ...],
    timeout: float | None,
    isolation: str,
    status: str,
    input_schema: dict[str, Any] | None,
    output_schema: dict[str, Any] | None,
    idempotent: bool,
    retries: int,
    version: str | None,
    license: str | None,
    compatibility: str | None,
    metadata: dict[str, str] | None,
    allowed_tools: tuple[str, ...] | None,
    body_line: int,
) -> SkillDescriptor:
    """A descriptor from all its field values, in field order, without ``__init__``.

    The frozen dataclass ``__init__`` (and its pickle ``__setstate__``) pays an
    ``object.__setattr__`` per field: for 22 fields that was ~36k instructions, as much as
    reading the whole frontmatter. This fills a draft with plain slot stores and retypes it
    instead (see ``draft_class``); a test checks the result equals what ``__init__`` builds.
    Scans and unpickling (a registry sent to a Ray actor, a forked scan's results) use it.
    """
    d = _new(_Draft)
    d.skill_id = sys.intern(skill_id)
    d.name = sys.intern(name)
    d.namespace = sys.intern(namespace)
    d.description = description
    d.path = path
    d.script = script
    d.hooks = hooks
    d.tags = tags
    d.requires = requires
    d.timeout = timeout
    d.isolation = isolation
    d.status = status
    d.input_schema = input_schema
    d.output_schema = output_schema
    d.idempotent = idempotent
    d.retries = retries
    d.version = version
    d.license = license
    d.compatibility = compatibility
    d.metadata = metadata
    d.allowed_tools = allowed_tools
    d.body_line = body_line
    d.__class__ = SkillDescriptor
    return cast(SkillDescriptor, d)


_FIELD_VALUES = attrgetter(*(f.name for f in dataclass_fields(SkillDescriptor)))  # as _restore


def _descriptor(
    fields: dict[str, Any], *, namespace: str, folder: str, body_line: int
) -> SkillDescriptor:
    """A descriptor from ``check_fields`` output (whose keys are the field names)."""
    get = fields.get
    hooks = get("hooks")
    return _restore(
        f"{namespace}@{fields['name']}",
        fields["name"],
        namespace,
        fields["description"],
        folder,
        get("script"),
        tuple(hooks.items()) if hooks else (),
        get("tags", ()),
        get("requires", ()),
        get("timeout"),
        get("isolation", "inline"),
        get("status", "active"),
        get("input_schema"),
        get("output_schema"),
        get("idempotent", False),
        get("retries", 0),
        get("version"),
        get("license"),
        get("compatibility"),
        get("metadata"),
        get("allowed_tools"),
        body_line,
    )


def _cannot_read(source: str, exc: OSError) -> Diagnostic:
    problem = exc.strerror or type(exc).__name__
    return Diagnostic(file=source, line=1, message=f"cannot read SKILL.md ({problem})")


def _read(fd: int, size: int) -> bytes:
    """The file's bytes, at most one byte over the limit. One ``read`` in the usual case: a
    regular file returns everything up to the requested count unless it is at its end."""
    raw = os.read(fd, size + 1)
    if len(raw) > size:  # it grew since fstat: take the rest too, up to the limit
        raw += os.read(fd, MAX_SKILL_MD_BYTES + 1 - len(raw))
    return raw


def _careful_fields(
    text: str, source: str, folder_name: str
) -> tuple[dict[str, Any] | None, list[Diagnostic], dict[str, int], int]:
    """(fields or None, diagnostics, key lines, body line): the path that explains."""
    front = read_frontmatter(text, source=source)
    diags = list(front.diagnostics)
    if front.data is None:
        return None, diags, {}, front.body_line
    fields, problems = check_fields(
        front.data, key_lines=front.key_lines, fm_line=2, source=source, folder_name=folder_name
    )
    diags.extend(problems)
    return fields, diags, front.key_lines, front.body_line


def _parse(
    raw: bytes,
    folder: str,
    name: str,
    namespace: str,
    source: str,
    memo: Memo,
    where: str,
    dir_fd: int | None,
) -> tuple[SkillDescriptor | None, tuple[Diagnostic, ...]]:
    """Check the bytes of one SKILL.md: (descriptor or None, diagnostics)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, tuple(decode_skill_md(raw, source=source)[1])
    diags: list[Diagnostic] = []
    key_lines: dict[str, int] | None = None
    clean = clean_fields(text, memo, name)
    if clean is not None:
        fields, body_line = clean
    else:
        careful, diags, key_lines, body_line = _careful_fields(text, source, name)
        if careful is None:
            return None, tuple(diags)
        fields = careful
    if ("script" in fields or "hooks" in fields) and not skill_files_ok(where, fields, dir_fd):
        missing = check_skill_files(
            folder, fields, key_lines=key_lines or {}, fm_line=2, source=source
        )
        if missing:
            if key_lines is None:  # only a problem needs the key lines: read them now
                key_lines = read_frontmatter(text, source=source).key_lines
                missing = check_skill_files(
                    folder, fields, key_lines=key_lines, fm_line=2, source=source
                )
            diags.extend(missing)
            return None, tuple(diags)
    desc = _descriptor(fields, namespace=namespace, folder=folder, body_line=body_line)
    return desc, tuple(diags) if diags else ()


def load_entry(
    folder: str,
    name: str,
    namespace: str,
    memo: Memo,
    *,
    follow: bool = False,
    dir_fd: int | None = None,
) -> Entry | None:
    """Read and check one skill folder; None when it holds no ``SKILL.md``. Never raises.

    One ``open`` + ``fstat`` + ``read`` + ``close``: the stat of the open file gives the
    (mtime_ns, size) the entry is kept under, so the content and its key always agree.
    Unless ``follow`` is set, a symlinked ``SKILL.md`` fails to open (``O_NOFOLLOW``) and
    the caller checks where it points first. With ``dir_fd`` (the open root) the files are
    reached by ``name``, relative to it: a shorter path for the kernel to walk.
    """
    source = folder + _SUFFIX
    where = folder if dir_fd is None else name
    try:
        fd = os.open(where + _SUFFIX, _FOLLOW_FLAGS if follow else _NOFOLLOW_FLAGS, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None  # no SKILL.md, or a file: not a skill folder
    except OSError as exc:
        if exc.errno in _LINK_ERRNOS and not follow:
            raise  # a symlink: the caller decides
        # No (mtime_ns, size) to key it by: a failed entry is re-checked on every refresh.
        return (0, 0, None, (_cannot_read(source, exc),))
    try:
        st = os.fstat(fd)
        mtime_ns, size = st.st_mtime_ns, st.st_size
        if size > MAX_SKILL_MD_BYTES:
            return (mtime_ns, size, None, (too_big(source, size),))
        if not stat.S_ISREG(st.st_mode):
            problem = os.strerror(errno.EISDIR) if stat.S_ISDIR(st.st_mode) else "not a file"
            diag = Diagnostic(file=source, line=1, message=f"cannot read SKILL.md ({problem})")
            return (mtime_ns, size, None, (diag,))
        raw = _read(fd, size)
    except OSError as exc:
        return (0, 0, None, (_cannot_read(source, exc),))
    finally:
        os.close(fd)
    if len(raw) > MAX_SKILL_MD_BYTES:
        return (mtime_ns, size, None, (too_big(source, len(raw)),))
    desc, diags = _parse(raw, folder, name, namespace, source, memo, where, dir_fd)
    return (mtime_ns, size, desc, diags)


def _leaves(path: str, real_root: str) -> bool:
    real = os.path.realpath(path)
    return not (real == real_root or real.startswith(real_root + os.sep))


class _Walk:
    """State of one ``scan_root`` pass (kept off the hot loop's locals)."""

    __slots__ = ("diagnostics", "fd", "memo", "namespace", "real", "root")

    def __init__(self, root: str, namespace: str) -> None:
        self.root = root
        self.namespace = namespace
        self.memo = Memo()
        self.real: str | None = None
        self.diagnostics: list[Diagnostic] = []
        self.fd: int | None = None  # the open root, while ``scan_root`` holds it

    def real_root(self) -> str:
        if self.real is None:
            self.real = os.path.realpath(self.root)
        return self.real

    def linked_md(self, folder: str, name: str) -> Entry | None:
        """A ``SKILL.md`` that is a symlink: followed only if it stays inside the root."""
        md = folder + os.sep + "SKILL.md"
        if _leaves(md, self.real_root()):
            self.diagnostics.append(_skipped_link(md))
            return None
        return load_entry(folder, name, self.namespace, self.memo, follow=True)

    def linked_folder(self, entry: os.DirEntry[str]) -> bool:
        """Whether a symlinked entry is a folder inside the root (else it is skipped)."""
        if _leaves(entry.path, self.real_root()):
            self.diagnostics.append(_skipped_link(entry.path))
            return False
        return entry.is_dir()

    def first(self, entry: os.DirEntry[str]) -> Entry | None:
        """The entry of a folder this root has not had before (None: not a skill)."""
        name = entry.name
        if name[0] in "._":
            return None
        if entry.is_symlink() and not self.linked_folder(entry):
            return None
        return self.load(entry.path, name)

    def recheck(self, folder: str, name: str, prev: Entry) -> Entry | None:
        """A known folder's entry now (None: its SKILL.md is gone): ``prev`` itself while its
        SKILL.md keeps its (mtime_ns, size). One ``lstat`` decides; an entry that failed is
        always read again, as its fix may be a new script file that leaves SKILL.md alone."""
        try:
            st = os.lstat(folder + _SUFFIX)
        except OSError:
            return None
        if S_ISLNK(st.st_mode):
            return self.linked_md(folder, name)  # a link's own stat says nothing
        if prev[0] == st.st_mtime_ns and prev[1] == st.st_size and prev[2] is not None:
            return prev
        return self.load(folder, name)

    def load(self, folder: str, name: str) -> Entry | None:
        if not _HAS_NOFOLLOW and os.path.islink(folder + os.sep + "SKILL.md"):
            return self.linked_md(folder, name)
        try:
            return load_entry(folder, name, self.namespace, self.memo, dir_fd=self.fd)
        except OSError:  # ELOOP: SKILL.md is a symlink
            return self.linked_md(folder, name)


_BY_NAME = attrgetter("name")  # a C-level sort key: no Python frame per entry


def _first_scan(
    walk: _Walk, found: list[os.DirEntry[str]]
) -> tuple[dict[str, Entry], tuple[Diagnostic, ...]]:
    """Entries and root diagnostics of a root read for the first time.

    A large root is shared with a forked child (``split_work``).
    """
    entries: dict[str, Entry] = {}
    if len(found) < SPLIT_MIN or not fork_ok():
        for item in found:
            new = walk.first(item)
            if new is not None:
                entries[sys.intern(item.name)] = new
        return entries, tuple(walk.diagnostics)

    def work(i: int) -> tuple[Entry | None, tuple[Diagnostic, ...]]:
        mark = len(walk.diagnostics)  # diagnostics travel with their folder
        return walk.first(found[i]), tuple(walk.diagnostics[mark:])

    diagnostics: list[Diagnostic] = []
    for item, (new, item_diags) in zip(found, split_work(len(found), work), strict=True):
        diagnostics += item_diags
        if new is not None:
            entries[sys.intern(item.name)] = new
    return entries, tuple(diagnostics)


def scan_root(
    root: str, namespace: str, previous: RootScan | None = None
) -> tuple[RootScan, list[str], list[str], list[str]]:
    """Scan ``root``; reuse ``previous`` entries whose SKILL.md did not change.

    Returns the new scan and the folder names added, changed and removed. An entry that
    failed before is always re-checked (see ``_Walk.recheck``).

    ``DirEntry`` answers "is it a symlink" from the listing (d_type), without a system
    call. Whether an entry is a folder at all is left to opening its ``SKILL.md`` (a file
    has no children): one system call fewer per skill.
    """
    walk = _Walk(root, sys.intern(namespace))
    try:
        walk.fd = os.open(root, _DIR_FLAGS)
    except OSError:
        pass  # listing it says why; a root that cannot be opened is reached by full paths
    try:
        return _scan(walk, previous)
    finally:
        if walk.fd is not None:
            os.close(walk.fd)


def _scan(
    walk: _Walk, previous: RootScan | None
) -> tuple[RootScan, list[str], list[str], list[str]]:
    root, namespace = walk.root, walk.namespace
    stamp = _root_stamp(root if walk.fd is None else walk.fd)
    if (
        previous is not None
        and stamp is not None
        and stamp == previous.stamp
        and walk.fd is not None
    ):
        return _restat(walk, previous, walk.fd)
    old = previous.entries if previous is not None else {}
    try:
        with os.scandir(root) as it:
            found = sorted(it, key=_BY_NAME)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            message = f"skills folder {root!r} does not exist; create it or fix the path"
        else:
            message = f"cannot list skills folder {root!r} ({exc.strerror}); check its permissions"
        diag = Diagnostic(file=root, line=0, message=message, severity="warning")
        scan = RootScan(root=root, namespace=namespace, entries={}, diagnostics=(diag,))
        return scan, [], [], sorted(old)
    if old:
        entries, added, changed = _relist(walk, found, old)
        diagnostics = tuple(walk.diagnostics)
    else:
        entries, diagnostics = _first_scan(walk, found)
        added, changed = list(entries), []
    if stamp is not None and any(item.is_symlink() for item in found):
        stamp = None  # where a link points can change without the root changing
    others = (  # usually every entry is a skill: then there is nothing to look for
        tuple(n for item in found if (n := item.name)[0] not in "._" and n not in entries)
        if len(entries) < len(found)
        else ()
    )
    scan = RootScan(
        root=root,
        namespace=namespace,
        entries=entries,
        diagnostics=diagnostics,
        stamp=stamp,
        others=others,
    )
    return scan, added, changed, [name for name in old if name not in entries]


def _root_stamp(root: str | int) -> tuple[int, ...] | None:
    """The root folder's own (inode, mtime_ns, ctime_ns, links, size), or None when it
    cannot be trusted to show a change: unreadable, or changed less than ``RACY_NS`` ago.

    Adding, removing or renaming a folder in the root moves its mtime, but only at the
    file system's timestamp granularity (a clock tick here, up to 2 s on some file
    systems), so a root that changed within that window may change again unseen: it is
    listed again until it is older. ``root`` may be the open root (then the stamp is of the
    folder that the refresh will stat through, even if a symlinked root was swapped).
    """
    try:
        st = os.stat(root)
    except OSError:
        return None
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_NS:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_nlink, st.st_size)


def _relist(
    walk: _Walk, found: list[os.DirEntry[str]], old: dict[str, Entry]
) -> tuple[dict[str, Entry], list[str], list[str]]:
    """A refresh from a new listing of the root: (entries, added, changed)."""
    entries: dict[str, Entry] = {}
    added: list[str] = []
    changed: list[str] = []
    for item in found:
        name = item.name
        if name[0] in "._":
            continue
        if item.is_symlink() and not walk.linked_folder(item):
            continue
        prev = old.get(name)
        new = walk.load(item.path, name) if prev is None else walk.recheck(item.path, name, prev)
        if new is None:
            continue
        name = sys.intern(name)
        entries[name] = new
        if prev is None:
            added.append(name)
        elif new is not prev and new != prev:
            changed.append(name)
    return entries, added, changed


def _restat(
    walk: _Walk, previous: RootScan, fd: int
) -> tuple[RootScan, list[str], list[str], list[str]]:
    """A refresh of a root (open as ``fd``) whose stamp has not moved: its folders are the
    ones it had. They are visited in name order, as a listing would, so that diagnostics
    come out in the same order either way."""
    old = previous.entries
    base = os.path.join(previous.root, "")  # "root/" as DirEntry.path would join it
    entries: dict[str, Entry] = {}
    added: list[str] = []
    changed: list[str] = []
    others: list[str] = []  # folders (still there: the stamp says so) with no skill now
    # Two sorted runs, merged in one pass by the sort; usually there are no others at all.
    names = sorted((*old, *previous.others)) if previous.others else old
    lstat = os.lstat
    for name in names:
        prev = old.get(name)
        if prev is None:  # a folder that had no SKILL.md: has one appeared?
            new = walk.load(base + name, name)
            if new is None:
                others.append(name)
            else:
                entries[name] = new
                added.append(name)
            continue
        # The common case inline, with a path relative to the root (a shorter walk for the
        # kernel); anything else goes to ``recheck``, which looks again.
        try:
            st = lstat(name + _SUFFIX, dir_fd=fd)
        except OSError:
            others.append(name)  # SKILL.md is gone
            continue
        if (
            prev[0] == st.st_mtime_ns
            and prev[1] == st.st_size
            and prev[2] is not None
            and not S_ISLNK(st.st_mode)
        ):
            entries[name] = prev
            continue
        new = walk.recheck(base + name, name, prev)
        if new is None:
            others.append(name)
            continue
        entries[name] = new
        if new != prev:
            changed.append(name)
    scan = RootScan(
        root=previous.root,
        namespace=previous.namespace,
        entries=entries,
        diagnostics=tuple(walk.diagnostics),  # links that leave are met again, as before
        stamp=previous.stamp,
        others=tuple(others),
    )
    return scan, added, changed, [name for name in old if name not in entries]


def _skipped_link(path: str) -> Diagnostic:
    return Diagnostic(
        file=path,
        line=0,
        severity="warning",
        message="skipped: this symlink leaves the skills root; copy the skill into the "
        "root instead of linking it",
    )
