"""The process-wide module cache of skill scripts, and running a cached plain script.

Private to ``agentsim.skills.scripts``. Every runner of the process shares the cache, so
1,000 agents using one skill share one import.

Each folder of scripts is imported as a package of its own, named after the folder's path
(``_agentsim_skill_<hash>``), and a script as a module of it. A script can therefore import
its sibling modules with relative imports (``from . import util``, ``from .util import f``)
in-process, and two skills that both ship a ``util.py`` never see each other's: nothing is
put on ``sys.path`` and no sibling is registered under its bare name. (An absolute
``import util`` still fails in-process and sends the script to the subprocess tier, where
Python puts the script's folder on the path itself.)

An entry is valid while its *stamp* holds: the name, ``mtime_ns`` and size of every ``.py``
file of the script's folder. Editing a sibling therefore re-imports the scripts that may use
it; the folder's package is then rebuilt, so no stale sibling survives in ``sys.modules``.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.util
import inspect
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import CodeType
from typing import Any

from agentsim.skills._capture import capturing
from agentsim.skills._outcome import (
    CappedWriter,
    Outcome,
    Tier,
    format_exc,
    outcome_from_exception,
)
from agentsim.skills.context import _CURRENT, SkillScriptContext

__all__ = [
    "CACHE",
    "WRAPPER_LOCK",
    "Entry",
    "NeedsSubprocess",
    "Stamp",
    "folder_lock",
    "load",
    "package_name",
    "run_main",
    "stamp_of",
]

Stamp = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One cached script file: how to run it, valid while its folder's stamp holds."""

    stamp: Stamp
    tier: Tier
    fn: Callable[..., Any] | None = None
    is_async: bool = False
    code: CodeType | None = None
    package: str | None = None
    reason: str | None = None


# Process-wide: every runner (and so every agent) of this process shares one import.
CACHE: dict[str, Entry] = {}
# sys.argv is a process global that plain scripts read: one plain script at a time. A
# threading lock (not an asyncio one) so that it is valid from any event loop and thread.
WRAPPER_LOCK = threading.Lock()

_folder_locks: dict[str, threading.Lock] = {}
_folder_locks_guard = threading.Lock()
# folder -> (stamp, package name) of the package currently registered for it
_packages: dict[str, tuple[Stamp, str]] = {}


class NeedsSubprocess(Exception):
    """A plain script failed on an import that only resolves when run as a real script."""


def folder_lock(folder: str) -> threading.Lock:
    """The lock serialising imports of one folder's scripts (and its package's rebuild)."""
    with _folder_locks_guard:
        return _folder_locks.setdefault(folder, threading.Lock())


def stamp_of(path: str) -> Stamp | None:
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


def _package(folder: str, stamp: Stamp) -> str:
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


def _module_name(package: str, path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    return f"{package}.{stem if stem.isidentifier() else '_' + package_name(stem)[-8:]}"


def load(path: str, stamp: Stamp) -> Entry:
    """Compile (and if it may define ``entrypoint``, import) one script; the caller holds
    ``folder_lock``. Never raises for a broken script: it goes to the subprocess tier."""
    with open(path, "rb") as fh:
        source = fh.read()
    try:
        tree = ast.parse(source, filename=path)
        code = compile(tree, path, "exec")
    except (SyntaxError, ValueError) as exc:
        return Entry(stamp=stamp, tier="subprocess", reason=format_exc(exc))
    package = _package(os.path.dirname(path), stamp)
    if not _may_define_entrypoint(tree):
        return Entry(stamp=stamp, tier="wrapper", code=code, package=package)
    name = _module_name(package, path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:  # pragma: no cover - every .py file gets a spec
        return Entry(stamp=stamp, tier="subprocess", reason=f"no import spec for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        # Run the code we compiled (matching the stamp we keyed on) instead of letting the
        # loader read the file again. Top-level prints go nowhere visible.
        with capturing(CappedWriter(0), CappedWriter(0)):
            exec(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        return Entry(stamp=stamp, tier="subprocess", reason=format_exc(exc))
    fn = getattr(module, "entrypoint", None)
    if not callable(fn):
        return Entry(stamp=stamp, tier="wrapper", code=code, package=package)
    return Entry(
        stamp=stamp,
        tier="entrypoint",
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn),
        package=package,
    )


def run_main(
    path: str, entry: Entry, argv: Sequence[str], ctx: SkillScriptContext, cap: int
) -> Outcome:
    """Run a plain script's cached code as ``__main__``; the caller holds ``WRAPPER_LOCK``.

    What it prints is its output; what it writes to stderr, its log. Raises
    ``NeedsSubprocess`` when it fails on an import (an absolute sibling import, say)."""
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
