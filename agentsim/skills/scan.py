"""Scanning one skills root into descriptors, re-scanning it on refresh, reading its files.

``SkillDescriptor`` is what a scan finds (id, folder, parsed manifest); it is defined here,
where descriptors are made, and handed out by ``registry``. ``builtin_skills_dir()`` is the
one lookup of the built-in root that every command and the engine use. Reading a skill's
body and files (``read_skill_file``) applies the manifest's path rules.

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

from agentsim._paths import is_inside
from agentsim.errors import SkillFileError
from agentsim.skills.frontmatter import (
    MAX_SKILL_MD_BYTES,
    Diagnostic,
    cannot_read,
    decode_skill_md,
    read_frontmatter,
    read_skill_bytes,
)
from agentsim.skills.manifest import SkillFile, SkillManifest, path_problem, read_skill

__all__ = [
    "NAMESPACE_ORDER",
    "DocCache",
    "RootScan",
    "ScannedSkill",
    "SkillDescriptor",
    "builtin_skills_dir",
    "check_scripts",
    "list_skill_files",
    "namespace_rank",
    "read_doc",
    "read_file",
    "scan_root",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillDescriptor:
    """A registered skill: where it is, under which id, and its parsed frontmatter.

    The body is not kept: it is read on activation. The fields of the seed API are
    read-only attributes (``skill_id``, ``name``, ``description``, ``script``, ``hooks``,
    ``source_path``); every other frontmatter field is read on the manifest
    (``desc.manifest.timeout``).
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

    @property
    def name(self) -> str:
        """The skill's ``name`` (the part of ``skill_id`` after ``@``)."""
        return self.manifest.name

    @property
    def description(self) -> str:
        """The frontmatter's ``description`` (what the catalog shows)."""
        return self.manifest.description

    @property
    def script(self) -> str | None:
        """The declared ``script``, relative to the skill folder, or None."""
        return self.manifest.script

    @property
    def source_path(self) -> Path:
        """The skill's folder (the one holding its ``SKILL.md``)."""
        return Path(self.path)

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

    def file_digests(self) -> dict[str, str]:
        """SHA-256 (hex) of each file of the skill an agent or the runtime can read, by
        path relative to the folder (``/``-separated, sorted): ``SKILL.md``, scripts,
        references, assets; hidden files and folders, ``__pycache__`` and links that leave
        the folder are left out. The one answer provenance records (docs/skills.md)."""
        from agentsim.skills.provenance import folder_digests

        return folder_digests(self.path)

    def file_bytes(self, rel: str) -> bytes:
        """The bytes of one file of the skill (``rel`` as ``file_digests`` names it)."""
        real = os.path.realpath(os.path.join(self.path, rel))
        if path_problem(rel) or not is_inside(real, self.path):
            raise SkillFileError(self.skill_id, rel, "refused: not a file of the skill folder")
        with open(real, "rb") as fh:
            return fh.read()

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


NAMESPACE_ORDER = ("agent", "custom", "built-in")
"""Precedence of namespaces for bare names; ``env:<module>`` namespaces come last."""


def namespace_rank(namespace: str) -> int:
    try:
        return NAMESPACE_ORDER.index(namespace)
    except ValueError:
        return len(NAMESPACE_ORDER)


ScriptStamps = tuple[tuple[int, ...] | None, ...]
"""How a skill's files looked when it was read: SKILL.md first, then each declared script."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScannedSkill:
    """One skill folder of a root: its descriptor (None when it is broken) and problems.

    ``stale``: the files were edited into a broken state after a good read; ``skill`` is
    then the last good version (kept active) and ``diagnostics`` say what the edit broke.
    """

    stamp: ScriptStamps
    scripts: tuple[str, ...]
    skill: SkillDescriptor | None
    diagnostics: tuple[Diagnostic, ...]
    stale: bool = False

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")


@dataclass(frozen=True, slots=True, kw_only=True)
class RootScan:
    """One scanned root: its entries by folder name (sorted) and root-level diagnostics."""

    root: str
    namespace: str
    entries: dict[str, ScannedSkill]
    diagnostics: tuple[Diagnostic, ...] = ()

    def broken(self) -> list[str]:
        """Folder names whose skill an edit broke (the last good version stays active)."""
        return [name for name, entry in self.entries.items() if entry.stale]

    def refused(self) -> dict[str, ScannedSkill]:
        """Folders holding a SKILL.md that was refused (no version of it is registered)."""
        return {name: e for name, e in self.entries.items() if e.skill is None}

    def all_diagnostics(self) -> list[Diagnostic]:
        """The root's and its entries' diagnostics, in folder order."""
        found = [*self.diagnostics]
        for entry in self.entries.values():
            found += entry.diagnostics
        return sorted(found, key=lambda d: d.file)  # stable: a file's lines stay in order


def _file_stamp(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _script_stamps(folder: str, scripts: tuple[str, ...]) -> ScriptStamps:
    out: list[tuple[int, ...] | None] = []
    for rel in scripts:
        try:
            out.append(_file_stamp(os.stat(os.path.join(folder, rel))))
        except OSError:
            out.append(None)
    return tuple(out)


def _entry(folder: str, namespace: str, md_stamp: tuple[int, ...] | None) -> ScannedSkill:
    """Read the skill in ``folder`` (whose SKILL.md exists) into an entry."""
    md = os.path.join(folder, "SKILL.md")
    got: SkillFile = read_skill(md)
    read_stamp = _file_stamp(got.stat) if got.stat is not None else md_stamp
    parsed = got.parsed
    skill = None
    if parsed.manifest is not None:
        skill = SkillDescriptor.create(namespace, folder, parsed.manifest, parsed.body_line)
    return ScannedSkill(
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

    def __init__(self, root: str, namespace: str, old: dict[str, ScannedSkill]) -> None:
        self.root = root
        self.namespace = namespace
        self.old = old
        self.entries: dict[str, ScannedSkill] = {}
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
            failed = ScannedSkill(
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
            return
        entry = _entry(folder, self.namespace, md_stamp)
        if (
            entry.skill is None
            and prev is not None
            and prev.skill is not None
            and entry.stamp[0] != prev.stamp[0]
        ):
            # An edit of SKILL.md broke a skill that was good: keep its last good version
            # (agents that use it go on), report what the edit broke, re-read at the next
            # change. A declared script that went away drops the skill: nothing could run it.
            entry = ScannedSkill(
                stamp=(entry.stamp[0], *_script_stamps(folder, prev.scripts)),
                scripts=prev.scripts,
                skill=prev.skill,
                diagnostics=entry.diagnostics,
                stale=True,
            )
        self.entries[name] = entry


def scan_root(
    root: str, namespace: str, previous: RootScan | None = None
) -> tuple[RootScan, list[str], list[str], list[str]]:
    """Scan ``root``, reusing the ``previous`` entries whose files did not change.

    Returns the new scan and the folder names whose skill was added, changed and removed.
    A skill an edit broke keeps its last good version and is not counted as changed (see
    ``RootScan.broken``).
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
    changed = [
        name
        for name, e in entries.items()
        if name in old and e is not old[name] and e.skill is not old[name].skill
    ]
    removed = [name for name in old if name not in entries]
    scan = RootScan(
        root=root, namespace=namespace, entries=entries, diagnostics=tuple(walk.diagnostics)
    )
    return scan, added, changed, removed


# -- reading a registered skill's body and files ---------------------------------------

_MAX_LISTED = 50


class DocCache:
    """Bodies by SKILL.md path, with the (mtime_ns, size) they were read at.

    One per registry and shared by its snapshots and views; it is per process, so it
    pickles empty (a Ray actor rebuilds it on first use).
    """

    __slots__ = ("_bodies",)

    def __init__(self) -> None:
        self._bodies: dict[str, tuple[int, int, str]] = {}

    def __reduce__(self) -> tuple[type[DocCache], tuple[()]]:
        return (DocCache, ())

    def __len__(self) -> int:
        return len(self._bodies)


def read_doc(desc: SkillDescriptor, cache: DocCache) -> str:
    md = desc.skill_md
    try:
        st = os.stat(md)
    except OSError as exc:
        raise SkillFileError(
            desc.skill_id, "SKILL.md", f"{exc.strerror}; refresh the registry"
        ) from None
    hit = cache._bodies.get(md)
    if hit is not None and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
        return hit[2]
    got = _read_body(md)
    if isinstance(got, str):
        if hit is not None:  # an edit broke it: the last good body stays (see ``_Walk``)
            return hit[2]
        raise SkillFileError(desc.skill_id, "SKILL.md", got)
    body, st = got  # the file that was read: the cache key and the body agree
    cache._bodies[md] = (st.st_mtime_ns, st.st_size, body)
    return body


def _read_body(md: str) -> tuple[str, os.stat_result] | str:
    """The body of ``md`` and the stat of the file read, or what is wrong with it."""
    got = read_skill_bytes(md)
    if isinstance(got, Diagnostic):
        return got.message
    text = decode_skill_md(got[0], source=md)
    if isinstance(text, Diagnostic):
        return text.message
    front = read_frontmatter(text, source=md)
    if front.data is None:
        return str(front.diagnostics[-1])
    return front.body, got[1]


def list_skill_files(folder: str) -> list[str]:
    """Relative paths of the files in a skill folder, sorted; hidden and cache folders
    are left out."""
    out: list[str] = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        rel_dir = os.path.relpath(here, folder)
        for name in sorted(files):
            if not name.startswith("."):
                rel = name if rel_dir == "." else os.path.join(rel_dir, name)
                out.append(rel.replace(os.sep, "/"))
    return out


def read_file(desc: SkillDescriptor, relative_path: str) -> str:
    problem = path_problem(relative_path)
    if problem:
        raise SkillFileError(desc.skill_id, str(relative_path), f"refused: {problem}")
    real = os.path.realpath(os.path.join(desc.path, relative_path))
    if not is_inside(real, desc.path):
        raise SkillFileError(
            desc.skill_id,
            relative_path,
            "refused: it resolves outside the skill folder (a symlink); copy the file "
            "into the skill",
        )
    if not os.path.isfile(real):
        files = list_skill_files(desc.path)
        shown = ", ".join(files[:_MAX_LISTED])
        more = f" and {len(files) - _MAX_LISTED} more" if len(files) > _MAX_LISTED else ""
        raise SkillFileError(
            desc.skill_id,
            relative_path,
            f"no such file; the skill's files are: {shown}{more}",
        )
    if os.path.getsize(real) > MAX_SKILL_MD_BYTES:
        raise SkillFileError(
            desc.skill_id, relative_path, "it is over the 1 MiB limit for reading into a prompt"
        )
    with open(real, "rb") as fh:
        raw = fh.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillFileError(
            desc.skill_id, relative_path, "it is not UTF-8 text; only text files can be read"
        ) from None


# -- where the built-in skills are -----------------------------------------------------


def builtin_skills_dir() -> Path | None:
    """``skills/`` beside the package in a source checkout, else the copy shipped in the wheel
    (``agentsim/_builtin_skills``); None when neither exists."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package.parent / "skills", package / "_builtin_skills"):
        if candidate.is_dir():
            return candidate
    return None


def check_scripts(desc: SkillDescriptor) -> tuple[Diagnostic, ...]:
    """What would stop a skill's scripts from loading, found without running them: each
    declared script and hook, and the sibling modules they import with ``from . import``,
    compiled (a ``SyntaxError`` at its file and line), and the modules their unconditional
    top-level imports name looked up with ``importlib.util.find_spec`` (a top-level package
    that is not installed). Nothing is imported, so no top-level code of a skill runs;
    imports inside functions, ``try`` or ``if`` blocks are not checked (they may be meant to
    fail)."""
    import ast
    import importlib.util

    folder = Path(desc.path)
    todo = [rel for rel in (desc.manifest.script, *(r for _, r in desc.hooks)) if rel]
    seen: set[Path] = set()
    found: list[Diagnostic] = []
    while todo:
        path = (folder / todo.pop()).resolve()
        if path in seen or path.suffix != ".py" or not path.is_file():
            continue
        seen.add(path)
        try:
            source = path.read_bytes()
            tree = ast.parse(source, filename=str(path))
            compile(tree, str(path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            what = f"{type(exc).__name__}: {exc.msg}"
            found.append(Diagnostic(file=str(path), line=exc.lineno or 1, message=what))
            continue
        except (OSError, ValueError) as exc:
            found.append(Diagnostic(file=str(path), line=1, message=f"cannot be read: {exc}"))
            continue
        for node in tree.body:  # unconditional top-level imports only
            if isinstance(node, ast.Import):
                names = [(a.name, 0) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "", node.level)]
                if node.level == 1 and not node.module:  # from . import a, b
                    names = [(a.name, 1) for a in node.names]
            else:
                continue
            for name, level in names:
                if level:
                    if level == 1 and name:
                        sibling = path.parent / (name.split(".")[0] + ".py")
                        todo.append(str(sibling.relative_to(folder.resolve())))
                    continue
                top = name.split(".")[0]
                if (path.parent / f"{top}.py").is_file() or (path.parent / top).is_dir():
                    continue  # a sibling module (a script run as a file has its folder first)
                try:
                    spec = importlib.util.find_spec(top)
                except (ImportError, ValueError):
                    spec = None
                if spec is None:
                    found.append(
                        Diagnostic(
                            file=str(path),
                            line=node.lineno,
                            message=f"ModuleNotFoundError: it imports {name!r}, but no "
                            f"module named {top!r} is installed in this Python",
                        )
                    )
    return tuple(found)
