"""The process-wide module cache of skill scripts.

Private to ``agentsim.skills.scripts``. One entry per resolved script path, valid while the
file's ``(mtime_ns, size)`` match; every runner of the process shares it, so 1,000 agents
using one skill share one import.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

from agentsim.skills._outcome import Tier, format_exc

__all__ = ["CACHE", "LOAD_LOCK", "Entry", "load"]


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
