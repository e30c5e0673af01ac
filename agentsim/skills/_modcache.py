"""The process-wide module cache of skill scripts, and running a cached plain script.

Private to ``agentsim.skills.scripts``. One entry per resolved script path, valid while the
file's ``(mtime_ns, size)`` match; every runner of the process shares it, so 1,000 agents
using one skill share one import. A plain script (the wrapper tier) is kept compiled and
run from here as ``__main__`` by ``run_main``.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.util
import inspect
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import CodeType
from typing import Any, cast

from agentsim.skills._outcome import (
    CappedWriter,
    Outcome,
    Tier,
    cap_text,
    format_exc,
    outcome_from_exception,
)
from agentsim.skills.context import _CURRENT, SkillScriptContext

__all__ = [
    "CACHE",
    "LOAD_LOCK",
    "WRAPPER_LOCK",
    "Entry",
    "NeedsSubprocess",
    "load",
    "run_main",
    "run_main_locked",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One cached script file: how to run it, valid while (mtime_ns, size) match."""

    mtime_ns: int
    size: int
    tier: Tier
    fn: Callable[..., Any] | None = None
    is_async: bool = False
    code: CodeType | None = None
    reason: str | None = None


# Process-wide: every runner (and so every agent) of this process shares one import.
CACHE: dict[str, Entry] = {}
LOAD_LOCK = threading.Lock()
# Guards sys.argv / sys.stdout while a wrapper-tier script runs; a threading lock (not an
# asyncio one) so that it is valid from any event loop and any thread.
WRAPPER_LOCK = threading.Lock()


class NeedsSubprocess(Exception):
    """A plain script failed on an import that only resolves when run as a real script."""


def _module_name(path: str) -> str:
    return "_agentsim_skill_" + hashlib.sha1(path.encode()).hexdigest()[:20]


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


def load(path: str, mtime_ns: int, size: int) -> Entry:
    """Compile (and if needed import) one script; never raises for a broken script."""
    with open(path, "rb") as fh:
        source = fh.read()
    try:
        tree = ast.parse(source, filename=path)
        code = compile(tree, path, "exec")
    except (SyntaxError, ValueError) as exc:
        return Entry(mtime_ns=mtime_ns, size=size, tier="subprocess", reason=format_exc(exc))
    if not _may_define_entrypoint(tree):
        return Entry(mtime_ns=mtime_ns, size=size, tier="wrapper", code=code)
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        # No loader for this suffix (e.g. `scripts/run` without `.py`): a bare module will do,
        # since we execute the compiled code ourselves.
        module = types.ModuleType(name)
        module.__file__ = path
    else:
        module = importlib.util.module_from_spec(spec)
    # Registered under a private name only, so dataclasses / pickling inside the script can
    # find their module; user code can never `import` it by accident.
    sys.modules[name] = module
    try:
        # Run the code we compiled (matching the stat we keyed on) instead of letting the
        # loader re-read the file and write __pycache__ into the skill folder.
        exec(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        return Entry(mtime_ns=mtime_ns, size=size, tier="subprocess", reason=format_exc(exc))
    fn = getattr(module, "entrypoint", None)
    if not callable(fn):
        return Entry(mtime_ns=mtime_ns, size=size, tier="wrapper", code=code)
    return Entry(
        mtime_ns=mtime_ns,
        size=size,
        tier="entrypoint",
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn),
    )


def run_main(
    path: str, entry: Entry, argv: Sequence[str], ctx: SkillScriptContext, cap: int
) -> Outcome:
    """Run a plain script's cached code as ``__main__``; the caller holds ``WRAPPER_LOCK``.

    Raises ``NeedsSubprocess`` when it fails on an import (a sibling module, say)."""
    out = CappedWriter(cap)
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__file__": path,
        "__builtins__": builtins,
        "__package__": None,
        "__cached__": None,
    }
    saved_argv, saved_stdout = sys.argv, sys.stdout
    sys.argv = [path, *argv]
    sys.stdout = out
    token = _CURRENT.set(ctx)
    failed: Outcome | None = None
    began = time.perf_counter()
    try:
        exec(cast(CodeType, entry.code), namespace)
    except ImportError as exc:
        raise NeedsSubprocess(format_exc(exc)) from None
    except (Exception, SystemExit) as exc:
        failed = outcome_from_exception(exc, cap)
    finally:
        _CURRENT.reset(token)
        sys.argv, sys.stdout = saved_argv, saved_stdout
    ran = time.perf_counter() - began
    output, truncated = cap_text(out.getvalue(), cap, out.dropped)
    if failed is None:
        failed = Outcome(ok=True, output=output, exit_code=0, error=None)
    return replace(failed, output=output, truncated=truncated, ran=ran)


def run_main_locked(
    path: str, entry: Entry, argv: Sequence[str], ctx: SkillScriptContext, cap: int
) -> Outcome:
    with WRAPPER_LOCK:
        return run_main(path, entry, argv, ctx, cap)
