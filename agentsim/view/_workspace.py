"""The folder ``agentsim view`` serves: its runs, found by name only, and a small cache.

Pages are served from worker threads at once, so both the kept runs and the cache are
``functools`` caches (their bookkeeping is thread-safe); a hand-kept dict lost keys to a
concurrent eviction (``KeyError`` under load).

A run is addressed by the name of its folder, looked up among the folders of the workspace;
nothing built from a request is ever joined onto a path, so ``../``, absolute paths and
encoded variants find no run. A run folder or agent folder that is a symlink leading out of
the workspace is not served.

Studies (``agentsim study``'s folders: a ``manifest.json`` with arms and runs) are served
too: the folder given, or each sub-folder of the workspace that is one. A study's run is
addressed as ``STUDY~RUN`` (the study's folder name and the run's id in its manifest), its
folder the one the manifest names inside the study folder.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Generic, TypeVar

from agentsim._paths import is_inside
from agentsim.errors import ConfigError, RunError
from agentsim.inspect import Run, open_run
from agentsim.inspect._files import read_json
from agentsim.inspect.agentview import AgentRecord

__all__ = ["STUDY_SEP", "Workspace", "is_study"]

STUDY_SEP = "~"
"""Between a study's name and a run's id in the name the viewer gives a study's run."""

_T = TypeVar("_T")
_CACHE_SIZE = 64


class _Once(Generic[_T]):
    """One cached value, built by the first caller; the others wait for it."""

    __slots__ = ("_built", "_lock", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built = False
        self._value: _T | None = None

    def get(self, build: Callable[[], _T]) -> _T:
        with self._lock:
            if not self._built:  # a build that raised leaves it empty: the next call tries
                self._value = build()
                self._built = True
            return self._value  # type: ignore[return-value]


def _new_once(_key: Hashable) -> _Once[Any]:
    return _Once()


def is_study(folder: Path) -> bool:
    """Whether ``folder`` is a study's folder: its ``manifest.json`` (not a link) lists arms
    and runs (a run's manifest does not)."""
    m = folder / "manifest.json"
    if m.is_symlink() or not m.is_file():
        return False
    try:
        data = read_json(m, what="manifest")
    except RunError:
        return False
    return isinstance(data.get("arms"), list) and isinstance(data.get("runs"), list)


class Workspace:
    """A workspace folder (its sub-folders with a ``manifest.json`` are runs or studies),
    one study folder, or one run."""

    def __init__(self, path: Path) -> None:
        root = Path(path).resolve()
        if not root.is_dir():
            raise ConfigError(
                "WORKSPACE_OR_RUN",
                f"{path} is not a folder",
                "give the workspace folder (e.g. workspace), a study folder or one run folder",
            )
        self.study_root = is_study(root)  # the folder given is one study
        self.single = not self.study_root and (root / "manifest.json").is_file()
        self.root = root.parent if self.single else root
        self._only = root.name if self.single else None
        # The least recently used of _CACHE_SIZE keys is dropped (see ``cached``).
        self._slots = functools.lru_cache(maxsize=_CACHE_SIZE)(_new_once)
        # One Run per run folder, kept: it keeps its shard reader between requests (it
        # reads again only files that changed).
        self._open: Callable[[str, Path], Run] = functools.cache(
            lambda run_id, folder: open_run(folder)
        )
        self._names: dict[Path, str] = {}  # a served run's folder -> its name

    def _folders(self) -> list[Path]:
        return sorted(
            p
            for p in self.root.iterdir()
            if not p.name.startswith(".")
            and p.is_dir()
            and (p / "manifest.json").is_file()
            and not (p / "manifest.json").is_symlink()  # links are never followed
            and is_inside(p, self.root)
        )

    def studies(self) -> dict[str, Path]:
        """The studies served, by folder name."""
        if self._only is not None:
            return {}
        if self.study_root:
            return {self.root.name: self.root}
        return {p.name: p for p in self._folders() if is_study(p)}

    def study(self, name: str) -> Path:
        known = self.studies()
        if name not in known:
            raise RunError(
                f"no study {name!r} in {self.root} (studies: {', '.join(known) or 'none'}); "
                "pick one from the Runs page"
            )
        return known[name]

    def study_runs(self, name: str, folder: Path) -> dict[str, Path]:
        """A study's runs whose folders exist, by the name the viewer gives them; a study
        whose manifest does not read has none."""
        from agentsim.study.compare import read_study

        try:
            _, runs = read_study(folder)
        except ConfigError:
            return {}
        return {
            f"{name}{STUDY_SEP}{r.id}": r.dir
            for r in runs
            if (r.dir / "manifest.json").is_file()
            and not (r.dir / "manifest.json").is_symlink()
            and is_inside(r.dir, folder)
        }

    def run_paths(self) -> dict[str, Path]:
        """Every run served, by name: the workspace's own runs, newest folder name last
        (names carry their start time), then the runs of each study."""
        if self._only is not None:
            found = {self._only: self.root / self._only}
        else:
            found = {} if self.study_root else {
                p.name: p for p in self._folders() if not is_study(p)
            }  # fmt: skip
            for name, folder in self.studies().items():
                found.update(self.study_runs(name, folder))
        for name, folder in found.items():
            self._names[folder] = name
        return found

    def run_ids(self) -> list[str]:
        """The names of the runs served (``run_paths``' order)."""
        return list(self.run_paths())

    def name_of(self, run: Run) -> str:
        """The name a served run goes by (its folder's name for a run of the workspace)."""
        return self._names.get(run.path, run.path.name)

    def run(self, run_id: str) -> Run:
        known = self.run_paths()
        if run_id not in known:
            raise RunError(
                f"no run {run_id!r} in workspace {self.root} (runs: {', '.join(known) or 'none'});"
                " pick one from the Runs page"
            )
        return self._open(run_id, known[run_id])

    def runs(self) -> list[Run]:
        """Every run served, in ``run_ids`` order (the folder is listed once)."""
        return [self._open(run_id, folder) for run_id, folder in self.run_paths().items()]

    def agent(self, run: Run, agent_id: str) -> AgentRecord:
        record = run.agent(agent_id)
        if not is_inside(record.root, self.root):
            raise RunError(
                f"agent {agent_id!r} of {run.path.name} leads outside the workspace; "
                "it is not served"
            )
        return record

    def cached(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """``build()`` once per key: keys carry the run's ticks done and status, so a run
        that moves on gets fresh values and a finished one is read once. Safe from many
        threads: a caller holds its key's slot, so an eviction meanwhile costs a rebuild
        later, never an error now."""
        slot: _Once[_T] = self._slots(key)
        return slot.get(build)
