"""``model.tool_calls`` and ``model.extra_params`` from the experiment file to the wire, the
reasoning fields of an answer, and recovered calls counted per model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.errors import ConfigError
from agentsim.llm.base import Completion, ToolCall
from agentsim.llm.cache import completion_from_dict, completion_to_dict
from agentsim.llm.models import build_model
from agentsim.llm.openai import OpenAIChatModel, parse_completion
from agentsim.llm.stats import ModelStats
from agentsim.testing import ChatRequest, calls_as_text, echo_answer, tool_call
from agentsim.testing.openai_server import OpenAITestServer

_MODEL = """
name: settings
ticks: 1
agents: [{{group: g, count: 1}}]
model: {{backend: openai, model: m, base_url: "http://127.0.0.1:9/v1", {extra}}}
"""


def _model(tmp: Path, extra: str) -> OpenAIChatModel:
    cfg = parse_experiment(_MODEL.format(extra=extra), base_dir=tmp)
    model = build_model(cfg.model, run_dir=tmp)
    assert isinstance(model, OpenAIChatModel)
    return model


def test_tool_calls_text_sends_no_tools_and_extra_params_reach_the_body(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "finish", "parameters": {}}}]
    messages = [{"role": "user", "content": "hi"}]
    text = _model(
        tmp_path,
        "tool_calls: text, extra_params: {chat_template_kwargs: {enable_thinking: false}}",
    )
    body = text.build_request(messages, tools, seed=1)
    assert "tools" not in body and "tool_choice" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    auto = _model(tmp_path, "tool_calls: auto")
    assert auto.build_request(messages, tools, seed=1)["tools"] == tools
    assert "chat_template_kwargs" not in auto.build_request(messages, tools, seed=1)


def test_a_bad_tool_calls_value_and_reserved_extra_params_are_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"model\.tool_calls: 'json' is not allowed; must be one of native, text, auto",
    ):
        parse_experiment(_MODEL.format(extra="tool_calls: json"), base_dir=tmp_path)
    with pytest.raises(
        ConfigError, match=r"model\.extra_params: sets seed, tools, which the model sets itself"
    ):
        _model(tmp_path, "extra_params: {tools: [], seed: 2, top_p: 0.9}")


def test_reasoning_fields_of_an_answer() -> None:
    def answer(field: str, value: object) -> Completion:
        message = {"role": "assistant", "content": "ok", field: value}
        return parse_completion({"choices": [{"message": message}]})

    assert answer("reasoning_content", "thought").reasoning == "thought"
    assert answer("reasoning", "thought").reasoning == "thought"
    assert answer("reasoning", "  ").reasoning is None
    assert answer("reasoning", {"steps": 1}).reasoning is None
    assert answer("other", "thought").reasoning is None
    assert answer("reasoning_content", "thought").message == {"role": "assistant", "content": "ok"}


def test_reasoning_survives_record_and_replay() -> None:
    c = Completion(content="a", reasoning="because")
    data = completion_to_dict(c)
    assert data["reasoning"] == "because" and completion_from_dict(data) == c
    assert "reasoning" not in completion_to_dict(Completion(content="a"))
    with pytest.raises(Exception, match="reasoning is not a string"):
        completion_from_dict({**data, "reasoning": 3})


def test_recovered_calls_merge_between_processes() -> None:
    a, b = ModelStats(), ModelStats()
    a.record_recovered(2)
    b.merge(a.snapshot())
    b.merge({k: v for k, v in a.snapshot().items() if k != "recovered_calls"})  # older host
    assert b.snapshot()["recovered_calls"] == 2


_GROUPS = """
name: per-model
seed: 1
clock: {{start: "2026-03-02T08:00:00", tick: 30m}}
ticks: 1
agents:
  - {{group: natives, count: 2, profile: {{template: generic}}, model: native}}
  - {{group: texts, count: 2, profile: {{template: generic}}}}
model: {{backend: openai, model: m, base_url: {url}, tool_calls: auto}}
models:
  native: {{backend: openai, model: m, base_url: {url}, tool_calls: native}}
output: {{dir: {out}, formats: [jsonl]}}
"""


def _writes_finish(request: ChatRequest) -> ToolCall | str:
    if request.calls:
        return echo_answer(request)
    return tool_call("finish", action="wrote a call")


@pytest.mark.slow
def test_recovered_calls_are_counted_per_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=calls_as_text(_writes_finish, "bare")) as srv:
        cfg = tmp_path / "exp.yaml"
        cfg.write_text(_GROUPS.format(url=srv.base_url, out=tmp_path / "ws"))
        code = main(["run", str(cfg), "--out", str(tmp_path / "run"), "--no-preflight"])
    out = capsys.readouterr().out
    assert code == 0, out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["recovered_calls"] == 2
    by_model = metrics["model"]["by_model"]
    assert by_model["default"]["recovered_calls"] == 2
    assert by_model["native"]["recovered_calls"] == 0
    assert "  tool calls written as text and run: 2 (by model: default 2)\n" in out
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    actions = {e["agent_id"]: e["action"] for e in events if e["type"] == "agent_action"}
    natives = sorted(a for a in actions if a.startswith("natives"))
    texts = sorted(a for a in actions if a.startswith("texts"))
    assert {actions[a] for a in texts} == {"wrote a call"}
    assert all(actions[a].startswith('I will do this now.\n{"name": "finish"') for a in natives)
