"""Running the test server (``agentsim.testing.openai_server``) in a child process, so that
a benchmark's client has its event loop, and its core, to itself."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def spawn_test_server(*, latency: float = 0.0, startup_timeout: float = 30.0) -> Iterator[str]:
    """Run the server in a child process; yields its ``base_url`` and stops it on exit."""
    # The child must import this very package, installed or not.
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "agentsim.testing.openai_server", "--latency", str(latency)]
    cmd.append("--stop-on-stdin-eof")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = _read_line(proc, startup_timeout)
        yield str(json.loads(line)["base_url"])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - only if the child hangs
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
