"""ScriptRunner away from the caller: the subprocess tier, thread and process isolation."""

from __future__ import annotations

import asyncio
import io
import json
import os
import pickle
import sys
import time
from pathlib import Path

import pytest

from agentsim.skills.scripts import TIMEOUT_EXIT_CODE, ScriptRunner, child
from tests.unit.helpers import SECRET_ENVIRON, fx, make_ctx, wait_for_file, write_script

# -- subprocess tier -------------------------------------------------------------------------------


async def test_import_failure_falls_back_to_a_scrubbed_subprocess(tmp_path: Path) -> None:
    """needs_sibling.py imports a module that lives next to it. The runner never adds the
    script's folder to sys.path, so the in-process import fails; `python needs_sibling.py`
    puts that folder on the path itself, so the subprocess tier really runs and prints its
    environment."""
    ctx = make_ctx(tmp_path)
    result = await ScriptRunner().run(fx(tmp_path, "needs_sibling.py"), ["--flag", "v"], ctx)
    assert (result.ok, result.tier, result.exit_code) == (True, "subprocess", 0), result.error
    data = json.loads(result.output)
    assert data["sibling"] == "sibling-ok"
    assert data["argv"] == ["--flag", "v"]
    real = os.path.realpath  # blocking, but trivial in a test
    assert real(data["cwd"]) == real(ctx.workspace_root)
    env = data["env"]
    assert set(env) == {
        "PATH",
        "LANG",
        "PYTHONDONTWRITEBYTECODE",
        "AGENTSIM_CONTEXT_JSON",
        "AGENT_WORK_DIR",
        "SKILL_ID",
        "SKILL_NAME",
        "SKILL_DIR",
        "AGENTSIM_CALL_ID",
    }
    assert (env["AGENT_WORK_DIR"], env["SKILL_ID"]) == (str(ctx.workspace_root), ctx.skill_id)
    shipped = json.loads(env["AGENTSIM_CONTEXT_JSON"])
    assert shipped["agent_id"] == "a-1"
    assert shipped["workspace_root"] == str(ctx.workspace_root)


def test_only_allow_listed_names_reach_ctx_env(tmp_path: Path) -> None:
    env = make_ctx(tmp_path).env
    assert dict(env) == {"PATH": SECRET_ENVIRON["PATH"], "LANG": "C.UTF-8"}


async def test_failing_subprocess_reports_exit_code_stderr_and_caps(tmp_path: Path) -> None:
    runner = ScriptRunner(output_cap=30)
    result = await runner.run(fx(tmp_path, "subprocess_fail.py"), ["50"], make_ctx(tmp_path))
    assert (result.ok, result.exit_code, result.tier) == (False, 3, "subprocess")
    assert result.truncated
    assert result.output == "x" * 30 + "\n...[truncated 21 chars]"
    assert result.error == "went wrong on purpose\n"
    assert runner.stats()["calls_subprocess"] == 1


async def test_syntax_error_goes_to_the_subprocess_which_reports_it(tmp_path: Path) -> None:
    script = write_script(tmp_path, "broken.py", "def entrypoint(argv, ctx)\n    return 1\n")
    result = await ScriptRunner().run(script, [], make_ctx(tmp_path))
    assert (result.ok, result.tier, result.exit_code) == (False, "subprocess", 1)
    assert result.error is not None and "SyntaxError" in result.error


async def test_plain_script_with_sibling_import_is_demoted_to_subprocess(tmp_path: Path) -> None:
    runner = ScriptRunner()
    ctx = make_ctx(tmp_path)
    first = await runner.run(fx(tmp_path, "plain_sibling.py"), [], ctx)
    second = await runner.run(fx(tmp_path, "plain_sibling.py"), [], ctx)
    assert (first.tier, first.output, first.ok) == ("subprocess", "sibling-ok\n", True)
    assert (second.tier, second.output) == ("subprocess", "sibling-ok\n")


@pytest.mark.slow
async def test_subprocess_timeout_kills_the_child(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "only_as_script.py",
        "if __name__ != '__main__':\n"
        "    raise ImportError('only runs as a script')\n"
        "import time\n"
        "def entrypoint(argv, ctx):\n"
        "    return 'never'\n"
        "time.sleep(30)\n",
    )
    result = await ScriptRunner().run(script, [], make_ctx(tmp_path), timeout=0.5)
    assert (result.timed_out, result.tier, result.exit_code) == (True, "subprocess", 124)
    assert result.error is not None and "timed out after 0.5s" in result.error


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as gone)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.01)
    return False


async def test_cancelling_a_subprocess_call_kills_the_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = write_script(
        tmp_path,
        "linger.py",
        "if __name__ != '__main__':\n"
        "    raise ImportError('only runs as a script')\n"
        "import os, pathlib, time\n"
        "def entrypoint(argv, ctx):\n"
        "    return 'never'\n"
        # Written then renamed, so the test never reads a half-written pid.
        f"tmp = pathlib.Path({str(pid_file)!r} + '.tmp')\n"
        "tmp.write_text(str(os.getpid()))\n"
        f"tmp.rename({str(pid_file)!r})\n"
        "time.sleep(30)\n",
    )
    task = asyncio.create_task(ScriptRunner().run(script, [], make_ctx(tmp_path), timeout=60))
    await asyncio.to_thread(wait_for_file, pid_file)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(process_gone, int(pid_file.read_text()))


async def test_missing_workspace_is_reported(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, "ghost", create=False)
    result = await ScriptRunner().run(fx(tmp_path, "needs_sibling.py"), [], ctx)
    assert (result.ok, result.exit_code) == (False, 127)
    assert result.error is not None
    assert "check that the agent workspace" in result.error


# -- thread isolation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "argv", "tier", "output"),
    [
        ("echo.py", ["t"], "entrypoint", "a-1:7:t"),
        ("async_sleepy.py", ["0"], "entrypoint", '["slept", "a-1"]'),
        ("plain.py", ["t"], "subprocess", "argv=t\nagent=a-1\n"),
    ],
    ids=["sync", "async", "plain"],
)
async def test_thread_isolation_runs_every_tier(
    tmp_path: Path, script: str, argv: list[str], tier: str, output: str
) -> None:
    result = await ScriptRunner().run(
        fx(tmp_path, script), argv, make_ctx(tmp_path), isolation="thread"
    )
    assert (result.ok, result.tier, result.output) == (True, tier, output), result.error


async def test_thread_isolation_demotes_a_wrapper_that_needs_its_folder(tmp_path: Path) -> None:
    # Fresh copies, so that no other test has demoted this path in the shared cache yet.
    fx(tmp_path, "plain_sibling.py")
    result = await ScriptRunner().run(
        tmp_path / "plain_sibling.py", [], make_ctx(tmp_path), isolation="thread"
    )
    assert (result.ok, result.tier, result.output) == (True, "subprocess", "sibling-ok\n")


async def test_thread_isolation_keeps_the_context_and_reports_errors(tmp_path: Path) -> None:
    runner = ScriptRunner()
    ctx = make_ctx(tmp_path)
    own = await runner.run(fx(tmp_path, "write_own.py"), [], ctx, isolation="thread")
    assert json.loads(own.output)["same_before"] is True
    failed = await runner.run(fx(tmp_path, "raising.py"), [], ctx, isolation="thread")
    assert (failed.ok, failed.exit_code, failed.isolation) == (False, 1, "thread")


async def test_thread_isolation_propagates_keyboard_interrupt(tmp_path: Path) -> None:
    script = write_script(
        tmp_path, "ctrl_c_t.py", "def entrypoint(argv, ctx):\n    raise KeyboardInterrupt\n"
    )
    with pytest.raises(KeyboardInterrupt):
        await ScriptRunner().run(script, [], make_ctx(tmp_path), isolation="thread")


def held(folder: Path) -> Path:
    """A script that returns only once the file ``argv[0]`` exists: a call that answers while
    that file is missing was cut at its timeout, however slowly this machine runs."""
    return write_script(
        folder,
        "held.py",
        "import os, time\n\ndef entrypoint(argv, ctx):\n"
        "    while not os.path.exists(argv[0]):\n        time.sleep(0.01)\n"
        "    return 'released'\n",
    )


@pytest.mark.slow
async def test_thread_isolation_enforces_the_timeout(tmp_path: Path) -> None:
    release = tmp_path / "release"
    try:
        async with asyncio.timeout(60):  # a guard: without the timeout the call never returns
            result = await ScriptRunner().run(
                held(tmp_path), [str(release)], make_ctx(tmp_path), isolation="thread", timeout=1
            )
    finally:
        release.touch()  # the abandoned thread ends; its late result is discarded
    assert (result.timed_out, result.ok, result.isolation) == (True, False, "thread")
    assert result.error is not None and "timed out after 1s under thread isolation" in result.error
    assert result.elapsed >= 1


# -- process isolation -----------------------------------------------------------------------


async def test_process_isolation_runs_entrypoint_and_wrapper(tmp_path: Path) -> None:
    runner = ScriptRunner()
    ctx = make_ctx(tmp_path)
    echo, plain, failed = await asyncio.gather(
        runner.run(fx(tmp_path, "echo.py"), ["p"], ctx, isolation="process"),
        runner.run(fx(tmp_path, "plain.py"), ["p"], ctx, isolation="process"),
        runner.run(fx(tmp_path, "raising.py"), [], ctx, isolation="process"),
    )
    assert (echo.ok, echo.output, echo.tier, echo.isolation) == (
        True,
        "a-1:7:p",
        "entrypoint",
        "process",
    ), echo.error
    assert (plain.output, plain.tier) == ("argv=p\nagent=a-1\n", "wrapper")
    assert (failed.ok, failed.exit_code) == (False, 1)
    assert failed.error is not None and "ValueError: boom from raising.py" in failed.error


async def test_process_isolation_reports_a_crashed_child(tmp_path: Path) -> None:
    script = write_script(
        tmp_path, "hard_exit.py", "import os\n\ndef entrypoint(argv, ctx):\n    os._exit(9)\n"
    )
    result = await ScriptRunner().run(script, [], make_ctx(tmp_path), isolation="process")
    assert (result.ok, result.exit_code) == (False, 9)
    assert (
        result.error is not None and "crashed its isolation process (exit code 9)" in result.error
    )


async def test_process_isolation_start_failure_is_reported(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, "ghost", create=False)
    result = await ScriptRunner().run(fx(tmp_path, "echo.py"), [], ctx, isolation="process")
    assert (result.ok, result.exit_code, result.isolation) == (False, 127, "process")
    assert result.error is not None and "check that the agent workspace" in result.error


@pytest.mark.slow
async def test_process_isolation_enforces_the_timeout(tmp_path: Path) -> None:
    release = tmp_path / "release"  # never created: only the kill at the timeout ends the call
    async with asyncio.timeout(60):  # a guard: without the timeout the call never returns
        result = await ScriptRunner().run(
            held(tmp_path), [str(release)], make_ctx(tmp_path), isolation="process", timeout=1
        )
    assert (result.timed_out, result.ok, result.isolation) == (True, False, "process")
    assert result.exit_code == TIMEOUT_EXIT_CODE
    assert result.error is not None and "timed out after 1s under process isolation" in result.error


def test_child_serves_a_pickled_request(tmp_path: Path) -> None:
    request = {
        "script": str(fx(tmp_path, "echo.py")),
        "argv": ["c"],
        "ctx": make_ctx(tmp_path),
        "output_cap": 100,
    }
    reply = json.loads(child.serve(pickle.dumps(request)))
    assert (reply["ok"], reply["output"], reply["tier"]) == (True, "a-1:7:c", "entrypoint")


def test_child_main_replies_on_fd_1_and_sends_raw_writes_to_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    script = write_script(
        tmp_path,
        "noisy.py",
        "import os\n\ndef entrypoint(argv, ctx):\n"
        "    os.write(1, b'raw on fd 1\\n')\n    print('noise')\n    return 'x'\n",
    )
    request = {"script": str(script), "argv": [], "ctx": make_ctx(tmp_path), "output_cap": 50}
    read_end, write_end = os.pipe()
    saved = os.dup(1)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(pickle.dumps(request))))
    # As in a real child: print() writes to whatever fd 1 is at the time.
    fd1 = open(1, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
    monkeypatch.setattr(sys, "stdout", fd1)
    try:
        os.dup2(write_end, 1)
        os.close(write_end)
        assert child.main() == 0
    finally:
        fd1.close()
        os.dup2(saved, 1)  # main() pointed fd 1 at stderr; give pytest its capture back
        os.close(saved)
    with os.fdopen(read_end, encoding="utf-8") as reply:
        data = json.loads(reply.read())
    assert (data["ok"], data["output"], data["log"]) == (True, "x", "noise\n")
    assert "raw on fd 1" in capfd.readouterr().err


async def test_a_one_call_process_runs_plain_scripts_as_main(tmp_path: Path) -> None:
    """``plain_in_process`` (the isolation child's mode): the wrapper tier, and a plain
    script whose import only resolves as a real script goes to the subprocess tier."""
    runner = ScriptRunner()
    runner.plain_in_process = True
    ctx = make_ctx(tmp_path)
    saved = sys.argv
    plain = await runner.run(fx(tmp_path, "plain.py"), ["w"], ctx)
    assert sys.argv is saved
    assert (plain.ok, plain.tier, plain.output) == (True, "wrapper", "argv=w\nagent=a-1\n")
    fx(tmp_path, "plain_sibling.py")
    sibling = await runner.run(tmp_path / "plain_sibling.py", [], ctx)
    assert (sibling.ok, sibling.tier, sibling.output) == (True, "subprocess", "sibling-ok\n")
