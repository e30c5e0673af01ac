"""Tool calls written as text, and reasoning in an answer: the pure parser."""

from __future__ import annotations

import json

import pytest

from agentsim.llm.textcalls import TextCalls, find_calls, split_thinking

NAMES = frozenset({"activate_skill", "execute_skill_script", "ask_env", "finish", "daily-guidance"})


def calls_of(found: TextCalls) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments)) for c in found.calls]


def test_a_json_fenced_block_with_prose_around_it() -> None:
    text = (
        "I should load the planner first.\n```json\n"
        '{"name": "activate_skill", "arguments": {"name": "daily-guidance"}}\n```\nThen I plan.'
    )
    found = find_calls(text, NAMES)
    assert calls_of(found) == [("activate_skill", {"name": "daily-guidance"})]
    assert found.rest == "I should load the planner first.\n\nThen I plan."
    assert found.problems == ()
    assert found.calls[0].id == "text_call_0"


def test_a_fence_without_language_and_parameters_for_arguments() -> None:
    text = '```\n{"name": "finish", "parameters": {"action": "walked home"}}\n```'
    found = find_calls(text, NAMES)
    assert calls_of(found) == [("finish", {"action": "walked home"})]
    assert found.rest == ""


def test_bare_json_is_a_call_when_it_names_an_offered_tool() -> None:
    found = find_calls('{"name": "finish", "arguments": {"action": "slept"}}', NAMES)
    assert calls_of(found) == [("finish", {"action": "slept"})]
    assert found.rest == ""


def test_bare_json_inside_prose() -> None:
    text = 'Okay. {"name": "ask_env", "arguments": {"module": "city", "action": "where"}} done'
    found = find_calls(text, NAMES)
    assert calls_of(found) == [("ask_env", {"module": "city", "action": "where"})]
    assert found.rest == "Okay.  done"


def test_qwen_hermes_tool_call_tags_several_calls() -> None:
    text = (
        '<tool_call>\n{"name": "activate_skill", "arguments": {"name": "daily-guidance"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "finish", "arguments": {"action": "planned"}}\n'
        "</tool_call>"
    )
    found = find_calls(text, NAMES)
    assert calls_of(found) == [
        ("activate_skill", {"name": "daily-guidance"}),
        ("finish", {"action": "planned"}),
    ]
    assert [c.id for c in found.calls] == ["text_call_0", "text_call_1"]
    assert found.rest == ""


def test_a_tool_call_tag_takes_any_name_the_tool_refuses_it_later() -> None:
    found = find_calls('<tool_call>{"name": "fly_to", "arguments": {"x": 1}}</tool_call>', NAMES)
    assert calls_of(found) == [("fly_to", {"x": 1})]


def test_llama_function_tags_closed_and_unclosed() -> None:
    closed = find_calls('<function=finish>{"action": "rested"}</function>', NAMES)
    assert calls_of(closed) == [("finish", {"action": "rested"})]
    unclosed = find_calls('Sure. <function=ask_env>{"module": "city", "action": "where"}', NAMES)
    assert calls_of(unclosed) == [("ask_env", {"module": "city", "action": "where"})]
    assert unclosed.rest == "Sure."


def test_function_tags_with_parameter_tags_inside_tool_call() -> None:
    text = (
        "<tool_call>\n<function=execute_skill_script>\n<parameter=name>daily-guidance"
        '</parameter>\n<parameter=args>["draft"]</parameter>\n</function>\n</tool_call>'
    )
    found = find_calls(text, NAMES)
    assert calls_of(found) == [
        ("execute_skill_script", {"name": "daily-guidance", "args": ["draft"]})
    ]
    assert found.rest == ""


def test_function_tag_with_no_arguments_and_with_unreadable_ones() -> None:
    assert calls_of(find_calls("<function=finish></function>", NAMES)) == [("finish", {})]
    bad = find_calls("<function=finish>walk home</function>", NAMES)
    assert bad.calls == ()
    assert bad.problems == ("could not read the arguments of <function=finish>walk home",)


def test_a_list_of_calls_and_the_openai_shape() -> None:
    text = json.dumps(
        [
            {
                "type": "function",
                "function": {"name": "activate_skill", "arguments": '{"name": "daily-guidance"}'},
            },
            {"name": "finish", "arguments": {"action": "x"}},
        ]
    )
    found = find_calls(text, NAMES)
    assert calls_of(found) == [
        ("activate_skill", {"name": "daily-guidance"}),
        ("finish", {"action": "x"}),
    ]
    wrapped = find_calls(json.dumps({"tool_calls": [{"name": "finish"}]}), NAMES)
    assert calls_of(wrapped) == [("finish", {})]
    # Mistral's marker is not left behind as prose.
    marked = find_calls('[TOOL_CALLS][{"name": "finish", "arguments": {"action": "y"}}]', NAMES)
    assert calls_of(marked) == [("finish", {"action": "y"})]
    assert marked.rest == ""


def test_a_skill_called_as_a_tool_is_recovered_with_its_arguments_as_written() -> None:
    found = find_calls('{"name": "daily-guidance", "arguments": ["draft"]}', NAMES)
    assert calls_of(found) == [("daily-guidance", ["draft"])]


def test_arguments_as_a_string_that_is_not_json_become_a_json_string() -> None:
    found = find_calls('{"name": "finish", "arguments": "walk home"}', NAMES)
    assert found.calls[0].arguments == '"walk home"'


@pytest.mark.parametrize(
    "text",
    [
        # Cut off by max_tokens in the middle of the call.
        '```json\n{"name": "finish", "arguments": {"action": "walked to the park',
        '<tool_call>\n{"name": "finish", "arguments": {"action": "walked to the park"',
        'Here: {"name": "finish", "arguments": {"action": "walked to the park',
        # Python-style quotes and a trailing comma.
        "```json\n{'name': 'finish', 'arguments': {'action': 'walked to the park',},}\n```",
    ],
)
def test_partial_or_malformed_json_is_repaired(text: str) -> None:
    found = find_calls(text, NAMES)
    assert calls_of(found) == [("finish", {"action": "walked to the park"})]
    assert found.problems == ()


def test_unreadable_calls_are_problems_not_prose() -> None:
    found = find_calls("<tool_call>finish now please</tool_call>", NAMES)
    assert found.calls == ()
    assert found.problems == (
        "could not read the call in <tool_call>finish now please</tool_call>",
    )
    # Names a tool, but is not a call's shape (an extra key).
    fence = find_calls('```json\n{"name": "finish", "arguments": {}, "mood": 1}\n```', NAMES)
    assert fence.calls == ()
    assert len(fence.problems) == 1
    assert fence.problems[0].startswith("could not read the call in the fenced block")


@pytest.mark.parametrize(
    "text",
    [
        "I walked to the cafe and had a coffee.",
        'The config looks like {"name": "Alice", "age": 31}, which is fine.',
        '```json\n{"name": "Alice", "arguments": {"x": 1}}\n```',
        "Scores: [1, 2, 3] and {broken json",
        '{"name": "finish", "arguments": {}, "mood": "happy"}',
        "",
    ],
)
def test_prose_that_mentions_json_is_not_a_call(text: str) -> None:
    found = find_calls(text, NAMES)
    assert found.calls == ()
    assert found.problems == ()
    assert found.rest == text.strip()


def test_think_blocks_are_split_from_the_answer() -> None:
    assert split_thinking("plain answer") == ("", "plain answer")
    assert split_thinking("<think>\nweigh it\n</think>\n\nI go home.") == ("weigh it", "I go home.")
    # Unclosed: cut off while thinking, so no answer.
    assert split_thinking("<think>still thinking about") == ("still thinking about", "")
    # The template opened <think> in the prompt: only the closing tag is in the answer.
    assert split_thinking("weigh it</think>I go home.") == ("weigh it", "I go home.")
    two = split_thinking("<think>a</think>x <think>b</think>y")
    assert two == ("a\n\nb", "x y")
