"""`agentsim inspect` and `agentsim.inspect.run.open_run` on finished, running and dead runs.

A small real run (6 agents, offline scripted model, city module) is made once per module;
the running and crashed variants are copies of it with the manifest and the event log
edited the way a live or a killed engine leaves them.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

import agentsim
from agentsim.config.experiment import load_experiment
from agentsim.errors import ConfigError, RunError
from agentsim.inspect.agentview import HISTORY_LAST
from agentsim.inspect.cli import add_inspect_commands
from agentsim.inspect.run import EVENT_COLUMNS, Run, iter_jsonl, open_run
from agentsim.inspect.summary import error_kind, summarize, summarize_events
from agentsim.run.engine import Engine
from agentsim.store.shard import read_index, read_member

EXPERIMENT = """
name: small-city
seed: 3
clock: {start: "2026-03-02T07:00:00", tick: 1h}
workflow:
  - run: {ticks: 3}
  - survey: {name: s1, question: "How is your day?", agents: all}
  - run: {ticks: 2}
agents:
  - group: commuters
    count: 4
    profile: {template: worker}
    skills: {default: [daily-guidance]}
  - group: retirees
    count: 2
    profile: {template: retiree}
    skills: {default: [daily-guidance, reflect]}
model: {backend: scripted}
environment:
  - {module: city}
output: {dir: workspace, checkpoint_every: 2}
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inspect")
    (root / "exp.yaml").write_text(EXPERIMENT, encoding="utf-8")
    run_dir = root / "run"
    asyncio.run(Engine(load_experiment(root / "exp.yaml"), run_dir=run_dir).run())
    return run_dir


def copy_run(src: Path, dst: Path, **manifest: Any) -> Path:
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text("utf-8"))
    m.update(manifest)
    (dst / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    return dst


def chop_last_line(path: Path) -> bytes:
    """Cut the file in the middle of its last line; return the complete lines kept."""
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: start + (len(data) - start) // 2])
    return data[:start]


def tear_rows_from(run_dir: Path, tick: int) -> None:
    """Leave the rows shard as a run killed while appending tick ``tick``'s rows leaves it:
    its last index lines unwritten, half a member of data, half an index line."""
    data = run_dir / "store" / "host-0000" / "rows.jsonl.gz"
    members = read_index(data)
    keep = next(
        i
        for i, m in enumerate(members)
        if any(f'"tick": {tick},' in line for line in read_member(data, m))
    )
    index = data.with_name(data.name + ".idx")
    lines = index.read_bytes().splitlines(keepends=True)
    index.write_bytes(b"".join(lines[:keep]) + lines[keep][:10])
    cut = members[keep].offset + members[keep].length // 2
    data.write_bytes(data.read_bytes()[:cut])


def events_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="agentsim")
    add_inspect_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


# -- the run overview ---------------------------------------------------------------------


def test_overview_of_a_finished_run_matches_the_event_log(finished: Path) -> None:
    events = events_of(finished / "events.jsonl")
    ends = [e for e in events if e["type"] == "tick_end"]
    ov = summarize(open_run(finished))
    assert ov.state["state"] == "completed" and ov.state["alive"] is None
    assert ov.ticks_done == len(ends) == 5 and ov.ticks_total == 5
    assert ov.agents == 6 and ov.seed == 3
    assert ov.agent_steps == sum(e["steps"] for e in ends) == 30
    assert ov.model_calls == sum(e["model_calls"] for e in ends)
    assert ov.tokens == sum(e["prompt_tokens"] + e["completion_tokens"] for e in ends)
    assert ov.events == dict(Counter(e["type"] for e in events))
    activations = Counter(e["skill"] for e in events if e["type"] == "skill_activated")
    scripts = Counter(e["skill"] for e in events if e["type"] == "script_called")
    assert {k: v.activations for k, v in ov.skills.items() if v.activations} == activations
    defaults = Counter(
        e["skill"] for e in events if e["type"] == "skill_activated" and e.get("default")
    )
    assert defaults == {"built-in@daily-guidance": 6, "built-in@reflect": 2}
    assert {k: v.default_activations for k, v in ov.skills.items() if v.activations} == {
        k: defaults[k] for k in activations
    }
    assert {k: v.script_calls for k, v in ov.skills.items() if v.script_calls} == scripts
    assert ov.cost is None and ov.errors == {} and ov.checkpoints == (2, 4)
    assert (
        ov.agent_steps_per_s
        == json.loads((finished / "metrics.json").read_text())["agent_steps_per_s"]
    )


def test_overview_json_shape(finished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "inspect", str(finished), "--json")
    data = json.loads(out)
    assert code == 0 and err == ""
    assert set(data) == {
        "run_id", "name", "path", "status", "state", "pid", "alive", "started", "ended",
        "seed", "ticks_done", "ticks_total", "last_time", "agents", "agent_steps",
        "agent_steps_per_s", "model_calls", "script_calls", "prompt_tokens",
        "completion_tokens", "cached_prompt_tokens", "tokens", "cost", "models", "skipped",
        "errors", "error_total",
        "gate_retries", "quarantined", "events", "skills", "skills_hidden", "hot_reloads",
        "checkpoints", "reason", "problems", "parent", "lineage", "budget_stop",
            "estimate_error",
        "skills_refused", "skills_shadowed", "skills_broken", "sandbox",
        "behaviour", "outcomes", "acted", "tool_calls", "tool_calls_by_tool",
        "tool_calls_by_skill", "by_group", "by_model", "never_fires", "lost",
    }  # fmt: skip
    assert data["status"] == "completed" and data["ticks_done"] == 5
    assert (data["reason"], data["problems"], data["parent"], data["lineage"]) == (
        None,
        [],
        None,
        [],
    )
    for use in data["skills"].values():
        assert set(use) == {
            "activations",
            "default_activations",
            "script_calls",
            "script_failures",
            "script_truncated",
        }


def test_overview_text(finished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "inspect", str(finished))
    assert code == 0
    assert "state        completed" in out and "ticks        5/5" in out
    assert "agent-steps  30" in out and "cost -" in out and "errors       none" in out


def test_running_run_ignores_the_torn_last_line(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = copy_run(finished, tmp_path / "live", status="running", ended=None, pid=os.getpid())
    kept = chop_last_line(run_dir / "events.jsonl")
    complete = [json.loads(line) for line in kept.decode().splitlines()]
    ov = summarize(open_run(run_dir))
    assert ov.state["state"] == "running" and ov.state["alive"] is True
    assert ov.events == dict(Counter(e["type"] for e in complete))
    assert "run_end" not in ov.events  # the torn line was the run_end event
    assert open_run(run_dir).events().num_rows == len(complete)
    code, out, _ = cli(capsys, "inspect", str(run_dir))
    assert code == 0 and "state        running" in out


def test_crashed_run_is_reported_dead(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = copy_run(finished, tmp_path / "dead", status="running", ended=None, pid=dead_pid())
    chop_last_line(run_dir / "events.jsonl")
    tear_rows_from(run_dir, 4)
    state = open_run(run_dir).state()
    assert (state.status, state.state, state.alive) == ("running", "dead", False)
    code, out, _ = cli(capsys, "inspect", str(run_dir))
    assert code == 0 and "dead (manifest says running, but process" in out
    code, out, _ = cli(capsys, "inspect", str(run_dir), "--agent", "commuters-00000", "--json")
    assert code == 0 and json.loads(out)["history"]["steps_total"] == 4  # 5 steps, last torn


def test_failed_run_and_a_manifest_without_pid(finished: Path, tmp_path: Path) -> None:
    failed = copy_run(finished, tmp_path / "failed", status="failed")
    assert open_run(failed).state().state == "failed"
    odd = copy_run(finished, tmp_path / "odd", status="running", pid="not a pid")
    state = open_run(odd).state()
    assert state.state == "running" and state.alive is None and state.pid is None


def test_cost_when_prices_are_configured(finished: Path, tmp_path: Path) -> None:
    run_dir = copy_run(finished, tmp_path / "priced")
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text("utf-8"))
    cfg["model"]["prices"] = {"prompt_per_1k": 0.5, "completion_per_1k": 2.0}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    ov = summarize(open_run(run_dir))
    assert ov.cost == pytest.approx(ov.prompt_tokens / 1000 * 0.5 + ov.completion_tokens / 500)
    cfg["model"]["prices"] = {"prompt_per_1k": "lots"}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert summarize(open_run(run_dir)).cost is None


def test_overview_survives_a_damaged_config(finished: Path, tmp_path: Path) -> None:
    run_dir = copy_run(finished, tmp_path / "noconfig")
    (run_dir / "config.yaml").unlink()
    (run_dir / "metrics.json").unlink()
    ov = summarize(open_run(run_dir))
    assert ov.ticks_done == 5 and ov.ticks_total is None and ov.agent_steps_per_s is None


def test_errors_by_kind_and_reloads() -> None:
    events = [
        {"type": "run_start", "tick": 0, "agents": 2},
        {"type": "agent_error", "tick": 0, "error": "ValueError: bad"},
        {"type": "agent_error", "tick": 0, "error": "ValueError: worse"},
        {"type": "agent_error", "tick": 1, "error": "step timed out after 1s"},
        {"type": "agent_error", "tick": 1, "error": "no colon here"},
        {"type": "agent_degraded", "tick": 1, "reason": "503"},
        {"type": "hook_gate_failed", "tick": 1, "skill": "custom@q"},
        {"type": "script_called", "tick": 1, "skill": "custom@q", "ok": False},
        {"type": "script_called", "tick": 1, "skill": "custom@q", "ok": True},
        {"type": "skills_reloaded", "tick": 2, "generation": 3, "added": ["custom@n"]},
        {"type": "tick_end", "tick": 2, "steps": 2, "model_calls": "?"},
    ]
    counts = summarize_events(events)
    assert counts.errors == {
        "agent_degraded": 1,
        "agent_error": 1,
        "agent_error: ValueError": 2,
        "agent_error: step timeout": 1,
        "hook_gate_failed": 1,
        "script_failed": 1,
    }
    assert counts.skills["custom@q"].to_dict() == {
        "activations": 0,
        "default_activations": 0,
        "script_calls": 2,
        "script_failures": 1,
        "script_truncated": 0,
    }
    assert counts.hot_reloads[0]["added"] == ["custom@n"] and counts.hot_reloads[0]["tick"] == 2
    assert counts.sums["steps"] == 2 and counts.sums["model_calls"] == 0
    assert counts.agents == 2 and error_kind({"type": "move"}) is None


def test_overview_with_reloads_in_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "synthetic"
    (run_dir / "agents" / "a-1").mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"status": "completed"}), encoding="utf-8")
    lines = [
        {"type": "skills_reloaded", "tick": 2, "generation": 3, "changed": ["custom@n"]},
        {"type": "agent_error", "tick": 2, "error": "KeyError: x"},
    ]
    (run_dir / "events.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in lines), encoding="utf-8"
    )
    code, out, _ = cli(capsys, "inspect", str(run_dir))
    assert code == 0 and "hot reload   tick 2 generation 3: changed custom@n" in out
    assert "errors       1: agent_error: KeyError 1" in out and "agents       1" in out
    assert "ticks        0/?" in out


# -- one agent ----------------------------------------------------------------------------


def test_agent_view_json_shape(finished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    aid = "retirees-00000"
    code, out, _ = cli(capsys, "inspect", str(finished), "--agent", aid, "--last", "2", "--json")
    data = json.loads(out)
    assert code == 0 and set(data) == {"agent_id", "path", "profile", "skills", "history", "files"}
    adir = finished / "agents" / aid
    trace = list(open_run(finished).agent(aid).trace())
    changes = [t for t in trace if "skills_active" in t]
    assert data["history"]["skills_over_time"] == [
        {"tick": t["tick"], "active": t["skills_active"]} for t in changes
    ]
    steps = [t for t in trace if "skills_active" not in t]
    assert data["history"]["steps_total"] == len(steps) == 5
    last = data["history"]["last_steps"]
    assert [s["tick"] for s in last] == [steps[-2]["tick"], steps[-1]["tick"]]
    assert set(last[0]) == {
        "tick", "time", "action", "skipped", "skill_hooks", "hooks", "post_hooks", "calls",
        "model_calls", "usage", "elapsed_ms", "system_sha", "limitation", "reasoning",
    }  # fmt: skip
    assert data["profile"]["agent_id"] == aid and "active" in data["skills"]
    sizes = {
        p.relative_to(adir).as_posix(): p.stat().st_size for p in adir.rglob("*") if p.is_file()
    }
    assert {f["path"]: f["size"] for f in data["files"]} == sizes


def test_agent_steps_show_hooks_calls_and_results(finished: Path) -> None:
    agent = open_run(finished).agent("commuters-00000")
    hist = agent.history(last=10)
    with_calls = [s for s in hist.last_steps if s.calls]
    assert with_calls, "the scripted model calls tools in this run"
    step = with_calls[0]
    raw = next(t for t in agent.trace() if t.get("tick") == step.tick and "calls" in t)
    assert [c["tool"] for c in step.calls] == [c["tool"] for c in raw["calls"]]
    assert step.skill_hooks.startswith("<skill_hooks>") and step.skill_hooks in raw["user"]
    skipped = [s for s in hist.last_steps if s.skipped]
    for s in skipped:  # a skipped step has no prompt: its block is rebuilt from the trace
        assert s.system_sha is None and s.skill_hooks.startswith("<skill_hooks>")
        assert s.hooks[0]["text"] in s.skill_hooks


def test_agent_text(finished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "inspect", str(finished), "--agent", "commuters-00000")
    assert code == 0
    for part in ("profile", "active skills over time", "last 5 of 5 steps", "workspace files"):
        assert part in out
    assert "<skill_hooks>" in out and "profile.json" in out and " -> " in out


def test_history_keeps_the_last_steps_and_says_how_to_get_more(
    finished: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = agentsim.open_run(finished).agent("commuters-00000")
    assert HISTORY_LAST == 5 and len(agent.history().last_steps) == 5  # every step of 5
    assert agent.history().more == ""
    two = agent.history(last=2)
    assert [s.tick for s in two.last_steps] == [3, 4] and two.steps_total == 5
    assert two.more == (
        "the last 2 of 5 steps (3 left out); pass history(last=N) for more, "
        "or history(last=None) for all"
    )
    everything = agent.history(last=None)
    assert [s.tick for s in everything.last_steps] == [0, 1, 2, 3, 4]
    with pytest.raises(
        ConfigError, match=r"history\(last=-1\) is not a step count; .*\(default 5\)"
    ):
        agent.history(last=-1)
    code, out, _ = cli(capsys, "inspect", str(finished), "--agent", agent.agent_id, "--last", "2")
    assert code == 0 and "last 2 of 5 steps  (--last N shows more)" in out


def test_long_results_are_cut_in_text_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    adir = tmp_path / "r" / "agents" / "a-1"
    adir.mkdir(parents=True)
    (tmp_path / "r" / "manifest.json").write_text("{}", encoding="utf-8")
    (adir / "profile.json").write_text('{"agent_id": "a-1"}', encoding="utf-8")
    step = {"tick": 0, "time": "t", "action": "x", "limitation": "ran out of turns",
            "calls": [{"tool": "ask_env", "args": "{}", "result": "y" * 1000}]}  # fmt: skip
    (adir / "trace.jsonl").write_text(json.dumps(step) + "\n", encoding="utf-8")
    code, out, _ = cli(capsys, "inspect", str(tmp_path / "r"), "--agent", "a-1")
    assert code == 0 and "(1000 chars; --json shows all)" in out
    assert "limitation: ran out of turns" in out and "tick     0" not in out
    code, out, _ = cli(capsys, "inspect", str(tmp_path / "r"), "--agent", "a-1", "--json")
    assert json.loads(out)["history"]["last_steps"][0]["calls"][0]["result"] == "y" * 1000
    assert json.loads(out)["skills"] == {}


def test_prompt_at_tick(finished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    aid = "commuters-00000"
    entry = next(t for t in open_run(finished).agent(aid).trace() if "user" in t)
    code, out, _ = cli(
        capsys, "inspect", str(finished), "--agent", aid, "--tick", str(entry["tick"]), "--json"
    )
    data = json.loads(out)
    system = data["system"]
    # Rebuilt from its stored parts, exactly: the hash the step recorded is the prompt's.
    assert hashlib.sha256(system.encode()).hexdigest()[:16] == entry["system_sha"]
    assert code == 0 and "<available_skills" in system and data["user"] == entry["user"]
    assert data["messages"] == [
        {"role": "system", "content": system},
        {"role": "user", "content": entry["user"]},
    ]
    code, out, _ = cli(
        capsys, "inspect", str(finished), "--agent", aid, "--tick", str(entry["tick"])
    )
    assert code == 0 and out.startswith(f"=== system ({entry['system_sha']}) ===\n<instructions>")
    assert f"=== user (tick {entry['tick']}" in out


def test_prompt_errors_name_the_problem(finished: Path, tmp_path: Path) -> None:
    run_dir = copy_run(finished, tmp_path / "p")
    agent = open_run(run_dir).agent("retirees-00000")
    with pytest.raises(RunError, match=r"no step at tick 99 in its trace \(ticks 0\.\.4\)"):
        agent.prompt_at(99)
    skipped = next((t for t in agent.trace() if "hooks" in t and "system_sha" not in t), None)
    if skipped is not None:
        with pytest.raises(RunError, match="saw no prompt at tick"):
            agent.prompt_at(skipped["tick"])
    entry = next(t for t in agent.trace() if "user" in t)
    host = run_dir / "store" / "host-0000"
    for name in ("parts.jsonl.gz", "parts.jsonl.gz.idx"):
        (host / name).unlink()
    with pytest.raises(RunError, match=r"prompt part \w+ of agent 'retirees-00000' is missing"):
        agent.prompt_at(entry["tick"])
    # The same folder read as layout 1 (a run written before the shards): all in the folder.
    copy_run(run_dir, tmp_path / "v1", layout=1)
    agent = open_run(tmp_path / "v1").agent("retirees-00000")
    trace = agent.root / "trace.jsonl"
    trace.write_text(json.dumps({"tick": 0, "system_sha": "abc", "user": "u"}) + "\n")
    with pytest.raises(RunError, match=r"system prompt abc of agent .* at tick 0 is missing"):
        agent.prompt_at(0)
    trace.write_text(json.dumps({"tick": 0, "system_sha": "abc", "action": "x"}) + "\n")
    with pytest.raises(RunError, match="--trace summary"):
        agent.prompt_at(0)
    trace.write_text(json.dumps({"tick": 0, "action": "x"}) + "\n")
    with pytest.raises(RunError, match=r"saw no prompt at tick 0: .*\(x\)"):
        agent.prompt_at(0)
    trace.unlink()
    with pytest.raises(RunError, match=r"no step at tick 0 in its trace \(no steps yet\)"):
        agent.step_at(0)


# -- events as a table --------------------------------------------------------------------


def test_events_table_from_parquet_and_from_jsonl_agree(finished: Path, tmp_path: Path) -> None:
    lines = events_of(finished / "events.jsonl")
    run = open_run(finished)
    table = run.events()
    assert tuple(table.column_names) == EVENT_COLUMNS and table.num_rows == len(lines)
    copy = copy_run(finished, tmp_path / "nopq")
    (copy / "events.parquet").unlink()
    assert open_run(copy).events().to_pylist() == table.to_pylist()
    moves = run.events(types=["move", "arrive"])
    assert moves.num_rows == sum(e["type"] in ("move", "arrive") for e in lines)
    assert open_run(copy).events(types=("move", "arrive")).to_pylist() == moves.to_pylist()
    first = table.slice(0, 1).to_pylist()[0]
    assert first["type"] == "run_start" and json.loads(first["data"])["agents"] == 6


def test_events_have_typed_columns(finished: Path, tmp_path: Path) -> None:
    no_parquet = copy_run(finished, tmp_path / "nopq")
    (no_parquet / "events.parquet").unlink()
    for run_dir in (finished, no_parquet):
        table = agentsim.open_run(run_dir).events()
        assert table.schema.types == [
            pa.int64(), pa.timestamp("us"), pa.string(), pa.string(), pa.string()
        ]  # fmt: skip
        first = table.slice(0, 1).to_pylist()[0]
        assert first["time"] == datetime(2026, 3, 2, 7, 0) and first["tick"] == 0


def test_events_of_one_type_have_their_fields_as_columns(finished: Path, tmp_path: Path) -> None:
    lines = events_of(finished / "events.jsonl")
    actions = [e for e in lines if e["type"] == "agent_action"]
    no_parquet = copy_run(finished, tmp_path / "nopq")
    (no_parquet / "events.parquet").unlink()
    for run_dir in (finished, no_parquet):
        run = agentsim.open_run(run_dir)
        table = run.events(type="agent_action")
        assert table.column_names == [
            "tick", "time", "type", "agent_id", "acted", "action", "degraded", "outcome"
        ]  # fmt: skip
        assert table.schema.field("time").type == pa.timestamp("us")
        assert table.schema.field("degraded").type == pa.bool_()
        assert table["action"].to_pylist() == [e["action"] for e in actions]
        assert table["agent_id"].to_pylist() == [e["agent_id"] for e in actions]
        moves = run.events(type="move")
        assert moves.schema.field("minutes").type == pa.int64() and moves.num_rows > 0
        occupancy = run.events(type="city_occupancy").schema.field("occupancy").type
        assert pa.types.is_struct(occupancy)  # a mapping becomes a struct, not JSON text
        answers = run.events(type="survey_answer")
        assert set(answers["name"].to_pylist()) == {"s1"} and answers.num_rows == 6
        never = run.events(type="interview_answer")
        assert never.num_rows == 0 and never.column_names == ["tick", "time", "type", "agent_id"]
    with pytest.raises(ConfigError, match=r"both types=\['move'\] and type='move' were given"):
        agentsim.open_run(finished).events(types=["move"], type="move")


def write_events(root: Path, events: list[dict[str, Any]]) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "manifest.json").write_text('{"status": "running"}', encoding="utf-8")
    (root / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return root


def test_event_fields_that_share_no_type_and_times_with_an_offset(tmp_path: Path) -> None:
    at = "2026-03-02T07:00:00+01:00"
    run = agentsim.open_run(
        write_events(
            tmp_path / "mixed",
            [
                {"type": "x", "tick": 0, "time": at, "value": 1},
                {"type": "x", "tick": 1, "time": at, "value": "one", "extra": True},
            ],
        )
    )
    table = run.events(type="x")
    assert table["value"].to_pylist() == ["1", '"one"']  # JSON text: int and str do not mix
    assert table["extra"].to_pylist() == [None, True]
    assert table.schema.field("time").type == pa.timestamp("us", tz="+01:00")
    assert table["time"][0].as_py() == datetime.fromisoformat(at)
    bad = write_events(tmp_path / "bad", [{"type": "x", "tick": 0, "time": "noon"}])
    with pytest.raises(RunError, match=r"event time 'noon' is not an ISO date-time"):
        agentsim.open_run(bad).events()


def test_events_df_is_a_pandas_frame_with_datetimes(finished: Path) -> None:
    pd = pytest.importorskip("pandas")
    df = agentsim.open_run(finished).events_df(type="agent_action")
    assert isinstance(df, pd.DataFrame) and list(df.columns)[-4:] == [
        "acted",
        "action",
        "degraded",
        "outcome",
    ]
    assert pd.api.types.is_datetime64_any_dtype(df["time"])


def test_events_df_needs_pandas(finished: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"needs pandas, which is not installed; `pip install"):
        open_run(finished).events_df()


def test_iter_jsonl_skips_bad_lines_and_stops_at_a_torn_one(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"a": 1}\nnot json\n[1, 2]\n{"b": 2}\n{"c": ')
    assert list(iter_jsonl(p)) == [{"a": 1}, {"b": 2}]
    assert list(iter_jsonl(tmp_path / "missing.jsonl")) == []


# -- errors -------------------------------------------------------------------------------


def test_open_run_errors(tmp_path: Path) -> None:
    with pytest.raises(RunError, match=r"run folder .* does not exist; give the folder"):
        open_run(tmp_path / "nope")
    with pytest.raises(RunError, match=r"is not a run folder \(no manifest.json\)"):
        open_run(tmp_path)


def test_unknown_agent_lists_close_matches(finished: Path) -> None:
    run = open_run(finished)
    assert repr(run) == f"Run({str(finished)!r})"
    with pytest.raises(
        RunError, match=r"agent 'commuters-0000' is not in run .*close matches: commu"
    ):
        run.agent("commuters-0000")
    with pytest.raises(RunError, match=r"agent '\.\./x' is not in run .*\(6 agents\)"):
        run.agent("../x")


def test_broken_files_are_named(finished: Path, tmp_path: Path) -> None:
    run_dir = copy_run(finished, tmp_path / "broken")
    run = Run(run_dir)
    (run_dir / "config.yaml").write_text("a: [", encoding="utf-8")
    with pytest.raises(RunError, match=r"config.yaml is not valid YAML"):
        run.config_dict()
    (run_dir / "config.yaml").write_text("- a\n", encoding="utf-8")
    with pytest.raises(RunError, match=r"config.yaml does not hold a mapping"):
        run.config_dict()
    (run_dir / "config.yaml").write_text("name: x\nticks: -1\n", encoding="utf-8")
    with pytest.raises(RunError, match=r"config.yaml no longer validates"):
        run.config()
    (run_dir / "config.yaml").unlink()
    with pytest.raises(RunError, match=r"config.yaml is missing"):
        run.config_dict()
    with pytest.raises(RunError, match=r"config.yaml is missing"):
        run.config()
    (run_dir / "manifest.json").write_text("{", encoding="utf-8")
    with pytest.raises(RunError, match=r"run manifest .* is not valid JSON"):
        run.manifest()
    (run_dir / "manifest.json").write_text("[]", encoding="utf-8")
    with pytest.raises(RunError, match=r"run manifest .* does not hold a JSON object"):
        run.manifest()
    (run_dir / "agents" / "a-1").mkdir()
    with pytest.raises(RunError, match=r"profile of agent 'a-1' .* is missing"):
        run.agent("a-1").profile()


def test_cli_bad_input_exits_2(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "inspect", str(tmp_path / "nope"))
    assert (
        code == 2 and out == "" and err.startswith("error: run folder") and "does not exist" in err
    )
    code, _, err = cli(capsys, "inspect", str(finished), "--tick", "3")
    assert (
        code == 2
        and err == "error: --tick: needs an agent; add --agent ID (an agent folder of RUN/agents)\n"
    )
    code, _, err = cli(
        capsys, "inspect", str(finished), "--agent", "commuters-00000", "--last", "-1"
    )
    assert code == 2 and "--last: must be >= 0, got -1" in err
    code, _, err = cli(capsys, "inspect", str(finished), "--agent", "nobody")
    assert code == 2 and "agent 'nobody' is not in run" in err


def test_a_symlinked_profile_or_memory_is_never_followed(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script may plant links in its agent's folder: inspect prints nothing they lead to."""
    from agentsim.cli import main

    secret = tmp_path / "secret.txt"
    secret.write_text('{"api_key": "sk-outside"}\n', encoding="utf-8")
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    agent = open_run(run_dir).agents[0]
    folder = run_dir / "agents" / agent
    (folder / "profile.json").unlink()
    os.symlink(secret, folder / "profile.json")
    if (folder / "memory.jsonl").exists():
        (folder / "memory.jsonl").unlink()
    os.symlink(secret, folder / "memory.jsonl")

    assert main(["inspect", str(run_dir), "--agent", agent]) == 2
    out, err = capsys.readouterr()
    assert "sk-outside" not in out + err
    assert f"profile of agent '{agent}' {folder / 'profile.json'} is a symbolic link" in err
    assert "links inside a run folder are never followed: replace it by the file itself" in err
    record = open_run(run_dir).agent(agent)
    with pytest.raises(RunError, match=r"memory\.jsonl is a symbolic link"):
        record.memory()
    listed = {f.path for f in record.files()}
    assert "profile.json" not in listed and "memory.jsonl" not in listed


def test_a_fifo_or_folder_in_place_of_a_file_is_refused_without_hanging(
    finished: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    agent = open_run(run_dir).agents[0]
    folder = run_dir / "agents" / agent
    (folder / "memory.jsonl").unlink(missing_ok=True)
    os.mkfifo(folder / "memory.jsonl")  # opening it for reading would wait for a writer
    (folder / "profile.json").unlink()
    (folder / "profile.json").mkdir()
    record = open_run(run_dir).agent(agent)
    with pytest.raises(RunError, match=r"memory\.jsonl is not a regular file; it is not read"):
        record.memory()
    with pytest.raises(RunError, match=r"profile\.json is not a regular file; it is not read"):
        record.profile()
