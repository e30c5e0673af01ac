"""The shard store: rows read back exactly, one key at a time; torn tails ignored by readers
and cut on resume; damage before a checkpoint stops the resume instead of losing rows."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentsim.config.experiment import load_experiment
from agentsim.errors import CheckpointError, RunError
from agentsim.inspect import open_run
from agentsim.run.engine import Engine, Progress
from agentsim.store.layout import HostStore, part_hash, prompt_row, row
from agentsim.store.shard import (
    ShardDamaged,
    append_rows,
    check_prefix,
    read_index,
    read_key,
    shard_sizes,
    truncate,
)
from tests.unit import helpers

SMALL = helpers.FIXTURES / "experiments" / "small.yaml"


def rows_for(keys: list[str], tick: int, pad: int = 0) -> list[tuple[str, str]]:
    return [(k, row(k, "trace", json.dumps({"tick": tick, "pad": "x" * pad}))) for k in keys]


def test_rows_read_back_by_key_in_order_from_few_members(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl.gz"
    keys = [f"a-{i:04d}" for i in range(3000)]
    for tick in range(3):
        append_rows(data, rows_for(keys, tick, pad=100))
    members = read_index(data)
    assert len(members) > 3  # each append was split into members of ~128 KB
    got = list(read_key(data, "a-1234"))
    assert [r["data"]["tick"] for r in got] == [0, 1, 2]
    assert got[0] == {"key": "a-1234", "kind": "trace", "data": {"tick": 0, "pad": "x" * 100}}
    # One member per append holds the key: a one-agent read decompresses only those.
    assert sum(m.may_hold("a-1234") for m in members) == 3
    assert list(read_key(data, "nobody")) == []


def test_a_reader_ignores_a_torn_tail_and_a_resume_cuts_it(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl.gz"
    index = data.with_name(data.name + ".idx")
    append_rows(data, rows_for(["a", "b"], 0))
    sizes = shard_sizes(data)
    check_prefix(data, sizes)
    # A process killed mid-append: half a member written, its index line torn.
    append_rows(data, rows_for(["a", "b"], 1))
    whole = data.read_bytes()
    data.write_bytes(whole[: sizes[0] + (len(whole) - sizes[0]) // 2])
    index.write_bytes(index.read_bytes()[:-7])
    assert [r["data"]["tick"] for r in read_key(data, "a")] == [0]
    truncate(data, sizes)
    check_prefix(data, sizes)
    assert shard_sizes(data) == sizes
    append_rows(data, rows_for(["a"], 1))
    assert [r["data"]["tick"] for r in read_key(data, "a")] == [0, 1]


def test_damage_before_the_recorded_sizes_is_named(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl.gz"
    append_rows(data, rows_for(["a", "b"], 0))
    append_rows(data, rows_for(["a", "b"], 1))
    sizes = shard_sizes(data)
    raw = bytearray(data.read_bytes())
    raw[-12] ^= 0xFF  # a flipped byte inside the last member
    data.write_bytes(bytes(raw))
    with pytest.raises(ShardDamaged, match=r"rows.jsonl.gz is damaged at byte \d+"):
        check_prefix(data, sizes)
    with pytest.raises(ShardDamaged, match=r"damaged at byte"):
        list(read_key(data, "b"))
    data.write_bytes(bytes(raw[:-30]))
    with pytest.raises(ShardDamaged, match=r"holds \d+ bytes, fewer than \d+"):
        check_prefix(data, sizes)
    data.unlink()
    with pytest.raises(ShardDamaged, match=r"it is missing, fewer than"):
        check_prefix(data, sizes)


def test_prompt_parts_are_stored_once_and_found_again_after_reload(tmp_path: Path) -> None:
    store = HostStore(tmp_path, 3)
    shared, head = "<available_skills>...</available_skills>", "<persona>P</persona>"
    for text in (head, shared, shared):
        store.add_part(part_hash(text), text)
    store.append([("a", prompt_row("a", "s1", [part_hash(head), part_hash(shared)]))])
    store.add_part(part_hash(shared), shared)
    store.append([("b", prompt_row("b", "s2", [part_hash(shared)]))])
    data = tmp_path / "store" / "host-0003" / "parts.jsonl.gz"
    assert sum(m.rows for m in read_index(data)) == 2
    assert [r["data"]["parts"] for r in read_key(data.with_name("rows.jsonl.gz"), "b")] == [
        [part_hash(shared)]
    ]
    again = HostStore(tmp_path, 3)  # a resumed host learns what is stored
    again.reload()
    again.add_part(part_hash(shared), shared)
    again.append([])
    assert sum(m.rows for m in read_index(data)) == 2


def run_small(run_dir: Path, **env: str) -> subprocess.Popen[bytes]:
    environ = {**os.environ, **env}
    environ.pop("PYTEST_CURRENT_TEST", None)
    cmd = [sys.executable, "-m", "agentsim.cli", "run", str(SMALL), "--json", "--out"]
    return subprocess.Popen([*cmd, str(run_dir)], env=environ, stdout=subprocess.DEVNULL)


def timeless(value: object) -> object:
    """Without wall-clock timings (``elapsed_ms`` of a step, ``elapsed`` of a hook)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in ("elapsed", "elapsed_ms")}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def histories(run_dir: Path) -> dict[str, object]:
    run = open_run(run_dir)
    out: dict[str, object] = {}
    for aid in run.agents:
        agent = run.agent(aid)
        trace = list(agent.trace())
        prompts = [agent.prompt_at(t["tick"]).system for t in trace if t.get("system_sha")]
        out[aid] = (timeless(trace), prompts, agent.skills(), agent.memory())
    return out


@pytest.mark.slow
def test_kill_9_during_a_shard_write_then_resume(tmp_path: Path) -> None:
    workflow = {"AGENTSIM_WORKFLOW": "[{run: {ticks: 12}}]"}
    reference, run_dir = tmp_path / "ref", tmp_path / "run"
    proc = run_small(run_dir, **workflow)
    try:
        deadline = time.monotonic() + 180  # a guard: a loaded machine starts slowly
        while not (run_dir / "checkpoints" / "tick-00000004").is_dir():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    # Whatever the kill interrupted, also leave what an append cut short leaves: part of a
    # member and part of its index line after the last whole append.
    data = run_dir / "store" / "host-0000" / "rows.jsonl.gz"
    with open(data, "ab") as f:
        f.write(b"\x1f\x8b\x08\x00 half a member")
    with open(data.with_name(data.name + ".idx"), "a", encoding="utf-8") as f:
        f.write('{"offset": 99')
    assert run_small(reference, **workflow).wait(timeout=120) == 0
    env = {**os.environ, **workflow}
    env.pop("PYTEST_CURRENT_TEST", None)
    resumed = subprocess.run(
        [sys.executable, "-m", "agentsim.cli", "run", "--resume", str(run_dir), "--json"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert (run_dir / "events.jsonl").read_bytes() == (reference / "events.jsonl").read_bytes()
    assert histories(run_dir) == histories(reference)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("store") / "run"
    asyncio.run(Engine(load_experiment(SMALL, environ={}), run_dir=run_dir).run())
    return run_dir


def test_a_shard_damaged_before_the_checkpoint_stops_the_resume(
    finished: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    data = run_dir / "store" / "host-0000" / "rows.jsonl.gz"
    data.write_bytes(data.read_bytes()[:-100])  # rows the last checkpoint counted are gone
    before = sorted(p.name for p in run_dir.rglob("*"))
    cfg = load_experiment(run_dir / "config.yaml", environ={})
    with pytest.raises(
        CheckpointError,
        match=r"rows.jsonl.gz is damaged .* fewer than \d+: rows written before checkpoint "
        r"tick-00000006 are lost or damaged; restore store/host-0000/rows.jsonl.gz",
    ):
        asyncio.run(Engine(cfg, run_dir=run_dir).run(resume=True))
    assert sorted(p.name for p in run_dir.rglob("*")) == before


def test_layouts_other_than_this_one(finished: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "future"
    shutil.copytree(finished, run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["layout"] = 9
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RunError, match=r"storage layout 9 \(written by agentsim 0\.1\.0\)"):
        open_run(run_dir).agent("workers-00000")
    manifest.pop("layout")  # a run from before the shards
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    cfg = load_experiment(run_dir / "config.yaml", environ={})
    with pytest.raises(CheckpointError, match=r"has storage layout 1 .* resume it with the"):
        asyncio.run(Engine(cfg, run_dir=run_dir).run(resume=True))


def test_one_agent_is_readable_while_the_run_writes(finished: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "live"
    shutil.copytree(finished, run_dir)
    agent = open_run(run_dir).agent("workers-00001")
    steps = [t["tick"] for t in agent.trace() if "action" in t]
    # The writer has appended a member but not yet its index line: not seen yet.
    data = run_dir / "store" / "host-0000" / "rows.jsonl.gz"
    line = row("workers-00001", "trace", json.dumps({"tick": 6, "action": "late"}))
    append_rows(data, [("workers-00001", line)])
    index = data.with_name(data.name + ".idx")
    whole = index.read_bytes()
    index.write_bytes(whole[: whole.rstrip(b"\n").rfind(b"\n") + 1])
    assert [t["tick"] for t in agent.trace() if "action" in t] == steps
    index.write_bytes(whole)
    assert [t["tick"] for t in agent.trace() if "action" in t] == [*steps, 6]


@pytest.mark.slow
def test_two_hosts_write_side_by_side_and_resume_to_the_same_histories(
    finished: Path, tmp_path: Path
) -> None:
    class Crash(Exception):
        pass

    def progress(p: Progress) -> None:
        if p.tick == 5:
            raise Crash("gone")

    cfg = load_experiment(SMALL, environ={"AGENTSIM_EXECUTOR__HOSTS": "2"})
    run_dir = tmp_path / "run"
    with pytest.raises(Crash, match="gone"):
        asyncio.run(Engine(cfg, run_dir=run_dir, progress=progress).run())
    assert asyncio.run(Engine(cfg, run_dir=run_dir).run(resume=True)).status == "completed"
    hosts = sorted(p.name for p in (run_dir / "store").iterdir())
    assert hosts == ["host-0000", "host-0001"]
    lists = [json.loads((run_dir / "store" / h / "agents.json").read_text()) for h in hosts]
    assert sorted(lists[0] + lists[1]) == open_run(run_dir).agents and lists[0] < lists[1]
    # The same agents' histories as the one-host run: the split does not show.
    assert histories(run_dir) == histories(finished)


def test_a_host_resumed_with_other_agents_says_how_many_hosts(tmp_path: Path) -> None:
    HostStore(tmp_path, 0).write_agents(["a-1", "a-2"])
    HostStore(tmp_path, 1).write_agents(["a-3"])
    HostStore(tmp_path, 0).write_agents(["a-2", "a-1"], resume=True)  # the same agents
    with pytest.raises(RunError, match=r"host-0000 of .* held other agents .* with 2 hosts"):
        HostStore(tmp_path, 0).write_agents(["a-1", "a-2", "a-3"], resume=True)


def test_a_layout_1_run_folder_still_opens(tmp_path: Path) -> None:
    # What agentsim wrote before the shards: everything in the agent's folder.
    root = tmp_path / "old"
    adir = root / "agents" / "a-1"
    (adir / "prompts").mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"versions": {"agentsim": "0.1.0"}}))
    (adir / "profile.json").write_text(json.dumps({"agent_id": "a-1", "persona": "P"}))
    system = "<persona>P</persona>\n<instructions>act</instructions>"
    sha = hashlib.sha256(system.encode()).hexdigest()[:16]
    (adir / "prompts" / f"{sha}.txt").write_text(system)
    trace = [
        {"tick": 0, "skills_active": ["built-in@x"]},
        {"tick": 0, "time": "t0", "action": "walked", "system_sha": sha, "user": "u0"},
    ]
    (adir / "trace.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trace))
    (adir / "skills.json").write_text(json.dumps({"active": ["built-in@x"], "step_count": 1}))
    agent = open_run(root).agent("a-1")
    assert agent.store is None
    assert agent.skills() == {"active": ["built-in@x"], "step_count": 1}
    hist = agent.history()
    assert hist.steps_total == 1 and hist.skills_over_time == ((0, ("built-in@x",)),)
    assert (agent.prompt_at(0).system, agent.prompt_at(0).user) == (system, "u0")
