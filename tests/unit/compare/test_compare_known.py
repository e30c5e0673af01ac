"""``compare_study`` on a study whose per-replicate values are known: run folders written
here with the events and survey rows a run writes (``measure``, ``agent_action``,
``social_opinions``, ``tick_end``; typed rows per contract C1), so every number of the
comparison is worked out by hand below."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agentsim.study import compare_study
from agentsim.study.compare import main

T2 = 4.302652729911275  # t(0.975, 2)
T4 = 2.7764451051977987  # t(0.975, 4)


def test_means_intervals_and_differences_are_the_hand_computed_ones(known_study: Path) -> None:
    cmp = compare_study(known_study)
    assert cmp.arms == ("control", "closure", "other", "single") and cmp.left_out == ()
    mood = cmp.item("measure-mood")
    ctl, clo, oth, one = (mood.final[a] for a in cmp.arms)

    # control: 2, 4, 6 -> mean 4, s 2
    assert ctl.values == (2.0, 4.0, 6.0) and ctl.runs == ("control-r1", "control-r2", "control-r3")
    half = T2 * 2 / math.sqrt(3)
    assert ctl.estimate.mean == 4.0
    assert (ctl.estimate.low, ctl.estimate.high) == (
        pytest.approx(4 - half),
        pytest.approx(4 + half),
    )
    assert ctl.difference is None and ctl.paired_agents is None

    # closure shares the seeds: paired t over 3 - 2, 7 - 4, 8 - 6 = 1, 3, 2 (s = 1)
    d = clo.difference
    assert d is not None and (d.method, d.n, d.mean) == ("paired t", 3, 2.0)
    assert (d.low, d.high) == (
        pytest.approx(2 - T2 / math.sqrt(3)),
        pytest.approx(2 + T2 / math.sqrt(3)),
    )
    # a fork: per agent 2, 3, 2 -> mean 7/3, s = sqrt(1/3), se = 1/3
    p = clo.paired_agents
    assert clo.paired_vs == "control" and p is not None and p.method == "paired t"
    assert p.mean == pytest.approx(7 / 3) and p.sd == pytest.approx(math.sqrt(1 / 3))
    assert (p.low, p.high) == (pytest.approx(7 / 3 - T2 / 3), pytest.approx(7 / 3 + T2 / 3))

    # other: seeds 4-6, no partner: Welch on 5, 7, 9 vs 2, 4, 6 (equal variances: 4 df)
    w = oth.difference
    se = math.sqrt(4 / 3 + 4 / 3)
    assert w is not None and (w.method, w.mean, w.df) == ("welch", 3.0, pytest.approx(4.0))
    assert (w.low, w.high) == (pytest.approx(3 - T4 * se), pytest.approx(3 + T4 * se))
    assert oth.paired_agents is None and oth.paired_vs is None

    # single: one replicate, no interval anywhere
    assert one.values == (1.0,) and one.estimate.low is None and one.estimate.high is None
    assert one.difference is not None and one.difference.mean == -3.0
    assert one.difference.low is None and "no interval" in one.difference.note

    # per tick: tick 0 is 0 everywhere, tick 1 is the final value
    assert [t.tick for t in mood.ticks] == [0, 1]
    assert mood.ticks[0].arms["control"].mean == 0.0
    assert mood.ticks[1].differences["closure"].mean == 2.0


def test_env_series_action_counts_and_choice_shares(known_study: Path) -> None:
    cmp = compare_study(known_study)
    env = cmp.item("env-social.mean")
    # control 0.1, 0.2, 0.3; closure 0.15, 0.3, 0.45: paired differences 0.05, 0.1, 0.15
    d = env.final["closure"].difference
    assert env.final["control"].values == pytest.approx((0.1, 0.2, 0.3))
    half = T2 * 0.05 / math.sqrt(3)
    assert d is not None and d.mean == pytest.approx(0.1)
    assert (d.low, d.high) == (pytest.approx(0.1 - half), pytest.approx(0.1 + half))
    assert env.final["closure"].paired_agents is None  # a run-level series has no agents

    posts = cmp.item("action-posted on social")
    assert posts.final["control"].values == (1.0, 1.0, 1.0)  # one post in each run
    assert posts.final["closure"].values == (2.0, 2.0, 2.0)
    assert posts.final["other"].values == (0.0, 0.0, 0.0)
    # per agent: closure-r1 a 1, b 1 vs control-r1 a 1, b 0, c 0 -> common a, b: (0 + 1) / 2
    p = posts.final["closure"].paired_agents
    assert p is not None and p.mean == 0.5 and p.low == p.high == 0.5
    assert [t.tick for t in posts.ticks] == [0, 1]
    assert posts.ticks[0].arms["closure"].mean == 0.0

    # choice "vote": shares per option over the ok answers (the invalid one is not data)
    yes = cmp.item("survey-vote-yes")
    assert yes.final["control"].values == (0.5, 1.0, 0.0)
    assert yes.final["closure"].values == (1.0, 1.0, 1.0)
    d = yes.final["closure"].difference  # 0.5, 0, 1: mean 0.5, s 0.5
    assert d is not None and d.mean == 0.5 and d.sd == 0.5
    assert yes.final["single"].values == ()  # no answers: left out of this item
    assert yes.final["single"].estimate.note == "no replicate has data"
    assert {it.key for it in cmp.items} == {
        "measure-mood", "env-social.mean", "action-posted on social", "survey-vote-no",
        "survey-vote-yes",
    }  # fmt: skip


def test_summary_json_and_plots_of_the_known_case(
    known_study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main([str(known_study), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "study cmp: 4 arms, 10 complete runs, 5 measures compared" in printed
    text = (out / "summary.md").read_text("utf-8")
    lo, hi = 4 - T2 * 2 / math.sqrt(3), 4 + T2 * 2 / math.sqrt(3)
    assert f"| `control` | 3 | 4.000 [{lo:.3f}, {hi:.3f}] | — | — |" in text
    assert (
        "| `single` | 1 | 1.000 (no interval: 1 replicate) | -3.000 (no interval: 1 replicate)"
        in text
    )
    dlo, dhi = 2 - T2 / math.sqrt(3), 2 + T2 / math.sqrt(3)
    plo, phi = 7 / 3 - T2 / 3, 7 / 3 + T2 / 3
    assert (
        "| `closure` | 3 | 6.000 [" in text
        and f"+2.000 [{dlo:.3f}, {dhi:.3f}] (paired t, 3 pairs) | +2.333 [{plo:.3f}, {phi:.3f}] "
        "(vs control, 3 replicates) |"
        in text
    )
    assert "Welch t" in text and "## Method" in text
    data = json.loads((out / "comparison.json").read_text("utf-8"))
    assert data["control"] == "control" and data["level"] == 0.95
    mood = next(i for i in data["items"] if i["key"] == "measure-mood")
    assert mood["final"][1]["difference"]["mean"] == 2.0
    assert mood["final"][3]["estimate"]["low"] is None
    for rel in data["plots"].values():
        assert (out / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data["plots"]) == 5


def _append(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def test_measures_that_cannot_be_compared_are_named_and_the_others_read(
    known_study: Path,
) -> None:
    runs = sorted(p for p in (known_study / "runs").iterdir())
    for i, run in enumerate(runs):
        # A free-text survey, a json one, a number one, a user module's series and the
        # city's occupancy (a place with nobody is left out of its table: 0).
        row = {"agent_id": "a", "question": "q", "status": "ok", "echo": False, "tick": 1,
               "time": "2026-03-02T08:00:00", "group": "g"}  # fmt: skip
        _append(run / "surveys" / "free.jsonl", [{**row, "answer": "fine", "value": "fine"}])
        _append(run / "surveys" / "form.jsonl",
                [{**row, "answer": "{}", "instrument": "json", "value": {"a": 1}}])  # fmt: skip
        age = {**row, "answer": str(20 + i), "instrument": "number", "value": 20.0 + i}
        _append(run / "surveys" / "age.jsonl", [age])
        events = [
            {"type": "mymod_state", "tick": 1, "time": "2026-03-02T08:00:00", "agent_id": None,
             "level": i},
            {"type": "city_occupancy", "tick": 1, "time": "2026-03-02T08:00:00",
             "agent_id": None, "occupancy": {"home-1": 2} if i % 2 else {"park-1": 1},
             "in_transit": 0},
        ]  # fmt: skip
        _append(run / "events.jsonl", events)
    manifest = json.loads((known_study / "manifest.json").read_text())
    manifest["measures"] = [
        {"survey": "../x"}, {"survey": "free"}, {"survey": "form"}, {"survey": "age"},
        {"survey": "never"}, {"measure": "nothing"}, {"env": "social"}, {"env": "social.nope"},
        {"env": "mymod.level"}, {"env": "city.occupancy.park-1"}, {"action": "flying"},
    ]  # fmt: skip
    (known_study / "manifest.json").write_text(json.dumps(manifest))
    cmp = compare_study(known_study)
    assert cmp.notes == (
        "survey '../x': not a survey name; not compared",
        "survey free: no typed answers (free text only); not compared. Give the survey step "
        "an `answer:` instrument (likert, choice or number)",
        "survey form: instrument json has no mean to compare; not compared (see "
        "surveys/form.jsonl)",
        "survey never: no run has surveys/never.jsonl; not compared",
        "measure nothing: no run recorded it (ctx.record('nothing', ...))",
        "env 'social': give MODULE.SERIES (e.g. social.mean, city.in_transit); not compared",
        "env social.nope: no run's social module recorded a number at 'nope' in its "
        "run-level events; not compared",
        "action 'flying': no agent_action event of any run matches it",
    )
    age = cmp.item("survey-age")
    assert age.label == "survey age (number): mean answer"
    # Runs in name order: closure-r1..3 (i = 0..2), control-r1..3 (3..5), other-r1..3 (6..8).
    assert age.final["control"].values == (23.0, 24.0, 25.0)
    level = cmp.item("env-mymod.level")
    assert level.final["other"].values == (6.0, 7.0, 8.0)
    park = cmp.item("env-city.occupancy.park-1")
    assert park.final["control"].values == (0.0, 1.0, 0.0)
    with pytest.raises(KeyError, match="no item 'x' in the comparison"):
        cmp.item("x")


def test_a_run_whose_folder_is_gone_is_left_out_with_the_reason(known_study: Path) -> None:
    import shutil

    shutil.rmtree(known_study / "runs" / "other-r2")
    (known_study / "runs" / "single-r1" / "manifest.json").write_text("[]")
    cmp = compare_study(known_study)
    reasons = {lo.run: lo.reason for lo in cmp.left_out}
    assert "run folder" in reasons["other-r2"] and "does not exist" in reasons["other-r2"]
    assert "does not hold a JSON object" in reasons["single-r1"]
    assert cmp.runs["other"] == ("other-r1", "other-r3")
    # Without partners (other's seeds are not the control's), Welch on 2 vs 3 replicates.
    d = cmp.item("measure-mood").final["other"].difference
    assert d is not None and d.method == "welch" and d.mean == pytest.approx(7 - 4)
