"""`agentsim report`: summary.md and PNG plots whose data match the event log."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import agentsim.cli
from agentsim.config.experiment import load_experiment
from agentsim.inspect.cli import add_inspect_commands
from agentsim.inspect.report import collect_report_data, write_report
from agentsim.inspect.run import open_run
from agentsim.run.engine import Engine

CITY = """
name: report-city
seed: 9
clock: {start: "2026-03-02T06:00:00", tick: 1h}
workflow:
  - run: {ticks: 3}
  - intervene: {env: city, action: close_place, args: {place: park-1}}
  - intervene: {message: "The park is closed | storm warning.", agents: all}
  - survey: {name: noon, question: "How is your day?", agents: {sample: 2}}
  - run: {ticks: 3}
agents:
  - group: commuters
    count: 5
    profile: {template: worker}
    skills: {default: [daily-guidance]}
model: {backend: scripted}
environment:
  - {module: city}
"""
SOCIAL = """
name: report-social
seed: 11
clock: {start: "2026-03-02T08:00:00", tick: 1h}
ticks: 3
agents:
  - group: citizens
    count: 5
    profile: {template: generic}
    skills: {default: [social-feed]}
  - group: activists
    count: 2
    profile: {template: worker, fields: {opinion: 0.9}}
    skills: {default: [social-feed]}
model: {backend: scripted}
environment:
  - {module: social, follow_k: 2, topic: the new city park}
"""
PNG = b"\x89PNG\r\n\x1a\n"


def assert_nothing_cut_off(png: Path) -> None:
    """Nothing drawn touches the image's edges: a legend or label cut off at an edge leaves
    its frame or its text in the outermost pixels, which are otherwise the white margin."""
    from matplotlib.image import imread

    img = imread(png)[:, :, :3]
    for edge in (img[0], img[-1], img[:, 0], img[:, -1]):
        assert edge.min() > 0.99, f"{png.name}: something is drawn on its edge"


def make_run(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "exp.yaml").write_text(text, encoding="utf-8")
    asyncio.run(Engine(load_experiment(root / "exp.yaml"), run_dir=root / "run").run())
    return root / "run"


@pytest.fixture(scope="module")
def city_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("city"), CITY)


@pytest.fixture(scope="module")
def social_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("social"), SOCIAL)


def events_of(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def per_tick(events: list[dict[str, Any]], kind: str) -> Counter[int]:
    return Counter(e["tick"] for e in events if e["type"] == kind)


@pytest.mark.slow
def test_city_report_images_and_data_match_the_events(city_run: Path, tmp_path: Path) -> None:
    rep = write_report(city_run, out_dir=tmp_path / "out")
    assert set(rep.images) == {"activity", "skills", "tokens", "city"}
    for p in (*rep.images.values(), rep.summary):
        assert p.parent == tmp_path / "out" and p.stat().st_size > 0
    for p in rep.images.values():
        assert p.read_bytes()[:8] == PNG
    events = events_of(city_run)
    ends = {e["tick"]: e for e in events if e["type"] == "tick_end"}
    ticks = sorted(ends)
    data = rep.data
    assert data.activity.ticks == tuple(ticks) == tuple(range(6))
    actions = per_tick(events, "agent_action")
    assert data.activity.columns["actions"] == tuple(actions[t] for t in ticks)
    assert data.activity.columns["steps"] == tuple(ends[t]["steps"] for t in ticks) == (5,) * 6
    assert data.tokens.columns["prompt_tokens"] == tuple(ends[t]["prompt_tokens"] for t in ticks)
    activations: defaultdict[str, Counter[int]] = defaultdict(Counter)
    defaults: Counter[str] = Counter()
    for e in events:
        if e["type"] == "skill_activated" and e.get("default"):
            defaults[e["skill"]] += 1
        elif e["type"] == "skill_activated":
            activations[e["skill"]][e["tick"]] += 1
    assert activations, "the scripted agents activate the city skills"
    assert dict(data.skills.columns) == {  # the default skills are noted apart, not drawn
        s: tuple(c[t] for t in ticks) for s, c in sorted(activations.items())
    }
    assert data.default_activations == defaults == {"built-in@daily-guidance": 5}
    occ = {e["tick"]: e for e in events if e["type"] == "city_occupancy"}
    assert data.city is not None and data.opinions is None
    for place, values in data.city.columns.items():
        key = "in_transit"
        want = [occ[t][key] if place == key else occ[t]["occupancy"].get(place, 0) for t in ticks]
        assert values == tuple(want)
    assert all(sum(data.city.columns[p][i] for p in data.city.columns) == 5 for i in range(6))
    text = rep.summary.read_text("utf-8")
    assert text.startswith("# Run run (report-city)") and "![city](city_occupancy.png)" in text
    assert "| agent steps | 30 (" in text and "- (no prices configured)" in text


@pytest.mark.slow
def test_social_report_opinions_match_the_events(social_run: Path) -> None:
    rep = write_report(open_run(social_run))
    assert rep.dir == social_run / "report" and rep.summary == social_run / "report" / "summary.md"
    assert set(rep.images) == {"activity", "skills", "tokens", "social"}
    assert rep.images["social"].read_bytes()[:8] == PNG
    snaps = [e for e in events_of(social_run) if e["type"] == "social_opinions"]
    hist, stats = rep.data.opinions, rep.data.opinion_stats
    assert hist is not None and stats is not None and rep.data.city is None
    bins = list(hist.columns)
    assert bins[0] == "[-1.0,-0.8)" and bins[-1] == "[+0.8,+1.0)" and len(bins) == 10
    for i, snap in enumerate(snaps):
        assert [hist.columns[b][i] for b in hist.columns] == snap["histogram"]
        assert (stats.columns["mean"][i], stats.columns["std"][i]) == (snap["mean"], snap["std"])
    assert hist.to_dict()["ticks"] == [0, 1, 2]
    groups = rep.data.opinion_groups
    assert groups is not None and set(groups) == {"activists", "citizens"}
    for i, snap in enumerate(snaps):
        for name, g in groups.items():
            got = {k: g.columns[k][i] for k in ("n", "mean", "std")}
            assert got == snap["groups"][name]
        # The groups add up to the whole population.
        assert groups["activists"].columns["n"][i] + groups["citizens"].columns["n"][i] == 7
        weighted = sum(g.columns["n"][i] * g.columns["mean"][i] for g in groups.values()) / 7
        assert weighted == pytest.approx(snap["mean"], abs=1e-5)
    assert groups["activists"].columns["mean"][0] == pytest.approx(0.9)
    # Each group's own distribution, a heat map row each: the bins add up to the group.
    bins_by_group = rep.data.opinion_group_bins
    assert bins_by_group is not None and set(bins_by_group) == {"activists", "citizens"}
    for i, snap in enumerate(snaps):
        for name, g in bins_by_group.items():
            assert [g.columns[b][i] for b in g.columns] == snap["group_histograms"][name]
            assert sum(g.columns[b][i] for b in g.columns) == snap["groups"][name]["n"]


def test_unfinished_ticks_are_left_out(city_run: Path, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(city_run, tmp_path / "live"))
    lines = (run_dir / "events.jsonl").read_text().splitlines(keepends=True)
    last_end = max(i for i, line in enumerate(lines) if '"tick_end"' in line)
    cut = "".join(lines[:last_end]) + lines[last_end][:20]  # tick 5 written, its end torn
    (run_dir / "events.jsonl").write_text(cut)
    data = collect_report_data(open_run(run_dir).iter_events())
    assert data.activity.ticks == (0, 1, 2, 3, 4)
    assert data.city is not None and data.city.ticks == (0, 1, 2, 3, 4)


def test_collect_report_data_from_synthetic_events() -> None:
    events: list[dict[str, Any]] = [
        {"type": "run_start", "tick": 0},
        {"type": "agent_action", "tick": 0, "agent_id": "a"},
        {"type": "agent_action", "tick": 0, "agent_id": "b"},
        {"type": "skill_activated", "tick": 0, "skill": "custom@x"},
        {"type": "tick_end", "tick": 0, "time": "2026-03-02T06:00:00", "steps": 2, "errors": 1},
        {"type": "agent_action", "tick": 1, "agent_id": "a"},  # tick 1 never ended
        {"type": "social_opinions", "tick": 0, "histogram": [1, 1], "mean": 0.0, "std": 1.0},
        {"type": "tick_end", "tick": "bad"},
    ]
    data = collect_report_data(events)
    assert data.activity.ticks == (0,) and data.activity.times == ("2026-03-02T06:00:00",)
    assert data.activity.columns["actions"] == (2,) and data.activity.columns["errors"] == (1,)
    assert data.activity.columns["skipped"] == (0,) and data.skills.columns == {"custom@x": (1,)}
    assert data.opinions is not None and list(data.opinions.columns) == [
        "[-1.0,+0.0)",
        "[+0.0,+1.0)",
    ]


def write_synthetic_run(root: Path, n_skills: int) -> Path:
    """A run folder written by hand: many skills, errors, a reload, prices, no modules."""
    (root / "agents").mkdir(parents=True)
    (root / "manifest.json").write_text(
        json.dumps({"run_id": "syn", "name": "synthetic", "status": "completed"})
    )
    (root / "config.yaml").write_text(
        "ticks: 2\nmodel: {prices: {prompt_per_1k: 1.0, completion_per_1k: 1.0}}\n"
    )
    events: list[dict[str, Any]] = [{"type": "run_start", "tick": 0, "agents": 0}]
    for t in range(2):
        events += [{"type": "skill_activated", "tick": t, "skill": f"custom@s{i:02d}"}
                   for i in range(n_skills) for _ in range(i)]  # fmt: skip
        events.append({"type": "tick_end", "tick": t, "time": "not a time", "prompt_tokens": 1000})
    events += [
        {"type": "agent_error", "tick": 1, "error": "ValueError: x"},
        {"type": "script_called", "tick": 1, "skill": "custom@s01", "ok": False},
        {"type": "skills_reloaded", "tick": 1, "generation": 2, "changed": ["custom@s01"]},
    ]
    (root / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return root


def test_summary_of_a_run_with_many_skills_errors_and_prices(tmp_path: Path) -> None:
    rep = write_report(write_synthetic_run(tmp_path / "syn", n_skills=12))
    assert set(rep.images) == {"activity", "skills", "tokens"}
    text = rep.summary.read_text("utf-8")
    assert "| cost | 2.0 |" in text and "| agent_error: ValueError | 1 |" in text
    assert "| script_failed | 1 |" in text and "| custom@s11 | 22 | 0 | 0 | 0 |" in text
    assert "- tick 1: generation 2; added -; changed custom@s01; removed -" in text
    # The reload is a marker of the plots and of the table of what happened between ticks.
    assert "| 1 |  | reload | skills reloaded: changed custom@s01 | registry generation 2 |" in text
    assert [m.kind for m in rep.data.markers] == ["reload"]
    assert "(skill plot: the 10 most activated of 11)" in text  # s00: none
    assert "| ticks | 2 of 2 (last: not a time) |" in text


def test_summary_of_an_empty_run(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    (root / "agents").mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"status": "running", "pid": 0}))
    rep = write_report(root)
    text = rep.summary.read_text("utf-8")
    assert "## Errors\n\nNone." in text and "No skill was activated or called." in text
    assert "## Hot reloads\n\nNone." in text and "| ticks | 0 of - (last: -) |" in text
    assert all(p.read_bytes()[:8] == PNG for p in rep.images.values())


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="agentsim")
    add_inspect_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_cli_report(social_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "r"
    code, out, _ = cli(capsys, "report", str(social_run), "--out", str(out_dir), "--json")
    data = json.loads(out)
    assert code == 0 and set(data) == {"dir", "summary", "images"}
    assert (
        data["summary"] == str(out_dir / "summary.md") and Path(data["images"]["social"]).is_file()
    )
    syn = write_synthetic_run(tmp_path / "syn", n_skills=2)
    code, out, _ = cli(capsys, "report", str(syn))
    assert code == 0 and out.splitlines()[0] == f"wrote {syn / 'report' / 'summary.md'}"
    code, out, err = cli(capsys, "report", str(tmp_path / "nope"))
    assert code == 2 and out == "" and "does not exist" in err


@pytest.mark.slow
def test_report_command_writes_the_plots_and_lists_interventions_and_surveys(
    city_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "rep"
    assert agentsim.cli.main(["report", str(city_run), "--out", str(out_dir)]) == 0
    assert f"wrote {out_dir / 'summary.md'}" in capsys.readouterr().out
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["activity.png", "city_occupancy.png", "skills.png", "summary.md", "tokens.png"]
    assert all(p.read_bytes()[:8] == PNG for p in out_dir.glob("*.png"))
    text = (out_dir / "summary.md").read_text("utf-8")
    section = text.split("## Interventions, surveys and hot reloads\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| 3 ")]
    assert rows == [
        '| 3 | 2026-03-02T09:00:00 | intervention | city.close_place | {"place": "park-1"} |',
        "| 3 | 2026-03-02T09:00:00 | intervention | message to 5 agents "
        "| 'The park is closed \\| storm warning.' |",
        "| 3 | 2026-03-02T09:00:00 | survey | survey noon (2 answers) "
        "| 2 answers in surveys/noon.jsonl |",
    ]
    assert "| built-in@daily-guidance | 5 | 5 |" in text  # activations, of which default


def test_markers_and_default_activations_from_synthetic_events() -> None:
    events: list[dict[str, Any]] = [
        {"type": "skill_activated", "tick": 0, "skill": "custom@d", "default": True},
        {"type": "skill_activated", "tick": 0, "skill": "custom@d", "default": True},
        {"type": "skill_activated", "tick": 0, "skill": "custom@x"},
        {"type": "tick_end", "tick": 0, "time": "2026-03-02T06:00:00"},
        {"type": "intervention", "tick": 1, "time": "T1", "env": "social",
         "action": "broadcast", "args": {"text": "x" * 200}},
        {"type": "interview_answer", "tick": 1, "time": "T1", "name": "deep", "answer": "a"},
        {"type": "survey_answer", "tick": 1, "time": "T1", "name": "q", "answer": "b"},
        {"type": "survey_answer", "tick": 1, "time": "T1", "name": "q", "answer": "c"},
        {"type": "intervention", "tick": 1, "time": "T1", "message": "m", "recipients": 3},
    ]  # fmt: skip
    data = collect_report_data(events)
    assert data.skills.columns == {"custom@x": (1,)}
    assert data.default_activations == {"custom@d": 2}
    assert [(m.kind, m.label, m.detail) for m in data.markers] == [
        ("intervention", "social.broadcast", '{"text": "' + "x" * 87 + "..."),
        ("interview", "interview deep (1 answer)", "1 answer in surveys/deep.jsonl"),
        ("survey", "survey q (2 answers)", "2 answers in surveys/q.jsonl"),
        ("intervention", "message to 3 agents", "'m'"),
    ]
    assert {(m.tick, m.time) for m in data.markers} == {(1, "T1")}


def test_no_plot_is_cut_off_at_its_edges_with_long_labels(tmp_path: Path) -> None:
    """Long skill ids, group names and intervention labels widen the legend column: every
    PNG keeps all of it inside the image."""
    root = tmp_path / "long"
    (root / "agents").mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"status": "completed"}))
    long_skill = "custom@a-skill-whose-identifier-is-much-longer-than-the-legend-column"
    long_group = "respondents-who-joined-in-the-second-wave-of-the-panel"
    events: list[dict[str, Any]] = []
    for t in range(4):
        time = f"2026-03-02T{8 + t:02d}:00:00"
        events += [
            {"type": "skill_activated", "tick": t, "skill": long_skill},
            {
                "type": "intervention",
                "tick": t,
                "env": "city",
                "action": "close_place_for_a_very_long_reason_indeed",
                "args": {"place": "park-0"},
            },
            {
                "type": "city_occupancy",
                "tick": t,
                "occupancy": {"a-place-kind-with-a-long-long-name-0": 3},
                "in_transit": 1,
            },
            {
                "type": "social_opinions",
                "tick": t,
                "histogram": [2, 0, 0, 2],
                "mean": 0.0,
                "std": 0.9,
                "groups": {long_group: {"n": 4, "mean": 0.0, "std": 0.9}},
                "group_histograms": {long_group: [2, 0, 0, 2]},
            },
            {"type": "tick_end", "tick": t, "time": time, "steps": 4, "prompt_tokens": 10},
        ]
    (root / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    rep = write_report(root)
    assert set(rep.images) == {"activity", "skills", "tokens", "city", "social"}
    for png in rep.images.values():
        assert_nothing_cut_off(png)
