"""Survey and interview answers carry their status: a model server that stops in the middle
of a survey leaves rows that say ``degraded`` with the reason, never a stand-in text counted
as an answer; ``open_run(...).events(type="survey_answer")``, the report and the viewer
count only the model's answers and say how many they left out."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.inspect import open_run
from agentsim.inspect.report import collect_report_data
from agentsim.inspect.run import left_out
from agentsim.testing import ChatRequest
from agentsim.testing.openai_server import OpenAITestServer
from agentsim.view._api import run_summary, survey_answers
from tests.unit.helpers import read_events

QUESTION = "How do you like the new park?"

_YAML = """
name: dies
seed: 3
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
workflow:
  - run: {{ticks: 1}}
  - survey: {{name: park, question: "{question}", agents: all}}
agents:
  - group: people
    count: 6
    profile: {{template: generic}}
    skills: {{default: [], disabled: [daily-guidance]}}
model:
  backend: openai
  model: test-model
  base_url: {base_url}
  max_concurrency: 1
  max_retries: 0
  timeout: 5
  max_degraded_share: 1.0
# The server answers in plain text: steps end ``answered``, which this test does not study.
agent: {{max_unfinished_share: 1.0}}
output: {{dir: ws, formats: [jsonl]}}
"""


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.mark.slow
def test_a_server_stopped_mid_survey_leaves_no_degraded_row_counted_as_an_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answered = []
    lock = threading.Lock()
    server = OpenAITestServer()

    async def answer(request: ChatRequest) -> str:
        if QUESTION not in request.last_user:
            return "I walk to the park."
        with lock:
            answered.append(1)
            n = len(answered)
        if n == 3:  # the third survey answer is the server's last one
            server.request_stop()
            # uvicorn sees the stop within 0.1 s: it closes its socket, and this
            # connection after this answer.
            await asyncio.sleep(0.5)
        return f"I like it ({n})."

    server.answer = answer
    with server:
        exp = tmp_path / "exp.yaml"
        exp.write_text(_YAML.format(question=QUESTION, base_url=server.base_url))
        run = tmp_path / "run"
        code = main(["run", str(exp), "--out", str(run)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert f"completed: {run}  ticks=1 agents=6" in out
    assert "survey park: 3 of 6 answers are not the model's (status degraded or error" in err

    rows = [json.loads(line) for line in (run / "surveys" / "park.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows].count("ok") == 3
    ok = [r for r in rows if r["status"] == "ok"]
    assert sorted(r["answer"] for r in ok) == [f"I like it ({i})." for i in (1, 2, 3)]
    bad = [r for r in rows if r["status"] != "ok"]
    assert len(bad) == 3
    for r in bad:  # no stand-in text as an answer, and the reason given
        assert r["status"] == "degraded" and r["answer"] == ""
        assert "kept its plan" not in json.dumps(r) and r["reason"]

    events = [e for e in read_events(run) if e["type"] == "survey_answer"]
    assert sorted(e["status"] for e in events) == ["degraded"] * 3 + ["ok"] * 3
    assert all(("reason" in e) == (e["status"] != "ok") for e in events)

    table = open_run(run).events(type="survey_answer")
    assert table.num_rows == 3 and set(table["status"].to_pylist()) == {"ok"}
    assert left_out(table) == 3
    everything = open_run(run).events(type="survey_answer", all_answers=True)
    assert everything.num_rows == 6 and left_out(everything) == 0
    wide = open_run(run).events(types=["survey_answer", "agent_action"])
    assert wide["type"].to_pylist().count("survey_answer") == 3 and left_out(wide) == 3

    report = collect_report_data(read_events(run))
    (marker,) = [m for m in report.markers if m.kind == "survey"]
    assert marker.label == "survey park (3 answers, 3 left out: not ok)"
    assert "3 rows left out (status degraded or error" in marker.detail

    view = run_summary(open_run(run))
    assert view["surveys"][0]["answers"] == 3 and view["surveys"][0]["not_ok"] == 3
    page = survey_answers(open_run(run), "park", offset=0, limit=10)
    assert sorted(a["status"] for a in page["answers"]) == ["degraded"] * 3 + ["ok"] * 3

    # The server is gone: an interview of that run says its answer is not the model's.
    code = main(["interview", str(run), "--agent", "people-00000", "How was your day?"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out.strip() == "(no answer)"
    assert "status: degraded: the answer above is not the model's" in err
    code = main(["interview", str(run), "--agent", "people-00000", "Still there?", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert code == 1 and res["status"] == "degraded" and res["answer"] == ""
    assert res["problems"]
