"""``compare_study`` on a study whose per-replicate values are known: run folders written
here with the events and survey rows a run writes (``measure``, ``agent_action``,
``social_opinions``, ``tick_end``; typed rows per contract C1), so every number of the
comparison is worked out by hand below."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentsim.study import compare_study
from agentsim.study.compare import main
from tests.unit.compare.conftest import write_manifest

T2 = 4.302652729911275  # t(0.975, 2)
T4 = 2.7764451051977987  # t(0.975, 4)
TIME = "2026-03-02T08:00:00"


def _ev(kind: str, tick: int, agent: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "tick": tick, "time": TIME, "agent_id": agent, **fields}


def _run(
    study: Path,
    run_id: str,
    mood: dict[str, float],
    *,
    opinion: float,
    posts: Sequence[str],
    votes: dict[str, str],
    status: str = "completed",
) -> dict[str, Any]:
    """A run of two ticks: at tick 0 every agent's mood is 0 and the opinion 0; at tick 1
    ``mood`` per agent, the opinion mean ``opinion``, one post per agent in ``posts``;
    ``votes`` answers a choice survey asked before tick 1."""
    root = study / "runs" / run_id
    (root / "surveys").mkdir(parents=True)
    for agent in mood:
        (root / "agents" / agent).mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"status": status}), "utf-8")
    events = []
    for tick in (0, 1):
        for agent, value in mood.items():
            events.append(_ev("measure", tick, agent, name="mood", value=value if tick else 0.0,
                              group="g", skill="custom@mood"))  # fmt: skip
        for agent in mood:
            action = "posted on social" if tick and agent in posts else "read the feed"
            events.append(_ev("agent_action", tick, agent, action=action, degraded=False))
        events.append(_ev("social_opinions", tick, None, n=len(mood),
                          mean=opinion if tick else 0.0, groups={"g": {"n": 2}}))  # fmt: skip
        events.append(_ev("tick_end", tick, None, steps=len(mood)))
    lines = "".join(json.dumps(e) + "\n" for e in events)
    (root / "events.jsonl").write_text(lines, "utf-8")
    rows = [
        {"agent_id": a, "question": "q", "answer": v, "status": "ok", "echo": False, "tick": 1,
         "time": TIME, "instrument": "choice", "value": v, "group": "g"}
        for a, v in votes.items()
    ]  # fmt: skip
    rows.append({"agent_id": "x", "question": "q", "answer": "??", "status": "invalid",
                 "reason": "not an option", "echo": False, "tick": 1, "time": TIME,
                 "instrument": "choice", "value": None, "group": "g"})  # fmt: skip
    (root / "surveys" / "vote.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"id": run_id, "dir": f"runs/{run_id}", "config_hash": "-", "sample": None}


MEASURES = [{"measure": "mood"}, {"env": "social.mean"}, {"action": "posted on social"},
            {"survey": "vote"}]  # fmt: skip


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Arms: control (seeds 1-3); closure, forks of control (seeds 1-3); other, seeds 4-6
    (unpaired); single, one replicate."""
    s = tmp_path / "study"
    runs = []
    # control: mood means 2, 4, 6 (r1 has a third agent c: (0 + 2 + 4) / 3 = 2)
    control = [{"a": 0.0, "b": 2.0, "c": 4.0}, {"a": 3.0, "b": 5.0}, {"a": 5.0, "b": 7.0}]
    # closure: means 3, 7, 8; per agent vs its parent: r1 (2, 2) -> 2, r2 (3, 3) -> 3,
    # r3 (2, 2) -> 2
    closure = [{"a": 2.0, "b": 4.0}, {"a": 6.0, "b": 8.0}, {"a": 7.0, "b": 9.0}]
    other = [{"a": 4.0, "b": 6.0}, {"a": 6.0, "b": 8.0}, {"a": 8.0, "b": 10.0}]  # 5, 7, 9
    votes = [{"a": "yes", "b": "no"}, {"a": "yes", "b": "yes"}, {"a": "no", "b": "no"}]
    for i in range(3):
        seed = i + 1
        c = _run(s, f"control-r{seed}", control[i], opinion=0.1 * seed, posts=["a"],
                 votes=votes[i])  # fmt: skip
        runs.append({**c, "arm": "control", "replicate": seed, "seed": seed, "fork_of": None,
                     "state": "complete"})  # fmt: skip
        f = _run(s, f"closure-r{seed}", closure[i], opinion=0.1 * seed + 0.05 * seed,
                 posts=["a", "b"], votes={"a": "yes", "b": "yes"})  # fmt: skip
        runs.append({**f, "arm": "closure", "replicate": seed, "seed": seed, "state": "complete",
                     "fork_of": {"run": f"control-r{seed}", "tick": 1}})  # fmt: skip
        o = _run(s, f"other-r{seed}", other[i], opinion=0.0, posts=[], votes={"a": "no"})
        runs.append({**o, "arm": "other", "replicate": seed, "seed": seed + 3, "fork_of": None,
                     "state": "complete"})  # fmt: skip
    one = _run(s, "single-r1", {"a": 1.0, "b": 1.0}, opinion=0.0, posts=[], votes={})
    runs.append({**one, "arm": "single", "replicate": 1, "seed": 9, "fork_of": None,
                 "state": "complete"})  # fmt: skip
    write_manifest(s, runs, measures=MEASURES, arms=("control", "closure", "other", "single"),
                   from_tick={"closure": 1})  # fmt: skip
    return s


def test_means_intervals_and_differences_are_the_hand_computed_ones(study: Path) -> None:
    cmp = compare_study(study)
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


def test_env_series_action_counts_and_choice_shares(study: Path) -> None:
    cmp = compare_study(study)
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
    study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main([str(study), "--out", str(out)]) == 0
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
