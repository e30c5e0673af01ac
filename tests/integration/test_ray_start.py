"""Where a Ray run's hosts go, settled before anything is written: a cluster of the run's own
unless given an address (never one found on the machine), an address that is not there
refused within ``executor.connect_timeout``, and hosts that do not fit the cluster's CPUs
refused with the numbers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agentsim.cli import main
from tests.unit import helpers

pytestmark = [pytest.mark.ray]

_YAML = """
name: ray-start
seed: 2
ticks: 1
agents: [{{group: a, count: {agents}, skills: {{default: [], disabled: [daily-guidance]}}}}]
executor: {{kind: ray, hosts: {hosts}, connect_timeout: 5}}
output: {{formats: [jsonl]}}
"""


def _experiment(tmp: Path, *, hosts: int, agents: int = 4) -> Path:
    exp = tmp / "exp.yaml"
    exp.write_text(_YAML.format(hosts=hosts, agents=agents), encoding="utf-8")
    return exp


def _cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``agentsim`` in a process of its own (this one may have joined a cluster already)."""
    return subprocess.run(
        [sys.executable, "-m", "agentsim.cli", *argv],
        capture_output=True, text=True, timeout=300, check=False,
        env={**env, "PYTHONPATH": str(helpers.REPO)},
    )  # fmt: skip


def _errors(stderr: str) -> list[str]:
    """Our own lines of stderr (Ray logs lines of its own there)."""
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.usefixtures("ray_cluster")
def test_hosts_that_do_not_fit_the_clusters_cpus_are_refused_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    cpus = int(ray.cluster_resources()["CPU"])
    exp = _experiment(tmp_path, hosts=cpus + 2, agents=cpus + 2)
    out = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert _errors(err) == [
        f"error: executor.hosts: {cpus + 2} hosts x 1 CPU need {cpus + 2} CPUs, but the Ray "
        f"cluster has {cpus}; set executor.hosts to at most {cpus}, or add nodes to the cluster"
    ]
    assert not out.exists()


def test_an_address_with_no_cluster_fails_within_the_connect_timeout(tmp_path: Path) -> None:
    exp = _experiment(tmp_path, hosts=1)
    out = tmp_path / "run"
    address = f"127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    started = time.monotonic()
    proc = _cli("run", str(exp), "--out", str(out), "--address", address, env=env)
    assert time.monotonic() - started < 60
    assert proc.returncode == 2, proc.stderr
    assert _errors(proc.stderr) == [
        f"error: executor.address: cannot reach the Ray cluster at {address} ([Errno 111] "
        "Connection refused); start it (`ray start --head`), fix executor.address / --address "
        "/ RAY_ADDRESS, or give none to start a local cluster; executor.connect_timeout sets "
        "the wait"
    ]
    assert "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.slow
def test_without_an_address_a_cluster_found_on_the_machine_is_not_joined(tmp_path: Path) -> None:
    # What `ray start` leaves for Ray's discovery: the address of "the cluster on this
    # machine" (here one that is gone). A run given no address must start its own.
    short = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # Ray's socket paths are short
    (short / "ray").mkdir()
    (short / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{_closed_port()}\n")
    exp = _experiment(tmp_path, hosts=1, agents=2)
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    try:
        proc = _cli(
            "run", str(exp), "--out", str(out), "--json", env={**env, "RAY_TMPDIR": str(short)}
        )
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    assert '"status": "completed"' in proc.stdout
    assert (out / "manifest.json").is_file()


@pytest.mark.slow
def test_sigterm_stops_a_ray_run_at_the_tick_end(tmp_path: Path) -> None:
    # Ray's own SIGTERM handler (exit at once) must not replace the run's.
    exp = tmp_path / "exp.yaml"
    exp.write_text(_YAML.format(hosts=1, agents=2).replace("ticks: 1", "ticks: 500"))
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsim.cli", "run", str(exp), "--out", str(out), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(helpers.REPO)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        manifest = out / "manifest.json"
        while time.monotonic() < deadline:
            if manifest.exists() and '"ticks_done": 0' not in manifest.read_text():
                break
            time.sleep(0.1)
        proc.terminate()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr
    assert '"status": "interrupted"' in stdout
    assert '"status": "interrupted"' in manifest.read_text()
