"""Typed answer forms (``agentsim.instruments``): the schema a model is asked for, reading an
answer's text (lenient about the wrapping, strict about the value), the offline model's
values, and the request a served model gets (``ANSWER_FORMAT``: the OpenAI body, the
record/replay key, what a ``FunctionModel`` sees)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentsim.instruments import Instrument, InstrumentError, instance_of, instrument_of
from agentsim.llm.base import ANSWER_FORMAT
from agentsim.llm.cache import CachedModel
from agentsim.llm.openai import OpenAIWire
from agentsim.llm.scripted import ScriptedModel
from agentsim.testing import FunctionModel, in_turn, scripted_answer
from agentsim.testing.function_model import ChatRequest

LIKERT = instrument_of("likert", [1, 5])
CHOICE = instrument_of("choice", ["yes", "no", "not sure"])
NUMBER = instrument_of("number", {"min": 0, "max": 40})
JSON = instrument_of(
    "json",
    {
        "type": "object",
        "properties": {"reason": {"type": "string"}, "score": {"type": "integer"}},
        "required": ["reason", "score"],
    },
)


@pytest.mark.parametrize(
    ("form", "text", "value"),
    [
        (LIKERT, '{"answer": 4}', 4),
        (LIKERT, '```json\n{"answer": 2}\n```', 2),
        (LIKERT, 'Sure. {"answer": 5} That is all.', 5),
        (LIKERT, "3", 3),
        (LIKERT, "3.", 3),
        (LIKERT, '{"answer": 4.0}', 4),
        (CHOICE, '{"answer": "Not Sure"}', "not sure"),
        (CHOICE, "yes", "yes"),
        (CHOICE, "**No**", "no"),
        (NUMBER, '{"answer": 12.5}', 12.5),
        (NUMBER, "7", 7.0),
        (JSON, '{"reason": "shade", "score": 2}', {"reason": "shade", "score": 2}),
    ],
)
def test_an_answer_is_read_from_its_text(form: Instrument, text: str, value: Any) -> None:
    reading = form.read(text)
    assert reading.ok and reading.reason is None
    assert reading.value == value and type(reading.value) is type(value)


@pytest.mark.parametrize(
    ("form", "text", "reason"),
    [
        (LIKERT, "I would say four", "likert: the answer is not JSON"),
        (LIKERT, '{"score": 4}', 'likert: the JSON object has no "answer" key'),
        (LIKERT, '{"answer": 6}', "likert: 6 is greater than the maximum of 5"),
        (LIKERT, '{"answer": 2.5}', "likert: 2.5 is not of type 'integer'"),
        (LIKERT, '{"answer": true}', "likert: True is not of type 'integer'"),
        (CHOICE, '{"answer": "maybe"}', "choice: 'maybe' is not one of"),
        (NUMBER, '{"answer": -1}', "number: -1 is less than the minimum of 0"),
        (NUMBER, "nan", "number: the answer is not JSON"),
        # JSON has no NaN or Infinity (Python's reader takes them; NaN passes every bound).
        (NUMBER, '{"answer": NaN}', "number: the answer is not JSON"),
        (NUMBER, '```json\n{"answer": Infinity}\n```', "number: the answer is not JSON"),
        (NUMBER, 'My answer: {"answer": -Infinity}', "number: the answer is not JSON"),
        (JSON, '{"reason": "shade", "score": NaN}', "json: the answer is not JSON"),
        (JSON, '{"reason": "shade"}', "json: 'score' is a required property"),
        (JSON, '{"reason": "shade", "score": "high"}', "json: 'high' is not of type 'integer'"),
        (JSON, "", "json: the answer is not JSON"),
    ],
)
def test_an_unfit_answer_says_why(form: Instrument, text: str, reason: str) -> None:
    reading = form.read(text)
    assert not reading.ok and reading.value is None
    assert reading.reason is not None and reading.reason.startswith(reason), reading.reason


def test_the_response_schema_wraps_built_in_forms_and_keeps_a_json_schema() -> None:
    assert NUMBER.response_format("my survey.v2") == {
        "name": "my_survey_v2",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "number", "minimum": 0, "maximum": 40}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    }
    assert JSON.response_format()["strict"] is False
    assert JSON.response_format()["schema"] == JSON.schema
    assert CHOICE.describe() == (
        'Answer with JSON only, in the form {"answer": VALUE}, where VALUE is exactly one of '
        '"yes", "no", "not sure".'
    )
    assert instrument_of("number", {"max": 3}).describe().endswith("a number of at most 3.")
    assert instrument_of("number", {"min": 3}).describe().endswith("a number of at least 3.")
    assert instrument_of("number", None).describe().endswith("VALUE is a number.")
    assert JSON.describe().startswith("Answer with JSON only: one value that follows")
    assert LIKERT.render(3) == '{"answer": 3}' and JSON.render({"a": 1}) == '{"a": 1}'


def test_an_unknown_form_and_a_schema_that_is_not_json_are_refused() -> None:
    with pytest.raises(InstrumentError, match="unknown answer form 'scale'") as info:
        instrument_of("scale", [1, 5])
    assert info.value.where == "scale" and "likert" in info.value.fix
    with pytest.raises(InstrumentError, match="the schema is not JSON"):
        instrument_of("json", {"type": "number", "maximum": float("inf")})


@pytest.mark.parametrize(
    "schema",
    [
        LIKERT.response_schema,
        CHOICE.response_schema,
        NUMBER.response_schema,
        instrument_of("number", {"max": -5}).response_schema,
        instrument_of("number", {"min": 1000}).response_schema,
        JSON.schema,
        {"type": "array", "items": {"type": "boolean"}, "minItems": 3},
        {"type": ["null", "string"], "minLength": 12},
        {"anyOf": [{"const": "x"}, {"type": "number"}]},
        {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 2},
        {"type": "number", "exclusiveMinimum": 0.5},
        {"properties": {"n": {"type": "null"}}},
    ],
)
def test_the_offline_model_draws_valid_values(schema: dict[str, Any]) -> None:
    for i in range(20):
        jsonschema.validate(instance_of(schema, random.Random(i)), schema)


async def test_the_openai_body_the_cache_key_and_a_function_model_see_the_form(
    tmp_path: Path,
) -> None:
    wire = OpenAIWire(model="m", base_url="http://127.0.0.1:9/v1")
    off = OpenAIWire(model="m", base_url="http://127.0.0.1:9/v1", response_format=False)
    messages = [{"role": "user", "content": "hi"}]
    assert "response_format" not in wire.build_request(messages)
    seen: list[ChatRequest] = []

    def fn(request: ChatRequest) -> str:
        seen.append(request)
        return '{"answer": 2}'

    cache = CachedModel(FunctionModel(fn), path=tmp_path / "c.sqlite", mode="record")
    plain = cache.key_for(messages)
    token = ANSWER_FORMAT.set(LIKERT.response_format())
    try:
        body = wire.build_request(messages)
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": LIKERT.response_format(),
        }
        assert "response_format" not in off.build_request(messages)
        assert off._config()["response_format"] is False
        assert cache.key_for(messages) != plain
        await cache.complete(messages)
        scripted = await ScriptedModel().complete(messages, seed=3)
    finally:
        ANSWER_FORMAT.reset(token)
    assert seen[0].answer_format == LIKERT.response_format()
    assert LIKERT.read(scripted.content or "").ok
    # Outside a typed answer nothing changes: the same key as before.
    assert cache.key_for(messages) == plain
    await cache.complete(messages)
    assert seen[1].response_format is None and seen[1].answer_format is None


async def test_scripted_answer_reads_the_form_from_the_request() -> None:
    request = ChatRequest(
        messages=({"role": "user", "content": "<question>\nHow?\n</question>"},),
        seed=9,
        response_format={"type": "json_schema", "json_schema": CHOICE.response_format()},
    )
    first = await scripted_answer(request)
    again = await scripted_answer(request)
    assert first.content == again.content
    reading = CHOICE.read(first.content or "")
    assert reading.ok and reading.value in ("yes", "no", "not sure")
    assert ANSWER_FORMAT.get() is None
    odd = ChatRequest(messages=(), response_format={"type": "json_object"})
    assert odd.answer_format is None
    assert json.loads(json.dumps(request.answer_format)) == CHOICE.response_format()


async def test_in_turn_gives_its_replies_in_order_then_the_fallback() -> None:
    model = FunctionModel(in_turn("first", '{"answer": 2}', then=lambda r: "after"))
    messages = [{"role": "user", "content": "hi"}]
    texts = [(await model.complete(messages)).content for _ in range(4)]
    assert texts == ["first", '{"answer": 2}', "after", "after"]
