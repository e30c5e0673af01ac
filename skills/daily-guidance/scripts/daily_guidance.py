"""daily-guidance: draft, check and follow a day plan; also the skill's pre_step / post_step hooks.

The skill runner loads this file by path (it is not a package), so everything lives here.
State, per agent: ``<workspace>/state/daily_guidance/<date>/story.yaml`` (the plan and its
revisions). Needs (energy, hunger, social) are not stored: they are a pure function of the
day's plan and the clock, integrated from the wake hour, so a resumed run and an
uninterrupted one agree and a hook call writes nothing. Output is returned, never printed;
the script never touches ``os.environ``, the cwd or ``sys.stdout``.

The pre_step hook runs every step for every agent, so parsed files are cached per process,
keyed by path and ``(mtime_ns, size)``: a cached call costs a few ``stat`` calls.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import re
import sys
import threading
from collections.abc import Callable
from datetime import date, datetime, timedelta
from json.encoder import encode_basestring as _quote
from pathlib import Path
from typing import Any, Protocol

import yaml

_STATE = "daily_guidance"
_COMMANDS = ("draft", "plan", "revise", "status")
_DAY_END = 24 * 60
_MEALS = frozenset({"breakfast", "brunch", "lunch", "dinner", "meal", "snack"})
_SOCIAL_PLACES = frozenset({"cafe", "restaurant", "park", "gym", "bar"})
_VERB = dict(park="walk", gym="workout", shop="shopping", cafe="coffee", restaurant="dinner out")
# Interests that point at a kind of place; anything else falls back to a substring match on
# the category names ("cafes" -> cafe) and then to a random favourite.
_INTEREST_PLACES = {
    word: category
    for category, words in (
        ("park", "running jogging walking hiking nature dogs cycling"),
        ("gym", "fitness sport sports yoga swimming"),
        ("cafe", "coffee reading books chess art music"),
        ("shop", "shopping fashion cooking"),
        ("restaurant", "food dining friends wine"),
    )
    for word in words.split()
}
_TIME_RE = re.compile(r"^([01]\d|2[0-4]):([0-5]\d)$")
_SEGMENT_KEYS = ("start", "end", "activity", "place")
_SEGMENT_SET = frozenset(_SEGMENT_KEYS)
# Bounded so that 10,000 resident agents over many simulated days cannot grow memory forever.
_CACHE_LIMIT = 50_000
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Ctx(Protocol):
    @property
    def workspace_root(self) -> Path: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def time(self) -> datetime: ...


_files: dict[str, tuple[int, int, Any]] = {}


def _cached_read(path: str, parse: Callable[[str], Any]) -> Any:
    """The parsed content of ``path``, re-parsed only when it changed; None when the file is
    missing or unreadable (an unreadable plan is then simply drafted and saved again)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    hit = _files.get(path)
    if hit is not None and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
        return hit[2]
    try:
        with open(path, encoding="utf-8") as f:
            value = parse(f.read())
    except (ValueError, yaml.YAMLError):
        value = None
    return _remember(path, value)


def _remember(path: str, value: Any) -> Any:
    if len(_files) >= _CACHE_LIMIT:
        _files.clear()
        _shared_segments.clear()
    st = os.stat(path)
    value = _shared(value)
    _files[path] = (st.st_mtime_ns, st.st_size, value)
    return value


# Equal plan segments are one object for every agent: thousands of agents follow similar
# days, and a cached plan is never mutated (revisions copy it first).
_shared_segments: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}


def _shared(value: Any) -> Any:
    """``value`` (parsed JSON / YAML) with interned strings and shared segment dicts, so
    that the cache holds a few hundred bytes per agent instead of kilobytes."""
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= 64 else value
    if isinstance(value, list):
        return [_shared(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {sys.intern(k) if isinstance(k, str) else k: _shared(v) for k, v in value.items()}
    if out.keys() == _SEGMENT_SET and all(isinstance(v, str) for v in out.values()):
        key = tuple(out.items())
        return _shared_segments.setdefault(key, out)
    return out


def _write_atomic(path: str, text: str, value: Any) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        f = open(tmp, "w", encoding="utf-8")  # noqa: SIM115 (closed below)
    except FileNotFoundError:  # the day's folder: made on first use, not checked every save
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(tmp, "w", encoding="utf-8")  # noqa: SIM115
    with f:
        f.write(text)
    os.replace(tmp, path)
    _remember(path, value)


def _scalar(value: Any) -> str | None:
    """``value`` as a YAML flow scalar (JSON's quoting is valid YAML), or None."""
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bool | int | float) or value is None:
        return json.dumps(value)
    return None


_YAML_WORDS = frozenset(["y", "n", "yes", "no", "on", "off", "true", "false", "null"])


def _key(key: str) -> str:
    """A mapping key, bare when YAML reads it back as the same string."""
    plain = key.isidentifier() and key.isascii() and key.lower() not in _YAML_WORDS
    return key if plain else _quote(key)


def _flow(value: Any) -> str | None:
    """A scalar, or a mapping / list of scalars, as one line of YAML; None otherwise."""
    text = _scalar(value)
    if text is not None:
        return text
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        items = [(_key(k), _scalar(v)) for k, v in value.items()]
        if all(v is not None for _, v in items):
            return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if isinstance(value, list):
        parts = [_scalar(v) for v in value]
        if all(p is not None for p in parts):
            return "[" + ", ".join(p for p in parts if p is not None) + "]"
    return None


def _dump_yaml(story: dict[str, Any]) -> str:
    """``story`` as block YAML, one line per list item. Written by hand because PyYAML's
    emitter costs ~1.5 ms per plan, which every agent pays on the first tick of every day;
    shapes this writer does not know go to PyYAML."""
    lines: list[str] = []
    for key, value in story.items():
        name = _key(key)
        flat = _flow(value) if not isinstance(value, list) or not value else None
        if flat is not None:
            lines.append(f"{name}: {flat}")
            continue
        items = [_flow(v) for v in value] if isinstance(value, list) else [None]
        if any(i is None for i in items):
            return str(yaml.dump(story, Dumper=_Dumper, sort_keys=False, allow_unicode=True))
        lines.append(f"{name}:")
        lines.extend(f"- {i}" for i in items)
    return "\n".join(lines) + "\n"


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)


# -- time and places ------------------------------------------------------------------------


def _hm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _minutes(text: object) -> int | None:
    m = _TIME_RE.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    value = int(m.group(1)) * 60 + int(m.group(2))
    return value if value <= _DAY_END else None


def _hours(value: object, default: float) -> int:
    hours = value if isinstance(value, int | float) and not isinstance(value, bool) else default
    return round(float(hours) * 60)


def _path(ctx: _Ctx, day: date, name: str) -> str:
    # Plain strings: pathlib's parsing costs more than the rest of a cached hook call.
    return f"{ctx.workspace_root}{os.sep}state{os.sep}{_STATE}{os.sep}{day}{os.sep}{name}"


def _profile(ctx: _Ctx) -> dict[str, Any]:
    value = _cached_read(f"{ctx.workspace_root}{os.sep}profile.json", json.loads)
    return value if isinstance(value, dict) else {}


def _home(profile: dict[str, Any]) -> str:
    home = profile.get("home")
    return home if isinstance(home, str) and home else "home"


def _favourites(profile: dict[str, Any]) -> dict[str, str]:
    fav = profile.get("favourites")
    if not isinstance(fav, dict):
        return {}
    return {k: v for k, v in fav.items() if isinstance(v, str) and v}


def _category(place: str, profile: dict[str, Any]) -> str:
    if place == _home(profile):
        return "home"
    for cat, fav in _favourites(profile).items():
        if fav == place:
            return cat
    m = re.match(r"[a-z]+", place.lower())
    return m.group(0) if m else ""


def _is_meal(activity: str) -> bool:
    return any(w in _MEALS for w in activity.lower().replace("-", " ").split())


# -- drafting -------------------------------------------------------------------------------


class _Day:
    """Builds contiguous segments from midnight; a segment that would end before the cursor
    is dropped, so that odd profiles (late work, early bedtime) still give a valid plan."""

    def __init__(self) -> None:
        self.t = 0
        self.segments: list[dict[str, str]] = []

    def add(self, end: int, activity: str, place: str) -> None:
        end = min(end, _DAY_END)
        if end > self.t:
            seg = {"start": _hm(self.t), "end": _hm(end), "activity": activity, "place": place}
            self.segments.append(seg)
            self.t = end


def _rng(agent_id: str, day: date, salt: str = "") -> random.Random:
    digest = hashlib.sha256(f"{agent_id}|{day.isoformat()}|{salt}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _outing(
    profile: dict[str, Any], rng: random.Random, prefer: tuple[str, ...]
) -> tuple[str, str]:
    """A (category, place) among the agent's favourites, by interest first; ("", "") if none."""
    fav = _favourites(profile)
    liked: list[str] = []
    interests = profile.get("interests")
    for interest in interests if isinstance(interests, list) else []:
        word = str(interest).lower()
        cat = _INTEREST_PLACES.get(word) or next((c for c in fav if c in word), "")
        if cat in fav and cat not in liked:
            liked.append(cat)
    pool = liked or [c for c in prefer if c in fav] or sorted(fav)
    if not pool:
        return "", ""
    cat = rng.choice(pool)
    return cat, fav[cat]


def _draft(profile: dict[str, Any], agent_id: str, day: date) -> dict[str, Any]:
    rng = _rng(agent_id, day)
    home = _home(profile)
    occupation = str(profile.get("occupation", "")).lower()
    weekend = day.weekday() >= 5
    wake = _hours(profile.get("wake_hour"), 7.0) + rng.choice((-15, 0, 0, 15))
    wake = min(max(wake, 4 * 60), 11 * 60) + (60 if weekend else 0)
    bed = rng.choice((22 * 60, 22 * 60 + 30, 23 * 60))
    student = occupation in {"student", "pupil"}
    site = profile.get("school") if student else None
    site = site or profile.get("work")
    d = _Day()
    d.add(wake, "sleep", home)
    if isinstance(site, str) and site and occupation != "retiree" and not weekend:
        start = _hours(profile.get("work_start"), 8.0 if student else 9.0)
        end = _hours(profile.get("work_end"), 15.0 if student else 17.0)
        job = "school" if student else "work"
        commute = rng.choice((20, 30, 30, 45))
        d.add(start - commute, "breakfast", home)
        d.add(start, "commute", site)
        if end - start >= 5 * 60:
            lunch = min(max(12 * 60 + rng.choice((-30, 0, 30)), d.t + 60), end - 90)
            d.add(lunch, job, site)
            fav = _favourites(profile)
            out = [fav[c] for c in ("cafe", "restaurant") if c in fav]
            where = rng.choice(out) if out and not student and rng.random() < 0.5 else site
            d.add(d.t + rng.choice((45, 60)), "lunch", where)
        d.add(end, job, site)
        prefer = ("shop", "park") if occupation == "parent" else ("gym", "park", "cafe")
        if rng.random() < 0.75:
            cat, place = _outing(profile, rng, prefer)
            if place:
                d.add(d.t + rng.choice((60, 90, 120)), _VERB.get(cat, cat), place)
    else:
        d.add(d.t + 60, "breakfast", home)
        cat, place = _outing(profile, rng, ("park", "cafe", "shop"))
        if place:
            d.add(d.t + rng.choice((90, 120)), _VERB.get(cat, cat), place)
        d.add(12 * 60, "chores", home)
        restaurant = _favourites(profile).get("restaurant")
        d.add(d.t + 60, "lunch", restaurant if restaurant and rng.random() < 0.3 else home)
        d.add(max(d.t + 60, 15 * 60), "rest", home)
        if rng.random() < 0.5:
            cat, place = _outing(profile, rng, ("shop", "park", "cafe"))
            if place:
                d.add(d.t + rng.choice((60, 90)), _VERB.get(cat, cat), place)
    # No dinner out in the evening: eat at home.
    if not any(_is_meal(s["activity"]) for s in d.segments if s["start"] >= "16:00"):
        d.add(max(d.t + 30, 18 * 60 + 30), "free time", home)
        d.add(d.t + 60, "dinner", home)
    d.add(bed, "relax", home)
    d.add(_DAY_END, "sleep", home)
    return {"date": day.isoformat(), "segments": d.segments}


# -- checking and storing plans --------------------------------------------------------------


def _check_segment(seg: object, label: str, problems: list[str]) -> dict[str, str] | None:
    if not isinstance(seg, dict):
        problems.append(f"{label}: must be an object with keys {', '.join(_SEGMENT_KEYS)}")
        return None
    extra = sorted(set(seg) - set(_SEGMENT_KEYS))
    if extra:
        problems.append(f"{label}: unknown keys {extra}; allowed: {', '.join(_SEGMENT_KEYS)}")
    start, end = _minutes(seg.get("start")), _minutes(seg.get("end"))
    ok = True
    for key, value in (("start", start), ("end", end)):
        if value is None:
            problems.append(f"{label}: {key} {seg.get(key)!r} is not a time HH:MM in 00:00..24:00")
            ok = False
    if start is not None and end is not None and end <= start:
        problems.append(f"{label}: end {_hm(end)} must be after start {_hm(start)}")
        ok = False
    for key in ("activity", "place"):
        value = seg.get(key)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"{label}: {key} must be a non-empty string")
            ok = False
    if not ok or extra:
        return None
    return {k: str(seg[k]).strip() for k in _SEGMENT_KEYS}


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _check_plan(obj: object) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    if not isinstance(obj, dict):
        return {}, ["the plan must be a JSON object with keys date and segments"]
    day = obj.get("date")
    if not (isinstance(day, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", day) and _is_date(day)):
        problems.append(f"date {day!r} is not a date YYYY-MM-DD")
    raw = obj.get("segments")
    if not isinstance(raw, list) or not raw:
        problems.append("segments must be a non-empty list of {start, end, activity, place}")
        raw = []
    segments = []
    for i, seg in enumerate(raw):
        checked = _check_segment(seg, f"segment {i + 1}", problems)
        if checked is not None:
            segments.append(checked)
    for prev, seg in itertools.pairwise(segments):
        if seg["start"] < prev["end"]:
            problems.append(
                f"segment {seg['start']}-{seg['end']} starts before the previous one "
                f"({prev['start']}-{prev['end']}) ends; segments must be sorted and not overlap"
            )
    return {"date": day, "segments": segments}, problems


def _reject(what: str, problems: list[str]) -> ValueError:
    return ValueError(
        f"{what} rejected: {'; '.join(problems)}. Fix the plan and submit it again "
        "(`draft` prints a valid one)"
    )


def _json_arg(argv: list[str], command: str, shape: str) -> Any:
    if "--json" not in argv or argv.index("--json") + 1 >= len(argv):
        raise ValueError(f"daily-guidance {command}: missing --json '{shape}'; pass it as one arg")
    text = argv[argv.index("--json") + 1]
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"daily-guidance {command}: --json is not valid JSON ({exc})") from None


def _load_story(ctx: _Ctx, day: date) -> dict[str, Any] | None:
    story = _cached_read(_path(ctx, day, "story.yaml"), _yaml_load)
    return story if isinstance(story, dict) and story.get("segments") else None


def _save_story(ctx: _Ctx, story: dict[str, Any]) -> None:
    text = _dump_yaml(story)
    path = _path(ctx, date.fromisoformat(story["date"]), "story.yaml")
    _write_atomic(path, text, story)


def _describe(seg: dict[str, str]) -> str:
    return f"({seg['start']}-{seg['end']}): {seg['activity']} at {seg['place']}"


def _suggest(tool: str, args: dict[str, Any]) -> str:
    return f"SUGGESTED: {tool} {json.dumps(args)}"


def _move_to(place: str) -> str:
    return _suggest("ask_env", {"module": "city", "action": "move_to", "args": {"place": place}})


def _cmd_plan(argv: list[str], ctx: _Ctx) -> str:
    plan, problems = _check_plan(_json_arg(argv, "plan", '{"date": ..., "segments": [...]}'))
    if problems:
        raise _reject("plan", problems)
    day = date.fromisoformat(plan["date"])
    old = _load_story(ctx, day) or {"revisions": -1, "revision_log": []}
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
    _save_story(ctx, story)
    return f"Plan saved: {len(plan['segments'])} segments for {plan['date']}"


def _cmd_revise(argv: list[str], ctx: _Ctx) -> str:
    req = _json_arg(argv, "revise", '{"insert": {...}} or {"drop": "HH:MM"}')
    if not isinstance(req, dict) or ("insert" in req) == ("drop" in req):
        raise ValueError(
            'daily-guidance revise: pass exactly one of {"insert": {start, end, activity, '
            'place}} or {"drop": "HH:MM"}, optionally with "reason"'
        )
    day = date.fromisoformat(str(req["date"])) if "date" in req else ctx.time.date()
    story = _load_story(ctx, day)
    if story is None:
        raise ValueError(
            f"daily-guidance revise: no plan for {day.isoformat()}; draft one with `draft` "
            "and submit it with `plan --json` first"
        )
    segments: list[dict[str, str]] = [dict(s) for s in story["segments"]]
    now_place = ""
    if "insert" in req:
        problems: list[str] = []
        new = _check_segment(req["insert"], "insert", problems)
        if new is None:
            raise _reject("revision", problems)
        kept: list[dict[str, str]] = []
        # The new segment carves its time out of the ones it overlaps (splitting if needed).
        for s in segments:
            if s["end"] <= new["start"] or s["start"] >= new["end"]:
                kept.append(s)
                continue
            if s["start"] < new["start"]:
                kept.append({**s, "end": new["start"]})
            if s["end"] > new["end"]:
                kept.append({**s, "start": new["end"]})
        segments = sorted([*kept, new], key=lambda s: s["start"])
        change = f"inserted {new['start']}-{new['end']} {new['activity']} at {new['place']}"
        now = _hm(ctx.time.hour * 60 + ctx.time.minute)
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
    plan, problems = _check_plan({"date": day.isoformat(), "segments": segments})
    if problems:
        raise _reject("revision", problems)
    count = int(story.get("revisions", 0)) + 1
    log = [
        *story.get("revision_log", []),
        {"at": ctx.time.isoformat(), "change": change, "reason": str(req.get("reason", ""))},
    ]
    _save_story(
        ctx, {**story, "segments": plan["segments"], "revisions": count, "revision_log": log}
    )
    out = f"Plan revised (revision {count}): {change}. Now {len(segments)} segments."
    return f"{out}\n{_move_to(now_place)}" if now_place else out


def _cmd_status(ctx: _Ctx) -> str:
    day = ctx.time.date()
    story = _load_story(ctx, day)
    if story is None:
        return f"No plan for {day.isoformat()}. Draft one with `draft` and submit it with `plan`."
    needs = _needs_at(story, ctx.time, _profile(ctx))
    lines = [*_now_lines(story, ctx.time), _needs_line(needs)]
    lines.append(f"Plan for {day.isoformat()} ({story.get('revisions', 0)} revisions):")
    lines += [
        f"- {s['start']}-{s['end']} {s['activity']} at {s['place']}" for s in story["segments"]
    ]
    return "\n".join(lines)


# -- needs and hooks ------------------------------------------------------------------------


def _default_needs() -> dict[str, float]:
    return {"energy": 0.9, "hunger": 0.3, "social": 0.6}


def _needs_line(needs: dict[str, float]) -> str:
    return ", ".join(f"{k} {float(needs[k]):.2f}" for k in ("energy", "hunger", "social"))


def _rates(activity: str, category: str) -> tuple[float, float, float]:
    """Per-hour change of (energy, hunger, social) while doing ``activity`` at a place of
    ``category``: everything decays while awake and matching activities restore it."""
    act = activity.lower()
    if act == "sleep":
        return 0.15, 0.02, 0.0
    energy, hunger, social = -0.06, 0.1, -0.04
    if _is_meal(act):
        hunger = -1.5
    if category == "home":
        energy += 0.04
    if category in _SOCIAL_PLACES:
        social = 0.25
    elif act in {"work", "school"}:
        social = 0.03
    return energy, hunger, social


_Stretch = tuple[int, int, tuple[float, float, float]]
_compiled: dict[int, tuple[Any, Any, list[_Stretch]]] = {}


def _stretches(story: dict[str, Any] | None, profile: dict[str, Any]) -> list[_Stretch]:
    """The plan as (start, end, rates) minutes, gaps filled with free time at home; compiled
    once per parsed plan (the hook runs every step, the plan changes rarely)."""
    key = id(story)
    hit = _compiled.get(key)
    if hit is not None and hit[0] is story and hit[1] is profile:
        return hit[2]
    home = _home(profile)
    free = _rates("free time", "home")
    out: list[_Stretch] = []
    t = 0
    for seg in story["segments"] if story else ():
        start, end = _minutes(seg["start"]), _minutes(seg["end"])
        if start is None or end is None or end <= t:
            continue
        if start > t:
            out.append((t, start, free))
        out.append((max(t, start), end, _rates(seg["activity"], _category(seg["place"], profile))))
        t = end
    if t < _DAY_END:
        out.append((t, _DAY_END, _rates("free time", _category(home, profile))))
    if len(_compiled) >= _CACHE_LIMIT:
        _compiled.clear()
    _compiled[key] = (story, profile, out)
    return out


def _needs_at(
    story: dict[str, Any] | None, now: datetime, profile: dict[str, Any]
) -> dict[str, float]:
    """Needs at ``now``: the morning values at the wake hour, then each planned segment's
    rates (gaps count as free time at home), clamped to [0, 1] after every stretch."""
    e, h, so = (_default_needs()[k] for k in ("energy", "hunger", "social"))
    minute = now.hour * 60 + now.minute
    wake = min(_hours(profile.get("wake_hour"), 7.0), _DAY_END)
    for start, end, (re_, rh, rs) in _stretches(story, profile):
        lo, hi = max(start, wake), min(end, minute)
        if hi <= lo:
            if start >= minute:
                break
            continue
        hours = (hi - lo) / 60
        e = min(max(e + re_ * hours, 0.0), 1.0)
        h = min(max(h + rh * hours, 0.0), 1.0)
        so = min(max(so + rs * hours, 0.0), 1.0)
    return {"energy": round(e, 3), "hunger": round(h, 3), "social": round(so, 3)}


def _segment_at(segments: list[dict[str, str]], hm: str) -> dict[str, str] | None:
    return next((s for s in segments if s["start"] <= hm < s["end"]), None)


def _now_lines(story: dict[str, Any], now: datetime) -> list[str]:
    hm = _hm(now.hour * 60 + now.minute)
    segments = story["segments"]
    cur = _segment_at(segments, hm)
    nxt = next((s for s in segments if s["start"] > hm), None)
    lines = [f"Now {_describe(cur)}" if cur else "Now: free time (nothing planned)"]
    lines.append(f"Next {_describe(nxt)}" if nxt else "Next: nothing more planned today")
    return lines


def _meal_revision(now: datetime, profile: dict[str, Any]) -> str:
    minute = now.hour * 60 + now.minute
    fav = _favourites(profile)
    late = 11 * 60 <= minute < 14 * 60 or minute >= 18 * 60
    order = ("restaurant", "cafe") if late else ("cafe", "restaurant")
    place = next((fav[c] for c in order if c in fav), _home(profile))
    meal = "lunch" if 11 * 60 <= minute < 15 * 60 else "dinner" if minute >= 18 * 60 else "snack"
    end = min(minute + 45, _DAY_END)
    seg = {"start": _hm(minute), "end": _hm(end), "activity": meal, "place": place}
    req = json.dumps({"insert": seg, "reason": "hungry"})
    return _suggest(
        "execute_skill_script", {"name": "daily-guidance", "args": ["revise", "--json", req]}
    )


def _pre_step(ctx: _Ctx, now: datetime) -> str:
    profile = _profile(ctx)
    day = now.date()
    hm = _hm(now.hour * 60 + now.minute)
    story = _load_story(ctx, day)
    wake = _hm(min(_hours(profile.get("wake_hour"), 7.0), _DAY_END))
    cur = _segment_at(story["segments"], hm) if story else None
    # Night (23:00 to the wake hour) or a planned sleep: an agent at home sits the step out.
    if hm >= "23:00" or hm < wake or (cur is not None and cur["activity"].lower() == "sleep"):
        # Where the agent is: the last planned place at or before now, else where yesterday's
        # plan ended, else home (agents start the run at home).
        earlier = [s for s in story["segments"] if s["start"] <= hm] if story else []
        if not earlier:
            old = _load_story(ctx, day - timedelta(days=1))
            earlier = old["segments"] if old else []
        place = earlier[-1]["place"] if earlier else _home(profile)
        if place == _home(profile):
            return json.dumps({"decision": "skip", "message": "Asleep at home."})
    if story is None:
        return (
            f"No plan for {day.isoformat()}. Draft one with `draft` and submit it with "
            "`plan --json`.\n"
            + _suggest("execute_skill_script", {"name": "daily-guidance", "args": ["draft"]})
        )
    activity, place = (cur["activity"], cur["place"]) if cur else ("free time", _home(profile))
    needs = _needs_at(story, now, profile)
    lines = _now_lines(story, now)
    lines.append(f"Needs: {_needs_line(needs)}")
    if cur is not None:
        lines.append(_move_to(cur["place"]))
    if float(needs["hunger"]) > 0.75 and not _is_meal(activity):
        lines.append("You are hungry: fit a meal into the plan.")
        lines.append(_meal_revision(now, profile))
    return "\n".join(lines)


def _post_step(ctx: _Ctx, now: datetime) -> str:
    story = _load_story(ctx, now.date())
    if story is None:
        return json.dumps(
            {
                "decision": "retry",
                "message": f"No plan for {now.date().isoformat()} after this step.",
                "feedback": "You have no valid plan for today yet; draft one and submit it "
                "with plan --json.\n"
                + _suggest("execute_skill_script", {"name": "daily-guidance", "args": ["draft"]}),
            }
        )
    return f"ok: plan for {story['date']} has {len(story['segments'])} segments"


def _hook(argv: list[str], ctx: _Ctx) -> str:
    raw = argv[argv.index("--args-json") + 1] if argv.index("--args-json") + 1 < len(argv) else ""
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


def entrypoint(argv: list[str], ctx: _Ctx) -> str:
    """Commands: draft | plan --json PLAN | revise --json CHANGE | status | --args-json HOOK."""
    argv = list(argv)
    if "--args-json" in argv:
        return _hook(argv, ctx)
    command = argv[0] if argv else ""
    if command == "draft":
        plan = _draft(_profile(ctx), ctx.agent_id, ctx.time.date())
        text = json.dumps(plan, separators=(",", ":"))
        args = {"name": "daily-guidance", "args": ["plan", "--json", text]}
        return f"{text}\n{_suggest('execute_skill_script', args)}"
    if command == "plan":
        return _cmd_plan(argv, ctx)
    if command == "revise":
        return _cmd_revise(argv, ctx)
    if command == "status":
        return _cmd_status(ctx)
    raise ValueError(
        f"daily-guidance: unknown command {command!r}; use one of {', '.join(_COMMANDS)}"
    )
