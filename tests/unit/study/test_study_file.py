"""The study file: what it plans, and the exit-2 errors of bad files (nothing is written)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.config.experiment import RunStep, SurveyStep
from agentsim.study.spec import load_study, parse_study

BASE = """\
name: t
seed: 5
clock: {start: "2026-03-02T08:00:00", tick: 1h}
workflow:
  - run: {ticks: 3}
  - intervene: {env: social, action: broadcast, args: {text: "The park opens.", stance: 0.5}}
  - run: {ticks: 3}
  - survey: {name: opinion, question: "What do you think of the park?"}
agents:
  - {group: citizens, count: 6, skills: {default: [social-feed], disabled: [daily-guidance]}}
model: {backend: scripted}
environment:
  - {module: social, follow_k: 3, topic: the park}
"""

STUDY = """\
name: s
experiment: base.yaml
replicates: {seeds: [1, 2]}
arms:
  - name: control
  - name: rumour
    from_tick: 3
    set: {workflow.1.intervene.args.text: "A rumour.", workflow.1.intervene.args.stance: -0.8}
measures: [{survey: opinion}, {env: social.mean}]
"""


def _files(tmp_path: Path, study: str = STUDY, base: str = BASE) -> Path:
    (tmp_path / "base.yaml").write_text(base, encoding="utf-8")
    path = tmp_path / "study.yaml"
    path.write_text(study, encoding="utf-8")
    return path


def test_a_study_plans_each_arm_for_each_replicate(tmp_path: Path) -> None:
    study = load_study(_files(tmp_path))
    assert [(r.id, r.seed, r.fork_of) for r in study.runs] == [
        ("control-r1", 1, None),
        ("rumour-r1", 1, ("control-r1", 3)),
        ("control-r2", 2, None),
        ("rumour-r2", 2, ("control-r2", 3)),
    ]
    control, rumour = study.runs[0], study.runs[1]
    assert control.checkpoint_at == (3,) and rumour.checkpoint_at == ()
    assert control.config.seed == 1 and control.config.workflow is not None
    step = rumour.config.steps()[1]
    assert step.args == {"text": "A rumour.", "stance": -0.8}  # type: ignore[union-attr]
    assert control.config.steps()[1].args["text"] == "The park opens."  # type: ignore[union-attr]
    # The base as given: the control's own config differs from the base by its seed only.
    assert control.config.config_hash() != rumour.config.config_hash()
    assert [m.as_dict() for m in study.spec.measures] == [
        {"survey": "opinion"},
        {"env": "social.mean"},
    ]
    assert study.raw == (tmp_path / "study.yaml").read_bytes()


def test_an_arm_workflow_replaces_the_steps_from_its_tick(tmp_path: Path) -> None:
    text = """\
name: s
experiment: base.yaml
control: control
replicates: {count: 2}
arms:
  - name: control
  - name: late
    from_tick: 2
    workflow:
      - survey: {name: early, question: "How is it going?"}
      - run: {ticks: 5}
"""
    study = parse_study(text, base_dir=_files(tmp_path).parent, environ={})
    assert [r.seed for r in study.runs] == [5, 5, 6, 6]  # count: base.seed, base.seed + 1
    late = study.run("late-r1").config.steps()
    assert late == (
        RunStep(ticks=2),
        SurveyStep(name="early", question="How is it going?"),
        RunStep(ticks=5),
    )
    assert study.run("late-r1").config.total_ticks() == 7


def test_sampled_replicates_keep_the_seed_with_a_sampling_model(tmp_path: Path) -> None:
    base = BASE.replace(
        "model: {backend: scripted}",
        "model: {backend: openai, model: m, base_url: 'http://127.0.0.1:9/v1'}",
    )
    text = STUDY.replace("{seeds: [1, 2]}", "{samples: 3}")
    study = parse_study(text, base_dir=_files(tmp_path, base=base).parent, environ={})
    assert [(r.seed, r.sample) for r in study.runs if r.arm == "control"] == [
        (5, 1),
        (5, 2),
        (5, 3),
    ]


BAD = [
    (
        "unknown-key",
        STUDY.replace("from_tick: 3", "from_tik: 3"),
        r"error: arms\.1\.from_tik: unknown field 'from_tik' .*did you mean 'from_tick'\?",
    ),
    (
        "two-replicate-kinds",
        STUDY.replace("{seeds: [1, 2]}", "{seeds: [1], count: 2}"),
        r"error: replicates: needs exactly one of seeds, count or samples \(got seeds, count\)",
    ),
    (
        "repeated-seed",
        STUDY.replace("{seeds: [1, 2]}", "{seeds: [1, 1]}"),
        r"replicates\.seeds: seeds \[1, 1\] repeat a seed or hold a negative one; give distinct",
    ),
    (
        "no-such-control",
        STUDY.replace("replicates:", "control: placebo\nreplicates:"),
        r"error: control: arm 'placebo' does not exist \(arms: control, rumour\); name one",
    ),
    (
        "control-forks",
        STUDY.replace("replicates:", "control: rumour\nreplicates:"),
        r"error: arms\.1\.from_tick: the control arm 'rumour' has from_tick; the other arms",
    ),
    (
        "duplicate-arm",
        STUDY.replace("name: rumour", "name: control"),
        r"error: arms\.1\.name: duplicate arm 'control'; give each arm a unique name",
    ),
    (
        "fork-after-the-end",
        STUDY.replace("from_tick: 3", "from_tick: 9"),
        r"error: arms\.1\.from_tick: tick 9 is after the control's last tick \(6\); fork at a "
        r"tick from 1 to 6",
    ),
    (
        "fork-changes-history",
        STUDY.replace(
            "set: {workflow.1.intervene.args.text",
            "set: {agents.0.count: 3, workflow.1.intervene.args.text",
        ),
        r"error: arms\.1 -> agents: the arm forks from the control at tick 3, so its agents "
        r"differs from the parent run's agents",
    ),
    (
        "set-bad-index",
        STUDY.replace("workflow.1.intervene.args.text", "workflow.7.intervene.args.text"),
        r"error: arms\.1\.set workflow\.7\.intervene\.args\.text: workflow\.7: there is no "
        r"item '7' \(the list has 4\); use an index from 0 to 3",
    ),
    (
        "set-makes-a-bad-experiment",
        STUDY.replace("workflow.1.intervene.args.stance: -0.8", "ticks: 3"),
        r"error: arms\.1 -> ticks: arm 'rumour' makes an experiment that is not valid: needs "
        r"exactly one of 'ticks' or 'workflow'",
    ),
    (
        "samples-with-scripted",
        STUDY.replace("{seeds: [1, 2]}", "{samples: 3}"),
        r"error: replicates\.samples: sampled replicates need a sampling model, and model uses "
        r"the 'scripted' backend, which answers the same whatever the seed; use replicates: "
        r"\{seeds",
    ),
    (
        "measure-two-kinds",
        STUDY.replace("{survey: opinion}", "{survey: opinion, action: post}"),
        r"error: measures\.0: a measure names exactly one of survey, measure, env or action "
        r"\(got survey, action\)",
    ),
    (
        "env-measure-without-series",
        STUDY.replace("social.mean", "social"),
        r"error: measures\.1\.env: 'social' is not a valid value here",
    ),
    (
        "no-base",
        STUDY.replace("experiment: base.yaml", "experiment: nowhere.yaml"),
        r"error: experiment: the base experiment 'nowhere.yaml' is not a file \(.*nowhere\.yaml\); "
        r"give its path relative to the study file's folder",
    ),
    (
        "no-arms",
        "name: s\nexperiment: base.yaml\nreplicates: {count: 1}\narms: []\n",
        r"error: arms: 'arms' must not be empty; give the control and a treatment",
    ),
    ("not-yaml", "name: [s\n", r"error: .*study\.yaml is not valid YAML at line"),
    (
        "budget-bad-duration",
        STUDY + "budget: {wall_time: soon}\n",
        r"error: budget\.wall_time: ",
    ),
]


@pytest.mark.parametrize(("case", "text", "message"), BAD, ids=[c[0] for c in BAD])
def test_a_bad_study_file_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, text: str, message: str
) -> None:
    path = _files(tmp_path, text)
    out = tmp_path / "out"
    assert main(["study", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert not out.exists()  # nothing written


def test_a_bad_base_experiment_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _files(tmp_path, base=BASE.replace("seed: 5", "seed: -1"))
    assert main(["study", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "error: experiment -> seed: the base experiment" in err
    assert "base.yaml: input should be greater than or equal to 0" in err


def test_command_line_mistakes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["study"]) == 2
    assert "error: STUDY: no study file given; run `agentsim study" in capsys.readouterr().err
    assert main(["study", str(tmp_path / "missing.yaml")]) == 2
    assert "error: cannot read study file" in capsys.readouterr().err
    assert main(["study", "x.yaml", "--resume", str(tmp_path)]) == 2
    assert "error: --resume: takes the study folder alone" in capsys.readouterr().err
    assert main(["study", "--resume", str(tmp_path)]) == 2
    assert f"error: --resume: {tmp_path} is not a study folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["study", "--help"])
    assert info.value.code == 0
    assert "usage: agentsim study [-h] [--out DIR] [--resume STUDY_DIR]" in capsys.readouterr().out


def test_a_model_server_that_fails_the_preflight_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = BASE.replace(
        "model: {backend: scripted}",
        "model: {backend: openai, model: m, base_url: 'http://127.0.0.1:9/v1', max_retries: 0}",
    )
    out = tmp_path / "out"
    assert main(["study", str(_files(tmp_path, base=base)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "127.0.0.1:9" in err
    assert not out.exists()
