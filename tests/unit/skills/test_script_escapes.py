"""Timeouts hold for everything a script starts: a helper in a session of its own that keeps
the script's pipes open is killed with the script, in every tier that owns a process, and
the call returns at its timeout, not when the helper would end (it sleeps 120 s).

The timeout is 10 s where the helper must be running by then: two Python start-ups (the
script's, then the helper's) took up to 7 s on a loaded 2-core machine. Wall-clock bounds
are guards far from the 120 s the call would otherwise wait."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentsim.skills.scripts import ScriptRunner
from agentsim.skills.scripts.runner import TIMEOUT_EXIT_CODE
from tests.unit.helpers import (
    fx,
    gone_within,
    kill_all_with_arg,
    kill_pid_in,
    make_ctx,
    none_left_within,
    process_alive,
)

pytestmark = pytest.mark.slow  # each case starts Python processes and waits a timeout

CASES = [
    pytest.param("escapes_plain.py", "inline", "subprocess", id="subprocess"),
    pytest.param("escapes_plain.py", "process", "wrapper", id="process-wrapper"),
    pytest.param("escapes.py", "process", "entrypoint", id="process-entrypoint"),
]


def _pidfile(tmp_path: Path, isolation: str) -> Path:
    """Where the helper writes its pid: a sandboxed script writes only in its workspace."""
    if isolation == "process":
        return make_ctx(tmp_path).workspace_root / "daemon.pid"
    return tmp_path / "daemon.pid"


def _ended(pidfile: Path, isolation: str) -> bool:
    """Whether the helper is gone: a sandboxed helper's pid is that of its PID namespace, so
    it is found from here by its command line (the pid file's path)."""
    if isolation == "process":
        return pidfile.exists() and none_left_within(str(pidfile))
    return gone_within(int(pidfile.read_text()))


@pytest.mark.parametrize(("script", "isolation", "tier"), CASES)
async def test_a_timeout_kills_a_setsid_helper_holding_the_pipes(
    tmp_path: Path, script: str, isolation: str, tier: str
) -> None:
    pidfile = _pidfile(tmp_path, isolation)
    try:
        began = time.perf_counter()
        result = await ScriptRunner().run(
            fx(tmp_path, script),
            [str(pidfile), "hang"],
            make_ctx(tmp_path),
            isolation=isolation,  # type: ignore[arg-type]
            timeout=10,
        )
        took = time.perf_counter() - began
        assert (result.timed_out, result.exit_code) == (True, TIMEOUT_EXIT_CODE)
        assert result.error is not None and "timed out after 10s" in result.error
        assert took < 60, took  # not the helper's 120 s
        assert pidfile.exists(), "the helper had not started by the timeout"
        assert _ended(pidfile, isolation), "the setsid helper outlived the call"
    finally:
        kill_all_with_arg(str(pidfile))
        if isolation != "process":  # a sandboxed pid is not a pid of this machine's
            kill_pid_in(pidfile)


async def test_a_timeout_kills_a_descendant_without_the_tag(tmp_path: Path) -> None:
    """A helper started with an empty environment is found as the script's descendant."""
    pidfile = tmp_path / "daemon.pid"
    try:
        result = await ScriptRunner().run(
            fx(tmp_path, "escapes_plain.py"), [str(pidfile), "bare"], make_ctx(tmp_path), timeout=10
        )
        assert (result.timed_out, result.tier) == (True, "subprocess")
        assert pidfile.exists(), "the helper had not started by the timeout"
        assert gone_within(int(pidfile.read_text())), "the bare helper outlived the call"
    finally:
        kill_pid_in(pidfile)


@pytest.mark.parametrize(("script", "isolation", "tier"), CASES)
async def test_a_helper_holding_the_pipes_never_delays_a_finished_call(
    tmp_path: Path, script: str, isolation: str, tier: str
) -> None:
    """The script returns at once; its helper lives on (subprocess tier) or is killed
    (process isolation leaves nothing behind) — the call never waits for its pipes."""
    pidfile = _pidfile(tmp_path, isolation)
    try:
        began = time.perf_counter()
        result = await ScriptRunner().run(
            fx(tmp_path, script),
            [str(pidfile), "return"],
            make_ctx(tmp_path),
            isolation=isolation,  # type: ignore[arg-type]
            timeout=20,
        )
        assert time.perf_counter() - began < 60  # Python start-ups only, never the 120 s
        assert (result.ok, result.tier, result.output.strip()) == (True, tier, "started")
        if isolation == "process":
            assert _ended(pidfile, isolation), "process isolation left the helper running"
        else:
            # a plain subprocess may leave a daemon, as a shell does
            assert process_alive(int(pidfile.read_text()))
    finally:
        kill_all_with_arg(str(pidfile))
        if isolation != "process":  # a sandboxed pid is not a pid of this machine's
            kill_pid_in(pidfile)


async def test_an_inline_entrypoint_returns_at_its_timeout(tmp_path: Path) -> None:
    """In-process, the call returns at its timeout; what an inline script started cannot be
    told apart from the host's own children, so it runs on (use process isolation)."""
    pidfile = tmp_path / "daemon.pid"
    try:
        began = time.perf_counter()
        result = await ScriptRunner().run(
            fx(tmp_path, "escapes.py"), [str(pidfile), "hang"], make_ctx(tmp_path), timeout=3
        )
        assert time.perf_counter() - began < 60  # not the script's 120 s
        assert (result.timed_out, result.tier, result.isolation) == (True, "entrypoint", "inline")
        assert result.error is not None and "the call was abandoned" in result.error
    finally:
        kill_pid_in(pidfile)
