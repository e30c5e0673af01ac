"""The offline scripted model, rule by rule, on hand-built conversations."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentsim.llm.base import ChatModel, Completion
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
        ("finish", {"action": "tried to checked social feed (failed), stayed at home-3"}),
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
    body = '```playbook\nask_env {"module": "city", "action": "move_to", "args": {"place": "park-2"}}\n```'
    messages = [system(), user()]
    calls = await run_step(ALWAYS_ACTIVATE, messages, {"activate_skill": body})
    assert calls == [
        ("activate_skill", {"name": "fitness"}),
        ("ask_env", move("park-2")),
        ("finish", {"action": "activated fitness, moved to park-2"}),
    ]


async def test_activation_picks_the_best_fitting_inactive_skill() -> None:
    # "running" and "cafes" both fit; "fitness" also matches the observed park.
    c = await ALWAYS_ACTIVATE.complete(
        [system(), user(extra_obs="\nnearby: park-1 (parks are open)")], tools(*ALL_TOOLS)
    )
    assert call_of(c) == ("activate_skill", {"name": "fitness"})


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
    assert calls[-1][1] == {"action": "activated fitness, stayed at home-3"}


async def test_failed_activation_is_reported() -> None:
    calls = await run_step(
        ALWAYS_ACTIVATE, [system(), user()], {"activate_skill": "error: fitness is disabled"}
    )
    assert calls[-1] == ("finish", {"action": "could not activate fitness, stayed at home-3"})


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
