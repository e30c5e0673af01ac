"""Skill provenance: which version of each skill a run's agents had, kept in the run folder.

Every skill a run loads is recorded by the SHA-256 of each of its files, read through the
one method a skill's descriptor answers for it, ``file_digests()`` (relative path ->
hex digest; ``file_bytes(rel)`` gives a file's bytes). A folder skill hashes every file of
its folder that an agent or the runtime can read (``scan.list_skill_files``: hidden files
and folders and ``__pycache__`` are left out, and so are links that leave the folder); a
skill from elsewhere (an MCP server) answers with its manifest's digests.

The run folder keeps::

    RUN/skills/objects/<sha256>   each file's bytes, once per digest (content-addressed)
    RUN/skills/versions.jsonl     one row per skill version, in the order they took effect

A row is ``{"skill_id", "source", "tick", "files": {rel: sha256}, "version", "agent_id"}``:
``tick`` is the first tick whose steps used that version (0 for the skills loaded when a run
starts; a hot reload's tick; a fork's or a resume's first tick), ``version`` the first 12
hex digits of the SHA-256 of the ``files`` mapping (sorted JSON: the same files give the
same version in any run), ``agent_id`` null for the run's skills and the agent's id for a
skill of its own ``custom/skills`` folder. A skill that went away has a row with
``"removed": true`` and no files; a fork's rows for what it restored carry
``"restored_from": {"run", "tick"}``.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
import shutil
import stat
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from agentsim.errors import AgentsimError, RunError
from agentsim.skills.manifest import path_problem

_DIGEST = re.compile(r"[0-9a-f]{64}")
_PLAIN = re.compile(r"(?!\.\.?$)[A-Za-z0-9_.@:-]+")

__all__ = [
    "OBJECTS",
    "RESTORED",
    "SKILLS_DIR",
    "VERSIONS",
    "Provenance",
    "ProvenanceRecorder",
    "RestorePlan",
    "SkillChange",
    "SkillFiles",
    "SkillVersion",
    "add_diff_parser",
    "diff",
    "diff_command",
    "folder_digests",
    "plan_restore",
    "read_provenance",
    "restore",
    "text_diff",
    "version_of",
]

SKILLS_DIR = "skills"
OBJECTS = "skills/objects"
VERSIONS = "skills/versions.jsonl"


class _Roots(Protocol):
    """Where a run's skills come from (``hosts.protocol.SkillSources``, a dataclass)."""

    @property
    def builtin(self) -> str | None: ...

    @property
    def custom(self) -> tuple[str, ...]: ...

    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...


_S = TypeVar("_S", bound=_Roots)

RESTORED = "skills/restored"
"""Where a fork keeps the skill folders it restored from its parent (what it watches)."""


class SkillFiles(Protocol):
    """What provenance asks of a skill (``SkillDescriptor`` and MCP skills answer it)."""

    @property
    def skill_id(self) -> str: ...

    @property
    def path(self) -> str: ...

    def file_digests(self) -> dict[str, str]: ...

    def file_bytes(self, rel: str) -> bytes: ...


# -- digests of a folder ------------------------------------------------------------------

# (path) -> (stat stamp, digest): a file is hashed again only when its stat moved.
_DIGESTS: dict[str, tuple[tuple[int, ...], str]] = {}


def _stamp(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _readable_files(folder: str) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, real path, stat) of each regular file of a skill folder that an
    agent or the runtime can read: hidden entries, ``__pycache__`` and links that leave
    the folder are skipped."""
    from agentsim._paths import is_inside
    from agentsim.skills.scan import list_skill_files

    for rel in list_skill_files(folder):  # links to folders are listed, never entered
        full = os.path.join(folder, rel)
        try:
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                if not is_inside(full, folder):
                    continue  # a link that leaves the folder: the runtime refuses to read it
                st = os.stat(full)
        except OSError:
            continue  # gone since listed, or a dangling link
        if stat.S_ISREG(st.st_mode):
            yield rel, full, st


def _hash_file(full: str, st: os.stat_result) -> str:
    stamp = _stamp(st)
    hit = _DIGESTS.get(full)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    h = hashlib.sha256()
    with open(full, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    _DIGESTS[full] = (stamp, digest)
    return digest


def folder_digests(folder: str) -> dict[str, str]:
    """SHA-256 of each readable file of a skill folder, by relative path (``/``), sorted."""
    out: dict[str, str] = {}
    for rel, full, st in _readable_files(folder):
        try:
            out[rel] = _hash_file(full, st)
        except OSError:
            continue  # unreadable: no agent can read it either
    return out


def version_of(files: Mapping[str, str]) -> str:
    """A skill version's short id: 12 hex digits of the SHA-256 of its sorted file map."""
    text = json.dumps(dict(files), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


# -- rows ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillVersion:
    """One row of ``versions.jsonl``."""

    skill_id: str
    source: str
    tick: int
    files: Mapping[str, str]
    agent_id: str | None = None
    removed: bool = False
    restored_from: Mapping[str, Any] | None = None

    @property
    def version(self) -> str:
        return "" if self.removed else version_of(self.files)

    @property
    def key(self) -> tuple[str | None, str]:
        return (self.agent_id, self.skill_id)

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "skill_id": self.skill_id,
            "source": self.source,
            "tick": self.tick,
            "files": dict(self.files),
            "version": self.version or None,
            "agent_id": self.agent_id,
        }
        if self.removed:
            row["removed"] = True
        if self.restored_from is not None:
            row["restored_from"] = dict(self.restored_from)
        return row

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SkillVersion:
        """A row as read from ``versions.jsonl``, checked: a run folder may come from
        someone else, and a fork writes files and a diff reads objects by these names, so a
        path that leaves its folder, a digest that is not one, or an agent id that is not a
        plain name is a ``ValueError`` (and a source whose last part is not a folder name
        is refused by ``restore``)."""
        skill_id, tick = str(d["skill_id"]), int(d["tick"])
        files = {str(k): str(v) for k, v in (d.get("files") or {}).items()}
        for rel, digest in files.items():
            if _DIGEST.fullmatch(digest) is None:
                raise ValueError(f"{digest!r} (of {rel!r}) is not a SHA-256 digest")
            why = path_problem(rel)
            if why is None and any(part in ("", ".") for part in rel.split("/")):
                why = f"{rel!r} is not a plain relative path"
            if why is not None:
                raise ValueError(f"file {why}")
        agent_id = None if d.get("agent_id") is None else str(d["agent_id"])
        if agent_id is not None and _PLAIN.fullmatch(agent_id) is None:
            raise ValueError(f"agent_id {agent_id!r} is not a plain name")
        return cls(
            skill_id=skill_id,
            source=str(d.get("source") or ""),
            tick=tick,
            files=files,
            agent_id=agent_id,
            removed=bool(d.get("removed", False)),
            restored_from=d.get("restored_from"),
        )


def _read_rows(path: Path) -> list[SkillVersion]:
    rows: list[SkillVersion] = []
    if not path.is_file():
        return rows
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(SkillVersion.from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                if not line.endswith("\n"):
                    break  # a last line cut short by a crash: the rows before it stand
                raise RunError(
                    f"{path}:{n}: not a skill version row ({type(exc).__name__}: {exc}); the "
                    "file was edited or damaged"
                ) from None
    return rows


# -- writing: the recorder -----------------------------------------------------------------


class ProvenanceRecorder:
    """Records skill versions into one run folder (one per process that loads skills).

    ``record(skills, tick=, agent_id=)`` writes a row for each skill whose files differ from
    the version last recorded for it (and a ``removed`` row for each recorded skill of that
    scope that is no longer among ``skills``) and stores each file's bytes once per digest.
    What a run folder already holds is read first, so a resume or a reload with unchanged
    files adds nothing. Rows are appended with one write per call (``O_APPEND``), so hosts
    in other processes may record into the same file.
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.root = Path(run_dir)
        self.objects = self.root / OBJECTS
        self.versions = self.root / VERSIONS
        self._last: dict[tuple[str | None, str], SkillVersion] | None = None
        self._have: set[str] = set()

    def _memo(self) -> dict[tuple[str | None, str], SkillVersion]:
        if self._last is None:
            last: dict[tuple[str | None, str], SkillVersion] = {}
            for row in _read_rows(self.versions):
                last[row.key] = row
            self._last = last
        return self._last

    def _store(self, skill: SkillFiles, digests: dict[str, str]) -> dict[str, str]:
        """Store each file not stored yet; the digests of the bytes actually stored (a file
        edited between hashing and reading is recorded as read)."""
        out = dict(digests)
        for rel, digest in digests.items():
            if digest in self._have:
                continue
            target = self.objects / digest
            if target.exists():
                self._have.add(digest)
                continue
            try:
                data = skill.file_bytes(rel)
            except (OSError, AgentsimError):
                del out[rel]  # gone since hashed: the agents cannot read it either
                continue
            got = hashlib.sha256(data).hexdigest()
            out[rel] = got
            self._write_object(got, data)
        return dict(sorted(out.items()))

    def _write_object(self, digest: str, data: bytes) -> None:
        target = self.objects / digest
        if digest in self._have or target.exists():
            self._have.add(digest)
            return
        self.objects.mkdir(parents=True, exist_ok=True)
        tmp = self.objects / f".{digest}.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, target)
        self._have.add(digest)

    def record(
        self,
        skills: Iterable[SkillFiles],
        *,
        tick: int,
        agent_id: str | None = None,
        keep: Iterable[str] = (),
        origins: Mapping[str, str] | None = None,
    ) -> list[SkillVersion]:
        """Record ``skills`` (all the skills of one scope: the run's, or one agent's own) as
        in effect from ``tick``; the rows written. ``keep``: ids left as last recorded (a
        skill an edit broke keeps its last good version). ``origins``: a root a skill was
        read from -> the root its rows name as ``source`` (a fork's restored copies name
        the parent's folders)."""
        memo = self._memo()
        kept = set(keep)
        rows: list[SkillVersion] = []
        seen: set[str] = set()
        for skill in skills:
            sid = skill.skill_id
            seen.add(sid)
            if sid in kept:
                continue
            digests = self._store(skill, skill.file_digests())
            last = memo.get((agent_id, sid))
            if last is not None and not last.removed and dict(last.files) == digests:
                continue
            source = skill.path
            if origins:
                root, name = os.path.split(source)
                if root in origins:
                    source = os.path.join(origins[root], name)
            rows.append(
                SkillVersion(
                    skill_id=sid, source=source, tick=tick, files=digests, agent_id=agent_id
                )
            )
        for (aid, sid), last in list(memo.items()):
            if aid == agent_id and sid not in seen and not last.removed:
                rows.append(
                    SkillVersion(
                        skill_id=sid,
                        source=last.source,
                        tick=tick,
                        files={},
                        agent_id=agent_id,
                        removed=True,
                    )
                )
        self.append(rows)
        return rows

    def cut(self, tick: int) -> None:
        """Keep only the rows of versions that took effect before ``tick`` (a resume from
        its checkpoint at ``tick`` runs the later ticks again, and records them again)."""
        rows = _read_rows(self.versions)
        kept = [r for r in rows if r.tick < tick]
        if len(kept) != len(rows):
            tmp = self.versions.with_name(f".{self.versions.name}.{os.getpid()}.tmp")
            tmp.write_text(
                "".join(
                    json.dumps(r.to_dict(), sort_keys=True, ensure_ascii=False) + "\n" for r in kept
                ),
                encoding="utf-8",
            )
            os.replace(tmp, self.versions)
        self._last = None

    def append(self, rows: Sequence[SkillVersion]) -> None:
        """Append rows (one write) and remember them as the last version of each skill."""
        if not rows:
            return
        memo = self._memo()
        self.versions.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(
            json.dumps(r.to_dict(), sort_keys=True, ensure_ascii=False) + "\n" for r in rows
        )
        fd = os.open(self.versions, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, text.encode("utf-8"))
        finally:
            os.close(fd)
        for r in rows:
            memo[r.key] = r


# -- reading -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance:
    """The skill versions a run folder recorded (``read_provenance(run)``)."""

    run: Path
    rows: tuple[SkillVersion, ...]

    def at(
        self, tick: int | None = None, *, agent_id: str | None = None
    ) -> dict[str, SkillVersion]:
        """The version of each skill in effect at ``tick`` (None: the last recorded), by
        skill id: the run's skills, plus ``agent_id``'s own when given."""
        out: dict[str, SkillVersion] = {}
        for row in self.rows:
            if tick is not None and row.tick > tick:
                continue
            if row.agent_id is not None and row.agent_id != agent_id:
                continue
            if row.removed:
                out.pop(row.skill_id, None)
            else:
                out[row.skill_id] = row
        return out

    def agents(self) -> list[str]:
        """Agents with skills of their own, sorted."""
        return sorted({r.agent_id for r in self.rows if r.agent_id is not None})

    def state(self, tick: int | None = None) -> dict[tuple[str | None, str], SkillVersion]:
        """Every skill in effect at ``tick`` (None: the end), the agents' own included, by
        (agent id or None, skill id)."""
        out: dict[tuple[str | None, str], SkillVersion] = {}
        for row in self.rows:
            if tick is not None and row.tick > tick:
                continue
            if row.removed:
                out.pop(row.key, None)
            else:
                out[row.key] = row
        return out

    def object_path(self, digest: str) -> Path:
        return self.run / OBJECTS / digest

    def read_object(self, digest: str) -> bytes:
        path = self.object_path(digest)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise RunError(
                f"skill file object {digest} is missing from {self.run / OBJECTS}; the run "
                "folder is incomplete (copy it whole, with its skills/ folder)"
            ) from None


def read_provenance(run: str | os.PathLike[str]) -> Provenance:
    """The skill versions of a run folder; a ``RunError`` names what is missing: not a run
    folder, or a run made before skill provenance was recorded."""
    root = Path(run)
    if not (root / "manifest.json").is_file():
        what = "does not exist" if not root.exists() else "is not a run folder (no manifest.json)"
        raise RunError(f"{root} {what}; give a run folder (e.g. workspace/<name>-<timestamp>)")
    path = root / VERSIONS
    if not path.is_file():
        raise RunError(
            f"run {root} has no skill provenance ({VERSIONS} is missing): it was made by an "
            "agentsim that did not record skill versions; run the experiment again to record "
            "them"
        )
    return Provenance(run=root, rows=tuple(_read_rows(path)))


# -- forks: restoring a parent's versions --------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RestorePlan:
    """What a fork restores: the parent's skill versions in effect at ``tick``.

    ``roots`` maps each parent skills root (namespace, folder) to the skills it held then;
    ``agents`` maps each agent with skills of its own to those (None: the agent had none at
    ``tick``, though it had some later)."""

    parent: Path
    tick: int
    roots: Mapping[tuple[str, str], tuple[SkillVersion, ...]]
    agents: Mapping[str, tuple[SkillVersion, ...]]
    earlier: tuple[SkillVersion, ...]  # the parent's rows before ``tick`` (copied as they are)
    restored: dict[tuple[str, str], str] = field(default_factory=dict)

    def origins(self) -> dict[str, str]:
        """Each restored copy's folder -> the parent's root it stands for."""
        return {copy: root for (_ns, root), copy in self.restored.items()}

    def remap(self, namespace: str, root: str) -> str:
        """The folder a fork scans for a root of the parent (``root`` itself when the
        parent recorded no skill from it)."""
        return self.restored.get((namespace, os.path.abspath(root)), root)

    def remap_sources(self, sources: _S) -> _S:
        """``sources`` (a ``SkillSources``: ``builtin``, ``custom``, ``env``) with each root
        the parent recorded skills from replaced by its restored copy (after ``restore``)."""
        # An MCP server whose skills the parent recorded: the fork uses the restored
        # versions (its folders) and lists the server no more.
        servers: tuple[Any, ...] = getattr(sources, "mcp", ())
        listed, restored = [], []
        for server in servers:
            ns = server.namespace
            copies = tuple(sorted(c for (n, _root), c in self.restored.items() if n == ns))
            if copies:
                restored.append((server, copies))
            else:
                listed.append(server)
        mcp = {"mcp": tuple(listed), "mcp_restored": tuple(restored)} if servers else {}
        return dataclasses.replace(
            sources,  # type: ignore[type-var]
            builtin=self.remap("built-in", sources.builtin) if sources.builtin else None,
            custom=tuple(self.remap("custom", r) for r in sources.custom),
            env=tuple((self.remap(f"env:{m}", d), m) for d, m in sources.env),
            **mcp,
        )


def plan_restore(
    parent: str | os.PathLike[str], tick: int, *, agents: Collection[str] | None = None
) -> RestorePlan | None:
    """The parent's skill versions at ``tick`` (its rows up to ``tick``, each file present
    in its objects), or None for a parent that recorded none (an older run). ``agents``:
    only these agents' own skills (None: every agent's)."""
    root = Path(parent)
    if not (root / VERSIONS).is_file():
        return None
    prov = read_provenance(root)
    state = prov.state(tick)
    if agents is not None:
        wanted = set(agents)
        state = {k: v for k, v in state.items() if k[0] is None or k[0] in wanted}
    for row in state.values():
        for rel, digest in row.files.items():
            if not prov.object_path(digest).is_file():
                raise RunError(
                    f"run {root} lacks the file {rel} of skill {row.skill_id} (object "
                    f"{digest} is missing from {root / OBJECTS}); a fork cannot restore what "
                    "its agents saw; copy the run folder whole"
                )
    roots: dict[tuple[str, str], list[SkillVersion]] = {}
    owners = prov.agents() if agents is None else [a for a in prov.agents() if a in agents]
    own: dict[str, list[SkillVersion]] = {aid: [] for aid in owners}
    for (aid, _sid), row in sorted(state.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
        if aid is not None:
            own[aid].append(row)
            continue
        namespace = row.skill_id.partition("@")[0]
        roots.setdefault((namespace, os.path.dirname(os.path.abspath(row.source))), []).append(row)
    return RestorePlan(
        parent=root,
        tick=tick,
        roots={k: tuple(v) for k, v in roots.items()},
        agents={k: tuple(v) for k, v in own.items()},
        earlier=tuple(r for r in prov.rows if r.tick < tick),
    )


def _folder_name(row: SkillVersion) -> str:
    """The skill's folder name (its source's last part), refused unless a plain name."""
    name = os.path.basename(row.source)
    if name in ("", ".", ".."):
        raise RunError(
            f"skill {row.skill_id}'s recorded source {row.source!r} does not end in a folder "
            "name; the parent's skills/versions.jsonl was edited or damaged"
        )
    return name


def _write_skill(prov: Provenance, row: SkillVersion, folder: Path) -> None:
    for rel, digest in row.files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(prov.read_object(digest))


def restore(plan: RestorePlan, run_dir: str | os.PathLike[str]) -> list[SkillVersion]:
    """Write the plan's skills into a fork's folder: each parent root as a folder of
    ``RUN/skills/restored/`` (the fork scans and watches these), each agent's own skills
    into its ``custom/skills``; copy the objects and write the fork's rows (the parent's
    before ``tick``, then what it restored, at ``tick``). Returns the restored rows."""
    fork = Path(run_dir)
    prov = Provenance(run=plan.parent, rows=())
    base = fork / RESTORED
    rows: list[SkillVersion] = []
    origin = {"run": str(plan.parent.resolve()), "tick": plan.tick}
    for i, ((namespace, root), skills) in enumerate(sorted(plan.roots.items())):
        slug = namespace.replace(":", "-").replace("@", "-")
        here = base / f"{i}-{slug}"
        here.mkdir(parents=True, exist_ok=True)
        plan.restored[(namespace, root)] = str(here.absolute())
        for row in skills:
            _write_skill(prov, row, here / _folder_name(row))
            rows.append(  # the source stays the folder it came from (the copy is in RESTORED)
                SkillVersion(
                    skill_id=row.skill_id,
                    source=row.source,
                    tick=plan.tick,
                    files=row.files,
                    restored_from=origin,
                )
            )
    for aid, skills in sorted(plan.agents.items()):
        own = fork / "agents" / aid / "custom" / "skills"
        if own.is_dir():
            shutil.rmtree(own)  # the parent's folder as it ended: replaced by what it was
        for row in skills:
            folder = own / _folder_name(row)
            _write_skill(prov, row, folder)
            rows.append(
                SkillVersion(
                    skill_id=row.skill_id,
                    source=str(folder.absolute()),
                    tick=plan.tick,
                    files=row.files,
                    agent_id=aid,
                    restored_from=origin,
                )
            )
    recorder = ProvenanceRecorder(fork)
    digests = {d for r in (*plan.earlier, *rows) for d in r.files.values()}
    for digest in sorted(digests):
        src = prov.object_path(digest)
        if src.is_file():
            recorder._write_object(digest, src.read_bytes())
    recorder.append([*plan.earlier, *rows])
    return rows


# -- comparing two runs --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillChange:
    """One skill that differs between two runs."""

    key: tuple[str | None, str]
    kind: str  # "added" | "removed" | "changed"
    a: SkillVersion | None
    b: SkillVersion | None

    @property
    def label(self) -> str:
        aid, sid = self.key
        return sid if aid is None else f"{sid} (agent {aid})"

    def files(self) -> list[tuple[str, str, str | None, str | None]]:
        """(kind, path, digest in A, digest in B) of each file that differs."""
        fa = dict(self.a.files) if self.a else {}
        fb = dict(self.b.files) if self.b else {}
        out = []
        for rel in sorted(set(fa) | set(fb)):
            da, db = fa.get(rel), fb.get(rel)
            if da == db:
                continue
            kind = "added" if da is None else "removed" if db is None else "changed"
            out.append((kind, rel, da, db))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "skill_id": self.key[1],
            "agent_id": self.key[0],
            "change": self.kind,
            "version_a": self.a.version if self.a else None,
            "version_b": self.b.version if self.b else None,
            "files": [
                {"change": k, "path": p, "sha256_a": da, "sha256_b": db}
                for k, p, da, db in self.files()
            ],
        }


def diff(a: Provenance, b: Provenance, *, tick: int | None = None) -> list[SkillChange]:
    """The skills whose files differ between two runs at ``tick`` (None: each run's end)."""
    sa, sb = a.state(tick), b.state(tick)
    out: list[SkillChange] = []
    for key in sorted(set(sa) | set(sb), key=lambda k: (k[0] or "", k[1])):
        ra, rb = sa.get(key), sb.get(key)
        if ra is not None and rb is not None and dict(ra.files) == dict(rb.files):
            continue
        kind = "added" if ra is None else "removed" if rb is None else "changed"
        out.append(SkillChange(key=key, kind=kind, a=ra, b=rb))
    return out


def text_diff(a: Provenance, b: Provenance, change: SkillChange) -> str:
    """A unified diff of the skill's SKILL.md between the two runs ("" when it is the
    same or not text)."""
    da = change.a.files.get("SKILL.md") if change.a else None
    db = change.b.files.get("SKILL.md") if change.b else None
    if da == db:
        return ""

    def lines(prov: Provenance, digest: str | None) -> list[str]:
        if digest is None:
            return []
        try:
            return prov.read_object(digest).decode("utf-8").splitlines(keepends=True)
        except UnicodeDecodeError:
            return ["(not UTF-8 text)\n"]

    name = change.label
    out = difflib.unified_diff(
        lines(a, da),
        lines(b, db),
        fromfile=f"{a.run.name}: {name} SKILL.md",
        tofile=f"{b.run.name}: {name} SKILL.md",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)


# -- ``agentsim skills diff`` --------------------------------------------------------------


def _short(digest: str | None) -> str:
    return digest[:12] if digest else "-"


def diff_command(args: Any, out: Any = None) -> int:
    """``agentsim skills diff RUN_A RUN_B [--tick T] [--text] [--json]``: 0 when every skill
    has the same files in both runs, 1 when some differ, 2 when a run cannot be read."""
    import sys

    out = out or sys.stdout
    try:
        a, b = read_provenance(args.run_a), read_provenance(args.run_b)
    except RunError as exc:
        print(f"agentsim skills diff: {exc}", file=sys.stderr)
        return 2
    changes = diff(a, b, tick=args.tick)
    when = "at the end of each run" if args.tick is None else f"at tick {args.tick}"
    if args.json:
        data = {
            "run_a": str(a.run),
            "run_b": str(b.run),
            "tick": args.tick,
            "same": not changes,
            "skills": [c.to_dict() for c in changes],
        }
        if args.text:
            for item, c in zip(data["skills"], changes, strict=True):
                item["skill_md_diff"] = text_diff(a, b, c)
        out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return 1 if changes else 0
    if not changes:
        n = len(a.state(args.tick))
        out.write(f"same skills {when}: {n} skill version(s) with identical files\n")
        return 0
    out.write(f"skills that differ {when} ({a.run} -> {b.run}):\n")
    for c in changes:
        va = c.a.version if c.a else "-"
        vb = c.b.version if c.b else "-"
        out.write(f"  {c.kind:<8} {c.label}  {va} -> {vb}\n")
        for kind, rel, da, db in c.files():
            out.write(f"      {kind:<8} {rel}  {_short(da)} -> {_short(db)}\n")
        if args.text:
            text = text_diff(a, b, c)
            if text:
                out.write("".join(f"      {line}" for line in text.splitlines(keepends=True)))
    out.write(f"{len(changes)} skill(s) differ\n")
    return 1


def add_diff_parser(sub: Any) -> None:
    """Register ``skills diff`` on the ``agentsim skills`` subparsers."""
    p = sub.add_parser(
        "diff",
        help="skills whose files differ between two runs (exit 0 same, 1 different)",
        description="Compare the skill versions two run folders recorded (RUN/skills): "
        "skills added, removed or changed, with the files and digests that differ.",
    )
    p.add_argument("run_a", metavar="RUN_A", help="a run folder")
    p.add_argument("run_b", metavar="RUN_B", help="another run folder")
    p.add_argument("--tick", type=int, metavar="T", help="compare the versions in effect at tick T")
    p.add_argument("--text", action="store_true", help="also show a diff of each SKILL.md")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=diff_command)
