"""Skills from MCP servers that offer the skills extension (SEP-2640).

A server lists its skills with ``skills/list``: each entry carries the skill's frontmatter
and a manifest of its files (``skill://`` resource URIs, each with a size and a SHA-256
digest). ``McpSkillSource`` turns one server into a registry root: at the start of a run and
at each refresh it lists the skills, reads the files it does not hold yet (``resources/read``),
checks every file against the manifest's digest, keeps each file once by digest in a cache
folder and lays each skill version out as a folder of its own there, so that everything
downstream (the body read on activation, ``read_skill_file``, scripts) reads it as it reads
a folder skill. A file whose bytes do not match its digest breaks the skill (a diagnostic
naming it; an earlier good version stays, as for a folder skill an edit broke).

The connection is kept open on a thread of its own (the registry is refreshed from
synchronous code inside the engine's event loop); a server that stops answering keeps the
last good version of its skills until it answers again. Nothing here is imported unless a
run lists MCP servers: the client library is imported on first connection.

MCP skills are untrusted: ``!`cmd``` lines of their bodies never run, and their scripts and
hooks run only when the experiment allows it for that server (``scripts: true``), always
under ``process`` isolation (see ``SkillSpace``).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import os
import shlex
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlsplit

from agentsim.errors import ConfigError
from agentsim.skills.frontmatter import Diagnostic
from agentsim.skills.manifest import SkillManifest, path_problem, read_skill
from agentsim.skills.scan import RootScan, ScannedSkill, SkillDescriptor, scan_root

if TYPE_CHECKING:
    from fastmcp import Client

__all__ = [
    "MAX_SKILL_BYTES",
    "MAX_SKILL_FILES",
    "McpServer",
    "McpSkillDescriptor",
    "McpSkillSource",
    "McpUnavailableError",
    "RestoredMcpSource",
    "default_cache_dir",
]

MAX_SKILL_FILES = 512
"""Files of one skill a server may list (more: the skill is refused)."""
MAX_SKILL_BYTES = 16 * 1024 * 1024
"""Bytes of one skill's files together (more: the skill is refused)."""

_T = TypeVar("_T")


class McpUnavailableError(Exception):
    """The server could not be reached, or did not answer as a skills server."""


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServer:
    """One configured server (``skills.mcp.<i>``); small and picklable (hosts get it)."""

    namespace: str
    url: str | None = None
    command: tuple[str, ...] = ()
    scripts: bool = False
    timeout: float = 30.0
    field: str = "skills.mcp"  # where it is configured, for error messages

    @property
    def target(self) -> str:
        """The URL, or the command line of a stdio server."""
        return self.url if self.url is not None else shlex.join(self.command)

    def describe(self) -> str:
        return f"MCP skills server {self.namespace!r} ({self.target})"


def _untrusted(manifest: SkillManifest) -> SkillManifest:
    """A served skill's manifest without what only the experiment may grant: environment
    variables passed to its scripts (``env``: API keys) and network access (``network``).
    Its scripts, where ``scripts: true`` allows them, run sandboxed with neither."""
    if not manifest.env and not manifest.network:
        return manifest
    return manifest.model_copy(update={"env": (), "network": False})


@dataclass(frozen=True, slots=True, kw_only=True)
class McpSkillDescriptor(SkillDescriptor):
    """A skill served by an MCP server: ``path`` is the folder its verified files were laid
    out in (one folder per version), ``uri`` its ``SKILL.md`` resource, ``digests`` the
    manifest's SHA-256 of each file (relative path -> hex digest)."""

    server: str
    uri: str
    digests: tuple[tuple[str, str], ...]
    scripts_allowed: bool = False

    def file_digests(self) -> dict[str, str]:
        """Relative path -> SHA-256 (hex) of each file of the skill, as the server's
        manifest gave them (every file was checked against it before the skill was
        registered)."""
        return dict(self.digests)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/agentsim/mcp-skills`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "agentsim", "mcp-skills")


# -- the file cache --------------------------------------------------------------------


class _Cache:
    """Files by SHA-256 (``objects/<hex>``), and one folder per skill version
    (``skills/<key>/<name>/``, the key a digest of its file list), each written once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects = root / "objects"
        self.trees = root / "skills"

    def has(self, digest: str) -> bool:
        return (self.objects / digest).is_file()

    def put(self, digest: str, data: bytes) -> None:
        self.objects.mkdir(parents=True, exist_ok=True)
        target = self.objects / digest
        if target.is_file():
            return
        fd, tmp = tempfile.mkstemp(dir=self.objects, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)

    def get(self, digest: str) -> bytes | None:
        """The bytes kept for ``digest``, or None (absent, or damaged: then dropped)."""
        try:
            data = (self.objects / digest).read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != digest:
            (self.objects / digest).unlink(missing_ok=True)
            return None
        return data

    def tree(self, name: str, files: Mapping[str, str]) -> Path:
        """The folder holding ``files`` (relative path -> digest) as skill ``name``; every
        digest must be in the cache."""
        listing = "\n".join(f"{rel}\0{files[rel]}" for rel in sorted(files))
        key = hashlib.sha256(f"{name}\n{listing}".encode()).hexdigest()
        final = self.trees / key
        if final.is_dir():
            return final / name
        self.trees.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=self.trees, prefix=".tmp-"))
        try:
            for rel, digest in files.items():
                data = self.get(digest)
                if data is None:
                    raise OSError(f"the cached copy of {rel} is missing or damaged")
                dest = tmp / name / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.is_dir():  # not another process laying out the same version
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final / name


# -- the connection --------------------------------------------------------------------

_Job = Callable[["Client[Any]"], Awaitable[Any]]


class _Link:
    """One server's client session, kept open by a task on a thread of its own; a job
    is a coroutine function of the connected client. Any failure ends the session (the
    next job connects again)."""

    def __init__(self, server: McpServer, log: Path) -> None:
        self.server = server
        self.log = log  # a stdio server's stderr
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        self._jobs: asyncio.Queue[tuple[_Job | None, asyncio.Future[Any]]] | None = None

    def call(self, job: Callable[[Client[Any]], Awaitable[_T]]) -> _T:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name=f"mcp-{self.server.namespace}", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            loop = self._loop
        fut = asyncio.run_coroutine_threadsafe(self._submit(job), loop)
        try:
            result: _T = fut.result(timeout=self.server.timeout * 4)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise McpUnavailableError(f"no answer within {self.server.timeout * 4:g}s") from None
        return result

    async def _submit(self, job: _Job) -> Any:
        # ``_jobs`` is None once the session stopped taking jobs (it may still be closing).
        if self._jobs is None:
            jobs: asyncio.Queue[tuple[_Job | None, asyncio.Future[Any]]] = asyncio.Queue()
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._jobs = jobs
            self._task = asyncio.create_task(self._serve(ready, jobs))
            await ready
        assert self._jobs is not None
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._jobs.put((job, done))
        return await done

    def _client(self) -> Client[Any]:
        from fastmcp import Client
        from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
        from fastmcp.skills import SkillsClientExtension

        server = self.server
        transport: Any
        if server.url is not None:
            transport = StreamableHttpTransport(server.url)
        else:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            # Ends with the session; its stderr goes to a log beside the cache, not the
            # run's console.
            transport = StdioTransport(
                server.command[0], list(server.command[1:]), keep_alive=False, log_file=self.log
            )
        return Client(
            transport,
            timeout=server.timeout,
            init_timeout=server.timeout,
            cache=False,
            extensions=[SkillsClientExtension()],
        )

    async def _serve(
        self,
        ready: asyncio.Future[None],
        jobs: asyncio.Queue[tuple[_Job | None, asyncio.Future[Any]]],
    ) -> None:
        pending: asyncio.Future[Any] | None = None

        def stop_taking_jobs() -> None:
            if self._jobs is jobs:
                self._jobs = None

        try:
            async with self._client() as client:
                caps = client.server_capabilities
                extensions = caps.extensions if caps is not None else None
                if not extensions or "io.modelcontextprotocol/skills" not in extensions:
                    raise McpUnavailableError(
                        "it does not offer the skills extension (io.modelcontextprotocol/skills)"
                    )
                ready.set_result(None)
                while True:
                    job, pending = await jobs.get()
                    if job is None:
                        stop_taking_jobs()
                        pending.set_result(None)
                        return
                    try:
                        pending.set_result(await job(client))
                    except Exception as exc:
                        stop_taking_jobs()  # a failed exchange may have broken the session
                        pending.set_exception(McpUnavailableError(_reason(exc)))
                        return
                    pending = None
        except Exception as exc:  # the connection failed or broke
            for fut in (ready, pending):
                if fut is not None and not fut.done():
                    fut.set_exception(McpUnavailableError(_reason(exc)))
        finally:
            stop_taking_jobs()
            while not jobs.empty():  # jobs queued behind a failure: tell them
                _, fut = jobs.get_nowait()
                if not fut.done():
                    fut.set_exception(McpUnavailableError("the connection closed"))

    def close(self) -> None:
        """End the session (a stdio server's process ends with it) and the thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def stop() -> None:
            task, jobs = self._task, self._jobs
            if jobs is not None:
                done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                await jobs.put((None, done))
            if task is not None and not task.done():
                try:
                    async with asyncio.timeout(self.server.timeout):
                        await task
                except (TimeoutError, Exception):
                    task.cancel()

        try:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(self.server.timeout + 5)
        except (concurrent.futures.TimeoutError, Exception):  # pragma: no cover - defensive
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()


def _reason(exc: BaseException) -> str:
    """A one-line account of a connection failure (the innermost error of a group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, McpUnavailableError):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# -- listing -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Listed:
    """What one ``skills/list`` gave: each entry's name, URI and files (relative path ->
    (resource URI, digest, size)), or why the entry cannot be used."""

    name: str
    uri: str
    files: dict[str, tuple[str, str, int]]
    problem: str | None = None


def _segments(uri: str) -> tuple[str, str, tuple[str, ...]]:
    parts = urlsplit(uri)
    segs = tuple(unquote(s) for s in parts.path.split("/") if s)
    return parts.scheme, parts.netloc, segs


def _listed(entry: Any) -> _Listed:
    """Read one ``MCPSkill`` entry (the client has validated its shape)."""
    name = str(entry.frontmatter.name)
    uri = str(entry.uri)
    if not isinstance(entry.resources, list):
        return _Listed(
            name,
            uri,
            {},
            "its manifest lists no files (resources: dynamic); agentsim needs each file's "
            "digest, so this skill is not loaded",
        )
    scheme, authority, segs = _segments(uri)
    depth = len(segs) - 1  # the skill folder's segments, before SKILL.md
    files: dict[str, tuple[str, str, int]] = {}
    total = 0
    for res in entry.resources:
        r_scheme, r_auth, r_segs = _segments(str(res.uri))
        rel = "/".join(r_segs[depth:])
        problem = path_problem(rel)
        if (r_scheme, r_auth, r_segs[:depth]) != (scheme, authority, segs[:depth]) or problem:
            return _Listed(name, uri, {}, f"file {res.uri} is not inside the skill: {problem}")
        files[rel] = (str(res.uri), str(res.digest).removeprefix("sha256:"), int(res.size))
        total += int(res.size)
    if len(files) > MAX_SKILL_FILES or total > MAX_SKILL_BYTES:
        return _Listed(
            name,
            uri,
            {},
            f"it has {len(files)} files of {total} bytes, over the limit of {MAX_SKILL_FILES} "
            f"files and {MAX_SKILL_BYTES} bytes",
        )
    return _Listed(name, uri, files)


async def _fetch(client: Client[Any], uri: str) -> bytes:
    import mcp_types

    contents = await client.read_resource(uri)
    if len(contents) != 1:
        raise ValueError(f"{len(contents)} content blocks, where one was expected")
    (content,) = contents
    if isinstance(content, mcp_types.TextResourceContents):
        return content.text.encode("utf-8")
    return base64.b64decode(content.blob)


async def _list_and_fetch(
    client: Client[Any], cache: _Cache
) -> tuple[list[_Listed], dict[str, bytes | str]]:
    """Every listed skill, and the bytes (or the error) of each file the cache lacks, by
    resource URI. A file the server refuses breaks its skill only; a broken connection
    raises."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    listed = [_listed(e) for e in await client.list_skills()]
    fetched: dict[str, bytes | str] = {}
    for item in listed:
        for res_uri, digest, _ in item.files.values():
            if res_uri in fetched or cache.has(digest):
                continue
            try:
                fetched[res_uri] = await _fetch(client, res_uri)
            except MCPError as exc:
                if exc.error.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                    raise  # the server, not this file
                fetched[res_uri] = str(exc) or type(exc).__name__
            except ValueError as exc:
                fetched[res_uri] = str(exc) or type(exc).__name__
    return listed, fetched


# -- the source --------------------------------------------------------------------------


class McpSkillSource:
    """One MCP server as a registry root (namespace ``server.namespace``)."""

    def __init__(self, server: McpServer, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.server = server
        self.cache = _Cache(Path(cache_dir) if cache_dir is not None else default_cache_dir())
        self._link = _Link(server, self.cache.root / "logs" / f"{server.namespace}.log")
        self.down: str | None = None  # why the last refresh failed, or None

    @property
    def namespace(self) -> str:
        return self.server.namespace

    def close(self) -> None:
        self._link.close()

    def scan(
        self, previous: RootScan | None = None
    ) -> tuple[RootScan, list[str], list[str], list[str]]:
        """List the server's skills (see ``scan.scan_root`` for what is returned).

        Without ``previous`` (the first scan of a run) a server that cannot be reached is a
        ``ConfigError`` naming it; later, its last good skills are kept (each marked broken
        once, with why) until it answers again."""
        cache = self.cache
        try:
            listed, fetched = self._link.call(lambda c: _list_and_fetch(c, cache))
        except McpUnavailableError as exc:
            if previous is None:
                raise ConfigError(
                    self.server.field,
                    f"{self.server.describe()} cannot be used: {exc}",
                    "start the server, or fix its url / command (or remove it from skills.mcp)",
                ) from None
            return self._unreachable(previous, str(exc)), [], [], []
        self.down = None
        old = previous.entries if previous is not None else {}
        entries: dict[str, ScannedSkill] = {}
        for item in sorted(listed, key=lambda i: i.name):
            if item.name in entries:
                continue  # a server listing one name twice: the first wins
            entries[item.name] = self._entry(item, fetched, old.get(item.name))
        added = [n for n in entries if n not in old]
        changed = [
            n
            for n, e in entries.items()
            if n in old and e.skill is not old[n].skill and e.skill is not None and not e.stale
        ]
        removed = [n for n in old if n not in entries]
        scan = RootScan(root=self.server.target, namespace=self.namespace, entries=entries)
        return scan, added, changed, removed

    def _unreachable(self, previous: RootScan, why: str) -> RootScan:
        if self.down is not None:
            return previous  # still down: nothing new to say
        self.down = why
        message = (
            f"{self.server.describe()} did not answer ({why}); the last good version of "
            "this skill stays active until it answers again"
        )
        entries = {}
        for name, entry in previous.entries.items():
            if entry.skill is None:
                entries[name] = entry
                continue
            diag = Diagnostic(file=_uri_of(entry), line=0, message=message)
            entries[name] = replace(entry, diagnostics=(diag,), stale=True)
        return replace(previous, entries=entries)

    def _entry(
        self, item: _Listed, fetched: Mapping[str, bytes | str], prev: ScannedSkill | None
    ) -> ScannedSkill:
        digests = tuple(sorted((rel, d) for rel, (_, d, _) in item.files.items()))
        last_good = prev.skill if prev is not None else None
        if (
            isinstance(last_good, McpSkillDescriptor)
            and last_good.digests == digests
            and last_good.uri == item.uri
        ):
            if prev is not None and not prev.stale:
                return prev
            return ScannedSkill(stamp=(None,), scripts=(), skill=last_good, diagnostics=())
        try:
            problem = item.problem or self._store(item, fetched)
        except OSError as exc:  # the cache folder cannot be written
            problem = f"cannot keep its files in {self.cache.root} ({exc}); fix skills.mcp_cache"
        folder = None
        if problem is None:
            try:
                folder = self.cache.tree(item.name, dict(digests))
            except OSError as exc:  # a damaged copy was dropped: fetched again next time
                problem = f"cannot lay out its files from the cache ({exc}); it is read again "
                problem += "from the server at the next refresh"
        if folder is not None:
            got = read_skill(str(folder / "SKILL.md"))
            diags = tuple(
                replace(d, file=item.uri if d.file.startswith(str(self.cache.root)) else d.file)
                for d in got.parsed.diagnostics
            )
            manifest = got.parsed.manifest
            if manifest is not None:
                desc = McpSkillDescriptor(
                    skill_id=f"{self.namespace}@{manifest.name}",
                    namespace=self.namespace,
                    path=str(folder),
                    manifest=_untrusted(manifest),
                    body_line=got.parsed.body_line,
                    server=self.server.target,
                    uri=item.uri,
                    digests=digests,
                    scripts_allowed=self.server.scripts,
                )
                return ScannedSkill(stamp=(None,), scripts=(), skill=desc, diagnostics=diags)
            errors = diags
        else:
            errors = (
                Diagnostic(
                    file=item.uri,
                    line=0,
                    message=f"skill {item.name!r} of {self.server.describe()}: {problem}",
                ),
            )
        if last_good is not None:  # keep the last good version, as for a folder skill
            return ScannedSkill(
                stamp=(None,), scripts=(), skill=last_good, diagnostics=errors, stale=True
            )
        return ScannedSkill(stamp=(None,), scripts=(), skill=None, diagnostics=errors)

    def _store(self, item: _Listed, fetched: Mapping[str, bytes | str]) -> str | None:
        """Check each fetched file against the manifest and keep it; what is wrong, or None."""
        if "SKILL.md" not in item.files:
            return "its manifest has no SKILL.md"
        for rel, (res_uri, digest, size) in sorted(item.files.items()):
            if self.cache.has(digest):
                continue
            data = fetched.get(res_uri)
            if data is None:
                return f"file {rel} could not be read: not fetched"
            if isinstance(data, str):
                return f"file {rel} could not be read: {data}"
            actual = hashlib.sha256(data).hexdigest()
            if actual != digest or len(data) != size:
                return (
                    f"file {rel} does not match the server's manifest (SHA-256 {actual}, "
                    f"{len(data)} bytes; the manifest says {digest}, {size} bytes), so the "
                    "skill is not loaded"
                )
            self.cache.put(digest, data)
        return None


def _uri_of(entry: ScannedSkill) -> str:
    skill = entry.skill
    return skill.uri if isinstance(skill, McpSkillDescriptor) else ""


class RestoredMcpSource:
    """A server's skills as a fork restored them from its parent's run (the folders of
    ``RUN/skills/restored/``): scanned and watched like folders, never listed from the server
    again, and still MCP skills (untrusted, scripts as the server's entry allows)."""

    def __init__(self, server: McpServer, folders: tuple[str, ...]) -> None:
        self.server = server
        self.folders = folders

    @property
    def namespace(self) -> str:
        return self.server.namespace

    def close(self) -> None:
        """Nothing to close: no connection."""

    def scan(
        self, previous: RootScan | None = None
    ) -> tuple[RootScan, list[str], list[str], list[str]]:
        """Scan the restored folders (see ``scan.scan_root``); their skills as MCP skills."""
        from agentsim.skills.provenance import folder_digests

        old = previous.entries if previous is not None else {}
        entries: dict[str, ScannedSkill] = {}
        diagnostics: list[Diagnostic] = []
        for folder in self.folders:
            mine = {n: e for n, e in old.items() if e.skill is None or _inside(e.skill, folder)}
            prev = RootScan(root=folder, namespace=self.namespace, entries=mine)
            scan, *_ = scan_root(folder, self.namespace, prev)
            diagnostics += scan.diagnostics
            for name, entry in scan.entries.items():
                skill = entry.skill
                if skill is not None and not isinstance(skill, McpSkillDescriptor):
                    digests = tuple(sorted(folder_digests(skill.path).items()))
                    skill = McpSkillDescriptor(
                        skill_id=skill.skill_id,
                        namespace=skill.namespace,
                        path=skill.path,
                        manifest=_untrusted(skill.manifest),
                        body_line=skill.body_line,
                        server=self.server.target,
                        uri=f"skill://{skill.manifest.name}/SKILL.md",
                        digests=digests,
                        scripts_allowed=self.server.scripts,
                    )
                    entry = replace(entry, skill=skill)
                entries.setdefault(name, entry)
        added = [n for n in entries if n not in old]
        changed = [
            n for n, e in entries.items() if n in old and e.skill is not old[n].skill and e.skill
        ]
        removed = [n for n in old if n not in entries]
        scan = RootScan(
            root=self.server.target,
            namespace=self.namespace,
            entries=entries,
            diagnostics=tuple(diagnostics),
        )
        return scan, added, changed, removed


def _inside(skill: SkillDescriptor, folder: str) -> bool:
    return os.path.dirname(skill.path) == folder
