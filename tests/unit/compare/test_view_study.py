"""``agentsim view`` on a study folder, or on a folder holding one: the study's runs listed
together by arm and served as ordinary runs, its comparison on a page of its own, with the
viewer's rules (the Host check; no link followed out of the folder served)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentsim.view import create_app
from tests.unit import helpers


def get(client: TestClient, url: str, status: int = 200) -> Any:
    r = client.get(url)
    assert r.status_code == status, r.text
    return r.json()


def test_a_study_folder_lists_its_runs_by_arm_and_shows_the_comparison(known_study: Path) -> None:
    c = TestClient(create_app(known_study), base_url=helpers.LOCAL)
    data = get(c, "/api/runs")
    ids = [r["id"] for r in data["runs"]]
    assert ids[:2] == ["study~control-r1", "study~closure-r1"] and len(ids) == 10
    [st] = data["studies"]
    assert (st["id"], st["name"], st["control"]) == ("study", "cmp", "control")
    closure = next(a for a in st["arms"] if a["name"] == "closure")
    assert closure["from_tick"] == 1
    assert [(r["id"], r["state"], r["served"]) for r in closure["runs"]] == [
        (f"study~closure-r{i}", "complete", True) for i in (1, 2, 3)
    ]
    # A study's run is an ordinary run of the viewer.
    run = get(c, "/api/runs/study~closure-r2")
    assert run["id"] == "study~closure-r2" and run["status"] == "completed"
    assert get(c, "/api/runs/study~closure-r2/status")["id"] == "study~closure-r2"

    page = get(c, "/api/studies/study")
    assert [r["id"] for r in page["runs"]] == ids
    cmp = page["comparison"]
    assert page["comparison_error"] is None and "path" not in cmp
    mood = next(i for i in cmp["items"] if i["key"] == "measure-mood")
    assert [a["arm"] for a in mood["final"]] == ["control", "closure", "other", "single"]
    assert mood["final"][1]["difference"]["mean"] == 2.0  # the hand-computed case
    assert mood["final"][1]["paired_vs"] == "control"

    assert "no study 'nope'" in get(c, "/api/studies/nope", 404)["error"]
    assert "no run 'study~nope'" in get(c, "/api/runs/study~nope", 404)["error"]
    js = c.get("/static/app.js").text
    assert "async function studyPage(study)" in js and "/api/studies/" in js


def test_a_workspace_holding_a_study_lists_both(known_study: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copytree(known_study, ws / "park")
    shutil.copytree(known_study / "runs" / "control-r1", ws / "solo")
    c = TestClient(create_app(ws), base_url=helpers.LOCAL)
    data = get(c, "/api/runs")
    ids = [r["id"] for r in data["runs"]]
    assert ids[0] == "solo" and "park~other-r3" in ids and "park" not in ids
    assert [s["id"] for s in data["studies"]] == ["park"]
    assert get(c, "/api/studies/park")["comparison"]["study"] == "cmp"


def test_a_study_without_a_complete_run_says_so(known_study: Path) -> None:
    manifest = json.loads((known_study / "manifest.json").read_text())
    for r in manifest["runs"]:
        r["state"] = "running"
    (known_study / "manifest.json").write_text(json.dumps(manifest))
    c = TestClient(create_app(known_study), base_url=helpers.LOCAL)
    page = get(c, "/api/studies/study")
    assert page["comparison"] is None
    assert "no run of study" in page["comparison_error"]
    assert "control-r1 (state running)" in page["comparison_error"]


def test_the_study_pages_keep_the_viewers_rules(known_study: Path, tmp_path: Path) -> None:
    # Another Host (DNS rebinding) reads neither the study nor its runs.
    app = create_app(known_study, address=("127.0.0.1", 8765))
    evil = TestClient(app, base_url="http://evil.example:8765")
    for url in ("/api/studies/study", "/api/runs", "/api/runs/study~control-r1"):
        r = evil.get(url)
        assert r.status_code == 400 and "Host 'evil.example:8765' is not served" in r.text
    assert (
        TestClient(app, base_url="http://127.0.0.1:8765").get("/api/studies/study").status_code
        == 200
    )
    # A study that is a link out of the workspace, and a run of a study whose folder is a
    # link out of the study, are not served.
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(known_study, ws / "linked")
    inside = ws / "inside"
    shutil.copytree(known_study, inside)
    shutil.rmtree(inside / "runs" / "closure-r1")
    os.symlink(known_study / "runs" / "closure-r1", inside / "runs" / "closure-r1")
    c = TestClient(create_app(ws), base_url=helpers.LOCAL)
    data = get(c, "/api/runs")
    assert [s["id"] for s in data["studies"]] == ["inside"]
    assert "no study 'linked'" in get(c, "/api/studies/linked", 404)["error"]
    # The manifest names a folder that leads out: the study's manifest is refused whole.
    assert data["studies"][0]["error"].startswith("STUDY_DIR: ")
    assert "is not inside the study folder" in data["studies"][0]["error"]
    assert "no run 'inside~closure-r1'" in get(c, "/api/runs/inside~closure-r1", 404)["error"]


@pytest.mark.slow
def test_the_viewer_serves_a_study_of_scripted_runs(
    tmp_path: Path, study_builder: Callable[..., Path]
) -> None:
    study = study_builder(tmp_path, seeds=(1,))
    c = TestClient(create_app(study), base_url=helpers.LOCAL)
    rows = {r["id"]: r for r in get(c, "/api/runs")["runs"]}
    assert set(rows) == {"study~control-r1", "study~closure-r1"}
    assert rows["study~closure-r1"]["parent"]["tick"] == 2
    world = get(c, "/api/runs/study~closure-r1/world")
    assert world["run"]["id"] == "study~closure-r1"
    agents = get(c, "/api/runs/study~closure-r1/agents")["agents"]
    agent = get(c, f"/api/runs/study~closure-r1/agents/{agents[0]}")
    assert agent["run"]["id"] == "study~closure-r1"
    cmp = get(c, "/api/studies/study")["comparison"]
    env = next(i for i in cmp["items"] if i["key"] == "env-social.mean")
    # One replicate per arm: means without intervals.
    assert env["final"][0]["estimate"]["low"] is None
