"""The folder ``agentsim view`` serves: its runs, found by name only, and a small cache.

Pages are served from worker threads at once, so both the kept runs and the cache are
``functools`` caches (their bookkeeping is thread-safe); a hand-kept dict lost keys to a
concurrent eviction (``KeyError`` under load).

A run is addressed by the name of its folder, looked up among the folders of the workspace;
nothing built from a request is ever joined onto a path, so ``../``, absolute paths and
encoded variants find no run. A run folder or agent folder that is a symlink leading out of
the workspace is not served.
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
from agentsim.inspect.agentview import AgentRecord

__all__ = ["Workspace"]

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


class Workspace:
    """A workspace folder (its sub-folders with a ``manifest.json`` are runs), or one run."""

    def __init__(self, path: Path) -> None:
        root = Path(path).resolve()
        if not root.is_dir():
            raise ConfigError(
                "WORKSPACE_OR_RUN",
                f"{path} is not a folder",
                "give the workspace folder (e.g. workspace) or one run folder in it",
            )
        self.single = (root / "manifest.json").is_file()
        self.root = root.parent if self.single else root
        self._only = root.name if self.single else None
        # The least recently used of _CACHE_SIZE keys is dropped (see ``cached``).
        self._slots = functools.lru_cache(maxsize=_CACHE_SIZE)(_new_once)
        # One Run per run folder, kept: it keeps its shard reader between requests (it
        # reads again only files that changed).
        self._open: Callable[[str], Run] = functools.cache(
            lambda run_id: open_run(self.root / run_id)
        )

    def run_ids(self) -> list[str]:
        """The runs served, newest folder name last (names carry their start time)."""
        if self._only is not None:
            return [self._only]
        return sorted(
            p.name
            for p in self.root.iterdir()
            if not p.name.startswith(".")
            and p.is_dir()
            and (p / "manifest.json").is_file()
            and not (p / "manifest.json").is_symlink()  # links are never followed
            and is_inside(p, self.root)
        )

    def run(self, run_id: str) -> Run:
        known = self.run_ids()
        if run_id not in known:
            raise RunError(
                f"no run {run_id!r} in workspace {self.root} (runs: {', '.join(known) or 'none'});"
                " pick one from the Runs page"
            )
        return self._open(run_id)

    def runs(self) -> list[Run]:
        """Every run served, in ``run_ids`` order (the folder is listed once)."""
        return [self._open(run_id) for run_id in self.run_ids()]

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
