"""A script that overruns its timeout fails that call, never the caller (issue 14, items 2-3).

Each test bounds the wall time: an overrun is reported within timeout + 0.5 s. Hanging
scripts spin only until the test drops a stop file, so that no thread outlives its test.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsim.skills.context import SkillScriptContext
from agentsim.skills.scripts import TIMEOUT_EXIT_CODE, Quarantined, ScriptRunner
from agentsim.skills.scripts.inprocess import CACHE, MAX_WORKERS
from tests.unit import helpers

SLACK = 0.5


def make_ctx(skill_dir: Path, agent_id: str = "a-1") -> SkillScriptContext:
    return helpers.script_context(
        skill_dir,
        workspace=skill_dir / "agents" / agent_id,
        agent_id=agent_id,
        skill_name="demo",
        env={},
    )


@pytest.fixture
def stop(tmp_path: Path) -> Iterator[Path]:
    """A file whose creation ends every spinning script of the test."""
    path = tmp_path / "stop"
    yield path
    path.touch()
    time.sleep(0.05)  # let the released threads see it


def spin(stop: Path) -> str:
    return f"import os\nwhile not os.path.exists({str(stop)!r}):\n    pass\n"


def script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


async def test_sync_inline_loop_fails_the_call_and_the_caller_goes_on(
    tmp_path: Path, stop: Path
) -> None:
    hang = script(
        tmp_path, "hang.py", f"def entrypoint(argv, ctx):\n{_indent(spin(stop))}    return 'x'\n"
    )
    echo = script(tmp_path, "echo.py", "def entrypoint(argv, ctx):\n    return ctx.agent_id\n")
    runner = ScriptRunner()
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    began = time.perf_counter()
    hung, *others = await asyncio.gather(
        runner.run(hang, [], make_ctx(tmp_path), timeout=0.3),
        *(runner.run(echo, [], make_ctx(tmp_path, f"b-{i}"), timeout=5) for i in range(5)),
    )
    took = time.perf_counter() - began
    beat.cancel()
    assert took < 0.3 + SLACK
    assert ticks > 5  # the event loop kept running while the script spun
    assert (hung.ok, hung.timed_out, hung.exit_code) == (False, True, TIMEOUT_EXIT_CODE)
    assert hung.error is not None
    assert "timed out after 0.3s under inline isolation (the call was abandoned)" in hung.error
    assert [r.output for r in others] == [f"b-{i}" for i in range(5)]


async def test_async_overrun_cancels_only_the_script(tmp_path: Path) -> None:
    cancelled = tmp_path / "cancelled"
    slow = script(
        tmp_path,
        "slow.py",
        "import asyncio, pathlib\n\n"
        "async def entrypoint(argv, ctx):\n"
        "    try:\n"
        "        await asyncio.sleep(30)\n"
        "    except asyncio.CancelledError:\n"
        f"        pathlib.Path({str(cancelled)!r}).touch()\n"
        "        raise\n",
    )

    async def caller() -> tuple[bool, int]:
        result = await ScriptRunner().run(slow, [], make_ctx(tmp_path), timeout=0.2)
        await asyncio.sleep(0.05)  # the caller's task is still alive and can await
        task = asyncio.current_task()
        assert task is not None
        return result.timed_out, task.cancelling()

    began = time.perf_counter()
    timed_out, cancelling = await asyncio.create_task(caller())
    assert time.perf_counter() - began < 0.2 + SLACK
    assert (timed_out, cancelling) == (True, 0)
    assert cancelled.exists()


@pytest.mark.slow
async def test_async_script_that_ignores_cancellation_is_walked_away_from(tmp_path: Path) -> None:
    stubborn = script(
        tmp_path,
        "stubborn.py",
        "import asyncio\n\n"
        "async def entrypoint(argv, ctx):\n"
        "    try:\n"
        "        await asyncio.sleep(30)\n"
        "    except asyncio.CancelledError:\n"
        "        await asyncio.sleep(0.6)\n"
        "    return 'late'\n",
    )
    began = time.perf_counter()
    result = await ScriptRunner().run(stubborn, [], make_ctx(tmp_path), timeout=0.2)
    assert time.perf_counter() - began < 0.2 + SLACK
    assert (result.timed_out, result.output) == (True, "")
    await asyncio.sleep(0.7)  # the straggler ends on its own before the loop closes


async def test_thread_isolation_cuts_an_async_script_that_blocks(tmp_path: Path) -> None:
    blocking = script(
        tmp_path,
        "blocking.py",
        "import time\n\nasync def entrypoint(argv, ctx):\n    time.sleep(1.0)\n    return 'x'\n",
    )
    began = time.perf_counter()
    result = await ScriptRunner().run(
        blocking, [], make_ctx(tmp_path), isolation="thread", timeout=0.2
    )
    assert time.perf_counter() - began < 0.2 + SLACK
    assert result.timed_out and result.isolation == "thread"
    assert result.error is not None and "its thread was left running" in result.error


async def test_inline_async_that_blocks_the_loop_is_reported_once_it_returns(
    tmp_path: Path,
) -> None:
    blocking = script(
        tmp_path,
        "blocks_loop.py",
        "import time\n\nasync def entrypoint(argv, ctx):\n    time.sleep(0.3)\n    return 'x'\n",
    )
    result = await ScriptRunner().run(blocking, [], make_ctx(tmp_path), timeout=0.1)
    assert result.timed_out
    assert result.error is not None and "(it blocked the event loop)" in result.error


async def test_top_level_code_that_hangs_inline_times_out_while_importing(
    tmp_path: Path, stop: Path
) -> None:
    hang = script(
        tmp_path, "hang_import.py", spin(stop) + "\ndef entrypoint(argv, ctx):\n    return 'x'\n"
    )
    began = time.perf_counter()
    result = await ScriptRunner().run(hang, [], make_ctx(tmp_path), timeout=0.3)
    assert time.perf_counter() - began < 0.3 + SLACK
    assert result.timed_out
    assert result.error is not None and "timed out after 0.3s importing it" in result.error


@pytest.mark.slow
async def test_process_isolation_never_imports_a_sleeping_module_in_the_host(
    tmp_path: Path,
) -> None:
    ctx = make_ctx(tmp_path)
    marker = ctx.workspace_root / "imported-by"  # the one folder a sandboxed script writes
    sleeper = script(
        tmp_path,
        "top_sleep.py",
        "import os, pathlib, time\n"
        f"pathlib.Path({str(marker)!r}).write_text(str(os.getpid()))\n"
        "time.sleep(100)\n\n"
        "def entrypoint(argv, ctx):\n    return 'never'\n",
    )
    began = time.perf_counter()
    result = await ScriptRunner().run(sleeper, [], ctx, isolation="process", timeout=1.0)
    assert time.perf_counter() - began < 1.0 + SLACK
    assert (result.timed_out, result.isolation, result.exit_code) == (True, "process", 124)
    assert result.error is not None and "its process was killed" in result.error
    assert marker.read_text() != str(os.getpid())  # imported, but by the child
    assert str(sleeper.resolve()) not in CACHE


async def test_process_isolation_survives_os_exit_at_import(tmp_path: Path) -> None:
    exits = script(
        tmp_path,
        "top_exit.py",
        "import os\nos._exit(3)\n\ndef entrypoint(argv, ctx):\n    return 'never'\n",
    )
    began = time.perf_counter()
    result = await ScriptRunner().run(exits, [], make_ctx(tmp_path), isolation="process")
    assert time.perf_counter() - began < 10
    assert (result.ok, result.exit_code, result.isolation) == (False, 3, "process")
    assert result.error is not None
    assert "crashed its isolation process (exit code 3)" in result.error


@pytest.mark.slow
async def test_repeated_overruns_quarantine_the_script_until_it_changes(
    tmp_path: Path,
) -> None:
    slow = script(
        tmp_path,
        "slow_sync.py",
        "import time\n\ndef entrypoint(argv, ctx):\n    time.sleep(0.3)\n    return 'x'\n",
    )
    runner = ScriptRunner(quarantine_after=2)
    ctx = make_ctx(tmp_path)
    first = await runner.run(slow, [], ctx, timeout=0.05)
    assert (first.timed_out, first.quarantined) == (True, False)
    assert runner.quarantined() == ()
    second = await runner.run(slow, [], ctx, timeout=0.05)
    assert (second.timed_out, second.quarantined) == (True, True)
    assert second.error is not None and "script quarantined after 2 timeouts" in second.error
    assert runner.quarantined() == (
        Quarantined(script=str(slow), skill_id="custom@demo", overruns=2),
    )
    began = time.perf_counter()
    refused = await runner.run(slow, [], ctx, timeout=5)
    assert time.perf_counter() - began < 0.2  # refused at once, not run
    assert (refused.ok, refused.quarantined, refused.timed_out) == (False, True, False)
    assert refused.error is not None and "is quarantined after 2 timeouts" in refused.error
    assert runner.stats()["quarantined"] == 1
    await asyncio.sleep(0.4)  # the abandoned threads finish
    slow.write_text("def entrypoint(argv, ctx):\n    return 'fixed'\n")
    fixed = await runner.run(slow, [], ctx, timeout=5)
    assert (fixed.ok, fixed.output, fixed.quarantined) == (True, "fixed", False)
    assert runner.quarantined() == ()


def test_quarantine_after_is_checked() -> None:
    from agentsim.errors import SkillError

    with pytest.raises(SkillError, match=r"quarantine_after=0 must be >= 1"):
        ScriptRunner(quarantine_after=0)


def _indent(code: str) -> str:
    return "".join(f"    {line}\n" for line in code.splitlines())


@pytest.mark.slow
async def test_waiting_for_a_free_worker_does_not_count_against_the_timeout(
    tmp_path: Path,
) -> None:
    nap = script(
        tmp_path,
        "nap.py",
        "import time\n\ndef entrypoint(argv, ctx):\n    time.sleep(0.3)\n    return 'rested'\n",
    )
    runner = ScriptRunner()
    ctx = make_ctx(tmp_path)
    # One call more than there are workers: the last one queues for ~0.3 s, then runs 0.3 s.
    results = await asyncio.gather(
        *(runner.run(nap, [], ctx, timeout=0.45) for _ in range(MAX_WORKERS + 1))
    )
    assert [r.output for r in results] == ["rested"] * (MAX_WORKERS + 1)
    assert runner.stats()["timeouts"] == 0


@pytest.mark.slow
async def test_workers_left_behind_by_timeouts_are_replaced(tmp_path: Path) -> None:
    stuck = script(
        tmp_path, "stuck.py", "import time\n\ndef entrypoint(argv, ctx):\n    time.sleep(1.5)\n"
    )
    quick = script(tmp_path, "quick.py", "def entrypoint(argv, ctx):\n    return 'quick'\n")
    runner = ScriptRunner(quarantine_after=1000)
    ctx = make_ctx(tmp_path)
    stuck_results = await asyncio.gather(
        *(runner.run(stuck, [], ctx, timeout=0.1) for _ in range(MAX_WORKERS))
    )
    assert all(r.timed_out for r in stuck_results)
    began = time.perf_counter()
    result = await runner.run(quick, [], ctx, timeout=5)
    assert time.perf_counter() - began < 0.5  # not queued behind the stuck workers
    assert result.output == "quick"
    await asyncio.sleep(1.5)  # the stuck workers end, and exit


async def test_a_cancelled_caller_leaves_its_sync_call_behind(tmp_path: Path, stop: Path) -> None:
    stuck = script(tmp_path, "stuck.py", f"def entrypoint(argv, ctx):\n{_indent(spin(stop))}")
    quick = script(tmp_path, "quick.py", "def entrypoint(argv, ctx):\n    return 'quick'\n")
    runner = ScriptRunner()
    ctx = make_ctx(tmp_path)
    calls = [
        asyncio.create_task(runner.run(stuck, [], ctx, timeout=30)) for _ in range(MAX_WORKERS)
    ]
    await asyncio.sleep(0.2)  # every worker is now spinning
    began = time.perf_counter()
    for call in calls:
        call.cancel()
    for call in calls:
        with pytest.raises(asyncio.CancelledError):
            await call
    # The spinning workers were written off and replaced: a new call does not queue.
    result = await asyncio.wait_for(runner.run(quick, [], ctx, timeout=5), 2)
    assert time.perf_counter() - began < 0.5
    assert result.output == "quick"


@pytest.mark.slow
@pytest.mark.parametrize(
    "source",
    [
        "import os, time\n\ndef entrypoint(argv, ctx):\n"
        "    while not os.path.exists(argv[0]):\n        time.sleep(0.02)\n",
        "import asyncio\n\nasync def entrypoint(argv, ctx):\n    await asyncio.sleep(60)\n",
    ],
    ids=["sync-threads", "async-tasks"],
)
async def test_a_quarantine_abandons_the_calls_already_waiting_or_running(
    tmp_path: Path, source: str
) -> None:
    release = tmp_path / "release"
    script = helpers.write_script(tmp_path, "hangs.py", source)
    runner = ScriptRunner(quarantine_after=2)
    began = time.perf_counter()
    try:
        results = await asyncio.gather(
            *(
                runner.run(script, [str(release)], make_ctx(tmp_path, f"a-{i}"), timeout=0.5)
                for i in range(40)
            )
        )
    finally:
        release.touch()
    assert time.perf_counter() - began < 0.5 + 1.5  # one timeout, not 40 / 8 workers of them
    overran = [r for r in results if r.timed_out]
    abandoned = [r for r in results if not r.timed_out]
    assert 2 <= len(overran) <= 12 and runner.stats()["timeouts"] == len(overran)
    assert all(r.quarantined and not r.ok for r in abandoned)
    assert len(abandoned) == 40 - len(overran)
    assert all(
        r.error is not None
        and "was quarantined after 2 timeouts while this call waited or ran" in r.error
        for r in abandoned
    )
    assert [q.script for q in runner.quarantined()] == [str(script.resolve())]


async def test_a_caller_cancelled_while_a_quarantine_strikes_stays_cancelled(
    tmp_path: Path,
) -> None:
    """Only the runner's own cancellation becomes a result: the caller's propagates."""
    script = helpers.write_script(
        tmp_path,
        "nap.py",
        "import asyncio\n\nasync def entrypoint(argv, ctx):\n    await asyncio.sleep(60)\n",
    )
    runner = ScriptRunner()
    call = asyncio.create_task(runner.run(script, [], make_ctx(tmp_path), timeout=30))
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
