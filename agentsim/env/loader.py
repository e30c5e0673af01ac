"""Finding an environment module's class from the ``module:`` key of an experiment.

A reference is one of:

- a name: a built-in module (``city``, ``social``) or one an installed package registers in
  the entry-point group ``agentsim.env_modules`` (``market = my_pkg.market:Market``);
- ``package.module:Class``: a class importable from ``sys.path``;
- ``./path/file.py:Class``: a class in a file, relative to the experiment's folder.

Every problem is a ``ConfigError`` naming what was looked for and what was found. Files are
imported under a name made from their absolute path (``agentsim_envfile_<stem>_<hash>``), so
that two experiments' ``market.py`` never share a module, and so that views pickled for
another process name a module that process can load again (``ModuleCode``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from agentsim.env.base import EnvModule
from agentsim.errors import ConfigError

__all__ = [
    "ENTRY_POINT_GROUP",
    "FILE_MODULE_PREFIX",
    "ModuleCode",
    "module_code",
    "resolve_module",
]

ENTRY_POINT_GROUP = "agentsim.env_modules"
FILE_MODULE_PREFIX = "agentsim_envfile_"
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_DOTTED_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_CLASS_RE = re.compile(r"^[A-Za-z_]\w*$")
_FORMS = "a module name (city, social or an installed one), package.module:Class or ./file.py:Class"


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _known_names() -> list[str]:
    from agentsim.env.router import BUILTIN_MODULES

    return sorted({*BUILTIN_MODULES, *_entry_points()})


def _file_module_name(path: Path) -> str:
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    stem = re.sub(r"\W", "_", path.stem)
    return f"{FILE_MODULE_PREFIX}{stem}_{digest}"


def load_file(path: Path, name: str | None = None) -> ModuleType:
    """Import the Python file ``path`` (once per process) under ``name`` (by default the
    name made from its path). Its own errors propagate."""
    name = name or _file_module_name(path)
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - only for non-.py suffixes
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: dataclasses and pickle look the module up by name.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import_failed(where: str, what: str, exc: BaseException) -> ConfigError:
    return ConfigError(
        where,
        f"importing {what} failed: {type(exc).__name__}: {exc}",
        "fix the module's code (run `python -c 'import ...'` to see the whole traceback)",
    )


def _from_file(ref: str, file: str, cls_name: str, *, base_dir: Path, where: str) -> object:
    path = Path(file).expanduser()
    if not path.is_absolute():
        path = Path(base_dir) / path
    path = path.resolve()
    if not path.is_file():
        raise ConfigError(
            where,
            f"environment module file {file!r} does not exist (looked for {path})",
            "check the path: it is relative to the experiment's folder",
        )
    try:
        module = load_file(path)
    except Exception as exc:
        raise _import_failed(where, str(path), exc) from None
    return _attribute(module, cls_name, ref, where)


def _from_import(ref: str, dotted: str, cls_name: str, *, where: str) -> object:
    try:
        module = importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            where,
            f"cannot import {dotted!r} for {ref!r}: {exc}",
            "install the package or fix the spelling; a file beside the experiment is "
            "written ./file.py:Class",
        ) from None
    except Exception as exc:
        raise _import_failed(where, repr(dotted), exc) from None
    return _attribute(module, cls_name, ref, where)


def _attribute(module: ModuleType, cls_name: str, ref: str, where: str) -> object:
    found = getattr(module, cls_name, None)
    if found is None:
        classes = sorted(
            n
            for n, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, EnvModule) and v is not EnvModule
        )
        raise ConfigError(
            where,
            f"{ref!r}: the module has no class {cls_name!r} "
            f"(EnvModule classes in it: {', '.join(classes) or 'none'})",
            "fix the class name after the ':'",
        )
    return found


def _from_name(name: str, *, where: str) -> object:
    from agentsim.env.router import BUILTIN_MODULES

    builtin = BUILTIN_MODULES.get(name)
    if builtin is not None:
        return builtin
    ep = _entry_points().get(name)
    if ep is None:
        raise ConfigError(
            where,
            f"unknown environment module {name!r} (known: {', '.join(_known_names())})",
            f"use one of the known modules, or give {_FORMS}",
        )
    try:
        return ep.load()
    except Exception as exc:
        raise _import_failed(where, f"entry point {name!r} ({ep.value})", exc) from None


def resolve_module(ref: str, *, base_dir: Path, where: str = "module") -> type[EnvModule]:
    """The ``EnvModule`` subclass that ``ref`` names; a ``ConfigError`` at ``where`` when the
    file, module or class is missing, or the class is not an ``EnvModule``."""
    target, sep, cls_name = ref.rpartition(":")
    if not sep:
        if not _NAME_RE.match(ref):
            raise ConfigError(where, f"{ref!r} is not a module reference", f"give {_FORMS}")
        found = _from_name(ref, where=where)
    elif not _CLASS_RE.match(cls_name) or not target:
        raise ConfigError(where, f"{ref!r}: {cls_name!r} is not a class name", f"give {_FORMS}")
    elif target.endswith(".py") or "/" in target or "\\" in target:
        found = _from_file(ref, target, cls_name, base_dir=base_dir, where=where)
    elif _DOTTED_RE.match(target):
        found = _from_import(ref, target, cls_name, where=where)
    else:
        raise ConfigError(where, f"{ref!r} is not a module reference", f"give {_FORMS}")
    if not (isinstance(found, type) and issubclass(found, EnvModule)):
        what = f"class {found.__name__}" if isinstance(found, type) else type(found).__name__
        raise ConfigError(
            where,
            f"{ref!r} is a {what}, not a subclass of agentsim.env.EnvModule",
            "make the class subclass EnvModule (docs/experiments.md, 'Your own module')",
        )
    if found is EnvModule or not _NAME_RE.match(found.name) or found.name == EnvModule.name:
        raise ConfigError(
            where,
            f"{ref!r}: class {found.__name__} has the module name {found.name!r}",
            "set a class attribute name = 'my_module' (lower-case letters, digits and '_')",
        )
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class ModuleCode:
    """Where the code of an experiment's own modules lives, for hosts in other processes:
    ``files`` (import name, absolute path) are imported again under the same name before a
    view is unpickled; ``ship`` lists what Ray's runtime environment uploads to every actor
    (those files and the folders of packages that are not installed in the environment)."""

    files: tuple[tuple[str, str], ...] = ()
    ship: tuple[str, ...] = ()

    def load(self) -> None:
        """Import every file module under its name: from its path, or (on a node without
        that path) from the copy Ray shipped, which is importable by the file's stem."""
        for name, file in self.files:
            path = Path(file)
            if not path.is_file():
                spec = importlib.util.find_spec(path.stem)
                if spec is None or spec.origin is None:
                    raise ConfigError(
                        "environment",
                        f"environment module file {file} is not on this node",
                        "run from a shared folder, or let the Ray executor ship it",
                    )
                path = Path(spec.origin)
            load_file(path, name)

    def job_runtime_env(self) -> dict[str, Any]:
        """Ray's job-level ``runtime_env`` (``ray.init``): the code is uploaded to every
        node of the cluster. Empty when nothing is to be shipped."""
        return {"py_modules": list(self.ship)} if self.ship else {}

    def actor_runtime_env(self) -> dict[str, Any]:
        """The actor-level ``runtime_env`` for a Ray that was started before the run (Ray
        uploads local code at the job level only): the packages' folders on the actors'
        ``PYTHONPATH``, for nodes that share the driver's file system."""
        roots = [str(Path(p).parent) for p in self.ship if not p.endswith(".py")]
        if not roots:
            return {}
        old = os.environ.get("PYTHONPATH")
        return {"env_vars": {"PYTHONPATH": os.pathsep.join([*roots, *([old] if old else [])])}}


def _installed(path: Path) -> bool:
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    return any(path.is_relative_to(Path(r).resolve()) for r in roots)


def module_code(classes: list[type[EnvModule]]) -> ModuleCode:
    """The ``ModuleCode`` of ``classes``: nothing for built-in and installed modules."""
    files: list[tuple[str, str]] = []
    ship: list[str] = []
    for cls in classes:
        mod = sys.modules[cls.__module__]
        origin = getattr(mod, "__file__", None)
        if origin is None or cls.__module__.partition(".")[0] == "agentsim":
            continue
        if cls.__module__.startswith(FILE_MODULE_PREFIX):
            files.append((cls.__module__, origin))
            ship.append(origin)
            continue
        top = sys.modules.get(cls.__module__.partition(".")[0])
        top_file = getattr(top, "__file__", None)
        if top_file is None or _installed(Path(top_file).resolve()):
            continue
        top_path = Path(top_file)
        ship.append(str(top_path.parent if top_path.name == "__init__.py" else top_path))
    return ModuleCode(files=tuple(dict.fromkeys(files)), ship=tuple(dict.fromkeys(ship)))
