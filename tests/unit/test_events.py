"""``agentsim.events``: every event the runtime writes is declared, the shipped experiments
write only what is declared, and the docs' table is the declaration's."""

from __future__ import annotations

import ast
import asyncio
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsim import events
from agentsim.config.experiment import parse_experiment
from agentsim.errors import EventError
from agentsim.events import EVENTS, checked, problems
from agentsim.run.engine import Engine
from tests.unit.helpers import REPO as ROOT

DOC = ROOT / "docs" / "inspection.md"
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.yaml"))


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"tick": 1, "time": "2026-03-02T08:00:00", "type": kind, "agent_id": "a", **fields}


# -- the declaration -------------------------------------------------------------------------


def test_the_docs_table_is_generated_from_the_declaration() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert events.DOC_START in text and events.DOC_END in text
    assert events.replace_table(text) == text, (
        "the event table of docs/inspection.md differs from agentsim/events.py; regenerate "
        "it with: python -m agentsim.events --write docs/inspection.md"
    )


def test_replace_table_rewrites_only_the_block_between_the_markers() -> None:
    text = f"# Title\n\n{events.DOC_START}\nold table\n{events.DOC_END}\n\nafter\n"
    out = events.replace_table(text)
    assert "old table" not in out and out.endswith(f"{events.DOC_END}\n\nafter\n")
    assert events.render_table() in out
    assert events.replace_table(out) == out


def test_replace_table_without_markers_says_what_to_add() -> None:
    with pytest.raises(EventError, match="the document has no event table markers; add a line"):
        events.replace_table("# no table here\n")


def test_main_prints_the_table_and_writes_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert events.main([]) == 0
    assert capsys.readouterr().out == events.render_table()
    doc = tmp_path / "doc.md"
    doc.write_text(f"x\n{events.DOC_START}\n{events.DOC_END}\n", encoding="utf-8")
    assert events.main(["--write", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == events.replace_table(doc.read_text("utf-8"))
    assert "| `tick_end` | sim |" in doc.read_text(encoding="utf-8")
    assert events.main(["--bogus"]) == 2
    assert "usage: python -m agentsim.events [--write FILE]" in capsys.readouterr().err


def test_every_type_is_declared_once_with_distinct_fields() -> None:
    assert list(EVENTS) == [e.name for e in EVENTS.values()]
    # Declared once: no name twice in the declaration (a dict would keep the last silently).
    assert len(EVENTS) == len(events._DECLARED)
    for spec in EVENTS.values():
        names = [f.name for f in spec.fields]
        assert len(names) == len(set(names)), spec.name
        assert not set(names) & {f.name for f in events.COMMON}, spec.name


# -- writing through events.py ---------------------------------------------------------------


def test_checked_passes_declared_events_through_unchanged() -> None:
    batch = [_event("agent_action", action="walked", degraded=False), _event("follow", target="b")]
    assert checked(batch) is batch


@pytest.mark.parametrize(
    ("event", "message"),
    [
        pytest.param(
            _event("teleport", place="x"),
            "event type 'teleport' is not declared (known: agent_action, agent_degraded, ",
            id="unknown-type",
        ),
        pytest.param(
            _event("arrive", place="x", speed=3),
            "event 'arrive' has undeclared field(s) speed (declared: agent_id, place, tick, "
            "time, type); declare them in agentsim/events.py",
            id="unknown-field",
        ),
        pytest.param(
            {"type": "arrive", "place": "x"},
            "event 'arrive' lacks required field(s) agent_id, tick, time; set them, or mark "
            "them optional in agentsim/events.py",
            id="missing-field",
        ),
        pytest.param(
            {"tick": 0, "time": "t", "agent_id": None},
            "event type None is not declared",
            id="no-type",
        ),
    ],
)
def test_writing_an_undeclared_event_fails_loudly(event: dict[str, Any], message: str) -> None:
    with pytest.raises(EventError) as caught:
        checked([_event("follow", target="b"), event])
    assert str(caught.value).startswith(message)
    assert problems(event) == [str(caught.value)]


def test_the_engine_refuses_to_write_an_undeclared_event(tmp_path: Path) -> None:
    engine = Engine(_small(EXPERIMENTS[0]), run_dir=tmp_path / "run")
    engine.ws = engine_ws = _workspace(tmp_path / "run")
    with pytest.raises(EventError, match="event type 'teleport' is not declared"):
        engine._emit([_event("teleport")])
    engine_ws.close()
    engine_ws.release()
    assert not (tmp_path / "run" / "events.jsonl").exists()


@pytest.mark.parametrize(
    ("event", "message"),
    [
        pytest.param(
            _event("arrive", place=3),
            "event 'arrive' field 'place' is 3, not str as declared in agentsim/events.py",
            id="str",
        ),
        pytest.param(
            _event("hook_gate_failed", skill="s", retries=True),
            "event 'hook_gate_failed' field 'retries' is True, not int",
            id="bool-is-not-int",
        ),
        pytest.param(
            _event("city_occupancy", occupancy={"park-1": "2"}, in_transit=0),
            "event 'city_occupancy' field 'occupancy' is {'park-1': '2'}, not dict[str, int]",
            id="dict-values",
        ),
        pytest.param(
            {**_event("follow", target="b"), "agent_id": 7},
            "event 'follow' field 'agent_id' is 7, not str | null as declared",
            id="common-field",
        ),
    ],
)
def test_problems_names_the_type_and_field_of_a_wrong_value(
    event: dict[str, Any], message: str
) -> None:
    (problem,) = problems(event)
    assert problem.startswith(message)


def test_a_float_field_takes_a_json_integer_and_null_where_declared() -> None:
    assert problems(_event("post", post_id="post-1", text="hi", stance=1)) == []
    assert problems(_event("post", post_id="post-1", text="hi", stance=None)) == []
    assert problems(_event("skill_quarantined", skill="s", script="x.py", hook=None)) == []


# -- the shipped experiments -----------------------------------------------------------------


def _small(path: Path) -> Any:
    """The experiment with a few agents per group and two ticks per ``run`` step (its
    interventions and surveys kept)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for group in data["agents"]:
        group["count"] = min(group["count"], 6)
    for step in data.get("workflow") or ():
        if "run" in step:
            step["run"] = {**step["run"], "ticks": 2}
        if "survey" in step and isinstance(step["survey"].get("agents"), dict):
            step["survey"]["agents"] = "all"
    data.setdefault("output", {})["checkpoint_every"] = 0
    return parse_experiment(yaml.safe_dump(data), source=str(path), base_dir=ROOT)


def _workspace(run_dir: Path) -> Any:
    from agentsim.run.workspace import RunWorkspace

    return RunWorkspace.create(run_dir)


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=[p.stem for p in EXPERIMENTS])
def test_a_shipped_experiment_writes_only_declared_events(experiment: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    summary = asyncio.run(Engine(_small(experiment), run_dir=run_dir).run())
    assert summary.status == "completed"
    wrong: list[str] = []
    kinds: set[str] = set()
    for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        kinds.add(event["type"])
        wrong += [p for p in problems(event) if p not in wrong]
    assert wrong == [], f"{experiment.name} wrote events that agentsim/events.py does not declare"
    assert {"run_start", "tick_end", "agent_action", "intervention", "run_end"} <= kinds


# -- the code that builds events -------------------------------------------------------------

PACKAGE = ROOT / "agentsim"
# How the writers build an event from a literal type name and keyword fields: the function
# or method called, and the position of the type name among its arguments. ``event`` is
# ``agentsim.events.event`` and an environment module's ``clock.event``; ``_run_event`` the
# engine's; ``_emit`` an agent step's.
_BUILDERS = {"event": 0, "_run_event": 0, "_emit": 1}
# The common fields a writer must set when it builds an event, never back-fill later.
_COMMON_BACKFILLED = ("tick", "time", "agent_id")


def _writer_paths() -> list[Path]:
    """The modules that write events: the run, hosts, agents and environment modules."""
    return sorted(
        p for layer in ("run", "hosts", "agent", "env") for p in (PACKAGE / layer).rglob("*.py")
    )


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _keyword_names(node: ast.Call) -> set[str]:
    """The keyword arguments' names, with the keys of a ``**{"from": ...}`` literal (a field
    whose name is a Python keyword)."""
    names = set()
    for k in node.keywords:
        if k.arg is not None:
            names.add(k.arg)
        elif isinstance(k.value, ast.Dict):
            names |= {str(key.value) for key in k.value.keys if isinstance(key, ast.Constant)}
    return names


def _events_in(tree: ast.AST, where: str) -> list[tuple[str, str, frozenset[str]]]:
    found = []
    for node in ast.walk(tree):
        at = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"type", "agent_id"} <= keys:
                kind = node.values[[getattr(k, "value", None) for k in node.keys].index("type")]
                if isinstance(kind, ast.Constant) and isinstance(kind.value, str):
                    found.append((at, kind.value, frozenset(map(str, keys))))
        elif isinstance(node, ast.Call):
            pos = _BUILDERS.get(_call_name(node) or "")
            if pos is not None and len(node.args) > pos:
                kind = node.args[pos]
                if isinstance(kind, ast.Constant) and isinstance(kind.value, str):
                    names = {*_keyword_names(node), "type", "agent_id"}
                    found.append((at, kind.value, frozenset(names)))
    return found


@functools.cache
def _built_events() -> tuple[tuple[str, str, frozenset[str]], ...]:
    """(where, type, field names) of every event the writers (run, hosts, agent, env) build with
    a literal type: a dict literal with ``"type"`` and ``"agent_id"`` keys, or a call of a
    builder (``_BUILDERS``)."""
    found = []
    for path in _writer_paths():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += _events_in(tree, str(path.relative_to(ROOT)))
    return tuple(found)


def _backfills(source: str, where: str) -> list[tuple[str, str]]:
    """(file, field) of each ``x.setdefault("tick" | "time" | "agent_id", ...)`` in
    ``source``: an event completed after it was built."""
    return [
        (where, node.args[0].value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "setdefault"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value in _COMMON_BACKFILLED
    ]


def test_the_check_finds_the_events_the_code_builds() -> None:
    kinds = {kind for _, kind, _ in _built_events()}
    # Every declared type but those whose name is computed: f"{kind}_answer" in the engine,
    # the social module's follow/unfollow (the action's name).
    computed = {"survey_answer", "interview_answer", "follow", "unfollow"}
    assert kinds == set(EVENTS) - computed


def test_every_event_the_code_builds_is_declared() -> None:
    """Also the types no shipped experiment writes (errors, quarantines, hot reloads...)."""
    wrong = []
    for where, kind, names in _built_events():
        spec = EVENTS.get(kind)
        if spec is None:
            wrong.append(f"{where}: event type {kind!r} is not declared in agentsim/events.py")
        elif names - spec.names:
            extra = ", ".join(sorted(names - spec.names))
            wrong.append(f"{where}: event {kind!r} field(s) {extra} not declared")
    assert wrong == []


def test_a_run_that_builds_an_undeclared_event_fails_and_does_not_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentsim.env.city import CityModule

    real = CityModule.tick_events

    def tick_events(self: CityModule, clock: Any) -> list[dict[str, Any]]:
        return [*real(self, clock), {"type": "arrive", "agent_id": None, "place": "x", "by": 1}]

    monkeypatch.setattr(CityModule, "tick_events", tick_events)
    run_dir = tmp_path / "run"
    city = next(p for p in EXPERIMENTS if p.stem == "daily-mobility")
    with pytest.raises(EventError, match="event 'arrive' has undeclared field\\(s\\) by "):
        asyncio.run(Engine(_small(city), run_dir=run_dir).run())
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["type"] for line in lines if '"by"' in line] == []
    assert json.loads((run_dir / "manifest.json").read_text("utf-8"))["status"] == "failed"


def test_no_writer_completes_an_event_after_building_it() -> None:
    """Each writer builds its events complete (``event``, ``clock.event``, ``_run_event``,
    ``_emit``): a ``setdefault`` of a common field is a second, scattered way."""
    found = [
        hit
        for path in _writer_paths()
        for hit in _backfills(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert found == []


def test_the_backfill_check_catches_a_setdefault_of_a_common_field() -> None:
    source = (
        "def complete(events, tick, iso):\n"
        "    for e in events:\n"
        "        e.setdefault('tick', tick)\n"
        "        e.setdefault('time', iso)\n"
        "        e.setdefault('agent_id', None)\n"
        "        e.setdefault('reason', '')\n"
        "    seen = {}\n"
        "    seen.setdefault(tick, []).append(iso)\n"
    )
    assert _backfills(source, "x.py") == [("x.py", "tick"), ("x.py", "time"), ("x.py", "agent_id")]


def test_the_check_finds_events_built_by_each_writer_and_their_fields() -> None:
    source = (
        "event('run_end', tick=1, time=t, status='completed')\n"
        "clock.event('move', agent_id=a, **{'from': here}, to=there)\n"
        "self._run_event('tick_end', steps=3)\n"
        "self._emit(st, 'agent_action', action='x', degraded=False)\n"
        "clock.event(action, agent_id=a, target=b)\n"
    )
    found = [(kind, sorted(names)) for _, kind, names in _events_in(ast.parse(source), "x.py")]
    assert sorted(found) == [
        ("agent_action", ["action", "agent_id", "degraded", "type"]),
        ("move", ["agent_id", "from", "to", "type"]),
        ("run_end", ["agent_id", "status", "tick", "time", "type"]),
        ("tick_end", ["agent_id", "steps", "type"]),
    ]
