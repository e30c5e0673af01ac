"""The engine through its public API: workflow order, run folder, failures that do not stop
a run, step timeouts, the stop event, determinism."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from agentsim.agent.agent import step_seed
from agentsim.config.experiment import ExperimentConfig, load_experiment, parse_experiment
from agentsim.errors import ConfigError
from agentsim.hosts.host import HostSpec
from agentsim.hosts.local import LocalExecutor, partition
from agentsim.inspect import open_run
from agentsim.llm.base import ChatModel, Completion, Message, ToolSchema
from agentsim.llm.scripted import ScriptedModel
from agentsim.run.engine import Engine, Progress, RunSummary
from tests.unit import helpers

SMALL = helpers.FIXTURES / "experiments" / "small.yaml"


def small(**env: str) -> ExperimentConfig:
    return load_experiment(SMALL, environ={f"AGENTSIM_{k}": v for k, v in env.items()})


def events(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text("utf-8").splitlines()
    return [json.loads(line) for line in lines]


class FaultyModel:
    """The scripted model, except that the steps of one agent raise or hang forever."""

    def __init__(self, config: ExperimentConfig, agent_id: str, *, hang: bool) -> None:
        self.inner = ScriptedModel()
        self.hang = hang
        # Agents pass their step seed to the model: that is how we recognise the victim.
        self.bad = {step_seed(config.seed, agent_id, t) for t in range(config.total_ticks())}

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        if seed in self.bad:
            if self.hang:
                await asyncio.Event().wait()
            raise RuntimeError("the fake model broke")
        return await self.inner.complete(messages, tools, seed=seed)


@pytest.fixture(scope="module")
def completed(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunSummary, Path]:
    run_dir = tmp_path_factory.mktemp("engine") / "run"
    summary = asyncio.run(Engine(small(), run_dir=run_dir).run())
    return summary, run_dir


def test_the_run_completes_with_its_summary(completed: tuple[RunSummary, Path]) -> None:
    summary, _ = completed
    assert (summary.status, summary.ticks, summary.agents) == ("completed", 6, 20)
    assert summary.metrics["agent_steps"] == 6 * 20
    assert summary.metrics["errors"] == 0 and summary.metrics["model_calls"] > 0


def test_run_folder_layout(completed: tuple[RunSummary, Path]) -> None:
    _, run_dir = completed
    cfg = small()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config_hash"] == cfg.config_hash()
    assert manifest["seed"] == 5 and manifest["executor"] == "local"
    assert manifest["status"] == "completed" and manifest["ticks_done"] == 6
    assert {"python", "agentsim", "pydantic"} <= set(manifest["versions"])
    assert manifest["started"] and manifest["ended"]
    again = parse_experiment(
        (run_dir / "config.yaml").read_text(), base_dir=Path(manifest["source_dir"])
    )
    assert again.config_hash() == manifest["config_hash"]
    n_events = len(events(run_dir))
    assert pq.read_table(run_dir / "events.parquet").num_rows == n_events
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["ticks"] == 6 and metrics["events"] == n_events
    assert {"agent_steps", "model_calls", "prompt_tokens", "errors", "wall_seconds"} <= set(metrics)
    agents = sorted(p.name for p in (run_dir / "agents").iterdir())
    assert len(agents) == 20 and agents[0] == "posters-00000"
    run = open_run(run_dir)
    for aid in agents:
        d = run_dir / "agents" / aid
        # What skills read stays in the agent's folder; the rest is in the host's shards.
        assert sorted(p.name for p in d.iterdir() if p.name != "state") == [
            "AGENT.json",
            "memory.jsonl",
            "profile.json",
        ]
        agent_json = json.loads((d / "AGENT.json").read_text())
        assert (agent_json["agent_id"], agent_json["tick"]) == (aid, 5)
        assert agent_json["current_time"] == "2026-03-02T11:00:00"  # the last tick, 5
        assert json.loads((d / "profile.json").read_text())["agent_id"] == aid
        assert (d / "memory.jsonl").read_text().splitlines()
        trace = list(run.agent(aid).trace())
        assert [t["tick"] for t in trace if "action" in t] == list(range(6))
        assert "active" in run.agent(aid).skills()
    assert json.loads((run_dir / "manifest.json").read_text())["layout"] == 2
    assert sorted(p.name for p in (run_dir / "store" / "host-0000").iterdir()) == [
        "agents.json",
        "parts.jsonl.gz",
        "parts.jsonl.gz.idx",
        "rows.jsonl.gz",
        "rows.jsonl.gz.idx",
    ]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "tick-00000002",
        "tick-00000004",
        "tick-00000006",
    ]


def test_events_are_ordered_and_the_workflow_runs_in_order(
    completed: tuple[RunSummary, Path],
) -> None:
    _, run_dir = completed
    evs = events(run_dir)
    assert evs[0]["type"] == "run_start" and evs[-1]["type"] == "run_end"
    assert [e["tick"] for e in evs] == sorted(e["tick"] for e in evs)
    kinds = [e["type"] for e in evs]
    last_tick_end_2 = max(i for i, e in enumerate(evs) if e == {**e, "type": "tick_end", "tick": 2})
    close = kinds.index("place_closed")
    interventions = [i for i, k in enumerate(kinds) if k == "intervention"]
    answers = [i for i, k in enumerate(kinds) if k == "survey_answer"]
    first_tick_3_action = next(
        i for i, e in enumerate(evs) if e["tick"] == 3 and e["type"] == "agent_action"
    )
    # run 3 ticks -> close the park -> message -> survey -> run again
    assert last_tick_end_2 < interventions[0] < close < interventions[1] < answers[0]
    assert answers[-1] < first_tick_3_action
    assert evs[interventions[1]]["recipients"] == 20
    for t in range(6):
        acted = [e["agent_id"] for e in evs if e["tick"] == t and e["type"] == "agent_action"]
        skipped = [e["agent_id"] for e in evs if e["tick"] == t and e["type"] == "hook_decision"]
        assert acted == sorted(acted) and len(set(acted) | set(skipped)) == 20
    rows = [json.loads(x) for x in (run_dir / "surveys" / "check.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["question"] == "How is your day going?" for r in rows)
    assert all(r["answer"] and r["tick"] == 3 for r in rows)
    assert [r["agent_id"] for r in rows] == [evs[i]["agent_id"] for i in answers]
    # The message was delivered: every agent remembers it.
    memory = (run_dir / "agents" / "workers-00000" / "memory.jsonl").read_text()
    assert "The park is closed today." in memory


def test_same_seed_gives_byte_identical_events(
    completed: tuple[RunSummary, Path], tmp_path: Path
) -> None:
    _, first = completed
    asyncio.run(Engine(small(), run_dir=tmp_path / "again").run())
    assert (tmp_path / "again" / "events.jsonl").read_bytes() == (
        first / "events.jsonl"
    ).read_bytes()


async def test_an_agent_step_that_raises_becomes_an_event(tmp_path: Path) -> None:
    cfg = small(WORKFLOW="[{run: {ticks: 2}}]")
    victim = "posters-00003"  # workers may sleep through 06:00 (a hook skips their step)
    ex = LocalExecutor(model_factory=lambda spec: FaultyModel(cfg, victim, hang=False))
    summary = await Engine(cfg, run_dir=tmp_path / "r", executor=ex).run()
    # One agent of 20 failing every step is 5% of the steps, over agent.max_error_share.
    assert summary.status == "completed with problems" and summary.metrics["errors"] == 2
    assert summary.problems == [
        "2 of 40 agent steps failed (5%), more than agent.max_error_share=0.01"
    ]
    evs = events(tmp_path / "r")
    errors = [e for e in evs if e["type"] == "agent_error"]
    assert [(e["agent_id"], e["tick"]) for e in errors] == [(victim, 0), (victim, 1)]
    assert errors[0]["error"] == "RuntimeError: the fake model broke"
    acted = {e["agent_id"] for e in evs if e["type"] == "agent_action"}
    assert victim not in acted and len(acted) >= 8


@pytest.mark.slow
async def test_a_hanging_model_cannot_stall_the_tick(tmp_path: Path) -> None:
    # 2 s: room for the 19 other steps, which must not time out on a loaded machine.
    cfg = small(WORKFLOW="[{run: {ticks: 1}}]", EXECUTOR__STEP_TIMEOUT="2")
    ex = LocalExecutor(model_factory=lambda spec: FaultyModel(cfg, "posters-00001", hang=True))
    # Without the step timeout this never returns; the outer guard only turns that into a
    # failure instead of a stuck suite.
    summary = await asyncio.wait_for(Engine(cfg, run_dir=tmp_path / "r", executor=ex).run(), 30)
    errors = [e for e in events(tmp_path / "r") if e["type"] == "agent_error"]
    assert [e["error"] for e in errors] == ["step timed out after 2s"]
    assert summary.metrics["agent_steps"] == 20


class SuspendingModel:
    """The scripted model behind a real suspension (as a network model would be), failing
    for one agent (if given) only after it has suspended."""

    def __init__(self, config: ExperimentConfig, agent_id: str | None) -> None:
        self.inner = ScriptedModel()
        ticks = range(config.total_ticks())
        self.bad = {step_seed(config.seed, agent_id, t) for t in ticks} if agent_id else set()

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        await asyncio.sleep(0)
        if seed in self.bad:
            raise RuntimeError("failed after suspending")
        return await self.inner.complete(messages, tools, seed=seed)


@pytest.mark.slow
async def test_steps_that_suspend_give_the_same_events_as_steps_that_do_not(
    tmp_path: Path,
) -> None:
    """Steps that wait on their model and steps that never suspend give the same log, and
    a failure after a suspension is still one agent's error event."""
    cfg = small(WORKFLOW="[{run: {ticks: 2}}]")
    await Engine(cfg, run_dir=tmp_path / "sync").run()
    ex = LocalExecutor(model_factory=lambda spec: SuspendingModel(cfg, None))
    await Engine(cfg, run_dir=tmp_path / "async", executor=ex).run()
    sync_log = (tmp_path / "sync" / "events.jsonl").read_bytes()
    assert (tmp_path / "async" / "events.jsonl").read_bytes() == sync_log
    assert sync_log.count(b'"agent_action"') > 20

    victim = "posters-00003"
    ex = LocalExecutor(model_factory=lambda spec: SuspendingModel(cfg, victim))
    summary = await Engine(cfg, run_dir=tmp_path / "fail", executor=ex).run()
    # One agent of 20 failing every step is 5% of the steps, over agent.max_error_share.
    assert summary.status == "completed with problems" and summary.metrics["errors"] == 2
    assert summary.problems == [
        "2 of 40 agent steps failed (5%), more than agent.max_error_share=0.01"
    ]
    errors = [e for e in events(tmp_path / "fail") if e["type"] == "agent_error"]
    assert [(e["agent_id"], e["error"]) for e in errors] == [
        (victim, "RuntimeError: failed after suspending")
    ] * 2


@pytest.mark.slow
async def test_all_hanging_agents_share_one_timeout(tmp_path: Path) -> None:
    cfg = small(WORKFLOW="[{run: {ticks: 1}}]", EXECUTOR__STEP_TIMEOUT="2")
    stuck = ScriptedModel()

    class Hang:
        inside = most = 0

        async def complete(self, *a: Any, **k: Any) -> Completion:
            Hang.inside += 1
            Hang.most = max(Hang.most, Hang.inside)
            try:
                await asyncio.Event().wait()
            finally:
                Hang.inside -= 1
            return await stuck.complete([], ())

    ex = LocalExecutor(model_factory=lambda spec: Hang())
    summary = await Engine(cfg, run_dir=tmp_path / "r", executor=ex).run()
    m = summary.metrics
    assert m["errors"] >= 8 and m["errors"] + m["skipped"] == 20
    # Stepped side by side, not one after another: every hanging step was waiting on the
    # model before the first one's 2 s ran out (its own preparation takes milliseconds).
    assert Hang.most == m["errors"]


async def test_stop_event_interrupts_at_a_tick_boundary(tmp_path: Path) -> None:
    stop = threading.Event()
    seen: list[Progress] = []

    def progress(p: Progress) -> None:
        seen.append(p)
        if p.tick == 2:
            stop.set()

    run_dir = tmp_path / "r"
    summary = await Engine(small(), run_dir=run_dir, progress=progress, stop=stop).run()
    assert summary.status == "interrupted" and summary.ticks == 2
    assert [p.tick for p in seen] == [1, 2] and seen[-1].total == 6
    assert seen[-1].agent_steps == 40 and seen[-1].model_calls > 0 and seen[-1].tokens > 0
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    text = (run_dir / "events.jsonl").read_text()
    assert text.endswith("\n") and all(json.loads(x) for x in text.splitlines())
    assert events(run_dir)[-1] == {**events(run_dir)[-1], "type": "run_end", "tick": 2}
    assert json.loads((run_dir / "metrics.json").read_text())["ticks"] == 2
    assert (run_dir / "checkpoints" / "tick-00000002" / "engine.json").is_file()


async def test_max_ticks_stops_the_run(tmp_path: Path) -> None:
    summary = await Engine(small(), run_dir=tmp_path / "r", max_ticks=1).run()
    assert (summary.status, summary.ticks) == ("stopped", 1)


async def test_a_crash_marks_the_run_failed(tmp_path: Path) -> None:
    def progress(p: Progress) -> None:
        raise ValueError("progress display broke")

    with pytest.raises(ValueError, match="progress display broke"):
        await Engine(small(), run_dir=tmp_path / "r", progress=progress).run()
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["ticks_done"] == 1
    assert not (tmp_path / "r" / "events.parquet").exists()


def test_partition_is_balanced_and_sorted(completed: tuple[RunSummary, Path]) -> None:
    from agentsim.config.profiles import resolve_agents

    agents = resolve_agents(small())
    blocks = partition(list(reversed(agents)), 3)
    assert [len(b) for b in blocks] == [7, 7, 6]
    flat = [a.agent_id for b in blocks for a in b]
    assert flat == sorted(flat)
    assert len(partition(agents[:2], 5)) == 2


@pytest.mark.slow
async def test_several_local_hosts_give_the_same_events(
    completed: tuple[RunSummary, Path], tmp_path: Path
) -> None:
    _, first = completed
    specs: list[HostSpec] = []

    def factory(spec: HostSpec) -> ChatModel:
        from agentsim.llm.models import build_model

        specs.append(spec)
        return build_model(
            spec.model, run_dir=Path(spec.run_dir), max_react_turns=spec.settings.max_react_turns
        )

    ex = LocalExecutor(model_factory=factory)
    await Engine(small(EXECUTOR__HOSTS="3"), run_dir=tmp_path / "r", executor=ex).run()
    assert sorted(s.host_id for s in specs) == [0, 1, 2]
    ours = [e for e in events(tmp_path / "r") if e["type"] != "run_end"]
    theirs = [e for e in events(first) if e["type"] != "run_end"]
    assert ours == theirs


def test_build_model_follows_the_model_section(tmp_path: Path) -> None:
    from agentsim.config.experiment import ModelConfig
    from agentsim.llm.cache import CachedModel
    from agentsim.llm.models import build_model
    from agentsim.llm.openai import OpenAIChatModel

    assert isinstance(build_model(ModelConfig(), run_dir=tmp_path), ScriptedModel)
    remote = {"backend": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"}
    plain = build_model(ModelConfig.model_validate(remote), run_dir=tmp_path, hosts=2)
    assert isinstance(plain, OpenAIChatModel)
    priced = {**remote, "prices": {"prompt_per_1k": 1.0, "completion_per_1k": 2.0}}
    cfg = ModelConfig.model_validate({**priced, "cache": "record"})
    cached = build_model(cfg, run_dir=tmp_path)
    assert isinstance(cached, CachedModel) and cached.path == tmp_path / "model_cache.sqlite"
    replay = ModelConfig.model_validate({**remote, "cache": "replay", "cache_path": "none.db"})
    with pytest.raises(ConfigError, match=r"no recording at none.db; run once with cache mode"):
        build_model(replay, run_dir=tmp_path)
