"""The built-in daily-guidance skill: drafting, checking, revising plans, needs and hooks.

The script is loaded by path, as the runner loads it, and called with a real
``SkillScriptContext`` on a temporary agent workspace.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from agentsim.skills.context import SkillScriptContext
from agentsim.skills.hooks import parse_hook_output
from agentsim.testing.skills import suggestions
from tests.unit import helpers

SKILL_DIR = helpers.REPO / "skills" / "daily-guidance"
MONDAY = datetime(2026, 3, 2, 9, 0)

WORKER = {
    "name": "Ana",
    "age": 34,
    "occupation": "worker",
    "wake_hour": 6.5,
    "work_start": 9,
    "work_end": 17,
    "interests": ["running", "cafes"],
    "home": "home-3",
    "work": "office-2",
    "favourites": {"cafe": "cafe-1", "park": "park-2", "restaurant": "restaurant-2"},
}


def _load() -> ModuleType:
    # The scripts folder as a package, as the runner imports it: siblings import relatively.
    package = ModuleType("daily_guidance_scripts")
    package.__path__ = [str(SKILL_DIR / "scripts")]
    sys.modules[package.__name__] = package
    return importlib.import_module(f"{package.__name__}.daily_guidance")


dg = _load()
Ctx = Callable[..., SkillScriptContext]


@pytest.fixture
def make_ctx(tmp_path: Path) -> Callable[..., SkillScriptContext]:
    def make(
        when: datetime = MONDAY,
        *,
        profile: dict[str, Any] | None = WORKER,
        agent: str = "agent-1",
        tick: int = 0,
    ) -> SkillScriptContext:
        ws = tmp_path / agent
        return helpers.script_context(
            SKILL_DIR,
            workspace=ws,
            agent_id=agent,
            skill_id="built-in@daily-guidance",
            tick=tick,
            when=when,
            env={},
            # A later call for the same agent keeps the profile the test may have edited.
            profile=None if (ws / "profile.json").exists() else profile,
        )

    return make


def draft(ctx: SkillScriptContext) -> dict[str, Any]:
    plan: dict[str, Any] = json.loads(dg.entrypoint(["draft"], ctx).splitlines()[0])
    return plan


def save(ctx: SkillScriptContext, plan: dict[str, Any] | None = None) -> str:
    out: str = dg.entrypoint(["plan", "--json", json.dumps(plan or draft(ctx))], ctx)
    return out


def hook(ctx: SkillScriptContext, kind: str, when: datetime) -> str:
    payload = {"hook_type": kind, "tick": 1, "time": when.isoformat(), "agent_id": "x"}
    out: str = dg.entrypoint(["--args-json", json.dumps(payload)], ctx)
    return out


def seg(start: str, end: str, activity: str = "work", place: str = "office-2") -> dict[str, str]:
    return {"start": start, "end": end, "activity": activity, "place": place}


def story(ctx: SkillScriptContext, day: str = "2026-03-02") -> dict[str, Any]:
    path = ctx.workspace_root / "state" / "built-in" / "daily-guidance" / day / "story.yaml"
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


# -- draft -----------------------------------------------------------------------------------


def _covers_day(plan: dict[str, Any]) -> None:
    segs = plan["segments"]
    assert segs[0]["start"] == "00:00"
    assert segs[-1]["end"] == "24:00"
    for a, b in itertools.pairwise(segs):
        assert a["end"] == b["start"]
        assert a["start"] < a["end"]


PROFILES = {
    "worker": WORKER,
    "student": {"occupation": "student", "home": "home-1", "school": "school-1", "wake_hour": 7},
    "retiree": {
        "occupation": "retiree",
        "home": "home-2",
        "interests": ["walking"],
        "favourites": {"park": "park-1", "shop": "shop-1", "restaurant": "restaurant-1"},
    },
    "parent": {**WORKER, "occupation": "parent", "favourites": {"shop": "shop-4"}},
    "bare": {},
}


@pytest.mark.parametrize("kind", sorted(PROFILES))
def test_draft_covers_the_day_and_is_accepted_by_plan(make_ctx: Ctx, kind: str) -> None:
    ctx = make_ctx(profile=PROFILES[kind])
    out = dg.entrypoint(["draft"], ctx)
    plan = json.loads(out.splitlines()[0])
    assert plan["date"] == "2026-03-02"
    _covers_day(plan)
    [(tool, args)] = suggestions(out)
    assert tool == "execute_skill_script"
    assert args["name"] == "built-in@daily-guidance"  # its own id, never a namesake
    assert args["args"][:2] == ["plan", "--json"]
    assert json.loads(args["args"][2]) == plan
    assert (
        dg.entrypoint(args["args"], ctx)
        == f"Plan saved: {len(plan['segments'])} segments for 2026-03-02"
    )


def test_worker_draft_follows_work_hours_and_interests(make_ctx: Ctx) -> None:
    plans = [draft(make_ctx(agent=f"w-{i}")) for i in range(12)]
    for plan in plans:
        by_activity = {s["activity"]: s for s in plan["segments"]}
        work = [s for s in plan["segments"] if s["activity"] == "work"]
        assert work and all(s["place"] == "office-2" for s in work)
        assert work[0]["start"] == "09:00" and work[-1]["end"] == "17:00"
        assert by_activity["commute"]["end"] == "09:00"
        assert by_activity["sleep"]["place"] == "home-3"
        assert any(s["activity"] == "lunch" for s in plan["segments"])
        wake = plan["segments"][0]["end"]
        assert "06:15" <= wake <= "06:45"
    evening = {s["place"] for p in plans for s in p["segments"] if s["start"] == "17:00"}
    # Interests are running (park) and cafes (cafe); some agents go straight home.
    assert evening <= {"park-2", "cafe-1", "home-3"}
    assert evening & {"park-2", "cafe-1"}


def test_student_goes_to_school_and_retiree_and_weekend_do_not_work(make_ctx: Ctx) -> None:
    student = draft(make_ctx(profile=PROFILES["student"], agent="s"))
    assert {s["place"] for s in student["segments"] if s["activity"] == "school"} == {"school-1"}
    retiree = draft(make_ctx(profile=PROFILES["retiree"], agent="r"))
    assert not any(s["activity"] in {"work", "commute"} for s in retiree["segments"])
    assert {"park-1", "shop-1", "restaurant-1"} & {s["place"] for s in retiree["segments"]}
    saturday = draft(make_ctx(datetime(2026, 3, 7, 9), agent="w"))
    assert saturday["date"] == "2026-03-07"
    assert not any(s["activity"] == "work" for s in saturday["segments"])
    assert saturday["segments"][0]["end"] >= "07:15"  # a weekend lie-in


def test_draft_is_deterministic_per_agent_and_date_and_varies(make_ctx: Ctx) -> None:
    first = draft(make_ctx(agent="a-1"))
    assert draft(make_ctx(agent="a-1")) == first
    population = {json.dumps(draft(make_ctx(agent=f"a-{i}"))) for i in range(20)}
    assert len(population) > 3
    days = {
        json.dumps(draft(make_ctx(MONDAY + timedelta(days=d), agent="a-1"))["segments"])
        for d in range(5)
    }
    assert len(days) > 1


# -- plan ------------------------------------------------------------------------------------

BAD_PLANS = {
    "not-object": ([1, 2], "must be a JSON object with keys date and segments"),
    "bad-date": ({"date": "2026-13-40", "segments": [seg("00:00", "24:00")]}, "date '2026-13-40'"),
    "no-segments": ({"date": "2026-03-02", "segments": []}, "segments must be a non-empty list"),
    "bad-time": (
        {"date": "2026-03-02", "segments": [seg("09:00", "25:00")]},
        "end '25:00' is not a time",
    ),
    "late-minute": ({"date": "2026-03-02", "segments": [seg("23:00", "24:30")]}, "end '24:30'"),
    "backwards": (
        {"date": "2026-03-02", "segments": [seg("10:00", "09:00")]},
        "end 09:00 must be after start 10:00",
    ),
    "overlap": (
        {"date": "2026-03-02", "segments": [seg("09:00", "12:00"), seg("11:00", "13:00")]},
        "11:00-13:00 starts before the previous one \\(09:00-12:00\\) ends",
    ),
    "empty-place": (
        {"date": "2026-03-02", "segments": [seg("09:00", "10:00", place=" ")]},
        "place must be a non-empty",
    ),
    "no-activity": (
        {"date": "2026-03-02", "segments": [{"start": "09:00", "end": "10:00", "place": "x"}]},
        "activity must be",
    ),
    "extra-key": (
        {"date": "2026-03-02", "segments": [{**seg("09:00", "10:00"), "mood": "ok"}]},
        "unknown keys \\['mood'\\]",
    ),
    "not-a-segment": ({"date": "2026-03-02", "segments": ["work"]}, "segment 1: must be an object"),
}


@pytest.mark.parametrize("name", sorted(BAD_PLANS))
def test_plan_rejects_bad_plans_with_a_message(make_ctx: Ctx, name: str) -> None:
    plan, message = BAD_PLANS[name]
    ctx = make_ctx()
    with pytest.raises(ValueError, match=f"plan rejected: .*{message}"):
        dg.entrypoint(["plan", "--json", json.dumps(plan)], ctx)
    assert not (ctx.workspace_root / "state").exists()


def test_plan_reports_every_problem_at_once(make_ctx: Ctx) -> None:
    plan = {"date": "x", "segments": [seg("10:00", "09:00"), seg("09:00", "10:00", place="")]}
    with pytest.raises(ValueError, match=r"date 'x'.*must be after start.*place must be") as info:
        dg.entrypoint(["plan", "--json", json.dumps(plan)], make_ctx())
    assert "submit it again" in str(info.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan"], "plan: missing --json"),
        (["plan", "--json"], "plan: missing --json"),
        (["plan", "--json", "{not json"], "plan: --json is not valid JSON"),
        (["fly"], "unknown command 'fly'; use one of draft, plan, revise, status"),
        ([], "unknown command ''"),
    ],
)
def test_bad_arguments_name_the_fix(make_ctx: Ctx, argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dg.entrypoint(argv, make_ctx())


def test_plan_writes_story_atomically_and_counts_replans(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    plan = draft(ctx)
    save(ctx, plan)
    saved = story(ctx)
    assert saved["segments"] == plan["segments"]
    assert saved["revisions"] == 0 and saved["agent_id"] == "agent-1"
    folder = ctx.workspace_root / "state" / "built-in" / "daily-guidance" / "2026-03-02"
    assert sorted(p.name for p in folder.iterdir()) == ["story.yaml"]  # no temp file left
    save(ctx, {"date": "2026-03-02", "segments": [seg("00:00", "24:00", "rest", "home-3")]})
    saved = story(ctx)
    assert saved["revisions"] == 1
    assert saved["revision_log"][0]["change"] == "replaced the whole plan"


# -- revise and status -----------------------------------------------------------------------

DAY = {
    "date": "2026-03-02",
    "segments": [
        seg("00:00", "08:00", "sleep", "home-3"),
        seg("08:00", "17:00"),
        seg("17:00", "24:00", "relax", "home-3"),
    ],
}


def test_revise_insert_carves_its_time_out_and_logs_the_reason(make_ctx: Ctx) -> None:
    ctx = make_ctx(datetime(2026, 3, 2, 12, 15))
    save(ctx, DAY)
    change = {"insert": seg("12:00", "12:45", "lunch", "cafe-1"), "reason": "hungry"}
    out = dg.entrypoint(["revise", "--json", json.dumps(change)], ctx)
    assert out.startswith("Plan revised (revision 1): inserted 12:00-12:45 lunch at cafe-1")
    # The new segment covers now, so the agent is told to go there.
    assert suggestions(out) == [
        ("ask_env", {"module": "city", "action": "move_to", "args": {"place": "cafe-1"}})
    ]
    saved = story(ctx)
    assert [(s["start"], s["end"], s["activity"]) for s in saved["segments"]] == [
        ("00:00", "08:00", "sleep"),
        ("08:00", "12:00", "work"),
        ("12:00", "12:45", "lunch"),
        ("12:45", "17:00", "work"),
        ("17:00", "24:00", "relax"),
    ]
    assert saved["revisions"] == 1
    assert saved["revision_log"][-1]["reason"] == "hungry"


def test_revise_insert_across_segments_and_drop(make_ctx: Ctx) -> None:
    ctx = make_ctx(datetime(2026, 3, 2, 6, 0))
    save(ctx, DAY)
    out = dg.entrypoint(
        ["revise", "--json", json.dumps({"insert": seg("16:00", "19:00", "walk", "park-2")})], ctx
    )
    assert suggestions(out) == []  # not current: no move
    assert [s["start"] for s in story(ctx)["segments"]] == ["00:00", "08:00", "16:00", "19:00"]
    out = dg.entrypoint(["revise", "--json", json.dumps({"drop": "16:00", "reason": "rain"})], ctx)
    assert "dropped 16:00-19:00 walk" in out
    saved = story(ctx)
    assert [s["start"] for s in saved["segments"]] == ["00:00", "08:00", "19:00"]
    assert saved["revisions"] == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop": "10:30"}, "no segment starts at '10:30' on 2026-03-02; drop one of 00:00, 08:00"),
        ({"insert": seg("12:00", "11:00")}, "revision rejected: insert: end 11:00 must be after"),
        ({}, "pass exactly one of"),
        ({"insert": seg("1:00", "2:00"), "drop": "08:00"}, "pass exactly one of"),
        ({"drop": "08:00", "date": "2026-03-03"}, "no plan for 2026-03-03; draft one"),
    ],
)
def test_revise_errors(make_ctx: Ctx, change: dict[str, Any], message: str) -> None:
    ctx = make_ctx()
    save(ctx, DAY)
    with pytest.raises(ValueError, match=message):
        dg.entrypoint(["revise", "--json", json.dumps(change)], ctx)
    assert story(ctx)["revisions"] == 0


def test_revise_without_a_plan(make_ctx: Ctx) -> None:
    with pytest.raises(ValueError, match="revise: no plan for 2026-03-02; draft one with `draft`"):
        dg.entrypoint(["revise", "--json", '{"drop": "08:00"}'], make_ctx())


def test_status_shows_now_next_needs_and_plan(make_ctx: Ctx) -> None:
    ctx = make_ctx(datetime(2026, 3, 2, 10, 0))
    assert dg.entrypoint(["status"], ctx).startswith("No plan for 2026-03-02.")
    save(ctx, DAY)
    out = dg.entrypoint(["status"], ctx)
    lines = out.splitlines()
    assert lines[0] == "Now (08:00-17:00): work at office-2"
    assert lines[1] == "Next (17:00-24:00): relax at home-3"
    assert lines[2] == "energy 0.88, hunger 0.53, social 0.66"  # woke 06:30, 2 h of work
    assert "- 00:00-08:00 sleep at home-3" in lines


# -- hooks -----------------------------------------------------------------------------------


def test_pre_step_without_plan_asks_for_a_draft(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    out = hook(ctx, "pre_step", MONDAY)
    assert out.startswith("No plan for 2026-03-02. Draft one with `draft`")
    assert suggestions(out) == [
        ("execute_skill_script", {"name": "built-in@daily-guidance", "args": ["draft"]})
    ]


def test_pre_step_follows_the_plan(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    save(ctx, DAY)
    out = hook(ctx, "pre_step", datetime(2026, 3, 2, 9, 0))
    text, decision = parse_hook_output(out, skill_id="built-in@daily-guidance", hook="pre_step")
    assert decision is None
    lines = text.splitlines()
    assert lines[0] == "Now (08:00-17:00): work at office-2"
    assert lines[1] == "Next (17:00-24:00): relax at home-3"
    assert lines[2].startswith("Needs: energy ")
    assert suggestions(out) == [
        ("ask_env", {"module": "city", "action": "move_to", "args": {"place": "office-2"}})
    ]
    late = hook(ctx, "pre_step", datetime(2026, 3, 2, 22, 0))
    assert "Next: nothing more planned today" in late


def test_pre_step_in_a_gap_suggests_no_move(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    save(
        ctx,
        {
            "date": "2026-03-02",
            "segments": [seg("00:00", "07:00", "sleep", "home-3"), seg("12:00", "13:00")],
        },
    )
    out = hook(ctx, "pre_step", datetime(2026, 3, 2, 9, 0))
    assert out.splitlines()[0] == "Now: free time (nothing planned)"
    assert not any(tool == "ask_env" for tool, _ in suggestions(out))


def test_asleep_at_home_sits_the_step_out(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    # No plan yet and no yesterday: agents start at home, so they sleep until wake time.
    out = hook(ctx, "pre_step", datetime(2026, 3, 2, 5, 0))
    _, decision = parse_hook_output(out, skill_id="built-in@daily-guidance", hook="pre_step")
    assert decision is not None and decision.kind == "skip"
    assert json.loads(out) == {"decision": "skip", "message": "Asleep at home."}
    save(ctx, DAY)
    assert json.loads(hook(ctx, "pre_step", datetime(2026, 3, 2, 23, 30)))["decision"] == "skip"
    # After the wake hour (06:30) a planned sleep at home is still slept through...
    assert json.loads(hook(ctx, "pre_step", datetime(2026, 3, 2, 7, 0)))["decision"] == "skip"
    # ...and at 22:00 the agent is awake (17:00-24:00 is "relax").
    assert hook(ctx, "pre_step", datetime(2026, 3, 2, 22, 0)).startswith("Now (17:00-24:00)")


def test_night_out_is_not_skipped_and_next_day_uses_yesterdays_last_place(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    night = {
        "date": "2026-03-02",
        "segments": [
            seg("00:00", "20:00", "rest", "home-3"),
            seg("20:00", "24:00", "party", "bar-1"),
        ],
    }
    save(ctx, night)
    out = hook(ctx, "pre_step", datetime(2026, 3, 2, 23, 30))
    assert out.startswith("Now (20:00-24:00): party at bar-1")
    # Just after midnight there is no plan yet; the agent is still where yesterday ended.
    out = hook(ctx, "pre_step", datetime(2026, 3, 3, 0, 15))
    assert out.startswith("No plan for 2026-03-03")
    ctx2 = make_ctx(agent="agent-2")
    save(ctx2, DAY)
    out = hook(ctx2, "pre_step", datetime(2026, 3, 3, 0, 15))
    assert json.loads(out)["decision"] == "skip"


def _needs(ctx: SkillScriptContext, when: datetime) -> dict[str, float]:
    """The needs the pre_step hook reports at ``when`` ("Needs: energy 0.80, ...")."""
    out = hook(ctx, "pre_step", when)
    line = next(x for x in out.splitlines() if x.startswith("Needs: "))
    pairs = (part.split() for part in line.removeprefix("Needs: ").split(", "))
    return {k: float(v) for k, v in pairs}


def test_needs_decay_with_time_and_meals_restore_hunger(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    save(
        ctx,
        {
            "date": "2026-03-02",
            "segments": [
                seg("00:00", "07:00", "sleep", "home-3"),
                seg("07:00", "12:00"),
                seg("12:00", "13:00", "lunch", "cafe-1"),
                seg("13:00", "24:00"),
            ],
        },
    )
    start = _needs(ctx, datetime(2026, 3, 2, 8, 0))
    after_work = _needs(ctx, datetime(2026, 3, 2, 11, 0))
    assert after_work["energy"] < start["energy"]
    assert after_work["hunger"] > start["hunger"]
    assert after_work["social"] >= start["social"]  # work is mildly social
    lunch = _needs(ctx, datetime(2026, 3, 2, 12, 45))
    assert lunch["hunger"] < after_work["hunger"]
    assert lunch["social"] > after_work["social"]  # a cafe is a social place
    for value in lunch.values():
        assert 0.0 <= value <= 1.0


def test_needs_depend_only_on_the_plan_and_the_clock(make_ctx: Ctx) -> None:
    """No hidden state: the same plan and time give the same needs whatever was called
    before, and a hook call writes no file (so a resumed run agrees with an uninterrupted
    one)."""
    fresh, busy = make_ctx(agent="agent-1"), make_ctx(agent="agent-2")
    save(fresh, DAY)
    save(busy, DAY)
    for hour in (8, 9, 13, 10):
        hook(busy, "pre_step", datetime(2026, 3, 2, hour, 0))
    state = busy.workspace_root / "state"
    before = sorted((p, p.stat().st_mtime_ns) for p in state.rglob("*") if p.is_file())
    assert _needs(busy, datetime(2026, 3, 2, 15, 0)) == _needs(fresh, datetime(2026, 3, 2, 15, 0))
    after = sorted((p, p.stat().st_mtime_ns) for p in state.rglob("*") if p.is_file())
    assert before == after
    assert [p.name for p, _ in after] == ["story.yaml"]


def test_hunger_suggests_a_valid_meal_revision(make_ctx: Ctx) -> None:
    ctx = make_ctx(datetime(2026, 3, 2, 15, 0))
    save(ctx, DAY)
    hook(ctx, "pre_step", datetime(2026, 3, 2, 8, 0))
    out = hook(ctx, "pre_step", datetime(2026, 3, 2, 15, 0))  # 7 hours of work, no meal
    assert "You are hungry" in out
    (_, _move), (tool, call) = suggestions(out)
    assert tool == "execute_skill_script" and call["args"][:2] == ["revise", "--json"]
    change = json.loads(call["args"][2])
    assert change == {"insert": seg("15:00", "15:45", "snack", "cafe-1"), "reason": "hungry"}
    dg.entrypoint(call["args"], ctx)
    after = hook(ctx, "pre_step", datetime(2026, 3, 2, 15, 15))
    assert after.startswith("Now (15:00-15:45): snack at cafe-1")
    assert "You are hungry" not in after


@pytest.mark.parametrize(
    ("hour", "meal", "place"),
    [(9, "snack", "cafe-1"), (19, "dinner", "restaurant-2")],
)
def test_meal_suggestion_depends_on_the_time(
    make_ctx: Ctx, hour: int, meal: str, place: str
) -> None:
    ctx = make_ctx(profile={**WORKER, "wake_hour": 4})
    save(ctx, {"date": "2026-03-02", "segments": [seg("00:00", "24:00")]})
    hook(ctx, "pre_step", datetime(2026, 3, 2, hour - 5, 0))
    out = hook(ctx, "pre_step", datetime(2026, 3, 2, hour, 0))
    change = json.loads(suggestions(out)[-1][1]["args"][2])
    assert (change["insert"]["activity"], change["insert"]["place"]) == (meal, place)


def test_meal_suggestion_falls_back_to_home(make_ctx: Ctx) -> None:
    ctx = make_ctx(profile={"home": "home-9", "wake_hour": 5})
    save(ctx, {"date": "2026-03-02", "segments": [seg("00:00", "24:00")]})
    hook(ctx, "pre_step", datetime(2026, 3, 2, 6, 0))
    out = hook(ctx, "pre_step", datetime(2026, 3, 2, 14, 0))
    change = json.loads(suggestions(out)[-1][1]["args"][2])
    assert change["insert"]["place"] == "home-9"


def test_post_step_is_a_quality_gate(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    out = hook(ctx, "post_step", MONDAY)
    text, decision = parse_hook_output(out, skill_id="built-in@daily-guidance", hook="post_step")
    assert decision is not None and decision.kind == "retry"
    assert "You have no valid plan for today yet" in decision.feedback
    assert suggestions(decision.feedback) == [
        ("execute_skill_script", {"name": "built-in@daily-guidance", "args": ["draft"]})
    ]
    assert text == "No plan for 2026-03-02 after this step."
    save(ctx, DAY)
    assert hook(ctx, "post_step", MONDAY) == "ok: plan for 2026-03-02 has 3 segments"


def test_hooks_see_a_plan_edited_on_disk(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    save(ctx, DAY)
    assert hook(ctx, "pre_step", MONDAY).startswith("Now (08:00-17:00): work")
    path = (
        ctx.workspace_root / "state" / "built-in" / "daily-guidance" / "2026-03-02" / "story.yaml"
    )
    edited = {**story(ctx), "segments": [seg("00:00", "24:00", "holiday", "home-3")]}
    path.write_text(yaml.safe_dump(edited))
    assert hook(ctx, "pre_step", MONDAY).startswith("Now (00:00-24:00): holiday at home-3")
    path.write_text("segments: [unclosed")  # broken by hand: treated as no plan
    assert hook(ctx, "pre_step", MONDAY).startswith("No plan for 2026-03-02")


def test_a_plan_saved_again_at_once_is_what_the_next_hook_sees(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    for place in ("office-1", "office-2", "office-3", "office-1"):
        save(ctx, {"date": "2026-03-02", "segments": [seg("00:00", "24:00", "work", place)]})
        assert hook(ctx, "pre_step", MONDAY).startswith(f"Now (00:00-24:00): work at {place}")


def test_hooks_of_many_agents_on_threads_at_once_each_see_their_own_plan(make_ctx: Ctx) -> None:
    # A host runs the hooks of different agents on its worker threads at the same time.
    ctxs = [make_ctx(agent=f"agent-{i}") for i in range(40)]
    for i, ctx in enumerate(ctxs):
        save(ctx, {"date": "2026-03-02", "segments": [seg("00:00", "24:00", "work", f"w-{i}")]})
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda c: hook(c, "pre_step", MONDAY), ctxs * 5))
    for i, out in enumerate(outs):
        assert out.startswith(f"Now (00:00-24:00): work at w-{i % 40}\n"), out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--args-json", "{bad"], "--args-json '\\{bad' is not a hook payload"),
        (["--args-json"], "--args-json '' is not a hook payload"),
        (["--args-json", '{"time": "2026-03-02T09:00:00"}'], "is not a hook payload"),
        (["--args-json", '{"hook_type": "mid_step"}'], "unknown hook_type 'mid_step'"),
    ],
)
def test_bad_hook_payloads(make_ctx: Ctx, argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dg.entrypoint(argv, make_ctx())


def test_hook_payload_without_time_uses_the_context_time(make_ctx: Ctx) -> None:
    ctx = make_ctx(datetime(2026, 3, 2, 3, 0))
    out = dg.entrypoint(["--args-json", '{"hook_type": "pre_step"}'], ctx)
    assert json.loads(out)["decision"] == "skip"


def test_workspace_without_profile_uses_defaults(make_ctx: Ctx) -> None:
    ctx = make_ctx(profile=None, agent="nobody")
    plan = draft(ctx)
    assert {s["place"] for s in plan["segments"]} == {"home"}
    (ctx.workspace_root / "profile.json").write_text("[1, 2]")  # not an object: ignored
    assert draft(ctx) == plan


def test_saved_plans_are_readable_yaml_in_a_stable_key_order(make_ctx: Ctx) -> None:
    ctx = make_ctx()
    tricky = seg("18:00", "19:00", 'dinner: "soup" & bread\ttonight', "cafe-1")
    save(ctx, {"date": "2026-03-02", "segments": [seg("08:00", "17:00"), tricky]})
    path = (
        ctx.workspace_root / "state" / "built-in" / "daily-guidance" / "2026-03-02" / "story.yaml"
    )
    text = path.read_text("utf-8")
    loaded = yaml.safe_load(text)
    assert list(loaded) == ["date", "agent_id", "segments", "revisions", "revision_log", "saved_at"]
    assert loaded["segments"] == [seg("08:00", "17:00"), tricky]
    assert text.startswith("date: '2026-03-02'\nagent_id: agent-1\nsegments:\n- start: 08:00\n")


def test_a_namesake_in_another_namespace_keeps_its_own_files_and_calls(
    make_ctx: Callable[..., SkillScriptContext],
) -> None:
    """A copy of the skill as custom@daily-guidance (an AS2 folder of that name) shares
    neither the built-in's state folder nor its SUGGESTED calls."""
    builtin = make_ctx()
    other = dataclasses.replace(builtin, skill_id="custom@daily-guidance")
    save(builtin)
    state = builtin.workspace_root / "state"
    assert sorted(p.relative_to(state).parts[:2] for p in state.rglob("story.yaml")) == [
        ("built-in", "daily-guidance")
    ]
    out = dg.entrypoint(["draft"], other)
    ((tool, args),) = suggestions(out)
    assert (tool, args["name"], args["args"][:2]) == (
        "execute_skill_script",
        "custom@daily-guidance",
        ["plan", "--json"],
    )
    dg.entrypoint(["plan", "--json", out.splitlines()[0]], other)
    assert sorted(p.relative_to(state).parts[:2] for p in state.rglob("story.yaml")) == [
        ("built-in", "daily-guidance"),
        ("custom", "daily-guidance"),
    ]
