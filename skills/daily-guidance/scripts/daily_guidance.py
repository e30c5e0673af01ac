"""daily-guidance: draft, check and follow a day plan; also the skill's pre_step / post_step hooks.

The reference skill: copy its layout. This file is the small entry script; its siblings
(imported with relative imports, which the runner supports in-process) do the work:

- ``common``: clock times, the profile, places, ``SUGGESTED:`` lines;
- ``drafting``: a plan from the profile, deterministic per agent and date;
- ``planfile``: checking a plan, and ``story.yaml`` on disk (``yaml.safe_dump``);
- ``needs``: energy, hunger and social, a pure function of the plan and the clock.

State, per agent: ``<workspace>/state/<namespace>/daily-guidance/<date>/story.yaml`` (the plan, its
revisions and their log). Output is returned, never printed; the script never touches
``os.environ``, the cwd or ``sys.stdout``.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from typing import Any

from .common import (
    DAY_END,
    Ctx,
    favourites,
    hm,
    home,
    hours,
    is_meal,
    load_profile,
    minute_of,
    move_to,
    suggest,
)
from .drafting import draft
from .needs import needs_at, needs_line
from .planfile import (
    check_plan,
    check_segment,
    json_arg,
    load_story,
    rejected,
    save_story,
)

_COMMANDS = ("draft", "plan", "revise", "status")


def _call(ctx: Ctx, *args: str) -> dict[str, Any]:
    """This skill's script called with ``args``, by its own id: a skill of the same name in
    another namespace never receives the call."""
    return {"name": ctx.skill_id, "args": list(args)}


def entrypoint(argv: list[str], ctx: Ctx) -> str:
    """Commands: draft | plan --json PLAN | revise --json CHANGE | status | --args-json HOOK."""
    argv = list(argv)
    if "--args-json" in argv:
        return _hook(argv, ctx)
    command = argv[0] if argv else ""
    if command == "draft":
        plan = draft(load_profile(ctx), ctx.agent_id, ctx.time.date())
        text = json.dumps(plan, separators=(",", ":"))
        args = _call(ctx, "plan", "--json", text)
        return f"{text}\n{suggest('execute_skill_script', args)}"
    if command == "plan":
        return _plan(argv, ctx)
    if command == "revise":
        return _revise(argv, ctx)
    if command == "status":
        return _status(ctx)
    raise ValueError(
        f"daily-guidance: unknown command {command!r}; use one of {', '.join(_COMMANDS)}"
    )


# -- commands --------------------------------------------------------------------------------


def _plan(argv: list[str], ctx: Ctx) -> str:
    plan, problems = check_plan(json_arg(argv, "plan", '{"date": ..., "segments": [...]}'))
    if problems:
        raise rejected("plan", problems)
    day = date.fromisoformat(plan["date"])
    old = load_story(ctx, day) or {"revisions": -1, "revision_log": []}
    log = list(old["revision_log"])
    if old["revisions"] >= 0:
        log.append({"at": ctx.time.isoformat(), "change": "replaced the whole plan", "reason": ""})
    story = {
        "date": plan["date"],
        "agent_id": ctx.agent_id,
        "segments": plan["segments"],
        "revisions": int(old["revisions"]) + 1,
        "revision_log": log,
        "saved_at": ctx.time.isoformat(),
    }
    save_story(ctx, story)
    return f"Plan saved: {len(plan['segments'])} segments for {plan['date']}"


def _revise(argv: list[str], ctx: Ctx) -> str:
    req = json_arg(argv, "revise", '{"insert": {...}} or {"drop": "HH:MM"}')
    if not isinstance(req, dict) or ("insert" in req) == ("drop" in req):
        raise ValueError(
            'daily-guidance revise: pass exactly one of {"insert": {start, end, activity, '
            'place}} or {"drop": "HH:MM"}, optionally with "reason"'
        )
    day = date.fromisoformat(str(req["date"])) if "date" in req else ctx.time.date()
    story = load_story(ctx, day)
    if story is None:
        raise ValueError(
            f"daily-guidance revise: no plan for {day.isoformat()}; draft one with `draft` "
            "and submit it with `plan --json` first"
        )
    segments: list[dict[str, str]] = [dict(s) for s in story["segments"]]
    now_place = ""
    if "insert" in req:
        problems: list[str] = []
        new = check_segment(req["insert"], "insert", problems)
        if new is None:
            raise rejected("revision", problems)
        segments = _carve(segments, new)
        change = f"inserted {new['start']}-{new['end']} {new['activity']} at {new['place']}"
        now = hm(minute_of(ctx.time))
        if new["start"] <= now < new["end"] and ctx.time.date() == day:
            now_place = new["place"]
    else:
        starts = [s["start"] for s in segments]
        if req["drop"] not in starts:
            raise ValueError(
                f"daily-guidance revise: no segment starts at {req['drop']!r} on "
                f"{day.isoformat()}; drop one of {', '.join(starts)}"
            )
        dropped = segments.pop(starts.index(req["drop"]))
        change = f"dropped {dropped['start']}-{dropped['end']} {dropped['activity']}"
    plan, problems = check_plan({"date": day.isoformat(), "segments": segments})
    if problems:
        raise rejected("revision", problems)
    count = int(story.get("revisions", 0)) + 1
    log = [
        *story.get("revision_log", []),
        {"at": ctx.time.isoformat(), "change": change, "reason": str(req.get("reason", ""))},
    ]
    save_story(
        ctx, {**story, "segments": plan["segments"], "revisions": count, "revision_log": log}
    )
    out = f"Plan revised (revision {count}): {change}. Now {len(segments)} segments."
    return f"{out}\n{move_to(now_place)}" if now_place else out


def _carve(segments: list[dict[str, str]], new: dict[str, str]) -> list[dict[str, str]]:
    """``segments`` with ``new`` inserted: it takes its time from the ones it overlaps,
    splitting a segment that starts before and ends after it."""
    kept: list[dict[str, str]] = []
    for s in segments:
        if s["end"] <= new["start"] or s["start"] >= new["end"]:
            kept.append(s)
            continue
        if s["start"] < new["start"]:
            kept.append({**s, "end": new["start"]})
        if s["end"] > new["end"]:
            kept.append({**s, "start": new["end"]})
    return sorted([*kept, new], key=lambda s: s["start"])


def _status(ctx: Ctx) -> str:
    day = ctx.time.date()
    story = load_story(ctx, day)
    if story is None:
        return f"No plan for {day.isoformat()}. Draft one with `draft` and submit it with `plan`."
    needs = needs_at(story, ctx.time, load_profile(ctx))
    lines = [*_now_lines(story, ctx.time), needs_line(needs)]
    lines.append(f"Plan for {day.isoformat()} ({story.get('revisions', 0)} revisions):")
    lines += [
        f"- {s['start']}-{s['end']} {s['activity']} at {s['place']}" for s in story["segments"]
    ]
    return "\n".join(lines)


# -- hooks -----------------------------------------------------------------------------------


def _describe(seg: dict[str, str]) -> str:
    return f"({seg['start']}-{seg['end']}): {seg['activity']} at {seg['place']}"


def _segment_at(segments: list[dict[str, str]], at: str) -> dict[str, str] | None:
    return next((s for s in segments if s["start"] <= at < s["end"]), None)


def _now_lines(story: dict[str, Any], now: datetime) -> list[str]:
    at = hm(minute_of(now))
    segments = story["segments"]
    cur = _segment_at(segments, at)
    nxt = next((s for s in segments if s["start"] > at), None)
    return [
        f"Now {_describe(cur)}" if cur else "Now: free time (nothing planned)",
        f"Next {_describe(nxt)}" if nxt else "Next: nothing more planned today",
    ]


def _meal_revision(ctx: Ctx, now: datetime, profile: dict[str, Any]) -> str:
    minute = minute_of(now)
    fav = favourites(profile)
    late = 11 * 60 <= minute < 14 * 60 or minute >= 18 * 60
    order = ("restaurant", "cafe") if late else ("cafe", "restaurant")
    place = next((fav[c] for c in order if c in fav), home(profile))
    meal = "lunch" if 11 * 60 <= minute < 15 * 60 else "dinner" if minute >= 18 * 60 else "snack"
    seg = {
        "start": hm(minute),
        "end": hm(min(minute + 45, DAY_END)),
        "activity": meal,
        "place": place,
    }
    req = json.dumps({"insert": seg, "reason": "hungry"})
    return suggest("execute_skill_script", _call(ctx, "revise", "--json", req))


def _asleep_at_home(
    ctx: Ctx, story: dict[str, Any] | None, now: datetime, profile: dict[str, Any]
) -> bool:
    """Night (23:00 to the wake hour) or a planned sleep, at home: the agent sits out."""
    at = hm(minute_of(now))
    wake = hm(min(hours(profile.get("wake_hour"), 7.0), DAY_END))
    cur = _segment_at(story["segments"], at) if story else None
    if not (at >= "23:00" or at < wake or (cur is not None and cur["activity"].lower() == "sleep")):
        return False
    # Where the agent is: the last planned place at or before now, else where yesterday's
    # plan ended, else home (agents start the run at home).
    earlier = [s for s in story["segments"] if s["start"] <= at] if story else []
    if not earlier:
        old = load_story(ctx, now.date() - timedelta(days=1))
        earlier = old["segments"] if old else []
    place = earlier[-1]["place"] if earlier else home(profile)
    return place == home(profile)


def _pre_step(ctx: Ctx, now: datetime) -> str:
    profile = load_profile(ctx)
    day = now.date()
    story = load_story(ctx, day)
    if _asleep_at_home(ctx, story, now, profile):
        return json.dumps({"decision": "skip", "message": "Asleep at home."})
    if story is None:
        return (
            f"No plan for {day.isoformat()}. Draft one with `draft` and submit it with "
            "`plan --json`.\n" + suggest("execute_skill_script", _call(ctx, "draft"))
        )
    cur = _segment_at(story["segments"], hm(minute_of(now)))
    activity = cur["activity"] if cur else "free time"
    needs = needs_at(story, now, profile)
    lines = _now_lines(story, now)
    lines.append(f"Needs: {needs_line(needs)}")
    if cur is not None:
        lines.append(move_to(cur["place"]))
    if float(needs["hunger"]) > 0.75 and not is_meal(activity):
        lines.append("You are hungry: fit a meal into the plan.")
        lines.append(_meal_revision(ctx, now, profile))
    return "\n".join(lines)


def _post_step(ctx: Ctx, now: datetime) -> str:
    story = load_story(ctx, now.date())
    if story is not None:
        return f"ok: plan for {story['date']} has {len(story['segments'])} segments"
    return json.dumps(
        {
            "decision": "retry",
            "message": f"No plan for {now.date().isoformat()} after this step.",
            "feedback": "You have no valid plan for today yet; draft one and submit it "
            "with plan --json.\n" + suggest("execute_skill_script", _call(ctx, "draft")),
        }
    )


def _hook(argv: list[str], ctx: Ctx) -> str:
    at = argv.index("--args-json") + 1
    raw = argv[at] if at < len(argv) else ""
    try:
        payload = json.loads(raw)
        hook = payload["hook_type"]
        now = datetime.fromisoformat(payload["time"]) if "time" in payload else ctx.time
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"daily-guidance hook: --args-json {raw!r} is not a hook payload ({exc}); expected "
            '{"hook_type": "pre_step"|"post_step", "time": ISO, ...}'
        ) from None
    if hook == "pre_step":
        return _pre_step(ctx, now)
    if hook == "post_step":
        return _post_step(ctx, now)
    raise ValueError(f"daily-guidance hook: unknown hook_type {hook!r}; use pre_step or post_step")
