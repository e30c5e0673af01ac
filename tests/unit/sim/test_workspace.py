"""RunWorkspace: the run folder's files, written so that readers never see half a write."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from agentsim.errors import RunError
from agentsim.run.workspace import RunWorkspace, atomic_write_text, package_versions


def test_create_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "run" / "x").mkdir(parents=True)
    with pytest.raises(RunError, match=r"already exists and is not empty.*--resume"):
        RunWorkspace.create(tmp_path / "run")


def test_create_accepts_an_empty_folder_and_makes_agents(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    ws = RunWorkspace.create(tmp_path / "run")
    assert ws.agents_dir.is_dir()
    ws.release()


def test_open_existing_needs_a_manifest(tmp_path: Path) -> None:
    with pytest.raises(RunError, match=r"is not a run folder \(no manifest.json\)"):
        RunWorkspace.open_existing(tmp_path)


def test_manifest_config_and_metrics(tmp_path: Path) -> None:
    ws = RunWorkspace.create(tmp_path / "r")
    m = ws.new_manifest(run_id="r", name="n", config_hash="abc", seed=3, executor="local")
    assert m["status"] == "running" and m["versions"] == package_versions()
    ws.update_manifest(status="completed")
    again = RunWorkspace.open_existing(tmp_path / "r", lock=False).read_manifest()
    assert again["status"] == "completed" and again["seed"] == 3
    ws.write_config({"name": "n", "seed": 3})
    assert yaml.safe_load((ws.root / "config.yaml").read_text()) == {"name": "n", "seed": 3}
    ws.write_metrics({"ticks": 2})
    assert json.loads((ws.root / "metrics.json").read_text()) == {"ticks": 2}
    # Atomic writes leave no temp files behind.
    assert sorted(p.name for p in ws.root.iterdir()) == [
        "agents",
        "config.yaml",
        "manifest.json",
        "metrics.json",
        "run.lock",
    ]
    ws.release()


def test_events_append_size_and_truncate(tmp_path: Path) -> None:
    ws = RunWorkspace.create(tmp_path / "r")
    assert ws.events_size() == 0
    ws.truncate_events(0)  # no file yet: nothing to do
    assert ws.append_events([]) == 0
    assert ws.append_events([{"tick": 0, "type": "a", "z": 1, "b": "é"}]) == 1
    size = ws.events_size()
    ws.append_events([{"tick": 1, "type": "b"}, {"tick": 1, "type": "c"}])
    with open(ws.root / "events.jsonl", "a", encoding="utf-8") as f:
        f.write('{"tick": 2, "ty')  # a torn line, as a kill -9 leaves it
    ws.truncate_events(size)
    lines = (ws.root / "events.jsonl").read_text("utf-8").splitlines()
    assert lines == ['{"b": "é", "tick": 0, "type": "a", "z": 1}']
    ws.append_events([{"tick": 1, "type": "again"}])  # reopens the file after the cut
    ws.close()
    ws.close()
    assert (ws.root / "events.jsonl").read_text("utf-8").endswith('"again"}\n')
    ws.release()


def test_parquet_has_one_row_per_event(tmp_path: Path) -> None:
    ws = RunWorkspace.create(tmp_path / "r")
    assert ws.write_parquet() is None  # no events yet
    ws.append_events(
        [
            {"tick": 0, "time": "t0", "type": "run_start", "agent_id": None, "agents": 2},
            {"tick": 0, "time": "t0", "type": "agent_action", "agent_id": "a", "action": "x"},
        ]
    )
    ws.close()
    out = ws.write_parquet()
    assert out is not None
    table = pq.read_table(out).to_pylist()
    assert [r["type"] for r in table] == ["run_start", "agent_action"]
    assert json.loads(table[1]["data"]) == {"action": "x"}
    ws.release()


def test_atomic_write_replaces(tmp_path: Path) -> None:
    p = tmp_path / "f.txt"
    atomic_write_text(p, "one")
    atomic_write_text(p, "two")
    assert p.read_text() == "two" and [x.name for x in tmp_path.iterdir()] == ["f.txt"]
