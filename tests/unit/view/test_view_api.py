"""The JSON endpoints of `agentsim view`, on a real run made once per module (20 agents, city
and social modules, an intervention and a survey, the offline scripted model)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from agentsim.cli import build_parser
from agentsim.config.experiment import load_experiment, parse_experiment
from agentsim.errors import ConfigError, RunError
from agentsim.inspect import open_run
from agentsim.inspect._query import agent_steps, find_agents
from agentsim.inspect.report import TICK_METRICS, collect_report_data
from agentsim.run.engine import Engine, Progress
from agentsim.store.layout import HostStore, row
from agentsim.view import create_app
from agentsim.view._workspace import Workspace
from tests.unit import helpers

EXPERIMENT = helpers.FIXTURES / "experiments" / "small.yaml"
RUN = "small-1"
AGENT = "workers-00000"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("view") / "workspace"
    asyncio.run(Engine(load_experiment(EXPERIMENT), run_dir=ws / RUN).run())
    return ws


@pytest.fixture(scope="module")
def client(workspace: Path) -> TestClient:
    return TestClient(create_app(workspace), base_url=helpers.LOCAL)


ASK = f"/api/runs/{RUN}/agents/{AGENT}/interview"


def get(client: TestClient, url: str, status: int = 200) -> Any:
    r = client.get(url)
    assert r.status_code == status, r.text
    return r.json()


def tree_hash(root: Path) -> str:
    """Every path under root with its bytes and mtime: any write shows."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(p.relative_to(root).as_posix().encode())
        if p.is_file():
            h.update(p.read_bytes())
            h.update(str(p.stat().st_mtime_ns).encode())
    return h.hexdigest()


def test_runs_lists_each_run_with_status_ticks_agents_and_errors(client: TestClient) -> None:
    data = get(client, "/api/runs")
    [row] = data["runs"]
    assert row["id"] == RUN and row["status"] == "completed" and row["state"] == "completed"
    assert (row["ticks_done"], row["total_ticks"], row["agents"], row["errors"]) == (6, 6, 20, 0)


def test_a_run_with_problems_lists_them_and_a_clean_run_none(
    client: TestClient, workspace: Path, tmp_path: Path
) -> None:
    assert get(client, "/api/runs")["runs"][0]["problems"] == []
    ws = tmp_path / "ws"
    shutil.copytree(workspace / RUN, ws / "bad")
    metrics = json.loads((ws / "bad" / "metrics.json").read_text("utf-8"))
    metrics["problems"].update(hook_failed=601, script_failed=2)
    (ws / "bad" / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    manifest = json.loads((ws / "bad" / "manifest.json").read_text("utf-8"))
    manifest.update(status="failed", reason="social.broadcast: unknown argument 'txt'")
    (ws / "bad" / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    [row] = get(TestClient(create_app(ws), base_url=helpers.LOCAL), "/api/runs")["runs"]
    assert row["problems"] == [
        "601 hook failed",
        "2 script failed",
        "stopped: social.broadcast: unknown argument 'txt'",
    ]
    # A run stopped on purpose records why, and that is no problem.
    metrics["problems"].update(hook_failed=0, script_failed=0)
    (ws / "bad" / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    manifest.update(status="stopped", reason="stopped after --ticks 2")
    (ws / "bad" / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    [row] = get(TestClient(create_app(ws), base_url=helpers.LOCAL), "/api/runs")["runs"]
    assert row["problems"] == [] and row["reason"] == "stopped after --ticks 2"


def test_run_page_has_metrics_per_tick_skills_markers_and_surveys(client: TestClient) -> None:
    data = get(client, f"/api/runs/{RUN}")
    assert data["ticks"] == 6
    assert data["series"]["steps"] == [20.0] * 6
    assert sum(data["series"]["model_calls"]) == data["metrics"]["model_calls"]
    assert sum(data["series"]["prompt_tokens"]) == data["metrics"]["prompt_tokens"]
    assert set(data["series"]) >= {"degraded", "errors", "script_failures", "hook_failures"}
    assert "built-in@daily-guidance" in data["skills"]
    assert all(len(v) == 6 for v in data["skills"].values())
    kinds = Counter((m["tick"], m["kind"]) for m in data["markers"])
    assert kinds == {(3, "intervention"): 2, (3, "survey"): 1}
    assert data["surveys"] == [
        {
            "name": "check",
            "tick": 3,
            "answers": 4,
            "not_ok": 0,
            "invalid": 0,
            "question": "How is your day going?",
        }
    ]
    assert data["reloads"] == []


def test_the_run_page_draws_the_series_the_report_plots(
    client: TestClient, workspace: Path
) -> None:
    data = get(client, f"/api/runs/{RUN}")
    report = collect_report_data(open_run(workspace / RUN).iter_events())
    assert report.activity.ticks == tuple(range(data["ticks"]))
    plotted = {**report.activity.columns, **report.tokens.columns}
    assert {k: data["series"][k] for k in TICK_METRICS} == {
        k: [float(v) for v in plotted[k]] for k in TICK_METRICS
    }
    assert list(data["labels"]) == list(data["series"])


def test_survey_answers_are_paged(client: TestClient) -> None:
    first = get(client, f"/api/runs/{RUN}/surveys/check?limit=3")
    rest = get(client, f"/api/runs/{RUN}/surveys/check?offset=3&limit=3")
    assert first["total"] == 4 and len(first["answers"]) == 3 and len(rest["answers"]) == 1
    assert all(a["answer"] and a["tick"] == 3 for a in first["answers"] + rest["answers"])


def test_agents_are_searched_and_paged(client: TestClient) -> None:
    page = get(client, f"/api/runs/{RUN}/agents?search=POST&offset=6&limit=3")
    assert page == {"total": 8, "agents": ["posters-00006", "posters-00007"]}
    assert get(client, f"/api/runs/{RUN}/agents?limit=2")["agents"] == [
        "posters-00000",
        "posters-00001",
    ]


def test_agent_page_has_profile_and_skills(client: TestClient) -> None:
    data = get(client, f"/api/runs/{RUN}/agents/{AGENT}")
    assert data["profile"]["agent_id"] == AGENT and data["profile"]["group"] == "workers"
    assert "built-in@daily-guidance" in data["skills"]["active"]
    assert data["run"]["ticks_done"] == 6


def test_steps_are_read_for_a_tick_range(client: TestClient) -> None:
    data = get(client, f"/api/runs/{RUN}/agents/{AGENT}/steps?start=2&end=3")
    assert data["ticks"] == [0, 1, 2, 3, 4, 5] and data["steps_total"] == 6
    assert [s["tick"] for s in data["steps"]] == [2, 3]
    step = data["steps"][0]
    assert step["observation"].startswith("tick: 2\n")
    assert "position:" in step["observation"]
    assert step["skill_hooks"].startswith("<skill_hooks>")
    assert step["calls"] and all({"tool", "args", "result"} <= set(c) for c in step["calls"])
    assert [m["tick"] for m in step["memory"]] == [2] * len(step["memory"])
    assert step["memory"] and step["action"]
    assert data["skills_over_time"][0]["tick"] == 0


def test_prompt_of_a_tick(client: TestClient) -> None:
    p = get(client, f"/api/runs/{RUN}/agents/{AGENT}/prompt?tick=1")
    assert p["tick"] == 1 and "<available_skills>" in p["system"] and "<persona>" in p["user"]
    assert p["user"].index("<persona>") < p["user"].index("<observation>")
    err = get(client, f"/api/runs/{RUN}/agents/{AGENT}/prompt?tick=99", 404)
    assert "has no step at tick 99" in err["error"]


def test_world_replays_moves_to_the_occupancy_the_city_logged(
    client: TestClient, workspace: Path
) -> None:
    data = get(client, f"/api/runs/{RUN}/world")
    assert data["modules"] == ["city", "social"]
    assert len(data["agents"]) == data["agents_total"] == 20
    assert data["edges"] and len(data["opinions"]) == 6
    place_ids = [p["id"] for p in data["places"]]
    pos = list(data["start"])
    moves = data["moves"]
    assert moves and min(pos) >= 0
    occupancy = {
        ev["tick"]: ev["occupancy"]
        for ev in open_run(workspace / RUN).events(type="city_occupancy").to_pylist()
    }
    k = 0
    for tick in range(6):
        while k < len(moves) and moves[k] <= tick:
            pos[moves[k + 1]] = moves[k + 2]
            k += 3
        counts = Counter(place_ids[p] for p in pos if p >= 0)
        logged = {p: n for p, n in occupancy[tick].items() if n}
        assert counts == logged, f"tick {tick}"
    assert get(client, f"/api/runs/{RUN}/world?limit=5")["agents"] == data["agents"][:5]


@pytest.mark.parametrize(
    ("url", "status", "message"),
    [
        ("/api/runs/..%2F..%2Fetc", 404, "is not served"),
        ("/api/runs/%2Fetc%2Fpasswd", 404, "is not served"),
        ("/api/runs/%2E%2E", 404, "no run '..' in workspace"),
        ("/api/runs/nope", 404, "no run 'nope' in workspace"),
        ("/api/runs/small-1/agents/%2E%2E", 404, "agent '..' is not in run"),
        ("/api/runs/small-1/agents/..%2F..%2Fmanifest.json", 404, "is not served"),
        ("/api/runs/small-1/agents/%2E%2E/steps", 404, "agent '..' is not in run"),
        ("/api/runs/small-1/agents?limit=0", 400, "limit"),
        ("/api/runs/small-1/agents/workers-00000/steps?start=x", 400, "start"),
    ],
    ids=[
        "dotdot",
        "absolute",
        "bare-dotdot",
        "unknown",
        "agent-dotdot",
        "agent-encoded",
        "agent-dotdot-steps",
        "bad-limit",
        "bad-start",
    ],
)
def test_bad_paths_and_parameters_are_refused(
    client: TestClient, url: str, status: int, message: str
) -> None:
    assert message in get(client, url, status)["error"]


def test_static_files_stay_in_their_folder(client: TestClient) -> None:
    assert client.get("/static/app.js").status_code == 200
    for raw in ("/static/../app.py", "/static/%2e%2e/app.py", "/static/..%2F..%2Fcli.py"):
        r = client.get(raw)
        assert r.status_code == 404 and "create_app" not in r.text


def test_symlinks_out_of_the_workspace_are_not_served(workspace: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(workspace / RUN, ws / RUN)
    os.symlink(workspace / RUN, ws / "outside")
    os.symlink(workspace / RUN / "agents" / AGENT, ws / RUN / "agents" / "zz-link")
    c = TestClient(create_app(ws), base_url=helpers.LOCAL)
    assert [r["id"] for r in get(c, "/api/runs")["runs"]] == [RUN]
    assert "no run 'outside'" in get(c, "/api/runs/outside", 404)["error"]
    err = get(c, f"/api/runs/{RUN}/agents/zz-link", 404)["error"]
    assert "leads outside the workspace" in err


def test_reading_every_endpoint_and_an_interview_change_nothing(
    client: TestClient, workspace: Path
) -> None:
    before = tree_hash(workspace)
    for url in (
        "/api/runs",
        f"/api/runs/{RUN}",
        f"/api/runs/{RUN}/status",
        f"/api/runs/{RUN}/world",
        f"/api/runs/{RUN}/surveys/check",
        f"/api/runs/{RUN}/agents?search=w",
        f"/api/runs/{RUN}/agents/{AGENT}",
        f"/api/runs/{RUN}/agents/{AGENT}/steps?start=0&end=5",
        f"/api/runs/{RUN}/agents/{AGENT}/prompt?tick=0",
    ):
        get(client, url)
    r = helpers.post_interview(client, ASK, "How was your day?")
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["agent_id"] == AGENT and answer["answer"] and answer["tick"] == 6
    assert tree_hash(workspace) == before


def test_an_interview_without_a_question_is_refused(client: TestClient) -> None:
    sent = {
        "X-Agentsim-Token": helpers.viewer_token(client),
        "Content-Type": "application/json",
    }
    r = client.post(ASK, content=b"not json", headers=sent)
    assert r.status_code == 400 and "the request body is not JSON" in r.json()["error"]
    r = client.post(ASK, content=b'{"q": 1}', headers=sent)
    assert r.status_code == 400 and "has no question" in r.json()["error"]
    r = helpers.post_interview(client, ASK, " ")
    assert r.status_code == 400 and "the question is empty" in r.json()["error"]
    r = helpers.post_interview(client, ASK, "why? " * 401)
    assert r.status_code == 400
    assert "the question has 2,005 characters, over 2,000" in r.json()["error"]


# -- what the viewer refuses (issue 32) ---------------------------------------------------


def test_a_request_with_another_host_is_refused_whatever_it_asks(workspace: Path) -> None:
    """DNS rebinding: a page of evil.example whose name resolves to 127.0.0.1 sends its own
    name as Host; it reads nothing, not even the page."""
    app = create_app(workspace, address=("127.0.0.1", 8765))
    c = TestClient(app, base_url="http://evil.example:8765")
    for url in ("/", "/api/runs", f"/api/runs/{RUN}/agents/{AGENT}"):
        r = c.get(url)
        assert r.status_code == 400, url
        assert "Host 'evil.example:8765' is not served" in r.json()["error"]
        assert "answers only to 127.0.0.1, localhost (port 8765)" in r.json()["error"]
    assert TestClient(app, base_url="http://localhost:8766").get("/api/runs").status_code == 400
    assert TestClient(app, base_url="http://127.0.0.1:8765").get("/api/runs").status_code == 200
    assert TestClient(app, base_url="http://LOCALHOST:8765").get("/api/runs").status_code == 200
    # An IPv6 bind, and a wildcard bind with a name the user allowed.
    six = create_app(workspace, address=("::1", 9000))
    assert TestClient(six, base_url="http://[::1]:9000").get("/api/runs").status_code == 200
    assert TestClient(six, base_url="http://[::2]:9000").get("/api/runs").status_code == 400
    wide = create_app(workspace, address=("0.0.0.0", 9000), allow_hosts=["0.0.0.0", "lab.lan"])
    assert TestClient(wide, base_url="http://lab.lan:9000").get("/api/runs").status_code == 200
    assert TestClient(wide, base_url="http://0.0.0.0:9000").get("/api/runs").status_code == 400


def test_a_cross_origin_interview_is_refused_before_any_model_call(client: TestClient) -> None:
    """A page of another site posts to the viewer (text/plain needs no CORS preflight)."""
    r = client.post(
        ASK,
        content=b'{"question": "spend my tokens"}',
        headers={"Origin": "http://evil.example", "Content-Type": "text/plain"},
    )
    assert r.status_code == 403
    assert "a request from http://evil.example is refused" in r.json()["error"]
    r = helpers.post_interview(client, ASK, "hi", **{"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403 and "a cross-site request is refused" in r.json()["error"]


def test_an_interview_needs_the_session_token_and_json(client: TestClient, workspace: Path) -> None:
    r = client.post(ASK, json={"question": "hi"})  # no token: curl, or a forged form
    assert r.status_code == 403
    assert "has no valid X-Agentsim-Token header" in r.json()["error"]
    r = helpers.post_interview(client, ASK, "hi", **{"X-Agentsim-Token": "guess"})
    assert r.status_code == 403 and "X-Agentsim-Token" in r.json()["error"]
    r = helpers.post_interview(client, ASK, "hi", **{"Content-Type": "text/plain"})
    assert r.status_code == 415
    assert (
        "Content-Type 'text/plain' is refused; send the body as application/json"
        in (r.json()["error"])
    )
    # Each viewer has its own token; the page of this one carries this one's.
    assert helpers.viewer_token(client) == client.app.state.token  # type: ignore[attr-defined]
    other = TestClient(create_app(workspace), base_url=helpers.LOCAL)
    assert helpers.viewer_token(other) != helpers.viewer_token(client)


def _post_raw(app: Any, token: str, length: str | None) -> tuple[int, str, int]:
    """POST 400 chunks of 1 MB to the interview through the app's ASGI interface, as a
    server hands them over: (status, error, chunks the app pulled)."""
    headers = [
        (b"host", b"localhost"),
        (b"content-type", b"application/json"),
        (b"x-agentsim-token", token.encode()),
    ]
    if length is not None:
        headers.append((b"content-length", length.encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": ASK,
        "raw_path": ASK.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    pulled = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": b"x" * 1_000_000, "more_body": pulled < 400}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body)["error"], pulled


def test_an_oversized_body_is_refused_without_reading_it(workspace: Path) -> None:
    app = create_app(workspace, token="t0ken")
    status, error, pulled = _post_raw(app, "t0ken", "400000000")  # 400 MB announced
    assert status == 413 and pulled == 0
    assert "the request body of 400,000,000 bytes is over 16,384 bytes" in error
    # Without a length (chunked): read until past the cap, then refused.
    status, error, pulled = _post_raw(app, "t0ken", None)
    assert status == 413 and pulled == 1
    assert "the request body is over 16,384 bytes; send less" in error
    # Nothing is read for a request without the token.
    status, error, pulled = _post_raw(app, "wrong", None)
    assert (status, pulled) == (403, 0) and "X-Agentsim-Token" in error


def test_a_symlinked_profile_or_memory_is_not_served(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"api_key": "sk-outside"}', encoding="utf-8")
    ws = tmp_path / "ws"
    shutil.copytree(workspace / RUN, ws / RUN)
    agent_dir = ws / RUN / "agents" / AGENT
    (agent_dir / "profile.json").unlink()
    os.symlink(secret, agent_dir / "profile.json")
    c = TestClient(create_app(ws), base_url=helpers.LOCAL)
    r = c.get(f"/api/runs/{RUN}/agents/{AGENT}")
    assert r.status_code == 404 and "sk-outside" not in r.text
    error = r.json()["error"]
    assert "profile.json is a symbolic link; links inside a run folder are never followed" in error
    # A run whose manifest is a link is not listed (the other runs still are).
    shutil.copytree(workspace / RUN, ws / "linked")
    (ws / "linked" / "manifest.json").unlink()
    os.symlink(workspace / RUN / "manifest.json", ws / "linked" / "manifest.json")
    c = TestClient(create_app(ws), base_url=helpers.LOCAL)
    assert [r["id"] for r in get(c, "/api/runs")["runs"]] == [RUN]


def test_a_running_run_shows_its_progress(workspace: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(workspace / RUN, ws / "live")
    manifest = json.loads((ws / "live" / "manifest.json").read_text("utf-8"))
    manifest.update(status="running", ticks_done=2, pid=os.getpid(), ended=None)
    (ws / "live" / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    c = TestClient(create_app(ws), base_url=helpers.LOCAL)
    [row] = get(c, "/api/runs")["runs"]
    assert (row["state"], row["ticks_done"], row["total_ticks"]) == ("running", 2, 6)
    manifest["ticks_done"] = 3
    (ws / "live" / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert get(c, "/api/runs/live/status")["ticks_done"] == 3
    assert get(c, "/api/runs")["runs"][0]["ticks_done"] == 3


def test_the_agent_pages_of_a_running_run_show_the_steps_written_since(
    workspace: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(workspace / RUN, ws / "live")
    manifest = json.loads((ws / "live" / "manifest.json").read_text("utf-8"))
    manifest.update(status="running", pid=os.getpid(), ended=None)
    (ws / "live" / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    c = TestClient(create_app(ws), base_url=helpers.LOCAL)
    url = f"/api/runs/live/agents/{AGENT}/steps?start=6&end=6"
    assert (get(c, url)["ticks"], get(c, url)["steps"]) == ([0, 1, 2, 3, 4, 5], [])
    late = {"tick": 6, "time": "t6", "action": "walked late"}
    HostStore(ws / "live", 0).append([(AGENT, row(AGENT, "trace", json.dumps(late)))])
    data = get(c, url)
    assert data["ticks"] == [0, 1, 2, 3, 4, 5, 6]
    assert [(s["tick"], s["action"]) for s in data["steps"]] == [(6, "walked late")]


def test_one_run_folder_can_be_served_alone(workspace: Path) -> None:
    c = TestClient(create_app(workspace / RUN), base_url=helpers.LOCAL)
    assert [r["id"] for r in get(c, "/api/runs")["runs"]] == [RUN]
    with pytest.raises(ConfigError, match="is not a folder"):
        Workspace(workspace / RUN / "manifest.json")


def test_queries_check_their_arguments(workspace: Path) -> None:
    run = open_run(workspace / RUN)
    with pytest.raises(ConfigError, match="offset: -1 is not a whole number >= 0"):
        find_agents(run, offset=-1)
    with pytest.raises(ConfigError, match=r"tick range 3\.\.2 is empty"):
        agent_steps(run.agent(AGENT), start=3, end=2)
    with pytest.raises(RunError, match="agent 'ghost' is not in run"):
        Workspace(workspace).agent(run, "ghost")


def test_the_view_command_binds_loopback_by_default(workspace: Path) -> None:
    args = build_parser().parse_args(["view", str(workspace)])
    assert (args.host, args.port, args.path) == ("127.0.0.1", 8765, str(workspace))
    assert args.allow_host == []
    more = ["view", str(workspace), "--allow-host", "a.lan", "--allow-host", "b.lan"]
    assert build_parser().parse_args(more).allow_host == ["a.lan", "b.lan"]


def test_the_view_command_refuses_a_port_in_use(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentsim.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["view", str(workspace), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "pass --port 0" in err


@pytest.mark.slow
def test_the_view_command_prints_its_url_serves_and_stops_on_ctrl_c(workspace: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsim.cli", "view", str(workspace), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.match(r"agentsim view: (http://127\.0\.0\.1:\d+/) ", line)
        assert m, line
        runs = httpx.get(m.group(1) + "api/runs", timeout=30).json()["runs"]
        assert [r["id"] for r in runs] == [RUN]
        # Served to its own address only: another name for it (DNS rebinding) is refused.
        port = m.group(1).rsplit(":", 1)[1].rstrip("/")
        r = httpx.get(m.group(1) + "api/runs", headers={"Host": f"evil.example:{port}"}, timeout=30)
        assert r.status_code == 400 and "is not served" in r.json()["error"]
        r = httpx.get(m.group(1) + "api/runs", headers={"Host": f"localhost:{port}"}, timeout=30)
        assert r.status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_hot_reloads_are_marked_and_a_run_without_places_draws_none(tmp_path: Path) -> None:
    skills = tmp_path / "skills" / "alpha"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text("---\nname: alpha\ndescription: Use for alpha.\n---\nA.\n")
    config = parse_experiment(
        f"""
name: reload
seed: 1
clock: {{start: "2026-03-02T06:00:00", tick: 1h}}
ticks: 3
agents: [{{group: people, count: 2, profile: {{template: generic}}, skills: {{default: [alpha]}}}}]
skills: {{paths: ["{skills.parent}"], builtin: false}}
model: {{backend: scripted}}
output: {{formats: [jsonl]}}
""",
        base_dir=tmp_path,
    )

    def between_ticks(p: Progress) -> None:
        if p.tick == 1:
            beta = skills.parent / "beta"
            beta.mkdir()
            (beta / "SKILL.md").write_text("---\nname: beta\ndescription: Use for beta.\n---\nB.\n")

    ws = tmp_path / "ws"
    asyncio.run(Engine(config, run_dir=ws / "reload-1", progress=between_ticks).run())
    c = TestClient(create_app(ws), base_url=helpers.LOCAL)
    data = get(c, "/api/runs/reload-1")
    assert data["reloads"] == [
        {"tick": 1, "kind": "reload", "label": "skills reloaded: added custom@beta"}
    ]
    assert data["surveys"] == [] and data["series"]["steps"] == [2.0, 2.0, 2.0]
    world = get(c, "/api/runs/reload-1/world")
    assert (world["modules"], world["places"], world["moves"], world["edges"]) == ([], [], [], [])
    assert world["agents"] == ["people-00000", "people-00001"]
