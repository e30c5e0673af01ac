"""Read a run folder for inspection: manifest, metrics, events, agents.

Everything here only reads. The engine replaces ``manifest.json`` and ``metrics.json``
atomically and appends whole lines to ``events.jsonl`` and the traces, so a reader that
stops at the last newline present when it started sees a consistent prefix of a run that is
still going; the torn last line a crash can leave is skipped, never an error.

    >>> run = open_run("workspace/daily-mobility-20260302-060000")
    >>> run.state().state, len(run.agents)
    >>> table = run.events(types=("move",))          # a pyarrow Table
    >>> actions = run.events(type="agent_action")    # its fields as typed columns
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from agentsim.errors import ConfigError, RunError
from agentsim.inspect._files import close_matches, iter_jsonl, read_json
from agentsim.inspect._store import StoreReader, open_store
from agentsim.inspect._tables import (
    BASE_COLUMNS,
    EVENT_COLUMNS,
    events_table,
    fields_table,
    time_array,
)
from agentsim.inspect.agentview import AgentRecord

if TYPE_CHECKING:
    import pyarrow as pa

    from agentsim.config.experiment import ExperimentConfig

__all__ = [
    "ANSWER_TYPES",
    "EVENT_COLUMNS",
    "Run",
    "RunState",
    "events_table",
    "iter_jsonl",
    "left_out",
    "open_run",
]

_FINAL = ("completed", "completed with problems", "failed", "interrupted", "stopped")


def _pid_alive(pid: object) -> bool | None:
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return None
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class RunState:
    """Where a run is. ``status`` is the manifest's word; ``state`` adds what the manifest
    cannot say itself: ``dead`` for a run marked running whose process is gone."""

    status: str
    state: str
    pid: int | None
    alive: bool | None
    started: str | None
    ended: str | None
    reason: str | None = None  # why it stopped (``manifest.json``'s ``reason``)
    problems: tuple[str, ...] = ()  # failure shares over their limits
    parent: Mapping[str, Any] | None = None  # a fork's parent run and tick
    # The budget limit that stopped it, with the figures (``agentsim.run.budget``).
    budget_stop: Mapping[str, Any] | None = None
    # Its estimate against what it spent (``agentsim.run.estimate.estimate_error``).
    estimate_error: Mapping[str, Any] | None = None

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> RunState:
        """The state a run's ``manifest.json`` (as read) gives."""
        status = str(manifest.get("status") or "unknown")
        pid = manifest.get("pid") if isinstance(manifest.get("pid"), int) else None
        alive = _pid_alive(pid) if status == "running" else None
        reason, problems, parent = (
            manifest.get("reason"),
            manifest.get("problems"),
            manifest.get("parent"),
        )
        return cls(
            status=status,
            state="dead" if status == "running" and alive is False else status,
            pid=pid,
            alive=alive,
            started=manifest.get("started"),
            ended=manifest.get("ended"),
            reason=str(reason) if reason else None,
            problems=tuple(str(p) for p in problems) if isinstance(problems, list) else (),
            parent=dict(parent) if isinstance(parent, dict) else None,
            budget_stop=_mapping(manifest.get("budget_stop")),
            estimate_error=_mapping(manifest.get("estimate_error")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "state": self.state,
            "pid": self.pid,
            "alive": self.alive,
            "started": self.started,
            "ended": self.ended,
            "reason": self.reason,
            "problems": list(self.problems),
            "parent": dict(self.parent) if self.parent is not None else None,
            "budget_stop": dict(self.budget_stop) if self.budget_stop is not None else None,
            "estimate_error": (
                dict(self.estimate_error) if self.estimate_error is not None else None
            ),
        }


def _mapping(value: object) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, dict) else None


class Run:
    """One run folder, opened for reading. Cheap to create: files are read when asked.

    A ``Run`` can be kept (the viewer keeps one per run): it reads the files anew when
    asked, so it follows a run that is still going."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    # -- small files -----------------------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        return read_json(self.path / "manifest.json", what="run manifest")

    def metrics(self) -> dict[str, Any]:
        """``metrics.json`` ({} before the first tick has ended)."""
        p = self.path / "metrics.json"
        return read_json(p, what="run metrics") if p.is_file() else {}

    def config_dict(self) -> dict[str, Any]:
        """The resolved experiment as written in ``config.yaml`` (plain data)."""
        p = self.path / "config.yaml"
        try:
            data = yaml.safe_load(p.read_text("utf-8"))
        except FileNotFoundError:
            raise RunError(
                f"{p} is missing; the run folder is incomplete (was it copied without it?)"
            ) from None
        except yaml.YAMLError as exc:
            raise RunError(
                f"{p} is not valid YAML ({exc}); restore it from the experiment"
            ) from None
        if not isinstance(data, dict):
            raise RunError(f"{p} does not hold a mapping; restore it from the experiment")
        return data

    def config(self) -> ExperimentConfig:
        """The experiment, validated, with paths resolved against its original folder."""
        from agentsim.config.experiment import parse_experiment

        p = self.path / "config.yaml"
        base = Path(str(self.manifest().get("source_dir") or "."))
        try:
            text = p.read_text("utf-8")
        except FileNotFoundError:
            raise RunError(f"{p} is missing; the run folder is incomplete") from None
        try:
            return parse_experiment(text, source=str(p), base_dir=base)
        except ConfigError as exc:
            raise RunError(f"{p} no longer validates ({exc}); check the agentsim version") from None

    def state(self) -> RunState:
        return RunState.from_manifest(self.manifest())

    def lineage(self) -> list[dict[str, Any]]:
        """The runs this one was forked from, nearest first: ``{"run", "run_id", "tick"}``
        each (a parent folder that is gone ends the list, marked ``"missing": True``)."""
        chain: list[dict[str, Any]] = []
        seen = {self.path.resolve()}
        parent = self.manifest().get("parent")
        while isinstance(parent, dict) and isinstance(parent.get("run"), str):
            path = Path(parent["run"])
            entry = {"run": str(path), "run_id": parent.get("run_id"), "tick": parent.get("tick")}
            chain.append(entry)
            if path.resolve() in seen or not (path / "manifest.json").is_file():
                entry["missing"] = path.resolve() not in seen
                break
            seen.add(path.resolve())
            try:
                parent = read_json(path / "manifest.json", what="run manifest").get("parent")
            except RunError:
                break
        return chain

    def checkpoints(self) -> list[tuple[int, Path]]:
        """``(tick, folder)`` of the complete checkpoints, oldest first."""
        cdir = self.path / "checkpoints"
        out: list[tuple[int, Path]] = []
        for p in cdir.glob("tick-*") if cdir.is_dir() else ():
            tick = p.name[5:]
            if p.is_dir() and tick.isdigit() and (p / "engine.json").is_file():
                out.append((int(tick), p))
        return sorted(out)

    # -- agents ----------------------------------------------------------------------------

    @functools.cached_property
    def _store(self) -> StoreReader | None:
        """The shard reader (None for a layout-1 run), made once: it reads an index or an
        agent list again only when that file changed, so lookups see rows written since."""
        return open_store(self.path)

    @property
    def agents(self) -> list[str]:
        """Agent ids that have a folder, sorted."""
        adir = self.path / "agents"
        return sorted(p.name for p in adir.iterdir() if p.is_dir()) if adir.is_dir() else []

    def agent(self, agent_id: str) -> AgentRecord:
        root = self.path / "agents" / agent_id
        if not agent_id or "/" in agent_id or agent_id.startswith(".") or not root.is_dir():
            known = self.agents
            hint = close_matches(agent_id, known)
            raise RunError(
                f"agent {agent_id!r} is not in run {self.path}{hint}; the agents are the "
                f"folders of {self.path / 'agents'} (run.agents in Python)"
            )
        store = self._store
        return AgentRecord(
            agent_id=agent_id, root=root, store=store.agent(agent_id) if store else None
        )

    # -- events ----------------------------------------------------------------------------

    def iter_events(self, types: Iterable[str] | None = None) -> Iterator[dict[str, Any]]:
        """Events in log order, streamed line by line (see ``iter_jsonl``)."""
        wanted = frozenset(types) if types is not None else None
        for ev in iter_jsonl(self.path / "events.jsonl"):
            if wanted is None or ev.get("type") in wanted:
                yield ev

    def _parquet(self) -> pa.Table | None:
        """``events.parquet`` when it holds the whole log: the run is over and the file is at
        least as new as ``events.jsonl`` (a resumed run appends to the JSON lines only)."""
        import pyarrow.parquet as pq

        pq_path, js_path = self.path / "events.parquet", self.path / "events.jsonl"
        if not (
            pq_path.is_file()
            and js_path.is_file()
            and self.manifest().get("status") in _FINAL
            and pq_path.stat().st_mtime_ns >= js_path.stat().st_mtime_ns
        ):
            return None
        table = pq.read_table(pq_path)
        return table if tuple(table.column_names) == EVENT_COLUMNS else None

    def events(
        self,
        types: Iterable[str] | None = None,
        *,
        type: str | None = None,
        all_answers: bool = False,
    ) -> pa.Table:
        """The events as a pyarrow Table; ``time`` is a timestamp (``pa.timestamp("us")``).

        - ``events()`` / ``events(types=[...])``: every event (or those types) with
          ``EVENT_COLUMNS``; the fields that depend on the type stay JSON text in ``data``.
        - ``events(type="agent_action")``: the events of one type with ``tick, time, type,
          agent_id`` and each of their fields as its own typed column. A type the run never
          logged gives a table with the four shared columns and no rows.

        Survey and interview answers (``survey_answer``, ``interview_answer``) whose
        ``status`` is not ``ok`` (the step degraded or failed: no answer of the model's; a
        typed answer that did not fit its form: ``invalid``) are
        left out unless ``all_answers=True``; ``left_out(table)`` says how many were.

        A finished run's ``events.parquet`` is read when it is at least as new as the JSON
        lines; otherwise the table is built from ``events.jsonl``."""
        table = self._events(types, type=type)
        return table if all_answers else _ok_answers_only(table)

    def _events(self, types: Iterable[str] | None = None, *, type: str | None = None) -> pa.Table:
        import pyarrow as pa
        import pyarrow.compute as pc

        if type is not None and types is not None:
            raise ConfigError(
                "events",
                f"both types={list(types)!r} and type={type!r} were given",
                "pass types=[...] for several types in one table, or type= for one type's "
                "fields as columns",
            )
        wanted = (type,) if type is not None else tuple(types) if types is not None else None
        table = self._parquet()
        if table is not None and wanted is not None:
            table = table.filter(pc.is_in(table["type"], pa.array(wanted, pa.string())))
        if type is not None:
            if table is None:
                return fields_table(self.iter_events(wanted))
            # The parquet keeps each event's own fields as JSON text: spread them again.
            rows = (
                {**json.loads(data), **base}
                for data, base in zip(
                    table["data"].to_pylist(),
                    table.select(list(BASE_COLUMNS)).to_pylist(),
                    strict=True,
                )
            )
            return fields_table(rows)
        if table is None:
            return events_table(self.iter_events(wanted))
        times = time_array(table["time"].to_pylist())
        return table.set_column(EVENT_COLUMNS.index("time"), "time", times)

    def events_df(
        self,
        types: Iterable[str] | None = None,
        *,
        type: str | None = None,
        all_answers: bool = False,
    ) -> Any:
        """``events(types, type=type, all_answers=...)`` as a pandas DataFrame (``time`` as
        datetime64).

        pandas is not a dependency of agentsim: this needs ``pip install pandas``."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise ImportError(
                "Run.events_df() needs pandas, which is not installed; `pip install pandas`, "
                "or use Run.events(), which returns a pyarrow Table"
            ) from None
        return self.events(types, type=type, all_answers=all_answers).to_pandas()


ANSWER_TYPES = ("survey_answer", "interview_answer")
"""The event types of survey and interview answers, which carry a ``status``."""

_LEFT_OUT = b"agentsim.left_out"


def left_out(table: pa.Table) -> int:
    """How many survey or interview answers that are not ``ok`` ``Run.events`` left out of
    ``table`` (0 for a table with every answer)."""
    meta = table.schema.metadata or {}
    return int(meta.get(_LEFT_OUT, b"0"))


def _ok_answers_only(table: pa.Table) -> pa.Table:
    """``table`` without the answers whose ``status`` is not ``ok`` (answers of runs made
    before answers had a status count as ok), the number left out in its metadata."""
    import pyarrow as pa

    if not table.num_rows:
        return table
    kinds = table["type"].to_pylist()
    if not any(k in ANSWER_TYPES for k in kinds):
        return table
    if "status" in table.column_names:
        statuses = table["status"].to_pylist()
    elif "data" in table.column_names:
        statuses = [
            json.loads(d or "{}").get("status") if k in ANSWER_TYPES else None
            for k, d in zip(kinds, table["data"].to_pylist(), strict=True)
        ]
    else:
        return table
    keep = [
        k not in ANSWER_TYPES or st in (None, "ok") for k, st in zip(kinds, statuses, strict=True)
    ]
    dropped = keep.count(False)
    if dropped:
        table = table.filter(pa.array(keep, pa.bool_()))
    meta = dict(table.schema.metadata or {})
    meta[_LEFT_OUT] = str(dropped).encode()
    return table.replace_schema_metadata(meta)


def open_run(path: str | os.PathLike[str]) -> Run:
    """Open a run folder (``workspace/<run-id>``) for reading."""
    root = Path(path)
    if not root.is_dir():
        raise RunError(
            f"run folder {root} does not exist; give the folder `agentsim run` printed "
            "(e.g. workspace/<name>-<timestamp>)"
        )
    if not (root / "manifest.json").is_file():
        raise RunError(
            f"{root} is not a run folder (no manifest.json); give the folder `agentsim run` "
            "printed, not the experiment or the workspace folder"
        )
    return Run(root)
