"""A ``Run`` kept open while its run goes on (as the viewer keeps one per run): every agent
lookup sees the rows, prompt parts and agent lists written since the last one."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from agentsim.config.experiment import load_experiment
from agentsim.inspect import open_run
from agentsim.run.engine import Engine
from agentsim.store.layout import HostStore, part_hash, prompt_row, row, text_hash
from tests.unit import helpers

EXPERIMENT = helpers.FIXTURES / "experiments" / "small.yaml"
AGENT = "workers-00001"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("live") / "run"
    asyncio.run(Engine(load_experiment(EXPERIMENT, environ={}), run_dir=run_dir).run())
    return run_dir


def running_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text("utf-8"))
    manifest.update(status="running", ended=None, pid=os.getpid())
    (dst / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return dst


def test_a_kept_run_sees_what_a_live_run_writes_after_a_lookup(
    finished: Path, tmp_path: Path
) -> None:
    run_dir = running_copy(finished, tmp_path / "live")
    run = open_run(run_dir)
    host = run_dir / "store" / "host-0000"
    agents = (host / "agents.json").read_bytes()
    # Looked up before its host has listed its agents: no rows yet.
    (host / "agents.json").unlink()
    assert list(run.agent(AGENT).trace()) == []
    (host / "agents.json").write_bytes(agents)
    before = run.agent(AGENT)
    ticks = [t["tick"] for t in before.trace() if "action" in t]
    first = next(t for t in before.trace() if "user" in t)
    assert before.prompt_at(first["tick"]).system  # the prompt parts' index is read now
    # The engine appends a step whose system prompt has a new part.
    system = "<persona>late</persona>\n<instructions>act</instructions>"
    sha = text_hash(system)
    late = {"tick": 6, "time": "t6", "action": "walked late", "system_sha": sha, "user": "u6"}
    store = HostStore(run_dir, 0)
    store.add_part(part_hash(system), system)
    store.append(
        [
            (AGENT, prompt_row(AGENT, sha, [part_hash(system)])),
            (AGENT, row(AGENT, "trace", json.dumps(late))),
        ]
    )
    after = run.agent(AGENT)
    assert [t["tick"] for t in after.trace() if "action" in t] == [*ticks, 6]
    assert (after.prompt_at(6).system, after.prompt_at(6).user) == (system, "u6")
    assert after.prompt_at(first["tick"]).system == before.prompt_at(first["tick"]).system


def test_a_shard_cut_back_and_written_again_is_read_anew(finished: Path, tmp_path: Path) -> None:
    # What a resume does: the shard is cut back to a checkpoint, then appended to again.
    run_dir = running_copy(finished, tmp_path / "resumed")
    run = open_run(run_dir)
    ticks = [t["tick"] for t in run.agent(AGENT).trace() if "action" in t]
    data = run_dir / "store" / "host-0000" / "rows.jsonl.gz"
    index = data.with_name(data.name + ".idx")
    sizes = data.stat().st_size, index.stat().st_size
    redo = {"tick": 6, "time": "t6", "action": "first try"}
    HostStore(run_dir, 0).append([(AGENT, row(AGENT, "trace", json.dumps(redo)))])
    assert [t.get("action") for t in run.agent(AGENT).trace()][-1] == "first try"
    with open(data, "r+b") as f:
        f.truncate(sizes[0])
    with open(index, "r+b") as f:
        f.truncate(sizes[1])
    redo["action"] = "second try, after the resume"
    HostStore(run_dir, 0).append([(AGENT, row(AGENT, "trace", json.dumps(redo)))])
    steps = [(t["tick"], t["action"]) for t in run.agent(AGENT).trace() if "action" in t]
    assert steps[-1] == (6, "second try, after the resume") and len(steps) == len(ticks) + 1
