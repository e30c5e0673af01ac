"""`agentsim interview`: a read-only step of one agent that leaves the run byte-identical.

The run records its model answers (cache: record), so the interview exercises the copy of
the cache opened in replay mode; variants of it (no cache, a missing cache, no checkpoint)
are copies with config.yaml edited.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsim.config.experiment import load_experiment
from agentsim.errors import ConfigError, ModelError, RunError
from agentsim.inspect.cli import add_inspect_commands
from agentsim.inspect.interview import interview
from agentsim.inspect.run import open_run
from agentsim.llm.base import Completion, Message, ToolCall, ToolSchema
from agentsim.run.engine import Engine

EXPERIMENT = """
name: small-town
seed: 5
clock: {start: "2026-03-02T07:00:00", tick: 1h}
ticks: 4
agents:
  - group: commuters
    count: 3
    profile: {template: worker}
    skills: {default: [daily-guidance]}
model: {backend: scripted, cache: record}
environment:
  - {module: city}
output: {dir: workspace, checkpoint_every: 3}
"""
AGENT = "commuters-00001"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("interview")
    (root / "exp.yaml").write_text(EXPERIMENT, encoding="utf-8")
    run_dir = root / "run"
    asyncio.run(Engine(load_experiment(root / "exp.yaml"), run_dir=run_dir).run())
    return run_dir


@pytest.fixture
def run_copy(recorded: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(recorded, tmp_path / "run"))


def hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (and the set of paths: new files count too)."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def edit_config(run_dir: Path, **model: Any) -> None:
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text("utf-8"))
    cfg["model"].update(model)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")


class Recorder:
    """A model that answers every request with ``finish`` and keeps what it was sent."""

    def __init__(self, *, fail: bool = False, hang: bool = False) -> None:
        self.requests: list[tuple[list[Message], list[ToolSchema]]] = []
        self.fail, self.hang = fail, hang

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        self.requests.append((list(messages), list(tools)))
        if self.hang:
            await asyncio.Event().wait()
        if self.fail:
            raise ModelError("the model server is down", attempts=3)
        args = json.dumps({"action": "answered", "answer": "I walked to work."})
        return Completion(tool_calls=(ToolCall(id="c1", name="finish", arguments=args),))


async def test_interview_leaves_the_agent_workspace_byte_identical(recorded: Path) -> None:
    agent_before = hashes(recorded / "agents" / AGENT)
    run_before = hashes(recorded)
    res = await interview(recorded, AGENT, "How was your day?")
    assert hashes(recorded / "agents" / AGENT) == agent_before
    assert hashes(recorded) == run_before  # not even the model cache or a report appeared
    assert res.answer and res.action == "answered" and res.problems == ()
    assert res.tick == 4 and res.time == "2026-03-02T11:00:00"
    assert res.environment == "checkpoint tick-3"
    assert res.model.startswith("scripted (cache: replay, new questions go to the model; copy")
    assert res.model_calls == 1 and res.prompt_tokens > 0


async def test_the_agent_sees_its_memory_skills_and_the_question_read_only(recorded: Path) -> None:
    model = Recorder()
    res = await interview(open_run(recorded), AGENT, "Where did you go?", model=model)
    assert res.answer == "I walked to work." and res.model == "custom model"
    (messages, tools), *_ = model.requests
    system, user = messages[0]["content"], messages[1]["content"]
    offered = {t["function"]["name"] for t in tools}
    assert offered == {"read_skill_file", "search_skills", "ask_env", "finish"}
    assert "You are being interviewed" in system
    skills = open_run(recorded).agent(AGENT).skills()
    for sid in skills["active"]:  # each active skill's body, in the agent's part
        assert f'<skill_content name="{sid.split("@", 1)[1]}">' in user
    assert '<skill_content name="daily-guidance">' in user and "<skill_content" not in system
    with (recorded / "agents" / AGENT / "memory.jsonl").open() as lines:
        memory = [json.loads(line) for line in lines]
    assert "<memory>" in user and memory[-1]["text"] in user
    assert "<question>Where did you go?</question>" in user
    assert "tick: 4\n" in user and "position:" in user  # the city observation, restored


async def test_the_interview_catalog_hides_what_the_run_hid(recorded: Path) -> None:
    # A city-only run: skills that need the social module were never offered to its agents.
    model = Recorder()
    await interview(recorded, AGENT, "Where did you go?", model=model)
    system = model.requests[0][0][0]["content"]
    assert 'id="built-in@daily-guidance"' in system
    assert 'id="built-in@social-feed"' not in system
    assert 'id="built-in@opinion-update"' not in system


async def test_cache_off_and_no_checkpoint(run_copy: Path) -> None:
    edit_config(run_copy, cache="off")
    shutil.rmtree(run_copy / "checkpoints")
    memory = run_copy / "agents" / AGENT / "memory.jsonl"
    bad = '{"tick": "soon", "time": "t", "kind": "action", "text": "x"}\n'  # skipped
    memory.write_text(memory.read_text("utf-8") + bad, encoding="utf-8")
    before = hashes(run_copy)
    res = await interview(run_copy, AGENT, "How was your day?")
    assert res.model == "scripted" and res.environment == "fresh" and res.answer
    assert hashes(run_copy) == before


async def test_record_mode_without_a_recording_calls_the_model(run_copy: Path) -> None:
    (run_copy / "model_cache.sqlite").unlink()
    res = await interview(run_copy, AGENT, "How was your day?")
    assert res.model == "scripted (cache: none recorded yet)" and res.answer
    assert not (run_copy / "model_cache.sqlite").exists()


async def test_replay_only_cannot_answer_a_new_question(run_copy: Path) -> None:
    edit_config(run_copy, cache="replay", cache_fallthrough=False)
    before = hashes(run_copy)
    res = await interview(run_copy, AGENT, "How was your day?")
    assert res.model.startswith("scripted (cache: replay only; copy of ")
    assert res.answer == "" and res.problems[0].startswith("replay: request ")
    assert "was never recorded in" in res.problems[0] and hashes(run_copy) == before
    (run_copy / "model_cache.sqlite").unlink()
    with pytest.raises(RunError, match=r"replays model answers from .*model_cache.sqlite, which"):
        await interview(run_copy, AGENT, "How was your day?")


async def test_model_failure_is_reported_not_raised(recorded: Path) -> None:
    res = await interview(recorded, AGENT, "How was your day?", model=Recorder(fail=True))
    assert res.answer == "" and res.problems == ("the model server is down (after 3 attempts)",)


async def test_a_hanging_model_times_out(run_copy: Path) -> None:
    cfg = yaml.safe_load((run_copy / "config.yaml").read_text("utf-8"))
    cfg["executor"]["step_timeout"] = 0.05
    (run_copy / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    res = await interview(run_copy, AGENT, "How was your day?", model=Recorder(hang=True))
    assert res.answer == "" and "timed out after 0.05s (executor.step_timeout)" in res.problems[0]


async def test_bad_input(recorded: Path, run_copy: Path) -> None:
    with pytest.raises(ConfigError, match="question: the question is empty; ask something"):
        await interview(recorded, AGENT, "  ")
    with pytest.raises(RunError, match=r"agent 'commuters-0001' is not in run .*close matches"):
        await interview(recorded, "commuters-0001", "Hi?")
    shutil.copytree(run_copy / "agents" / AGENT, run_copy / "agents" / "ghost-00000")
    with pytest.raises(RunError, match=r"has a folder in .* but is not in its config.yaml"):
        await interview(run_copy, "ghost-00000", "Hi?")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="agentsim")
    add_inspect_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_interview(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = hashes(recorded)
    code, out, err = cli(capsys, "interview", str(recorded), "--agent", AGENT, "How was your day?")
    assert code == 0 and out.strip() and "run folder unchanged" in err
    code, out, _ = cli(capsys, "interview", str(recorded), "--agent", AGENT, "Hi?", "--json")
    data = json.loads(out)
    assert code == 0 and set(data) == {
        "agent_id", "question", "answer", "action", "tick", "time", "environment", "model",
        "model_calls", "prompt_tokens", "completion_tokens", "problems", "status",
    }  # fmt: skip
    assert data["agent_id"] == AGENT and data["question"] == "Hi?"
    code, out, err = cli(capsys, "interview", str(recorded), "--agent", "nobody", "Hi?")
    assert code == 2 and out == "" and "agent 'nobody' is not in run" in err
    assert hashes(recorded) == before


def test_cli_interview_reports_a_failed_answer(
    run_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_config(run_copy, cache="replay", cache_fallthrough=False)
    code, out, err = cli(capsys, "interview", str(run_copy), "--agent", AGENT, "Hi?")
    assert code == 1 and out == "(no answer)\n"
    assert "problem: replay: request " in err
