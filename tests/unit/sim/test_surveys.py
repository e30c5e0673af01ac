"""Surveys and interviews against the OpenAI-compatible test server: every chosen agent is
asked at once under the model's limiter, each under its own step timeout, the answers are
written in agent order, and the progress line hears of them while they come in."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import agentsim.run.engine as engine_module
from agentsim.config.experiment import parse_experiment
from agentsim.hosts.local import LocalExecutor
from agentsim.run.engine import Engine, Progress
from agentsim.testing import ChatRequest
from agentsim.testing.openai_server import OpenAITestServer
from tests.unit import helpers

_YAML = """
name: asked
seed: 11
clock: {{start: "2026-03-02T09:00:00", tick: 30m}}
workflow:
  - {kind}: {{name: midday, question: "How is your day going?", agents: all}}
agents:
  - group: people
    count: {count}
    profile: {{template: generic}}
    skills: {{default: [], disabled: [daily-guidance]}}
model:
  backend: openai
  model: test-model
  base_url: {base_url}
  max_concurrency: {concurrency}
  max_retries: 0
  timeout: 30
output: {{dir: {out}, formats: [jsonl]}}
"""


def _engine(
    tmp: Path,
    base_url: str,
    *,
    count: int,
    concurrency: int,
    kind: str = "survey",
    name: str = "run",
    step_timeout: float | None = None,
    progress: Any = None,
    executor: Any = None,
) -> Engine:
    text = _YAML.format(
        base_url=base_url, count=count, concurrency=concurrency, kind=kind, out=tmp / "ws"
    )
    if step_timeout is not None:
        text += f"executor: {{step_timeout: {step_timeout}}}\n"
    cfg = parse_experiment(text, base_dir=tmp)
    return Engine(
        cfg, run_dir=tmp / name, stop=threading.Event(), progress=progress, executor=executor
    )


@pytest.mark.slow
async def test_a_500_agent_survey_asks_in_parallel_under_the_limiter(tmp_path: Path) -> None:
    latency, agents, slots = 0.2, 500, 32
    seen: list[Progress] = []
    # Answers wait for the limiter's 32 to be in at once, whatever the machine's load.
    together = helpers.Together(slots)
    async with OpenAITestServer(
        latency=latency, record=False, timeline=True, answer=together
    ) as srv:
        engine = _engine(
            tmp_path, srv.base_url, count=agents, concurrency=slots, progress=seen.append
        )
        summary = await engine.run()
        timeline = list(srv.timeline)
        most = srv.max_in_flight
    assert summary.status == "completed"
    assert len(timeline) == agents  # one question per agent, no tick ran
    took = max(done for _, done in timeline) - min(arrived for arrived, _ in timeline)
    ideal = latency * agents / slots  # 3.1 s; one agent at a time would take 100 s
    # A guard only, for a loaded 2-core machine, yet far from serial; the count below is
    # what says the survey asked in parallel.
    assert took < 50, f"the survey took {took:.1f} s (ideal {ideal:.1f} s)"
    assert most == slots  # the limiter's slots, all used, never more
    rows = (tmp_path / "run" / "surveys" / "midday.jsonl").read_text().splitlines()
    ids = [r.split('"agent_id": "')[1].split('"')[0] for r in rows]
    assert ids == sorted(ids) and len(ids) == agents
    surveys = [p for p in seen if p.survey is not None]
    assert surveys and surveys[-1].survey == "survey midday"
    assert (surveys[-1].answered, surveys[-1].asked) == (agents, agents)
    assert [p.answered for p in surveys] == sorted(p.answered for p in surveys)


async def test_survey_events_are_byte_identical_for_the_same_seed(tmp_path: Path) -> None:
    async with OpenAITestServer(latency=0.01) as srv:
        for name in ("a", "b"):
            engine = _engine(tmp_path, srv.base_url, count=12, concurrency=4, name=name)
            assert (await engine.run()).status == "completed"
    first = (tmp_path / "a" / "events.jsonl").read_bytes()
    assert first == (tmp_path / "b" / "events.jsonl").read_bytes()
    assert first.count(b'"type": "survey_answer"') == 12
    assert (tmp_path / "a" / "surveys" / "midday.jsonl").read_bytes() == (
        tmp_path / "b" / "surveys" / "midday.jsonl"
    ).read_bytes()


@pytest.mark.slow
async def test_each_interview_answer_has_its_own_timeout(tmp_path: Path) -> None:
    # Every answer takes 1.5 s; the step timeout is 1 s: each agent times out on its own
    # clock, so the whole interview ends after about one timeout, not one per agent.
    arrived: list[float] = []

    async def slow(request: ChatRequest) -> str:
        arrived.append(time.monotonic())
        await asyncio.sleep(1.5)
        return "too late"

    async with OpenAITestServer(answer=slow) as srv:
        engine = _engine(
            tmp_path, srv.base_url, count=6, concurrency=6, kind="interview", step_timeout=1
        )
        summary = await engine.run()
        asked = srv.requests
    assert summary.status == "completed" and asked == len(arrived) == 6
    # Every question was asked before the first answer's step could time out: one timeout
    # after another would ask each only once the one before it gave up, 1 s later.
    spread = max(arrived) - min(arrived)
    assert spread < 1.0, f"the questions were asked over {spread:.1f} s, one after another"
    rows = (tmp_path / "run" / "surveys" / "midday.jsonl").read_text().splitlines()
    answers = [json.loads(r) for r in rows]
    assert len(answers) == 6
    for a in answers:  # no stand-in text as an answer: the status and the reason instead
        assert (a["answer"], a["status"]) == ("", "error")
        assert a["reason"] == "step timed out after 1s"
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert events.count('"type": "interview_answer"') == 6


class _BlindExecutor(LocalExecutor):
    """Hosts that cannot say how far a survey is (as a Ray host that just died)."""

    async def answered(self) -> int:
        raise RuntimeError("host gone")


@pytest.mark.slow
async def test_progress_that_cannot_be_read_never_fails_the_survey(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "SURVEY_PROGRESS_EVERY", 0.05)
    seen: list[Progress] = []
    async with OpenAITestServer(latency=0.3) as srv:
        engine = _engine(
            tmp_path,
            srv.base_url,
            count=4,
            concurrency=4,
            progress=seen.append,
            executor=_BlindExecutor(),
        )
        summary = await engine.run()
    assert summary.status == "completed"
    assert [(p.survey, p.answered, p.asked) for p in seen] == [("survey midday", 4, 4)]


@pytest.mark.slow
async def test_progress_reports_answers_while_they_come_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "SURVEY_PROGRESS_EVERY", 0.05)
    seen: list[Progress] = []
    async with OpenAITestServer(latency=0.2) as srv:
        engine = _engine(tmp_path, srv.base_url, count=8, concurrency=2, progress=seen.append)
        assert (await engine.run()).status == "completed"
    counts = [p.answered for p in seen]
    assert counts[-1] == 8 and len(counts) > 2  # reports between the first and the last
    assert counts == sorted(counts) and all(p.asked == 8 for p in seen)
