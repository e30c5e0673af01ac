"""Running the test server in a child process, so that a benchmark's client has its event
loop, and its core, to itself."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

__all__ = ["SpawnedServer", "spawn_test_server"]


@dataclass(frozen=True, slots=True)
class SpawnedServer:
    """A test server running in a child process."""

    base_url: str
    port: int

    def stats(self) -> dict[str, Any]:
        """The server's counters (``GET /_stats``)."""
        response = httpx.get(f"http://127.0.0.1:{self.port}/_stats", trust_env=False)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data


@contextlib.contextmanager
def spawn_test_server(
    *,
    latency: float = 0.0,
    latency_sigma: float = 0.0,
    fault_rate: float = 0.0,
    faults: str = "429,500,503,drop",
    seed: int = 0,
    answer: str = "echo",
    startup_timeout: float = 30.0,
    prefix_cache_tokens: int | None = None,
    prefill_ms_per_1k: float = 0.0,
) -> Iterator[SpawnedServer]:
    """Run ``python -m agentsim.testing.openai_server`` with these options; yields its
    address and stops it on exit."""
    # The child must import this very package, installed or not.
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    cmd = [
        sys.executable,
        "-m",
        "agentsim.testing.openai_server",
        f"--latency={latency}",
        f"--latency-sigma={latency_sigma}",
        f"--fault-rate={fault_rate}",
        f"--faults={faults}",
        f"--seed={seed}",
        f"--answer={answer}",
        "--stop-on-stdin-eof",
    ]
    if prefix_cache_tokens is not None:
        cmd += [f"--prefix-cache-tokens={prefix_cache_tokens}"]
        cmd += [f"--prefill-ms-per-1k={prefill_ms_per_1k}"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        info = json.loads(_read_line(proc, startup_timeout))
        yield SpawnedServer(base_url=str(info["base_url"]), port=int(info["port"]))
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # only if the child hangs
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise RuntimeError(
                f"the test server did not start within {timeout} s; run "
                "`python -m agentsim.testing.openai_server` by hand to see why"
            )
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(
            f"the test server exited with code {proc.wait()} before printing its address; run "
            "`python -m agentsim.testing.openai_server` by hand to see why"
        )
    return line
