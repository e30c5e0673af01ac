"""Typed survey instruments end to end: ``answer:`` forms are checked when the experiment
is read; the OpenAI backend sends each form as ``response_format`` (the test server sees
it); an answer that does not fit is asked again once and then stored ``invalid``, never as
data (rows, events, Parquet, metrics, the summary line, ``open_run``, the report and the
viewer); the offline model answers typed forms with valid values, the same for a seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.errors import ConfigError
from agentsim.inspect import open_run
from agentsim.inspect.report import write_report
from agentsim.inspect.run import left_out
from agentsim.inspect.typed import typed_surveys
from agentsim.testing import ChatRequest
from agentsim.testing.openai_server import OpenAITestServer
from agentsim.view._api import run_summary, survey_answers
from tests.unit.helpers import read_events

LIKERT_QUESTION = "How much do you support the new park?"
CHOICE_QUESTION = "Would you vote for the park?"

_SERVED = """
name: typed
seed: 5
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
workflow:
  - survey: {{name: support, question: "{likert}", answer: {{likert: [1, 5]}}}}
  - survey: {{name: vote, question: "{choice}", answer: {{choice: ["yes", "no"]}}}}
agents:
  - group: calm
    count: 3
    profile: {{template: generic, fields: {{mood: calm}}}}
    skills: {{default: [], disabled: [daily-guidance]}}
  - group: odd
    count: 1
    profile: {{template: generic, fields: {{mood: contrary}}}}
    skills: {{default: [], disabled: [daily-guidance]}}
model:
  backend: openai
  model: test-model
  base_url: {base_url}
  max_concurrency: 1
  max_retries: 0
  timeout: 10
  response_format: {response_format}
output: {{dir: ws, formats: [jsonl]}}
"""


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _rows(run: Path, name: str) -> list[dict[str, Any]]:
    text = (run / "surveys" / f"{name}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


# -- the experiment file ------------------------------------------------------------------

_BASE = """
name: forms
workflow:
  - survey: {{question: "How?", answer: {form}}}
agents:
  - {{group: people, count: 2}}
"""


@pytest.mark.parametrize(
    ("form", "where", "message"),
    [
        ("{likert: [1.5, 5]}", "answer.likert", "the scale's ends must be whole numbers"),
        ("{likert: [5, 1]}", "answer.likert", "low end 5 is not below its high end 1"),
        ("{likert: [3, 3]}", "answer.likert", "low end 3 is not below its high end 3"),
        ("{likert: 5}", "answer.likert", "5 is not a scale"),
        ("{choice: []}", "answer.choice", "the list of options is empty"),
        ("{choice: [a, a]}", "answer.choice", "options repeat"),
        ("{choice: [yes, no]}", "answer.choice", "option True is a boolean, not text (YAML"),
        ("{choice: [a, 3]}", "answer.choice", "every option must be a non-empty string"),
        ("{number: {min: 10, max: 1}}", "answer.number", "min 10 is above max 1"),
        ("{number: {min: ten}}", "answer.number.min", "'ten' is not a number"),
        ("{number: {low: 1}}", "answer.number", "is not a number's bounds"),
        ("{json: {type: objekt}}", "answer.json", "not a valid JSON Schema at type"),
        ("{json: {}}", "answer.json", "is not a JSON schema object"),
        ("{scale: [1, 5]}", "answer", "is not an answer form"),
        ("{likert: [1, 5], choice: [a, b]}", "answer", "is not an answer form"),
    ],
)
def test_a_bad_answer_form_names_its_field_and_the_problem(
    form: str, where: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_experiment(_BASE.format(form=form))
    text = str(info.value)
    assert text.startswith(f"workflow.0.survey.{where}: "), text
    assert message in text


def test_a_bad_answer_form_stops_agentsim_run_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(_BASE.format(form="{likert: [5, 1]}"))
    code = main(["run", str(exp), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert "workflow.0.survey.answer.likert: the scale's low end 5 is not below" in err
    assert not (tmp_path / "run").exists()


def test_good_forms_parse_and_free_text_steps_dump_as_before() -> None:
    form = "{number: {max: 40}}"
    config = parse_experiment(_BASE.format(form=form))
    (step,) = config.steps()
    assert step.answer is not None and step.answer.kind == "number"  # type: ignore[union-attr]
    assert config.resolved_dict()["workflow"][0]["survey"]["answer"] == {"number": {"max": 40}}
    free = parse_experiment(_BASE.replace(", answer: {form}", "").format())
    assert "answer" not in free.resolved_dict()["workflow"][0]["survey"]


# -- a served model: constrained, validated, retried, invalid -----------------------------


def _answer(request: ChatRequest) -> str:
    """With the form sent or not, the same answers (``model.response_format: false``
    sends none: the question block says the form). Calm agents first answer in words (not
    the form), then right on the retry; the contrary one never answers in the form."""
    if len(request.messages) < 2:  # the pre-flight
        return "ok"
    contrary = "contrary" in request.agent
    retried = "That answer cannot be used" in request.last_user
    if LIKERT_QUESTION in request.messages[1]["content"]:
        if contrary:
            return "Somewhat, I guess."
        return '```json\n{"answer": 4}\n```' if retried else "I would say four"
    if contrary:
        return '{"answer": "maybe"}'
    return '{"answer": "Yes"}'


@pytest.mark.slow
def test_a_served_model_gets_response_format_and_an_unfit_answer_is_retried_then_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = OpenAITestServer(answer=_answer)
    with server:
        exp = tmp_path / "exp.yaml"
        exp.write_text(
            _SERVED.format(
                likert=LIKERT_QUESTION,
                choice=CHOICE_QUESTION,
                base_url=server.base_url,
                response_format="true",
            )
        )
        run = tmp_path / "run"
        code = main(["run", str(exp), "--out", str(run)])
        bodies = [b for b in server.chat_bodies() if "response_format" in b]
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert f"completed: {run}  ticks=0 agents=4" in out
    assert "answers 8 (echo 0: 0%; invalid 2: 25%)" in out
    assert "survey support: 1 of 4 answers did not fit the likert form after a retry" in err
    assert "survey vote: 1 of 4 answers did not fit the choice form after a retry" in err

    # The request: the form as OpenAI's json_schema response_format, and no tools.
    likert = [b for b in bodies if LIKERT_QUESTION in b["messages"][1]["content"]]
    assert len(likert) == 8  # each of the 4 agents answered twice (calm: retry; odd: twice)
    assert likert[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "likert_answer",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"answer": {"type": "integer", "minimum": 1, "maximum": 5}},
                "required": ["answer"],
                "additionalProperties": False,
            },
        },
    }
    assert all("tools" not in b for b in bodies)
    vote = [b for b in bodies if CHOICE_QUESTION in b["messages"][1]["content"]]
    assert len(vote) == 5  # calm agents fit at once; the contrary one was asked twice
    schema = vote[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["answer"] == {"type": "string", "enum": ["yes", "no"]}
    retry = next(b for b in likert if len(b["messages"]) == 4)
    assert retry["messages"][2] == {"role": "assistant", "content": "I would say four"}
    assert retry["messages"][3]["content"].startswith(
        "That answer cannot be used (likert: the answer is not JSON). Answer with JSON only"
    )

    # The rows: typed values, the group, and invalid ones with their reason and no value.
    rows = _rows(run, "support")
    assert [(r["group"], r["status"], r["value"]) for r in rows] == [
        ("calm", "ok", 4),
        ("calm", "ok", 4),
        ("calm", "ok", 4),
        ("odd", "invalid", None),
    ]
    assert all(r["instrument"] == "likert" for r in rows)
    assert rows[3]["reason"] == "likert: the answer is not JSON"
    assert rows[3]["answer"] == "Somewhat, I guess."
    votes = _rows(run, "vote")
    assert [r["value"] for r in votes] == ["yes", "yes", "yes", None]
    assert votes[3]["reason"] == "choice: 'maybe' is not one of ['yes', 'no']"

    # The events carry instrument and value; open_run leaves invalid answers out.
    events = [e for e in read_events(run) if e["type"] == "survey_answer"]
    assert [(e["name"], e["status"], e["value"]) for e in events[:4]] == [
        ("support", "ok", 4),
        ("support", "ok", 4),
        ("support", "ok", 4),
        ("support", "invalid", None),
    ]
    assert {e["instrument"] for e in events} == {"likert", "choice"}
    table = open_run(run).events(type="survey_answer")
    assert table.num_rows == 6 and set(table["status"].to_pylist()) == {"ok"}
    assert left_out(table) == 2
    # Values of several forms in one column: their JSON text.
    assert sorted(table["value"].to_pylist()) == ['"yes"'] * 3 + ["4"] * 3

    # The Parquet table: value typed, null where the answer is not data.
    support = pq.read_table(run / "surveys" / "support.parquet")
    assert support.schema.field("value").type == pa.int64()
    assert support["value"].to_pylist() == [4, 4, 4, None]
    assert support["status"].to_pylist() == ["ok", "ok", "ok", "invalid"]
    assert pq.read_table(run / "surveys" / "vote.parquet").schema.field("value").type == (
        pa.string()
    )

    # Metrics, the report's tables and markers, the viewer.
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["answers"] == 8 and metrics["invalid"] == 2
    assert metrics["by_group"]["odd"]["invalid"] == 2
    assert metrics["by_group"]["calm"]["invalid"] == 0
    report = write_report(run)
    summary = report.summary.read_text()
    assert "| all | 3 | 4 | 0 | 1: 0, 2: 0, 3: 0, 4: 3, 5: 0 | 1 | 0 |" in summary
    assert "| odd | 0 | - | - | 1: 0, 2: 0, 3: 0, 4: 0, 5: 0 | 1 | 0 |" in summary
    assert "| all | 3 | 3 (100%) | 0 (0%) | 1 | 0 |" in summary
    assert "survey support (3 answers, 1 invalid)" in summary
    view = run_summary(open_run(run))
    assert [(s["answers"], s["invalid"], s["not_ok"]) for s in view["surveys"]] == [
        (3, 1, 0),
        (3, 1, 0),
    ]
    page = survey_answers(open_run(run), "support", offset=0, limit=10)
    assert [a["status"] for a in page["answers"]] == ["ok", "ok", "ok", "invalid"]
    assert page["answers"][0]["value"] == 4 and "value" not in page["answers"][3]
    code = main(["inspect", str(run)])
    out = capsys.readouterr().out
    assert "invalid 2: 25%" in out


@pytest.mark.slow
def test_model_response_format_false_sends_no_schema_but_still_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = OpenAITestServer(answer=_answer)
    with server:
        exp = tmp_path / "exp.yaml"
        exp.write_text(
            _SERVED.format(
                likert=LIKERT_QUESTION,
                choice=CHOICE_QUESTION,
                base_url=server.base_url,
                response_format="false",
            )
        )
        run = tmp_path / "run"
        code = main(["run", str(exp), "--out", str(run)])
        bodies = [b for b in server.chat_bodies() if len(b["messages"]) > 1]  # no pre-flight
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert len(bodies) == 13 and all("response_format" not in b for b in bodies)
    # The form is in the question all the same, and the answers are checked.
    assert (
        'in the form {"answer": VALUE}, where VALUE is a whole number from 1 to 5.'
        in (bodies[0]["messages"][1]["content"])
    )
    assert [r["status"] for r in _rows(run, "support")] == ["ok"] * 3 + ["invalid"]


# -- the offline model --------------------------------------------------------------------

_OFFLINE = """
name: offline
seed: {seed}
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
workflow:
  - run: {{ticks: 1}}
  - survey: {{name: support, question: "Support?", answer: {{likert: [1, 7]}}}}
  - survey: {{name: vote, question: "Vote?", answer: {{choice: ["yes", "no", "unsure"]}}}}
  - survey: {{name: hours, question: "Hours?", answer: {{number: {{min: 0, max: 40}}}}}}
  - interview:
      name: why
      question: "Why?"
      agents: [people-00001]
      answer:
        json:
          type: object
          properties:
            reason: {{type: string, minLength: 3}}
            score: {{type: integer, minimum: 0, maximum: 3}}
          required: [reason, score]
  - survey: {{name: free, question: "How is your day going?"}}
agents:
  - group: people
    count: 5
    profile: {{template: generic}}
  - group: others
    count: 3
    profile: {{template: worker}}
output: {{dir: ws}}
"""


def _offline(tmp_path: Path, name: str, seed: int) -> Path:
    exp = tmp_path / f"{name}.yaml"
    exp.write_text(_OFFLINE.format(seed=seed))
    run = tmp_path / name
    assert main(["run", str(exp), "--out", str(run)]) == 0
    return run


@pytest.mark.slow
def test_the_scripted_model_answers_typed_forms_validly_and_the_same_for_a_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _offline(tmp_path, "a", 7)
    again = _offline(tmp_path, "b", 7)
    other = _offline(tmp_path, "c", 8)
    capsys.readouterr()
    for name in ("support", "vote", "hours", "why", "free"):
        assert (first / "surveys" / f"{name}.jsonl").read_bytes() == (
            again / "surveys" / f"{name}.jsonl"
        ).read_bytes()
    assert (first / "events.jsonl").read_bytes() == (again / "events.jsonl").read_bytes()
    assert _rows(first, "support") != _rows(other, "support")

    support = _rows(first, "support")
    assert all(r["status"] == "ok" and r["instrument"] == "likert" for r in support)
    assert all(isinstance(r["value"], int) and 1 <= r["value"] <= 7 for r in support)
    assert {r["value"] for r in _rows(first, "vote")} <= {"yes", "no", "unsure"}
    hours = _rows(first, "hours")
    assert all(isinstance(r["value"], float) and 0 <= r["value"] <= 40 for r in hours)
    (why,) = _rows(first, "why")
    assert why["status"] == "ok" and set(why["value"]) == {"reason", "score"}
    assert len(why["value"]["reason"]) >= 3 and 0 <= why["value"]["score"] <= 3
    # A free-text survey keeps its rows' fields (and gains the group).
    free = _rows(first, "free")
    assert all("instrument" not in r and "value" not in r for r in free)
    assert {r["group"] for r in free} == {"people", "others"}

    tables = {n: pq.read_table(first / "surveys" / f"{n}.parquet") for n in ("hours", "why")}
    assert tables["hours"].schema.field("value").type == pa.float64()
    assert tables["hours"]["value"].to_pylist() == [r["value"] for r in hours]
    assert json.loads(tables["why"]["value"][0].as_py()) == why["value"]
    assert pq.read_table(first / "surveys" / "free.parquet")["value"].null_count == 8

    found = {s.name: s for s in typed_surveys(open_run(first))}
    assert set(found) == {"support", "vote", "hours", "why"}
    (everyone, others, people) = found["support"].tables()
    assert (everyone.group, others.group, people.group) == ("all", "others", "people")
    values = [r["value"] for r in support]
    assert everyone.n == 8 and everyone.mean == pytest.approx(sum(values) / 8)
    assert sum(everyone.counts.values()) == 8 and list(everyone.counts) == [
        str(i) for i in range(1, 8)
    ]
    (hours_all, *_) = found["hours"].tables()
    low, q1, median, q3, high = hours_all.quantiles
    assert low == min(r["value"] for r in hours) and high == max(r["value"] for r in hours)
    assert low <= q1 <= median <= q3 <= high

    summary = write_report(first).summary.read_text()
    assert "### survey hours (number, before tick 1)" in summary
    assert f"| all | 8 | {hours_all.mean:.3g} | {hours_all.sd:.3g} | {low:.4g} / " in summary
    assert "### interview why (json, before tick 1)" in summary
    assert "| people | 1 | 0 | 0 |" in summary
    assert "### survey free" not in summary


@pytest.mark.slow
def test_a_typed_answer_whose_model_fails_is_degraded_not_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def answer(request: ChatRequest) -> str:
        if request.answer_format is not None and "contrary" in request.agent:
            raise RuntimeError("the server fails (the test server answers HTTP 500)")
        return '{"answer": 2}' if request.answer_format is not None else "ok"

    server = OpenAITestServer(answer=answer)
    with server:
        exp = tmp_path / "exp.yaml"
        exp.write_text(
            _SERVED.format(
                likert=LIKERT_QUESTION,
                choice=CHOICE_QUESTION,
                base_url=server.base_url,
                response_format="true",
            ).replace("max_retries: 0", "max_retries: 0\n  max_degraded_share: 1.0")
        )
        run = tmp_path / "run"
        code = main(["run", str(exp), "--out", str(run)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    rows = _rows(run, "support")
    assert [(r["status"], r["value"]) for r in rows] == [("ok", 2)] * 3 + [("degraded", None)]
    assert "HTTP 500" in rows[3]["reason"]
    assert "survey support: 1 of 4 answers are not the model's (status degraded" in err
    (table, *_) = next(s for s in typed_surveys(open_run(run)) if s.name == "support").tables()
    assert (table.n, table.invalid, table.not_ok, table.mean) == (3, 0, 1, 2.0)
