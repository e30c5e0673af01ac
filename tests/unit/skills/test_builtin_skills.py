"""The built-in skills folder: every SKILL.md validates, and each script does its job.

daily-guidance has its own file (test_skill_daily_guidance.py). Scripts are loaded by path,
as the runner loads them, and called with a real ``SkillScriptContext``; a few calls go
through ``ScriptRunner`` to check the tier and isolation each skill declares.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest

from agentsim.env.base import AgentInfo
from agentsim.env.clock import SimClock
from agentsim.env.social import SocialModule
from agentsim.skills.context import CONTEXT_ENV_VAR, SkillScriptContext
from agentsim.skills.manifest import load_skill_md
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.scripts import ScriptRunner
from agentsim.testing.skills import suggestions
from tests.unit import helpers

SKILLS = helpers.REPO / "skills"
NOW = datetime(2026, 3, 2, 9, 0)
NAMES = sorted(p.name for p in SKILLS.iterdir() if (p / "SKILL.md").is_file())


def _load(name: str, script: str) -> ModuleType:
    path = SKILLS / name / "scripts" / script
    spec = importlib.util.spec_from_file_location(f"skill_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


opinion = _load("opinion-update", "opinion_update.py")
reflect = _load("reflect", "reflect.py")
weather = _load("weather-lookup", "weather_lookup.py")
diary = _load("diary", "diary.py")

Ctx = Callable[..., SkillScriptContext]


@pytest.fixture
def make_ctx(tmp_path: Path) -> Ctx:
    def make(
        skill: str,
        *,
        when: datetime = NOW,
        tick: int = 0,
        agent: str = "agent-1",
        profile: dict[str, Any] | None = None,
    ) -> SkillScriptContext:
        return helpers.script_context(
            SKILLS / skill,
            workspace=tmp_path / agent,
            agent_id=agent,
            skill_id=f"built-in@{skill}",
            tick=tick,
            when=when,
            env={},
            profile=profile,
        )

    return make


# -- the folder as a whole -------------------------------------------------------------------


def test_every_builtin_skill_validates_without_diagnostics() -> None:
    registry = SkillRegistry()
    registry.scan_builtin(SKILLS)
    assert [str(d) for d in registry.diagnostics] == []
    ids = sorted(d.skill_id for d in registry.list_all())
    assert ids == [f"built-in@{n}" for n in NAMES]
    assert {"daily-guidance", "social-feed", "opinion-update", "reflect"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_manifest_is_complete_and_scripts_exist(name: str) -> None:
    parsed = load_skill_md(SKILLS / name / "SKILL.md")
    assert parsed.diagnostics == ()
    m = parsed.manifest
    assert m is not None and m.name == name
    assert m.version and m.tags
    assert m.description.startswith(("Use ", "Deprecated")), "say when to use it"
    for rel in [m.script, m.hooks.pre_step, m.hooks.post_step]:
        assert rel is None or (SKILLS / name / rel).is_file()
    assert "!`" not in parsed.body and not re.search(r"\$(ARGUMENTS|\d)", parsed.body)


def test_declared_runtime_features() -> None:
    registry = SkillRegistry()
    registry.scan_builtin(SKILLS)
    get = {d.manifest.name: d for d in registry.list_all()}
    assert get["daily-guidance"].hook_script("pre_step") == "scripts/daily_guidance.py"
    assert get["daily-guidance"].hook_script("post_step") == "scripts/daily_guidance.py"
    assert get["social-feed"].manifest.required_skills == ("opinion-update",)
    ou = get["opinion-update"]
    assert (ou.manifest.isolation, ou.manifest.idempotent, ou.manifest.retries) == (
        "thread",
        True,
        1,
    )
    assert ou.manifest.input_schema is not None and ou.manifest.output_schema is None
    wl = get["weather-lookup"]
    assert wl.manifest.status == "deprecated" and wl.manifest.output_schema is not None
    assert wl.manifest.isolation == "process"
    assert (get["diary"].manifest.isolation, get["diary"].manifest.timeout) == ("thread", 2.0)


def test_social_feed_playbook_lines_are_tool_calls() -> None:
    body = load_skill_md(SKILLS / "social-feed" / "SKILL.md").body
    block = re.search(r"```playbook\n(.*?)```", body, re.S)
    assert block is not None
    calls = [line.split(" ", 1) for line in block.group(1).strip().splitlines()]
    assert [c[0] for c in calls] == ["ask_env", "execute_skill_script"]
    assert json.loads(calls[0][1])["action"] == "feed"
    # {{result}} is substituted as the content of a JSON string, so the line parses as is.
    second = json.loads(calls[1][1])
    assert second == {"name": "built-in@opinion-update", "args": ["--json", "{{result}}"]}


# -- opinion-update --------------------------------------------------------------------------


def _feed(*posts: tuple[str, float | None]) -> str:
    items = [
        {"author": a, "text": "hello", **({} if s is None else {"stance": s})} for a, s in posts
    ]
    return json.dumps({"posts": items, "new": len(items)})


def _opinion_state(ctx: SkillScriptContext) -> dict[str, Any]:
    path = ctx.workspace_root / "state" / "opinion_update" / "opinion.json"
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def test_bounded_confidence_update(make_ctx: Ctx) -> None:
    ctx = make_ctx("opinion-update", tick=1, profile={"opinion": 0.2})
    # 0.5 and 0.6 are within 0.6 of 0.2; -0.9 is too far; agent-1 is the reader itself;
    # a post without stance does not count.
    feed = _feed(("b", 0.5), ("c", 0.6), ("d", -0.9), ("agent-1", 1.0), ("e", None))
    out = opinion.entrypoint(["--json", feed], ctx)
    first = json.loads(out.splitlines()[0])
    assert first == {"old": 0.2, "new": round(0.2 + 0.3 * (0.55 - 0.2), 4), "considered": 2}
    assert (
        "ask_env",
        {"module": "social", "action": "set_opinion", "args": {"value": 0.305}},
    ) in suggestions(out)
    assert _opinion_state(ctx)["value"] == 0.305


def test_retry_in_the_same_tick_is_idempotent_and_next_tick_moves_on(make_ctx: Ctx) -> None:
    ctx = make_ctx("opinion-update", tick=4, profile={"opinion": 0.0})
    feed = _feed(("b", 0.5))
    first = opinion.entrypoint(["--json", feed], ctx)
    assert opinion.entrypoint(["--json", feed], ctx) == first
    assert _opinion_state(ctx)["updates"] == 1
    later = make_ctx("opinion-update", tick=5)
    result = json.loads(opinion.entrypoint(["--json", feed], later).splitlines()[0])
    assert result["old"] == 0.15 and result["new"] == round(0.15 + 0.3 * 0.35, 4)
    assert _opinion_state(later)["updates"] == 2


def test_unchanged_opinion_suggests_no_set_opinion(make_ctx: Ctx) -> None:
    ctx = make_ctx("opinion-update", tick=1)  # no profile: opinion starts at 0
    out = opinion.entrypoint(["--json", _feed(("b", 0.9))], ctx)
    assert json.loads(out.splitlines()[0]) == {"old": 0.0, "new": 0.0, "considered": 0}
    assert all(args["action"] != "set_opinion" for _, args in suggestions(out))


def test_posts_come_about_every_third_step_and_reflect_the_stance(make_ctx: Ctx) -> None:
    posted = []
    for tick in range(45):
        ctx = make_ctx("opinion-update", tick=tick, agent="poster", profile={"opinion": 0.9})
        out = opinion.entrypoint(["--json", _feed(("b", 0.9))], ctx)
        posts = [a["args"] for _, a in suggestions(out) if a["action"] == "post"]
        posted += posts
    assert 7 <= len(posted) <= 25
    assert all(p["stance"] == 0.9 for p in posted)
    assert all("the new city park" in p["text"].lower() for p in posted)
    assert all(len(p["text"]) <= 280 for p in posted)
    again = [
        suggestions(
            opinion.entrypoint(
                ["--json", _feed()], make_ctx("opinion-update", tick=t, agent="poster")
            )
        )
        for t in range(45)
    ]
    assert sum(any(a["action"] == "post" for _, a in s) for s in again) == len(posted)


@pytest.mark.parametrize("stance", [-1.0, -0.5, 0.0, 0.5, 1.0])
def test_post_text_uses_the_feed_topic(make_ctx: Ctx, stance: float) -> None:
    feed = json.dumps({"feed": {"posts": [], "topic": "the tram line"}})
    texts = set()
    for tick in range(12):
        ctx = make_ctx("opinion-update", tick=tick, agent="t", profile={"opinion": stance})
        for _, args in suggestions(opinion.entrypoint(["--json", feed], ctx)):
            texts.add(args["args"]["text"])
            assert args["args"]["stance"] == stance
    assert texts and all("tram line" in t for t in texts)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "missing the feed; pass --json"),
        (["--json", "{oops"], "the feed is not valid JSON"),
        (["--json", '{"items": []}'], "the feed must be"),
        (["--json", '{"posts": [1]}'], "the feed must be"),
        (["--json", "[]", "--bound", "3"], "--bound needs a number in \\[0.0, 2.0\\]; got '3'"),
        (["--json", "[]", "--rate"], "--rate needs a number in \\[0.0, 1.0\\]; got 'nothing'"),
    ],
)
def test_opinion_update_errors(make_ctx: Ctx, argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        opinion.entrypoint(argv, make_ctx("opinion-update"))


def test_options_and_bare_list_feed(make_ctx: Ctx) -> None:
    ctx = make_ctx("opinion-update", tick=1, profile={"opinion": True})  # not a number: 0
    feed = json.dumps([{"author": "b", "text": "x", "stance": 1.0}])
    out = opinion.entrypoint([feed, "--bound", "2", "--rate", "0.5"], ctx)
    assert json.loads(out.splitlines()[0]) == {"old": 0.0, "new": 0.5, "considered": 1}


def test_real_social_feed_matches_the_input_schema_and_moves_the_opinion(
    make_ctx: Ctx, tmp_path: Path
) -> None:
    social = SocialModule({"follow_k": 1}, seed=1, base_dir=tmp_path)
    social.setup([AgentInfo(agent_id=a, group="g", profile={"opinion": 0.1}) for a in ("a", "b")])
    clock = SimClock(datetime(2026, 3, 2, 6), timedelta(minutes=15))
    social.intervene("broadcast", {"text": "The park opens soon", "stance": 0.4}, clock)
    clock.advance()
    answer = social.view(clock).query("a", "feed", {}, seq=0)
    feed = json.dumps(answer.result)
    schema = load_skill_md(SKILLS / "opinion-update" / "SKILL.md").manifest.input_schema  # type: ignore[union-attr]
    jsonschema.validate(json.loads(feed), schema)
    jsonschema.validate({"feed": json.loads(feed)}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"posts": [{"author": "x", "text": "y", "stance": 2}]}, schema)
    ctx = make_ctx("opinion-update", tick=1, agent="a", profile={"opinion": 0.1})
    result = json.loads(opinion.entrypoint(["--json", feed], ctx).splitlines()[0])
    assert result == {"old": 0.1, "new": 0.19, "considered": 1}


# -- reflect ---------------------------------------------------------------------------------

MEMORY = [
    {"tick": 1, "kind": "observation", "text": "tick: 1\nposition: home-3"},
    {
        "tick": 2,
        "kind": "action",
        "module": "city",
        "action": "move_to",
        "args": {"place": "cafe-1"},
    },
    {"tick": 3, "kind": "observation", "text": "position: cafe-1", "opinion": 0.1},
    {"tick": 4, "kind": "post", "text": "Nice day"},
    {
        "tick": 5,
        "kind": "action",
        "module": "social",
        "action": "set_opinion",
        "args": {"value": 0.3},
    },
    {
        "tick": 6,
        "kind": "observation",
        "text": "position: in transit to office-2",
        "place": "office-2",
    },
]


def _reflect_ctx(make_ctx: Ctx, memory: list[dict[str, Any]] | None) -> SkillScriptContext:
    ctx = make_ctx("reflect")
    if memory is not None:
        lines = [json.dumps(m) for m in memory]
        (ctx.workspace_root / "memory.jsonl").write_text("\n".join([*lines, "{torn"]) + "\n")
    return ctx


def test_reflect_summarises_memory_and_saves_it(
    make_ctx: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _reflect_ctx(make_ctx, MEMORY)
    monkeypatch.setenv(CONTEXT_ENV_VAR, json.dumps(ctx.to_dict()))
    text = reflect.main([])
    assert text.splitlines()[0] == "# Reflection of agent-1"
    assert "Last 6 memory entries (ticks 1-6)." in text
    assert "Kinds: action 2, observation 3, post 1" in text
    assert "Places visited: home-3 -> cafe-1 -> office-2" in text
    assert "Posts made: 1" in text
    assert "Opinion: +0.10 -> +0.30 (rising)" in text
    saved = (ctx.workspace_root / "state" / "reflect" / "summary.md").read_text()
    assert saved == text + "\n"


@pytest.mark.parametrize(
    ("memory", "argv", "expected"),
    [
        (None, [], "Nothing remembered yet."),
        ([{"kind": "note"}], [], "Opinion: no readings"),
        ([{"opinion": 0.5}, {"opinion": 0.5}], [], "Opinion: +0.50 -> +0.50 (steady)"),
        ([{"opinion": 0.5}, {"opinion": -0.5}], [], "(falling)"),
        ([{"opinion": 0.9}, {"opinion": 0.2}], ["--last", "1"], "Opinion: +0.20 (one reading)"),
        ([{"type": "step", "tick": 3}], [], "Kinds: step 1"),
    ],
)
def test_reflect_edge_cases(
    make_ctx: Ctx, monkeypatch: pytest.MonkeyPatch, memory: Any, argv: list[str], expected: str
) -> None:
    ctx = _reflect_ctx(make_ctx, memory)
    monkeypatch.setenv(CONTEXT_ENV_VAR, json.dumps(ctx.to_dict()))
    assert expected in reflect.main(argv)


@pytest.mark.parametrize("argv", [["--last"], ["--last", "0"], ["--last", "x"]])
def test_reflect_rejects_a_bad_last(argv: list[str]) -> None:
    with pytest.raises(SystemExit, match="reflect: --last needs a positive whole number"):
        reflect.parse_last(argv)


# -- weather-lookup and diary ----------------------------------------------------------------


def test_weather_matches_its_output_schema_and_is_shared(make_ctx: Ctx) -> None:
    schema = load_skill_md(SKILLS / "weather-lookup" / "SKILL.md").manifest.output_schema  # type: ignore[union-attr]
    validator = jsonschema.Draft202012Validator(schema)
    seen = set()
    for day in range(40):
        when = datetime(2026, 1, 1, 0) + timedelta(days=day * 9)
        for hour in (0, 6, 12, 18, 23):
            out = weather.entrypoint(["--hour", str(hour)], make_ctx("weather-lookup", when=when))
            value = json.loads(out)
            validator.validate(value)
            assert value["hour"] == hour
            assert value["outdoor_ok"] == (value["rain_mm"] == 0)
            seen.add(value["condition"])
    assert seen == {"sunny", "cloudy", "rain"}
    a = weather.entrypoint([], make_ctx("weather-lookup", agent="a"))
    assert a == weather.entrypoint([], make_ctx("weather-lookup", agent="b"))
    assert json.loads(a)["hour"] == 9


@pytest.mark.parametrize("argv", [["--hour"], ["--hour", "24"], ["--hour", "-1"]])
def test_weather_rejects_a_bad_hour(make_ctx: Ctx, argv: list[str]) -> None:
    with pytest.raises(ValueError, match=r"--hour needs a whole hour 0\.\.23"):
        weather.entrypoint(argv, make_ctx("weather-lookup"))


def test_diary_appends_and_reads_back(make_ctx: Ctx) -> None:
    ctx = make_ctx("diary", tick=12)
    assert diary.entrypoint(["read"], ctx) == "No diary entries for 2026-03-02."
    assert diary.entrypoint(["write", "Coffee", "with", "Bo."], ctx) == (
        "Diary entry saved for 2026-03-02 09:00."
    )
    later = make_ctx("diary", tick=40, when=NOW + timedelta(hours=7))
    diary.entrypoint(["write", "--json", json.dumps({"text": "Long\nday."})], later)
    text = diary.entrypoint(["read", "--date", "2026-03-02"], later)
    assert text.splitlines() == [
        "# Diary of agent-1, 2026-03-02",
        "",
        "- 09:00 (tick 12): Coffee with Bo.",
        "- 16:00 (tick 40): Long day.",
    ]
    other = make_ctx("diary", when=NOW + timedelta(days=1))
    assert diary.entrypoint(["read"], other) == (
        "No diary entries for 2026-03-03; days with entries: 2026-03-02."
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "diary: unknown command ''; use write or read"),
        (["write"], "diary write: nothing to write"),
        (["write", "--json", '{"text": 3}'], "diary write: nothing to write"),
        (["write", "--json", "{x"], "diary write: --json is not valid JSON"),
        (["write", "x" * 1001], "the entry has 1001 characters; keep it under 1000"),
        (["read", "--date", "March"], "diary read: --date needs YYYY-MM-DD; got 'March'"),
    ],
)
def test_diary_errors(make_ctx: Ctx, argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        diary.entrypoint(argv, make_ctx("diary"))


# -- through the script runner ---------------------------------------------------------------


async def test_each_skill_runs_through_the_runner_with_its_isolation(make_ctx: Ctx) -> None:
    registry = SkillRegistry()
    registry.scan_builtin(SKILLS)
    runner = ScriptRunner()
    feed = _feed(("b", 0.5))
    cases = {
        "daily-guidance": (["draft"], "entrypoint"),
        "opinion-update": (["--json", feed], "entrypoint"),
        "reflect": (["--last", "5"], "entrypoint"),
        "weather-lookup": ([], "entrypoint"),
        "diary": (["write", "hello"], "entrypoint"),
    }
    for name, (argv, tier) in cases.items():
        desc = next(d for d in registry.list_all() if d.manifest.name == name)
        ctx = make_ctx(name, profile={"opinion": 0.2, "home": "home-1"})
        res = await runner.run(
            desc.script_path(),
            argv,
            ctx,
            isolation=desc.manifest.isolation,
            timeout=desc.manifest.timeout,
        )
        assert res.ok, (name, res.error)
        assert res.tier == tier, name
        assert res.output.strip()
    assert (
        "# Reflection of agent-1"
        in (ctx.workspace_root / "state" / "reflect" / "summary.md").read_text()
    )


async def test_a_rejected_plan_is_a_failed_call_with_the_message(make_ctx: Ctx) -> None:
    ctx = make_ctx("daily-guidance")
    script = SKILLS / "daily-guidance" / "scripts" / "daily_guidance.py"
    res = await ScriptRunner().run(script, ["plan", "--json", "{}"], ctx)
    assert not res.ok and res.exit_code == 1
    assert res.error is not None and "plan rejected: date None is not a date" in res.error
