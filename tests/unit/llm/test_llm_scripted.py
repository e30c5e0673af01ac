"""The offline scripted model, rule by rule, on hand-built conversations."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentsim.llm.base import ChatModel, Completion, ToolCall
from agentsim.llm.prompt_blocks import BLOCKS
from agentsim.llm.scripted import ScriptedModel

ALL_TOOLS = (
    "activate_skill",
    "deactivate_skill",
    "read_skill_file",
    "execute_skill_script",
    "search_skills",
    "ask_env",
    "finish",
)
READ_ONLY = ("read_skill_file", "search_skills", "finish")

CATALOG = (
    "<available_skills>\n"
    '<skill name="daily-guidance" id="built-in@daily-guidance" active="true">'
    "Use for planning a daily routine between home and work.</skill>\n"
    '<skill name="social-feed" id="built-in@social-feed">Use to read and post on the social '
    "feed and discuss opinions.</skill>\n"
    '<skill name="fitness" id="built-in@fitness">Use for running, jogging and workouts in '
    "parks.</skill>\n"
    '<skill name="coffee-spots" id="custom@coffee-spots">Find cafes and coffee places '
    "nearby.</skill>\n"
    "</available_skills>"
)
PROFILE = {
    "age": 34,
    "occupation": "nurse",
    "home": "home-3",
    "work": "hospital-1",
    "interests": ["running", "cafes"],
    "opinion": 0.3,
}


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, "parameters": {}}} for n in names]


def system(
    *,
    catalog: str = CATALOG,
    bodies: dict[str, str] | None = None,
    profile: dict[str, Any] | None = None,
    persona: str = "Ana, 34, a nurse who likes running and cafes; wakes at 6:30.",
) -> dict[str, str]:
    parts = [f"<persona>{persona}</persona>"] if persona else []
    parts.append(f"<profile>{json.dumps(profile or PROFILE, sort_keys=True)}</profile>")
    parts.append(catalog)
    for name, body in (bodies or {}).items():
        parts.append(f'<skill_content name="{name}">\n{body}\n</skill_content>')
    parts.append("<instructions>Always end the step by calling finish.</instructions>")
    return {"role": "system", "content": "\n".join(parts)}


def user(
    *,
    position: str = "home-3",
    hooks: str = "",
    extra_obs: str = "",
    memory: str = "",
    question: str = "",
    feedback: str = "",
    tick: int = 12,
) -> dict[str, str]:
    obs = f"tick: {tick}\ntime: 2026-03-02T09:00:00 (Monday 09:00)\nposition: {position}"
    parts = [f"<observation>\n{obs}{extra_obs}\n</observation>"]
    if feedback:
        parts.append(f"<feedback>\n{feedback}\n</feedback>")
    if memory:
        parts.append(f"<memory>\n{memory}\n</memory>")
    if question:
        parts.append(f"<question>{question}</question>")
    if hooks:
        parts.append(
            "<skill_hooks>\n"
            '<skill_hook skill="built-in@daily-guidance" hook="pre_step" ok="true">\n'
            f"{hooks}\n</skill_hook>\n</skill_hooks>"
        )
    return {"role": "user", "content": "\n".join(parts)}


def suggested(tool: str, args: dict[str, Any]) -> str:
    return f"SUGGESTED: {tool} {json.dumps(args)}"


def move(place: str) -> dict[str, Any]:
    return {"module": "city", "action": "move_to", "args": {"place": place}}


def turn(messages: list[dict[str, Any]], done: Completion, result: str) -> None:
    """Append the model's call and the tool's result, as the agent does."""
    messages.append(done.message)
    messages.append({"role": "tool", "tool_call_id": done.tool_calls[0].id, "content": result})


def call_of(c: Completion) -> tuple[str, dict[str, Any]]:
    assert len(c.tool_calls) == 1
    return c.tool_calls[0].name, json.loads(c.tool_calls[0].arguments)


async def run_step(
    model: ScriptedModel,
    messages: list[dict[str, Any]],
    results: dict[str, str] | None = None,
    *,
    offered: tuple[str, ...] = ALL_TOOLS,
    seed: int = 0,
    limit: int = 20,
) -> list[tuple[str, dict[str, Any]]]:
    """Drive the model through one step; tool results come from ``results`` by tool name."""
    calls = []
    for _ in range(limit):
        c = await model.complete(messages, tools(*offered), seed=seed)
        name, args = call_of(c)
        calls.append((name, args))
        turn(messages, c, (results or {}).get(name, "ok"))
        if name == "finish":
            return calls
    raise AssertionError(f"no finish within {limit} calls: {calls}")


NO_ACTIVATION = ScriptedModel(activation_rate=0.0)
ALWAYS_ACTIVATE = ScriptedModel(activation_rate=1.0)


def test_is_a_chat_model() -> None:
    assert isinstance(ScriptedModel(), ChatModel)
    assert "activation_rate=0.35" in repr(ScriptedModel())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"activation_rate": 1.5}, r"activation_rate=1\.5 is outside \[0, 1\]"),
        ({"max_suggestions": 0}, r"max_suggestions=0 must be >= 1"),
    ],
    ids=["rate", "bound"],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ScriptedModel(**kwargs)


async def test_follows_hook_suggestions_in_order_then_finishes() -> None:
    hooks = "\n".join(
        [
            "Good morning. Plan: work.",
            suggested("ask_env", move("hospital-1")),
            suggested("execute_skill_script", {"name": "daily-guidance", "args": ["plan"]}),
        ]
    )
    messages = [system(), user(hooks=hooks)]
    calls = await run_step(NO_ACTIVATION, messages)
    assert calls == [
        ("ask_env", move("hospital-1")),
        ("execute_skill_script", {"name": "daily-guidance", "args": ["plan"]}),
        ("finish", {"action": "moved to hospital-1, used daily-guidance plan"}),
    ]


async def test_completion_shape_ids_and_usage() -> None:
    messages = [system(), user(hooks=suggested("ask_env", move("park-1")))]
    first = await NO_ACTIVATION.complete(messages, tools(*ALL_TOOLS))
    assert first.content is None
    assert first.finish_reason == "tool_calls"
    assert first.model == "scripted"
    assert first.tool_calls[0].id == "call_0"
    total = sum(len(m["content"]) for m in messages)
    assert first.usage.prompt_tokens == -(-total // 4)
    assert first.usage.completion_tokens == -(-len(first.tool_calls[0].arguments) // 4)
    turn(messages, first, "ok")
    second = await NO_ACTIVATION.complete(messages, tools(*ALL_TOOLS))
    assert second.tool_calls[0].id == "call_1"
    assert second.usage.prompt_tokens > first.usage.prompt_tokens


async def test_hook_output_is_unescaped_before_parsing() -> None:
    args = {"name": "daily-guidance", "args": ["note", "--text", "a<b & c>d"]}
    escaped = suggested("execute_skill_script", args).replace("&", "&amp;").replace("<", "&lt;")
    escaped = escaped.replace(">", "&gt;")
    c = await NO_ACTIVATION.complete([system(), user(hooks=escaped)], tools(*ALL_TOOLS))
    assert call_of(c) == ("execute_skill_script", args)


async def test_move_to_current_position_is_skipped() -> None:
    hooks = "\n".join(
        [
            suggested("ask_env", move("home-3")),
            suggested("ask_env", {"module": "social", "action": "feed", "args": {"limit": 3}}),
        ]
    )
    calls = await run_step(NO_ACTIVATION, [system(), user(position="home-3", hooks=hooks)])
    assert calls[0] == ("ask_env", {"module": "social", "action": "feed", "args": {"limit": 3}})
    assert calls[-1] == ("finish", {"action": "checked social feed, stayed at home-3"})


async def test_identical_suggestions_are_called_once() -> None:
    line = suggested("ask_env", move("cafe-2"))
    messages = [system(), user(hooks=f"{line}\n{line}")]
    calls = await run_step(NO_ACTIVATION, messages, {"ask_env": f"arrived\n{line}"})
    assert calls == [("ask_env", move("cafe-2")), ("finish", {"action": "moved to cafe-2"})]


async def test_suggestions_in_tool_results_are_followed_after_hooks() -> None:
    hooks = suggested("execute_skill_script", {"name": "daily-guidance", "args": ["plan"]})
    result = "Plan ready.\n" + suggested("ask_env", move("office-3"))
    calls = await run_step(
        NO_ACTIVATION, [system(), user(hooks=hooks)], {"execute_skill_script": result}
    )
    assert [c[0] for c in calls] == ["execute_skill_script", "ask_env", "finish"]
    assert calls[1][1] == move("office-3")


async def test_suggestions_inside_a_json_wrapped_result() -> None:
    hooks = suggested("execute_skill_script", {"name": "daily-guidance", "args": ["plan"]})
    wrapped = json.dumps({"ok": True, "output": "go\n" + suggested("ask_env", move("gym-1"))})
    calls = await run_step(
        NO_ACTIVATION, [system(), user(hooks=hooks)], {"execute_skill_script": wrapped}
    )
    assert calls[1] == ("ask_env", move("gym-1"))


@pytest.mark.parametrize(
    "line",
    [
        "SUGGESTED: ask_env {not json}",
        'SUGGESTED: ask_env ["a list"]',
        "SUGGESTED: ask_env",
        'see SUGGESTED: ask_env {"module": "city"}',
    ],
    ids=["bad-json", "not-object", "no-args", "mid-line"],
)
async def test_malformed_suggestions_are_ignored(line: str) -> None:
    calls = await run_step(NO_ACTIVATION, [system(), user(hooks=line)])
    assert calls == [("finish", {"action": "stayed at home-3"})]


async def test_tools_not_offered_are_never_called() -> None:
    hooks = "\n".join(
        [
            suggested("ask_env", move("office-3")),
            suggested("teleport", {"to": "moon"}),
            suggested("search_skills", {"query": "coffee"}),
        ]
    )
    calls = await run_step(
        NO_ACTIVATION, [system(), user(hooks=hooks)], offered=("search_skills", "finish")
    )
    assert calls == [
        ("search_skills", {"query": "coffee"}),
        ("finish", {"action": "stayed at home-3"}),
    ]


async def test_without_any_tool_the_answer_is_plain_text() -> None:
    c = await NO_ACTIVATION.complete([system(), user(hooks=suggested("ask_env", move("x-1")))])
    assert c.tool_calls == ()
    assert c.content == "stayed at home-3"
    assert c.finish_reason == "stop"
    assert c.usage.completion_tokens == 4


async def test_error_results_are_not_retried() -> None:
    line = suggested("ask_env", move("park-1"))
    messages = [system(), user(hooks=line)]
    calls = await run_step(
        NO_ACTIVATION, messages, {"ask_env": f"error: place 'park-1' is closed\n{line}"}
    )
    assert calls == [
        ("ask_env", move("park-1")),
        ("finish", {"action": "could not reach park-1, stayed at home-3"}),
    ]


async def test_max_suggestions_bounds_the_step() -> None:
    hooks = "\n".join(suggested("ask_env", move(f"shop-{i}")) for i in range(10))
    model = ScriptedModel(activation_rate=0.0, max_suggestions=3)
    calls = await run_step(model, [system(), user(hooks=hooks)])
    assert len(calls) == 4
    assert calls[-1] == ("finish", {"action": "moved to shop-0, moved to shop-1, moved to shop-2"})


async def test_feedback_suggestions_start_a_fresh_turn_without_repeating() -> None:
    done = suggested("ask_env", move("office-3"))
    model = ScriptedModel(activation_rate=0.0, max_suggestions=1)
    messages = [system(), user(hooks=done)]
    first = await run_step(model, messages)
    assert first[0] == ("ask_env", move("office-3"))
    retry = "You forgot lunch.\n" + done + "\n" + suggested("ask_env", move("cafe-2"))
    messages.append(user(position="office-3", feedback=retry, tick=12))
    second = await run_step(model, messages)
    assert second == [
        ("ask_env", move("cafe-2")),
        ("finish", {"action": "moved to office-3, moved to cafe-2"}),
    ]


PLAYBOOK_BODY = """Read the feed, then update your opinion with the script.

```playbook
# comment lines and blank lines are ignored

ask_env {"module": "social", "action": "feed", "args": {"limit": 5}}
execute_skill_script {"name": "social-feed", "args": ["--json", "{{result}}"]}
```
"""


async def test_playbook_runs_once_with_result_substitution_and_escaping() -> None:
    feed = 'post 1: "bikes" are great\npost 2: C:\\path \u00e9'
    messages = [system(bodies={"social-feed": PLAYBOOK_BODY}), user()]
    calls = await run_step(NO_ACTIVATION, messages, {"ask_env": feed})
    assert calls == [
        ("ask_env", {"module": "social", "action": "feed", "args": {"limit": 5}}),
        ("execute_skill_script", {"name": "social-feed", "args": ["--json", feed]}),
        ("finish", {"action": "checked social feed, used social-feed, stayed at home-3"}),
    ]


async def test_suggestions_take_priority_over_the_playbook() -> None:
    messages = [
        system(bodies={"social-feed": PLAYBOOK_BODY}),
        user(hooks=suggested("ask_env", move("park-1"))),
    ]
    calls = await run_step(NO_ACTIVATION, messages, {"ask_env": "[]"})
    assert [c[0] for c in calls] == ["ask_env", "ask_env", "execute_skill_script", "finish"]
    assert calls[0][1] == move("park-1")


async def test_failed_playbook_line_ends_the_playbook() -> None:
    messages = [system(bodies={"social-feed": PLAYBOOK_BODY}), user()]
    calls = await run_step(NO_ACTIVATION, messages, {"ask_env": '{"ok": false, "error": "down"}'})
    assert calls == [
        ("ask_env", {"module": "social", "action": "feed", "args": {"limit": 5}}),
        ("finish", {"action": "failed: checked social feed, stayed at home-3"}),
    ]


async def test_playbook_lines_that_cannot_run_are_skipped() -> None:
    body = (
        "```playbook\n"
        'teleport {"to": "moon"}\n'
        "ask_env {broken\n"
        'ask_env {"module": "city", "action": "move_to", "args": {"place": "home-3"}}\n'
        'ask_env {"module": "city", "action": "move_to", "args": {"place": "gym-1"}}\n'
        'execute_skill_script {"name": "fitness", "args": [{{result}}]}\n'
        "```"
    )
    calls = await run_step(NO_ACTIVATION, [system(bodies={"fitness": body}), user()])
    assert calls == [("ask_env", move("gym-1")), ("finish", {"action": "moved to gym-1"})]


@pytest.mark.parametrize(
    "body",
    ["no playbook here", "```playbook\nask_env {}", "```playbook"],
    ids=["none", "unclosed", "bare-marker"],
)
async def test_bodies_without_a_usable_playbook(body: str) -> None:
    calls = await run_step(NO_ACTIVATION, [system(bodies={"x": body}), user()])
    assert calls == [("finish", {"action": "stayed at home-3"})]


async def test_playbook_returned_by_activation_runs_the_same_step() -> None:
    body = f"```playbook\nask_env {json.dumps(move('park-2'))}\n```"
    messages = [system(), user()]
    calls = await run_step(ALWAYS_ACTIVATE, messages, {"activate_skill": body})
    assert calls == [
        ("activate_skill", {"name": "coffee-spots"}),
        ("ask_env", move("park-2")),
        ("finish", {"action": "activated coffee-spots, moved to park-2"}),
    ]


async def test_activation_picks_the_best_fitting_inactive_skill() -> None:
    # "running" and "cafes" both fit; "fitness" also matches the observed park.
    c = await ALWAYS_ACTIVATE.complete(
        [system(), user(extra_obs="\nweather: sunny, parks are open")], tools(*ALL_TOOLS)
    )
    assert call_of(c) == ("activate_skill", {"name": "fitness"})


async def test_a_deprecated_skill_is_never_activated() -> None:
    # The deprecated entry fits the agent best ("running", "parks"); the model takes the next.
    deprecated = CATALOG.replace(
        '<skill name="fitness" id="built-in@fitness">',
        '<skill name="fitness" id="built-in@fitness" status="deprecated">',
    )
    assert deprecated != CATALOG
    obs = "\nweather: sunny, parks are open"
    c = await ALWAYS_ACTIVATE.complete(
        [system(catalog=deprecated), user(extra_obs=obs)], tools(*ALL_TOOLS)
    )
    assert call_of(c) == ("activate_skill", {"name": "coffee-spots"})


async def test_a_deprecated_search_hit_is_never_activated() -> None:
    catalog = (
        "<available_skills>\n</available_skills>\n"
        "<!-- 2 more skills not listed to fit the catalog budget; call search_skills(query) "
        "to find them -->"
    )
    hits = [
        {"name": "old-runs", "description": "Running logs.", "active": False, "deprecated": True},
        {"name": "marathon", "description": "Training plans for running.", "active": False},
    ]
    calls = await run_step(
        ALWAYS_ACTIVATE,
        [system(catalog=catalog), user()],
        {"search_skills": json.dumps({"results": hits})},
    )
    assert calls[1] == ("activate_skill", {"name": "marathon"})
    calls = await run_step(
        ALWAYS_ACTIVATE,
        [system(catalog=catalog), user()],
        {"search_skills": json.dumps({"results": hits[:1]})},
    )
    assert [c[0] for c in calls] == ["search_skills", "finish"]


async def test_activation_ties_break_by_name_and_skip_active_skills() -> None:
    profile = {**PROFILE, "interests": ["coffee", "running"], "occupation": "clerk"}
    c = await ALWAYS_ACTIVATE.complete(
        [system(profile=profile, persona=""), user()], tools(*ALL_TOOLS)
    )
    assert call_of(c) == ("activate_skill", {"name": "coffee-spots"})
    # daily-guidance fits "routine" but is already active, so it is never proposed.
    profile = {**PROFILE, "interests": ["routine"], "occupation": "clerk"}
    c = await ALWAYS_ACTIVATE.complete(
        [system(profile=profile, persona=""), user()], tools(*ALL_TOOLS)
    )
    assert call_of(c) == ("finish", {"action": "stayed at home-3"})


async def test_activation_happens_at_most_once_per_step() -> None:
    calls = await run_step(ALWAYS_ACTIVATE, [system(), user()])
    assert [c[0] for c in calls] == ["activate_skill", "finish"]
    assert calls[-1][1] == {"action": "activated coffee-spots, stayed at home-3"}


async def test_failed_activation_is_reported() -> None:
    calls = await run_step(
        ALWAYS_ACTIVATE, [system(), user()], {"activate_skill": "error: fitness is disabled"}
    )
    assert calls[-1] == ("finish", {"action": "could not activate coffee-spots, stayed at home-3"})


async def test_activation_is_deterministic_for_a_seed_and_varies_across_seeds() -> None:
    model = ScriptedModel(activation_rate=0.35)
    messages = [system(), user()]
    outcomes = []
    for seed in range(200):
        a = await model.complete(messages, tools(*ALL_TOOLS), seed=seed)
        b = await model.complete(messages, tools(*ALL_TOOLS), seed=seed)
        assert a == b
        outcomes.append(a.tool_calls[0].name)
    share = outcomes.count("activate_skill") / len(outcomes)
    assert 0.2 < share < 0.5
    assert set(outcomes) == {"activate_skill", "finish"}


async def test_observation_changes_the_roll() -> None:
    model = ScriptedModel(activation_rate=0.5)
    names = set()
    for tick in range(40):
        c = await model.complete([system(), user(tick=tick)], tools(*ALL_TOOLS), seed=7)
        names.add(c.tool_calls[0].name)
    assert names == {"activate_skill", "finish"}


async def test_omitted_skills_are_searched_then_activated() -> None:
    catalog = (
        "<available_skills>\n"
        '<skill name="taxes" id="built-in@taxes">File tax returns.</skill>\n'
        "</available_skills>\n"
        "<!-- 3 more skills not listed to fit the catalog budget; call search_skills(query) "
        "to find them -->"
    )
    hits = json.dumps(
        [
            {"name": "marathon", "description": "Training plans for running.", "active": False},
            {"name": "old", "description": "Running logs.", "active": True},
            "junk",
        ]
    )
    calls = await run_step(
        ALWAYS_ACTIVATE, [system(catalog=catalog), user()], {"search_skills": hits}
    )
    assert calls[0][0] == "search_skills"
    assert "run" in calls[0][1]["query"]
    assert calls[1] == ("activate_skill", {"name": "marathon"})


@pytest.mark.parametrize(
    "hits",
    ["not json", json.dumps({"results": [{"name": "x", "description": "taxes"}]}), "42"],
    ids=["text", "no-fit", "scalar"],
)
async def test_useless_search_results_end_the_step(hits: str) -> None:
    catalog = "<available_skills>\n</available_skills>\n<!-- 3 more skills not listed -->"
    calls = await run_step(
        ALWAYS_ACTIVATE, [system(catalog=catalog), user()], {"search_skills": hits}
    )
    assert [c[0] for c in calls] == ["search_skills", "finish"]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        (
            "What do you think about the new bike lanes?",
            "On the new bike lanes, I'm mildly in favour (my opinion is +0.30).",
        ),
        ("What is your opinion?", "I'm mildly in favour (my opinion is +0.30)."),
        (
            "How was your morning?",
            "This morning I went to home-3, office-3 and cafe-2; it was an ordinary morning.",
        ),
        ("What do you do for work?", "I work as a nurse at hospital-1."),
        ("What are your hobbies?", "I enjoy running and cafes."),
    ],
    ids=["opinion-topic", "opinion", "morning", "work", "hobbies"],
)
async def test_interview_answers_depend_on_the_question(question: str, expected: str) -> None:
    memory = "tick 1: woke up at home-3\ntick 4: moved to office-3\ntick 9: coffee at cafe-2\nslept"
    messages = [system(), user(memory=memory, question=question)]
    c = await NO_ACTIVATION.complete(messages, tools(*READ_ONLY))
    assert call_of(c) == ("finish", {"action": "answered", "answer": expected})


@pytest.mark.parametrize(
    ("calls", "position", "expected"),
    [
        (
            [("ask_env", {"module": "social", "action": "post", "args": {"topic": "bike lanes"}})],
            "home-3",
            "posted about bike lanes, stayed at home-3",
        ),
        (
            [("ask_env", {"module": "social", "action": "post", "args": {"text": "hi"}})],
            "",
            "posted on social",
        ),
        (
            [("ask_env", {"module": "market", "action": "buy_item", "args": {}})],
            "in transit to office-3",
            "did buy item in market, kept travelling to office-3",
        ),
        (
            [
                ("deactivate_skill", {"name": "social-feed"}),
                ("read_skill_file", {"name": "x", "path": "a.md"}),
                ("execute_skill_script", {"name": "fitness", "args": ["--json", "{}"]}),
            ],
            "",
            "dropped social-feed, used fitness",
        ),
        ([], "", "did nothing in particular"),
    ],
    ids=["post-topic", "post", "other-action-in-transit", "skills", "nothing"],
)
async def test_finish_summaries(
    calls: list[tuple[str, dict[str, Any]]], position: str, expected: str
) -> None:
    hooks = "\n".join(suggested(n, a) for n, a in calls)
    u = user(hooks=hooks)
    u["content"] = u["content"].replace(
        "position: home-3", f"position: {position}" if position else ""
    )
    got = await run_step(NO_ACTIVATION, [system(), u])
    assert got[-1] == ("finish", {"action": expected})


async def test_long_summaries_are_cut() -> None:
    hooks = "\n".join(suggested("ask_env", move(f"a-very-long-place-name-{i}")) for i in range(6))
    got = await run_step(NO_ACTIVATION, [system(), user(hooks=hooks)])
    action = got[-1][1]["action"]
    assert len(action) == 200
    assert action.endswith("...")


async def test_messages_in_other_shapes_are_read() -> None:
    """Multi-part content, ToolCall objects, odd arguments and results without a call."""
    parts = user(hooks=suggested("ask_env", move("park-1")))
    parts["content"] = [{"type": "text", "text": parts["content"]}, "ignored"]
    done = ToolCall(id="x1", name="ask_env", arguments=json.dumps(move("park-1")))
    messages = [
        system(),
        {"role": "system", "content": "a second system message is ignored"},
        parts,
        {"role": "assistant", "content": None, "tool_calls": [done]},
        {"role": "tool", "tool_call_id": "x1", "content": "ok"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "x2",
                    "type": "function",
                    "function": {"name": "ask_env", "arguments": "{oops"},
                },
                {
                    "id": "x3",
                    "type": "function",
                    "function": {"name": "ask_env", "arguments": "[1]"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "unknown", "content": 12},
    ]
    c = await NO_ACTIVATION.complete(messages, [{"name": "finish"}, {"function": {}}])
    assert c.tool_calls[0].id == "call_3"
    assert call_of(c) == ("finish", {"action": "moved to park-1"})


async def test_malformed_json_result_is_scanned_as_text() -> None:
    hooks = suggested("execute_skill_script", {"name": "daily-guidance", "args": ["plan"]})
    result = "{not json\n" + suggested("ask_env", move("gym-1"))
    calls = await run_step(
        NO_ACTIVATION, [system(), user(hooks=hooks)], {"execute_skill_script": result}
    )
    assert calls[1] == ("ask_env", move("gym-1"))


@pytest.mark.parametrize(
    ("question", "obs", "profile", "memory", "expected"),
    [
        (
            "Do you support it?",
            "\nopinion: -0.7",
            PROFILE,
            "",
            "I'm strongly against it (my opinion is -0.70).",
        ),
        (
            "Do you agree?",
            "\nopinion: n/a\nopinion:",
            {**PROFILE, "opinion": -0.2},
            "",
            "I'm mildly against it (my opinion is -0.20).",
        ),
        ("Do you agree?", "\nopinion: 0.0", PROFILE, "", "I'm undecided (my opinion is +0.00)."),
        (
            "What do you think about the new city park?",
            "\nYour opinion on the new city park is +0.90 (-1 against, +1 for).",
            PROFILE,
            "",
            "On the new city park, I'm strongly in favour (my opinion is +0.90).",
        ),
        (
            "What do you think about taxes?",
            "",
            {"age": 3},
            "",
            "On taxes, I haven't made up my mind yet.",
        ),
        (
            "How was your evening?",
            "",
            PROFILE,
            "read a book",
            "This evening I mostly stayed at home-3; nothing special happened.",
        ),
        (
            "Where did you go today?",
            "",
            PROFILE,
            "tick 3: at home-3\ntick 5: at home-3",
            "Today I went to home-3; it was an ordinary day.",
        ),
        ("Who are you?", "", PROFILE, "", None),
    ],
    ids=[
        "strong-against",
        "profile-fallback",
        "undecided",
        "sentence",
        "no-opinion",
        "no-places",
        "one-place",
        "persona",
    ],
)
async def test_more_interview_answers(
    question: str, obs: str, profile: dict[str, Any], memory: str, expected: str | None
) -> None:
    messages = [system(profile=profile), user(extra_obs=obs, memory=memory, question=question)]
    c = await NO_ACTIVATION.complete(messages, tools(*READ_ONLY), seed=3)
    name, args = call_of(c)
    assert name == "finish"
    if expected is None:
        assert args["answer"].endswith(
            "I'm Ana, 34, a nurse who likes running and cafes; wakes at 6:30; "
            "that shapes how I see it."
        )
    else:
        assert args["answer"] == expected


async def test_persona_answers_vary_with_the_seed_and_handle_no_persona() -> None:
    answers = set()
    for seed in range(30):
        messages = [system(persona="You are Bo. Likes chess."), user(question="Anything else?")]
        c = await NO_ACTIVATION.complete(messages, tools(*READ_ONLY), seed=seed)
        answers.add(call_of(c)[1]["answer"])
    assert len(answers) == 3
    assert all(a.endswith("I'm Bo; that shapes how I see it.") for a in answers)
    messages = [system(persona=""), user(question="Anything else?", position="in transit to x-1")]
    c = await NO_ACTIVATION.complete(messages, tools(*READ_ONLY))
    assert call_of(c)[1]["answer"] == "I'd rather not say much; nothing stands out for me."
    c = await NO_ACTIVATION.complete(
        [system(), user(question="How was your day?", position="in transit to x-1")], ()
    )
    assert c.tool_calls == ()
    assert c.content == "Today was quiet; nothing special happened."


async def test_bad_profile_json_is_treated_as_empty() -> None:
    messages = [system(), user(question="What do you do for work?")]
    messages[0]["content"] = messages[0]["content"].replace('{"age"', '{oops "age"')
    c = await NO_ACTIVATION.complete(messages, tools(*READ_ONLY))
    assert call_of(c)[1]["answer"].startswith(("Well,", "Honestly,", "Speaking for myself,"))
    messages[0]["content"] = messages[0]["content"].replace('{oops "age"', '[1, {"age"')
    c = await NO_ACTIVATION.complete(messages, tools(*READ_ONLY))
    assert "nurse" in call_of(c)[1]["answer"]


async def test_suggestions_in_playbook_results_come_first_and_the_playbook_is_not_rerun() -> None:
    body = f"```playbook\nask_env {json.dumps(move('cafe-2'))}\n```"
    messages = [system(bodies={"coffee-spots": body}), user()]
    results = {"ask_env": "arrived\n" + suggested("ask_env", move("park-1"))}
    calls = await run_step(NO_ACTIVATION, messages, results)
    assert calls == [
        ("ask_env", move("cafe-2")),
        ("ask_env", move("park-1")),
        ("finish", {"action": "moved to cafe-2, moved to park-1"}),
    ]


async def test_move_to_the_place_already_heading_to_is_skipped() -> None:
    hooks = f"{suggested('ask_env', move('office-3'))}\n{suggested('ask_env', move('cafe-2'))}"
    calls = await run_step(
        NO_ACTIVATION, [system(), user(position="in transit to office-3", hooks=hooks)]
    )
    assert calls == [("ask_env", move("cafe-2")), ("finish", {"action": "moved to cafe-2"})]


async def test_a_move_refused_because_already_there_reads_as_staying() -> None:
    line = suggested("ask_env", move("home-1"))
    u = user(hooks=line)
    u["content"] = u["content"].replace("position: home-3", "You are at Home 1 (home).")
    refusal = "error: city.move_to: you are already at 'home-1'; pick another place"
    calls = await run_step(NO_ACTIVATION, [system(), u], {"ask_env": refusal})
    assert calls == [("ask_env", move("home-1")), ("finish", {"action": "stayed at home-1"})]


async def test_reads_the_blocks_where_their_declaration_puts_them() -> None:
    # The layout the agent sends: the agent's part (skill bodies, persona, profile) opens the
    # first user message, rendered from the same declaration the model reads through.
    body = f'<skill_content name="social-feed">\n{PLAYBOOK_BODY}\n</skill_content>'
    sys_text = BLOCKS.render("system", {"instructions": "<instructions/>", "available_skills": ""})
    mine = BLOCKS.render(
        "agent",
        {"skill_content": body, "persona": "Ana.", "profile": json.dumps(PROFILE)},
    )
    obs = "tick: 3\ntime: 2026-03-02T09:00:00 (Monday 09:00)\nposition: home-3"
    turn = BLOCKS.render("turn", {"observation": obs, "memory": "tick 1: at cafe-2"})
    first = {"role": "user", "content": f"{mine}\n{turn}"}
    calls = await run_step(NO_ACTIVATION, [{"role": "system", "content": sys_text}, first])
    assert calls[0] == ("ask_env", {"module": "social", "action": "feed", "args": {"limit": 5}})
    asked = BLOCKS.render("turn", {"observation": obs, "question": "What is your job?"})
    messages = [
        {"role": "system", "content": sys_text},
        {"role": "user", "content": f"{mine}\n{asked}"},
    ]
    c = await NO_ACTIVATION.complete(messages, tools(*READ_ONLY))
    assert call_of(c) == (
        "finish",
        {"action": "answered", "answer": "I work as a nurse at hospital-1."},
    )
