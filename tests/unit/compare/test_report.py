"""``agentsim study report STUDY_DIR`` (``agentsim.study.compare.main``) on a study folder
made of ordinary scripted runs: its summary, JSON and plots, runs that are not complete,
and folders that are not studies."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from agentsim.inspect import open_run
from agentsim.study import compare_study
from agentsim.study.compare import main
from tests.unit.compare.conftest import write_manifest


@pytest.mark.slow
def test_report_of_a_study_of_scripted_runs(
    tmp_path: Path, study_builder: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    study = study_builder(tmp_path, seeds=(1, 2))
    capsys.readouterr()
    assert main([str(study)]) == 0
    out = capsys.readouterr().out
    assert "study cmp: 2 arms, 4 complete runs, 3 measures compared" in out
    # The scripted runs' survey is free text (no `answer:` instrument): named, not compared.
    assert "note: survey opinion: no typed answers (free text only); not compared" in out
    report = study / "report"
    assert f"wrote {report / 'summary.md'}, {report / 'comparison.json'} and 3 plots" in out
    text = (report / "summary.md").read_text("utf-8")
    assert text.startswith("# Study cmp: comparison of the arms\n")
    assert "`control` (control): 2 complete runs; `closure` (forked at tick 2): 2 complete" in text
    for title in ("## measure mood", "## env social.mean", "## action 'posted on social': count"):
        assert title in text
    assert "(paired t, 2 pairs)" in text and "(vs control, 2 replicates)" in text

    # The numbers are those of the runs: the final social.mean of each run's last tick.
    data = json.loads((report / "comparison.json").read_text("utf-8"))
    env = next(i for i in data["items"] if i["key"] == "env-social.mean")
    finals = {}
    for arm in env["final"]:
        for rid, value in zip(arm["runs"], arm["values"], strict=True):
            finals[rid] = value
    for rid, value in finals.items():
        table = open_run(study / "runs" / rid).events(type="social_opinions")
        last = max(range(table.num_rows), key=table["tick"].to_pylist().__getitem__)
        assert value == table["mean"].to_pylist()[last]
    closure = env["final"][1]
    diffs = [finals[f"closure-r{i}"] - finals[f"control-r{i}"] for i in (1, 2)]
    assert closure["difference"]["mean"] == pytest.approx(sum(diffs) / 2)
    # Ticks 0 and 1 are shared (copied by the fork): no difference there.
    first = env["ticks"][0]
    assert first["tick"] == 0 and first["differences"]["closure"]["mean"] == 0.0
    for rel in data["plots"].values():
        assert (report / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({rel})" in text


@pytest.mark.slow
def test_runs_not_complete_are_named_and_left_out(
    tmp_path: Path, study_builder: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    study = study_builder(tmp_path, seeds=(1, 2), measures=[{"measure": "mood"}])
    manifest = json.loads((study / "manifest.json").read_text("utf-8"))
    runs = manifest["runs"]
    runs[3]["state"] = "failed"  # closure-r2
    # A run the manifest calls complete whose folder says otherwise.
    shutil.copytree(study / "runs" / "control-r1", study / "runs" / "control-r3")
    status = study / "runs" / "control-r3" / "manifest.json"
    status.write_text(json.dumps({**json.loads(status.read_text()), "status": "interrupted"}))
    runs.append({**runs[0], "id": "control-r3", "dir": "runs/control-r3", "replicate": 3,
                 "seed": 3})  # fmt: skip
    runs.append({**runs[1], "id": "closure-r3", "dir": "runs/closure-r3", "state": "pending",
                 "replicate": 3, "seed": 3})  # fmt: skip
    (study / "manifest.json").write_text(json.dumps(manifest))

    cmp = compare_study(study)
    assert cmp.runs == {"control": ("control-r1", "control-r2"), "closure": ("closure-r1",)}
    assert [(lo.run, lo.reason) for lo in cmp.left_out] == [
        ("closure-r2", "state failed"),
        ("control-r3", "its run folder says interrupted"),
        ("closure-r3", "state pending"),
    ]
    mood = cmp.item("measure-mood").final["closure"]
    assert mood.runs == ("closure-r1",) and mood.estimate.low is None
    assert mood.paired_agents is not None and mood.paired_agents.n == 1

    capsys.readouterr()
    assert main([str(study), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "left out: closure-r2 (arm closure): state failed" in out
    assert "left out: control-r3 (arm control): its run folder says interrupted" in out
    text = (tmp_path / "rep" / "summary.md").read_text("utf-8")
    assert "Runs left out (not complete):\n- `closure-r2` (arm `closure`): state failed\n" in text
    assert "- `closure-r3` (arm `closure`): state pending" in text
    assert "| `closure` | 1 | " in text and "(no interval: 1 replicate)" in text


def _study(tmp_path: Path, runs: list[dict[str, object]]) -> Path:
    study = tmp_path / "s"
    study.mkdir()
    write_manifest(study, runs, measures=[{"measure": "m"}])
    return study


def _run_entry(
    run_id: str, *, state: str = "complete", folder: str | None = None
) -> dict[str, object]:
    return {"id": run_id, "arm": "control", "replicate": 1, "seed": 1, "sample": None,
            "dir": folder or f"runs/{run_id}", "fork_of": None, "state": state}  # fmt: skip


def test_a_folder_that_is_not_a_study_exits_2_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def error(argv: list[str]) -> str:
        assert main(argv) == 2
        return capsys.readouterr().err

    missing = tmp_path / "nope"
    assert f"error: STUDY_DIR: {missing}: is not a folder" in error([str(missing)])
    assert (
        "is not a study folder (no manifest.json); give the folder `agentsim study "
        "STUDY.yaml` wrote" in error([str(tmp_path)])
    )
    # A run folder's manifest is not a study's.
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"run_id": "x", "status": "completed"}))
    assert "manifest.json has format None, not 1 (is it a run folder's manifest?)" in error(
        [str(run)]
    )
    (run / "manifest.json").write_text("{not json")
    assert "study manifest" in error([str(run)]) and "is not valid JSON" in error([str(run)])
    s = _study(tmp_path, [_run_entry("r1", folder="../elsewhere")])
    assert "run r1's folder '../elsewhere' is not inside the study folder" in error([str(s)])
    manifest = json.loads((s / "manifest.json").read_text())
    manifest["control"] = "treatment"
    (s / "manifest.json").write_text(json.dumps(manifest))
    assert "the control arm 'treatment' is not one of the arms (control, closure)" in error(
        [str(s)]
    )
    manifest["control"], manifest["runs"] = "control", [{"id": "r1", "arm": "placebo"}]
    (s / "manifest.json").write_text(json.dumps(manifest))
    assert "runs[0] of manifest.json needs an id, a dir and one of the arms" in error([str(s)])
    manifest["arms"] = []
    (s / "manifest.json").write_text(json.dumps(manifest))
    assert "manifest.json has no list of arms with names" in error([str(s)])
    assert main(["--help"]) == 0
    assert "agentsim study report" in capsys.readouterr().out
    assert main([]) == 2
    assert "the following arguments are required: STUDY_DIR" in capsys.readouterr().err


def test_a_study_with_no_complete_run_exits_1_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = _study(tmp_path, [_run_entry("r1", state="running"), _run_entry("r2")])
    assert main([str(s)]) == 1
    err = capsys.readouterr().err
    assert "error: no run of study" in err and "r1 (state running)" in err
    assert "r2 (run folder" in err and "does not exist" in err
    assert f"`agentsim study --resume {s}`" in err
    assert not (s / "report").exists()


def test_a_measure_that_is_not_one_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = _study(tmp_path, [_run_entry("r1")])
    run = s / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"status": "completed"}))
    manifest = json.loads((s / "manifest.json").read_text())
    manifest["measures"] = [{"survey": "a", "env": "b"}]
    (s / "manifest.json").write_text(json.dumps(manifest))
    assert main([str(s)]) == 2
    err = capsys.readouterr().err
    assert (
        "measures: {'survey': 'a', 'env': 'b'} is not a measure; each measure is one of "
        "{survey: NAME}, {measure: NAME}, {env: MODULE.SERIES}, {action: NAME}" in err
    )
    manifest["measures"] = ["survey"]
    (s / "manifest.json").write_text(json.dumps(manifest))
    assert main([str(s)]) == 2
    assert "measures: 'survey' is not a measure" in capsys.readouterr().err
