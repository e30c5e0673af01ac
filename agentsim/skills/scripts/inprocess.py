"""Running a skill script inside this process: what a tier returns, print capture, worker
threads, the import cache, and the calls themselves.

**Outcomes.** ``Outcome`` is what one tier returns; output and tracebacks are capped here,
with a visible truncation marker (``CappedWriter``, ``cap_text``).

**Print capture.** ``sys.stdout`` and ``sys.stderr`` are process globals and many calls run
at once (tasks of one loop, worker threads), so swapping them per call would race: one call
would restore the stream another is still printing to. Each stream is wrapped once by a
``_Switch`` that looks up a contextvar on every write: a call sets it to its own buffer
(tasks and worker threads start from a copy of the caller's context, so they inherit it)
and everything else writes through. Not covered: writes to ``sys.__stdout__``, to file
descriptor 1 (``os.write``, C extensions, child processes a script starts itself), and
prints from threads a script starts on its own (a new thread starts with an empty context).
Use ``process`` isolation for scripts that do that.

**Worker threads.** ``run_in_thread(call, limit=...)`` runs ``call()`` on a daemon worker
and raises ``TimeoutError`` when it has not returned ``limit`` seconds after it *started*
(waiting for a free worker does not count). Python cannot kill a thread: a call that times
out keeps its worker until it returns, so the pool writes that worker off and starts a
replacement; stragglers never starve later calls. Workers are reused between calls because
starting a thread per call costs more than most hook calls themselves.

**The import cache** is process-wide (``CACHE``): every runner, and so every agent, shares
one import of a script. Each folder of scripts is imported as a package of its own, named
after the folder's path (``_agentsim_skill_<hash>``), and a script as a module of it, so a
script can import its siblings with relative imports (``from . import util``) and two skills
that both ship a ``util.py`` never see each other's: nothing is put on ``sys.path``. (An
absolute ``import util`` fails in-process and sends the script to the subprocess tier.) An
entry is valid while its stamp holds: the name, ``mtime_ns`` and size of every ``.py`` file
of the folder, so editing a sibling re-imports the scripts that may use it and the folder's
package is rebuilt.

**Calls.** ``call_async`` runs an async entrypoint as a task of its own in the caller's loop
(at the deadline only that task is cancelled; one that ignores it is kept in
``STRAGGLERS``). ``call_in_thread`` runs a sync entrypoint, an async one on a loop of its own
(``thread`` isolation), or — in the one-call child of ``process`` isolation — a plain script, on
a worker thread.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import contextvars
import hashlib
import importlib.util
import inspect
import json
import math
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from types import CodeType
from typing import Any, Generic, Literal, TextIO, TypeVar, cast

from agentsim.skills.context import _CURRENT, SkillScriptContext

__all__ = [
    "CACHE",
    "HOOK_FUNCTIONS",
    "FolderStamp",
    "LoadedScript",
    "NeedsSubprocess",
    "Stopped",
    "folder_lock",
    "load",
    "package_name",
    "run_main",
    "stamp_of",
    "unwrapped",
]


# -- what a tier returns --------------------------------------------------------------

# ``hook``: a lifecycle hook function (``async def pre_step()``) called by name.
Tier = Literal["entrypoint", "wrapper", "subprocess", "hook"]
# Functions a script may define to be called by name as its skill's lifecycle hooks.
HOOK_FUNCTIONS = ("pre_step", "post_step")


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """A script call's result before timing, tier and isolation are attached."""

    ok: bool
    output: str
    exit_code: int
    error: str | None
    truncated: bool = False
    log: str = ""


class CappedWriter:
    """A text sink that keeps the first ``cap`` characters and counts the rest.

    Used for captured prints; writes come from one call's thread or task at a time, and a
    lost race between two threads of one script could only misorder its own lines."""

    def __init__(self, cap: int) -> None:
        self._parts: list[str] = []
        self._cap = cap
        self._room = cap
        self.dropped = 0

    def write(self, text: str) -> int:
        kept = text[: max(self._room, 0)]
        if kept:
            self._parts.append(kept)
            self._room -= len(kept)
        self.dropped += len(text) - len(kept)
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered."""

    def getvalue(self) -> str:
        return "".join(self._parts)

    def capped(self) -> tuple[str, bool]:
        """The text kept, with a truncation marker when something was dropped."""
        return cap_text(self.getvalue(), self._cap, self.dropped)


def exit_status(exc: SystemExit) -> tuple[int, str | None]:
    code = exc.code
    if code is None:
        return 0, None
    if isinstance(code, int):
        return code, None
    return 1, str(code)  # sys.exit("message") means failure with that message


def format_exc(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def cap_text(text: str, cap: int, dropped: int = 0) -> tuple[str, bool]:
    """``text`` cut to ``cap`` characters plus a marker naming how much was cut."""
    if len(text) <= cap and not dropped:
        return text, False
    extra = max(len(text) - cap, 0) + dropped
    return f"{text[:cap]}\n...[truncated {extra} chars]", True


def outcome_from_value(value: Any, cap: int) -> Outcome:
    """An entrypoint's return value as output: str as is, a ``(stdout, stderr)`` pair of str
    split into output and log (AgentSociety2's contract), other JSON data dumped, None empty."""
    if value is None:
        return Outcome(ok=True, output="", exit_code=0, error=None)
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value):
        output, truncated = cap_text(value[0], cap)
        log, _ = cap_text(value[1], cap)
        return Outcome(
            ok=True, output=output, exit_code=0, error=None, truncated=truncated, log=log
        )
    if isinstance(value, dict | list | tuple):
        try:
            text = json.dumps(value, sort_keys=True)
        except (TypeError, ValueError) as exc:
            return Outcome(
                ok=False,
                output="",
                exit_code=1,
                error=f"entrypoint returned {type(value).__name__} that is not JSON "
                f"serialisable ({exc}); return a str or plain JSON data",
            )
    else:
        text = value if isinstance(value, str) else str(value)
    output, truncated = cap_text(text, cap)
    return Outcome(ok=True, output=output, exit_code=0, error=None, truncated=truncated)


def outcome_from_exception(exc: BaseException, cap: int) -> Outcome:
    """``SystemExit(n)`` gives exit code n; anything else exit code 1 and the traceback."""
    if isinstance(exc, SystemExit):
        code, message = exit_status(exc)
        return Outcome(ok=code == 0, output="", exit_code=code, error=message)
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None:
        # Drop the runner's own frame (the one that called the script): the trace starts at
        # the script, and reads the same whichever runner path made the call.
        exc = exc.with_traceback(tb.tb_next)
    error, _ = cap_text(format_exc(exc), cap)
    return Outcome(ok=False, output="", exit_code=1, error=error)


# -- print capture --------------------------------------------------------------------

_OUT: contextvars.ContextVar[CappedWriter | None] = contextvars.ContextVar(
    "agentsim_script_stdout", default=None
)
_ERR: contextvars.ContextVar[CappedWriter | None] = contextvars.ContextVar(
    "agentsim_script_stderr", default=None
)
_INSTALL_LOCK = threading.Lock()


class _Switch:
    """A stream that writes to the current call's buffer, or else to ``inner``."""

    def __init__(self, inner: TextIO, var: contextvars.ContextVar[CappedWriter | None]) -> None:
        self._inner = inner
        self._var = var

    def write(self, text: str) -> int:
        sink = self._var.get()
        if sink is not None:
            return sink.write(text)
        return self._inner.write(text)

    def flush(self) -> None:
        if self._var.get() is None:
            self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        # encoding, isatty, fileno, buffer...: whatever the wrapped stream offers.
        return getattr(self._inner, name)


def unwrapped(stream: TextIO) -> TextIO:
    """``stream`` without the per-call print capture this module puts on ``sys.stdout`` /
    ``sys.stderr``: for the runner's own lines (notices, progress), which must reach the
    user whatever a script call left in the current context."""
    while isinstance(stream, _Switch):
        stream = stream._inner
    return stream


def _install() -> None:
    for name, var in (("stdout", _OUT), ("stderr", _ERR)):
        if not isinstance(getattr(sys, name), _Switch):
            with _INSTALL_LOCK:
                current = getattr(sys, name)
                if not isinstance(current, _Switch):
                    setattr(sys, name, cast(TextIO, _Switch(current, var)))


@contextlib.contextmanager
def capturing(out: CappedWriter, err: CappedWriter) -> Iterator[None]:
    """Within the block (and in tasks and runner threads started from it), prints to
    ``sys.stdout`` go to ``out`` and to ``sys.stderr`` go to ``err``."""
    _install()
    out_token = _OUT.set(out)
    err_token = _ERR.set(err)
    try:
        yield
    finally:
        _ERR.reset(err_token)
        _OUT.reset(out_token)


def route_to(out: CappedWriter, err: CappedWriter) -> None:
    """Send this context's prints to ``out`` / ``err`` from now on. Call it inside a context
    of the call's own (``Context.run``, a task's context, a worker thread's copy): it does
    not undo itself."""
    _install()
    _OUT.set(out)
    _ERR.set(err)


# -- worker threads -------------------------------------------------------------------

T = TypeVar("T")

MAX_WORKERS = 8
"""Workers running calls at once, not counting those written off after a timeout. Few: the
calls are mostly Python code that holds the GIL, so more workers mostly take turns with each
other and with the event loop that feeds them; a few still let file I/O overlap."""


class Stopped(Exception):
    """A queued call never started: its script was quarantined while it waited."""


class _Job(Generic[T]):
    """One call, the context to run it in, and the future (of the caller's loop) that
    reports on it."""

    __slots__ = (
        "abandoned",
        "call",
        "context",
        "done",
        "finished",
        "loop",
        "running",
        "started_at",
        "stop",
        "timer",
        "written_off",
    )

    def __init__(
        self,
        call: Callable[[], T],
        context: contextvars.Context,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.call = call
        self.context = context
        self.loop = loop
        self.done: asyncio.Future[T] = loop.create_future()
        self.started_at: float | None = None  # time.monotonic() when a worker took it
        self.timer: asyncio.TimerHandle | None = None  # checks the limit (see _check)
        self.stop: threading.Event | None = None  # set: never start this job
        # Guarded by the pool's lock.
        self.running = False
        self.finished = False
        self.abandoned = False
        self.written_off = False


def _resolve(future: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if future.done():
        return  # the caller gave up (timeout or cancellation): discard
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)


def _report(
    job: _Job[Any], future: asyncio.Future[Any], value: Any, exc: BaseException | None
) -> None:
    try:
        job.loop.call_soon_threadsafe(_resolve, future, value, exc)
    except RuntimeError:  # pragma: no cover - the caller's loop has closed
        pass


class _Pool:
    def __init__(self, max_workers: int) -> None:
        self._jobs: queue.SimpleQueue[_Job[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._max = max_workers
        # Guarded by the lock: workers not written off, those waiting for a job, and jobs
        # not yet taken by a worker.
        self._live = 0
        self._idle = 0
        self._pending = 0

    def _need_worker(self) -> bool:
        """Called with the lock held: start a worker if queued jobs outnumber idle ones."""
        if self._pending > self._idle and self._live < self._max:
            self._live += 1
            return True
        return False

    def _spawn(self) -> None:
        threading.Thread(target=self._work, name="agentsim-script", daemon=True).start()

    def submit(self, job: _Job[Any]) -> None:
        with self._lock:
            self._pending += 1
            spawn = self._need_worker()
        self._jobs.put(job)
        if spawn:
            self._spawn()

    def abandon(self, job: _Job[Any]) -> None:
        """The caller stopped waiting: skip the job, or write its worker off and replace it."""
        with self._lock:
            if job.finished or job.abandoned:
                return
            job.abandoned = True
            spawn = False
            if job.running:
                job.written_off = True
                self._live -= 1
                spawn = self._need_worker()
        if spawn:
            self._spawn()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
                self._pending -= 1
                stopped = not job.abandoned and job.stop is not None and job.stop.is_set()
                skip = job.abandoned or stopped
                job.abandoned = skip
                job.running = not skip
            if stopped:
                _report(job, job.done, None, Stopped())
            if skip:
                continue
            job.started_at = time.monotonic()
            value: Any = None
            err: BaseException | None = None
            try:
                value = job.context.run(job.call)
            except BaseException as exc:  # delivered to (and re-raised in) the caller
                err = exc
            _report(job, job.done, value, err)
            with self._lock:
                job.finished = True
                if job.written_off:
                    return  # a replacement has taken our place


_pool = _Pool(MAX_WORKERS)


async def run_in_thread(
    call: Callable[[], T], *, limit: float, stop: threading.Event | None = None
) -> T:
    """``call()`` on a worker thread, in a copy of the caller's context. Its exceptions are
    re-raised here; ``TimeoutError`` when it runs longer than ``limit`` seconds. A worker
    never starts a job whose ``stop`` is set (the runner sets it when the script is
    quarantined): the caller is told at once by the runner, and the job is skipped."""
    loop = asyncio.get_running_loop()
    job: _Job[T] = _Job(call, contextvars.copy_context(), loop)
    job.stop = stop
    _pool.submit(job)
    if not math.isinf(limit):
        job.timer = loop.call_later(limit, _check, job, limit)
    try:
        return await job.done
    except asyncio.CancelledError:  # our caller was cancelled, and so is the call
        _pool.abandon(job)
        raise
    finally:
        if job.timer is not None:
            job.timer.cancel()


def _check(job: _Job[Any], limit: float) -> None:
    """On the caller's loop, once the call could have run ``limit`` seconds: fail it if it
    has, else look again when it will have (time waiting for a worker is not the script's)."""
    if job.done.done():
        return
    started = job.started_at
    left = limit if started is None else started + limit - time.monotonic()
    if left > 0:
        job.timer = job.loop.call_later(left, _check, job, limit)
        return
    _pool.abandon(job)
    job.done.set_exception(TimeoutError())


# -- the import cache -----------------------------------------------------------------

FolderStamp = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedScript:
    """One cached script file: how to run it, valid while its folder's stamp holds."""

    stamp: FolderStamp
    tier: Tier
    fn: Callable[..., Any] | None = None
    is_async: bool = False
    takes_ctx: bool = True  # entrypoint(argv, ctx), or else entrypoint(argv)
    code: CodeType | None = None
    package: str | None = None
    reason: str | None = None
    # (name, function) of the lifecycle hook functions the module defines itself.
    hooks: tuple[tuple[str, Callable[..., Any]], ...] = ()

    def hook(self, name: str) -> Callable[..., Any] | None:
        return next((fn for n, fn in self.hooks if n == name), None)


# Process-wide: every runner (and so every agent) of this process shares one import.
CACHE: dict[str, LoadedScript] = {}

# Not an lru_cache: two threads missing at once could each get a lock of their own.
_folder_locks: dict[str, threading.Lock] = {}
_folder_locks_guard = threading.Lock()
# folder -> (stamp, package name) of the package currently registered for it
_packages: dict[str, tuple[FolderStamp, str]] = {}


class NeedsSubprocess(Exception):
    """A plain script failed on an import that only resolves when run as a real script."""


def folder_lock(folder: str) -> threading.Lock:
    """The lock serialising imports of one folder's scripts (and its package's rebuild)."""
    with _folder_locks_guard:
        return _folder_locks.setdefault(folder, threading.Lock())


def stamp_of(path: str) -> FolderStamp | None:
    """The stamp of ``path``'s folder, or None when ``path`` itself is not among its files.

    Raises ``OSError`` when the folder cannot be listed."""
    folder, name = os.path.split(path)
    items = []
    with os.scandir(folder) as it:
        for item in it:
            if item.name.endswith(".py"):
                try:
                    st = item.stat()
                except OSError:  # a dangling symlink among the siblings: not ours to run
                    continue
                items.append((item.name, st.st_mtime_ns, st.st_size))
    items.sort()
    if not any(n == name for n, _, _ in items):
        return None
    return tuple(items)


def package_name(folder: str) -> str:
    return "_agentsim_skill_" + hashlib.sha256(folder.encode()).hexdigest()[:16]


def _package(folder: str, stamp: FolderStamp) -> str:
    """The folder's package for this stamp, rebuilt (stale submodules dropped) on change."""
    name = package_name(folder)
    known = _packages.get(folder)
    if known is not None and known[0] == stamp and name in sys.modules:
        return name
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]
    spec = importlib.util.spec_from_loader(name, None, is_package=True)
    assert spec is not None  # spec_from_loader only returns None for a loader it rejects
    spec.submodule_search_locations = [folder]
    package = importlib.util.module_from_spec(spec)
    package.__path__ = [folder]
    sys.modules[name] = package
    _packages[folder] = (stamp, name)
    return name


def _may_define_entrypoint(tree: ast.Module) -> bool:
    # Over-approximates on purpose: importing a plain script would run its unguarded
    # top-level code, so only files that could bind `entrypoint` are imported.
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "entrypoint":
            return True
        if isinstance(node, ast.Name) and node.id == "entrypoint":
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name) in ("entrypoint", "*"):
            return True
    return False


def _defines_hook(tree: ast.Module) -> bool:
    # Top-level definitions only: a hook function is called by name on the module.
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in HOOK_FUNCTIONS
        for node in tree.body
    )


def _module_name(package: str, path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    return f"{package}.{stem if stem.isidentifier() else '_' + package_name(stem)[-8:]}"


def load(path: str, stamp: FolderStamp) -> LoadedScript:
    """Compile (and if it may define ``entrypoint``, import) one script; the caller holds
    ``folder_lock``. Never raises for a broken script: it goes to the subprocess tier."""
    with open(path, "rb") as fh:
        source = fh.read()
    try:
        tree = ast.parse(source, filename=path)
        code = compile(tree, path, "exec")
    except (SyntaxError, ValueError) as exc:
        return LoadedScript(stamp=stamp, tier="subprocess", reason=format_exc(exc))
    package = _package(os.path.dirname(path), stamp)
    if not (_may_define_entrypoint(tree) or _defines_hook(tree)):
        return LoadedScript(stamp=stamp, tier="wrapper", code=code, package=package)
    name = _module_name(package, path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:  # pragma: no cover - every .py file gets a spec
        return LoadedScript(stamp=stamp, tier="subprocess", reason=f"no import spec for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        # Run the code we compiled (matching the stamp we keyed on) instead of letting the
        # loader read the file again. Top-level prints go nowhere visible.
        with capturing(CappedWriter(0), CappedWriter(0)):
            exec(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        return LoadedScript(stamp=stamp, tier="subprocess", reason=format_exc(exc))
    hooks = tuple(
        (n, f)
        for n in HOOK_FUNCTIONS
        if callable(f := getattr(module, n, None)) and getattr(f, "__module__", None) == name
    )
    fn = getattr(module, "entrypoint", None)
    if not callable(fn):
        return LoadedScript(stamp=stamp, tier="wrapper", code=code, package=package, hooks=hooks)
    return LoadedScript(
        stamp=stamp,
        tier="entrypoint",
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn),
        takes_ctx=takes_ctx(fn),
        package=package,
        hooks=hooks,
    )


def takes_ctx(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` accepts a second positional argument (``ctx``): AgentSociety2's
    contract allows both ``entrypoint(argv)`` and ``entrypoint(argv, ctx)``. Decided once,
    when the script is imported."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a C function): the full contract
        return True
    positional = 0
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            return True
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional += 1
    return positional >= 2


def invoke(entry: LoadedScript, argv: Sequence[str], ctx: SkillScriptContext) -> Any:
    """Call the entrypoint with the arguments it takes (a coroutine for an async one)."""
    fn = entry.fn
    assert fn is not None  # only entrypoint entries are invoked
    return fn(list(argv), ctx) if entry.takes_ctx else fn(list(argv))


def run_main(
    path: str, entry: LoadedScript, argv: Sequence[str], ctx: SkillScriptContext, cap: int
) -> Outcome:
    """Run a plain script's cached code as ``__main__``, with ``sys.argv`` set.

    Only in a process that runs one call (the child of ``process`` isolation, whose cwd and
    environment are the call's): ``sys.argv`` is a process global. What it prints is its
    output; what it writes to stderr, its log. Raises ``NeedsSubprocess`` when it fails on
    an import (an absolute sibling import, say)."""
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__file__": path,
        "__builtins__": builtins,
        "__package__": entry.package,  # relative imports of siblings work here too
        "__cached__": None,
    }
    out, err = CappedWriter(cap), CappedWriter(cap)
    saved_argv = sys.argv
    sys.argv = [path, *argv]
    token = _CURRENT.set(ctx)
    outcome = Outcome(ok=True, output="", exit_code=0, error=None)
    try:
        with capturing(out, err):
            exec(entry.code or compile("", path, "exec"), namespace)
    except ImportError as exc:
        raise NeedsSubprocess(format_exc(exc)) from None
    except (Exception, SystemExit) as exc:
        outcome = outcome_from_exception(exc, cap)
    finally:
        _CURRENT.reset(token)
        sys.argv = saved_argv
    output, truncated = out.capped()
    log, _ = err.capped()
    return replace(outcome, output=output, truncated=truncated, log=log)


# -- calls ----------------------------------------------------------------------------

# Tasks cut at their deadline that ignored the cancellation: referenced here so that they
# are not garbage-collected mid-flight, dropped when they end.
STRAGGLERS: set[asyncio.Task[Any]] = set()
# How long a cancelled async script may take to unwind before the caller walks away.
_CANCEL_GRACE = 0.1


def _seconds(limit: float) -> float | None:
    return None if math.isinf(limit) else limit


def _with_log(outcome: Outcome, log: CappedWriter) -> Outcome:
    text, _ = log.capped()
    return replace(outcome, log=text) if text else outcome


async def call_async(
    entry: LoadedScript, argv: Sequence[str], ctx: SkillScriptContext, cap: int, limit: float
) -> Outcome:
    """Await the async entrypoint as its own task, in a copy of the caller's context."""
    log = CappedWriter(cap)
    call_context = contextvars.copy_context()
    call_context.run(_bind, ctx, log)
    task = asyncio.get_running_loop().create_task(invoke(entry, argv, ctx), context=call_context)
    try:
        done, _ = await asyncio.wait({task}, timeout=_seconds(limit))
    except asyncio.CancelledError:
        task.cancel()  # our caller is cancelled: so is its script call
        raise
    if not done:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=_CANCEL_GRACE)
        if not done:
            STRAGGLERS.add(task)
            task.add_done_callback(STRAGGLERS.discard)
        else:
            _ = task.cancelled() or task.exception()  # retrieved: no "never retrieved" warning
        raise TimeoutError
    if task.cancelled():
        outcome = Outcome(
            ok=False,
            output="",
            exit_code=1,
            error="the script's task was cancelled from inside the script",
        )
        return _with_log(outcome, log)
    try:
        value = task.result()
    except (Exception, SystemExit) as exc:
        return _with_log(outcome_from_exception(exc, cap), log)
    return _with_log(outcome_from_value(value, cap), log)


def _bind(ctx: SkillScriptContext, log: CappedWriter) -> None:
    _CURRENT.set(ctx)
    route_to(log, log)


async def call_in_thread(
    path: str,
    entry: LoadedScript,
    argv: Sequence[str],
    ctx: SkillScriptContext,
    cap: int,
    limit: float,
    *,
    stop: threading.Event | None = None,
) -> Outcome:
    """Run the call on a worker thread (``run_in_thread``; ``stop`` as there). Raises
    ``NeedsSubprocess`` for a plain script that must run as a real script."""
    if entry.fn is None:
        return await run_in_thread(
            lambda: run_main(path, entry, argv, ctx, cap), limit=limit, stop=stop
        )
    is_async = entry.is_async

    def call() -> Outcome:
        log = CappedWriter(cap)
        _bind(ctx, log)  # run_in_thread runs us in a copy of the caller's context
        try:
            value = invoke(entry, argv, ctx)
            if is_async:
                value = asyncio.run(value)
        except (Exception, SystemExit) as exc:
            return _with_log(outcome_from_exception(exc, cap), log)
        return _with_log(outcome_from_value(value, cap), log)

    return await run_in_thread(call, limit=limit, stop=stop)
