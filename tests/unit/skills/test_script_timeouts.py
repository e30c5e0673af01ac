"""A script that overruns its timeout fails that call, never the caller (issue 14, items 2-3).

A script that overruns here never ends by itself: it spins or waits until the test drops a
file. A call that answers while that file is missing was cut at its timeout, however slowly
the machine runs; the test's own guard (``asyncio.timeout(GUARD)``) only turns a call that
never answers into a failure instead of a stuck suite. Dropping the file at the end lets
every thread end with its test.
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
from agentsim.skills.scripts.inprocess import CACHE, MAX_WORKERS, STRAGGLERS
from tests.unit import helpers

GUARD = 60  # seconds: only a guard against a call that never answers


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
    spinning = tmp_path / "spinning"
    hang = script(
        tmp_path,
        "hang.py",
        f"def entrypoint(argv, ctx):\n    open({str(spinning)!r}, 'w').close()\n"
        f"{_indent(spin(stop))}    return 'x'\n",
    )
    echo = script(tmp_path, "echo.py", "def entrypoint(argv, ctx):\n    return ctx.agent_id\n")
    runner = ScriptRunner()
    seen = asyncio.Event()

    async def heartbeat() -> None:
        if await asyncio.to_thread(_all_exist_within, (spinning,), GUARD):
            seen.set()

    beat = asyncio.create_task(heartbeat())
    async with asyncio.timeout(GUARD):  # the script spins until the test ends
        hung, *others = await asyncio.gather(
            runner.run(hang, [], make_ctx(tmp_path), timeout=0.3),
            *(runner.run(echo, [], make_ctx(tmp_path, f"b-{i}"), timeout=5) for i in range(5)),
        )
        # The event loop runs on while the script spins: another task sees it spinning.
        await seen.wait()
    await beat
    assert not await asyncio.to_thread(stop.exists) and hung.elapsed >= 0.3
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

    async with asyncio.timeout(GUARD):  # the script sleeps 30 s unless cancelled
        timed_out, cancelling = await asyncio.create_task(caller())
    assert (timed_out, cancelling) == (True, 0)
    assert cancelled.exists()


async def test_async_script_that_ignores_cancellation_is_walked_away_from(
    tmp_path: Path, stop: Path
) -> None:
    stubborn = script(
        tmp_path,
        "stubborn.py",
        "import asyncio, os\n\n"
        "async def entrypoint(argv, ctx):\n"
        "    try:\n"
        "        await asyncio.sleep(30)\n"
        "    except asyncio.CancelledError:\n"
        f"        while not os.path.exists({str(stop)!r}):\n"
        "            await asyncio.sleep(0.01)\n"
        "    return 'late'\n",
    )
    before = set(STRAGGLERS)
    async with asyncio.timeout(GUARD):  # the script goes on until the test drops `stop`
        result = await ScriptRunner().run(stubborn, [], make_ctx(tmp_path), timeout=0.2)
    assert (result.timed_out, result.output) == (True, "")
    (straggler,) = STRAGGLERS - before  # still running, kept referenced until it ends
    await asyncio.to_thread(stop.touch)
    async with asyncio.timeout(GUARD):
        assert await straggler == "late"  # it ends on its own before the loop closes
    assert straggler not in STRAGGLERS


async def test_thread_isolation_cuts_an_async_script_that_blocks(
    tmp_path: Path, stop: Path
) -> None:
    blocking = script(
        tmp_path,
        "blocking.py",
        "import os, time\n\nasync def entrypoint(argv, ctx):\n"
        f"    while not os.path.exists({str(stop)!r}):\n        time.sleep(0.01)\n"
        "    return 'x'\n",
    )
    async with asyncio.timeout(GUARD):  # the script blocks until the test ends
        result = await ScriptRunner().run(
            blocking, [], make_ctx(tmp_path), isolation="thread", timeout=0.2
        )
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
    async with asyncio.timeout(GUARD):  # the import spins until the test ends
        result = await ScriptRunner().run(hang, [], make_ctx(tmp_path), timeout=0.3)
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
    async with asyncio.timeout(GUARD):  # the import sleeps 100 s unless its process is killed
        result = await ScriptRunner().run(sleeper, [], ctx, isolation="process", timeout=1.0)
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
    result = await ScriptRunner().run(exits, [], make_ctx(tmp_path), isolation="process")
    # Seen as a crash, not waited on until the default 30 s timeout.
    assert (result.ok, result.exit_code, result.isolation) == (False, 3, "process")
    assert not result.timed_out
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
    calls = runner.stats()["calls_entrypoint"]
    refused = await runner.run(slow, [], ctx, timeout=5)
    assert refused.refused and runner.stats()["calls_entrypoint"] == calls  # not run
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


def held(folder: Path) -> Path:
    """A sync script that says it started (touches ``argv[0]``) and returns once the file
    ``argv[1]`` exists: it holds its worker thread for as long as the test wants."""
    return script(
        folder,
        "held.py",
        "import os, time\n\ndef entrypoint(argv, ctx):\n"
        "    open(argv[0], 'w').close()\n"
        "    while not os.path.exists(argv[1]):\n        time.sleep(0.01)\n"
        "    return 'released'\n",
    )


def _all_exist_within(paths: tuple[Path, ...], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def started(*paths: Path) -> None:
    """Until every one of ``paths`` exists (a guard fails the test if one never does)."""
    assert await asyncio.to_thread(_all_exist_within, paths, GUARD), "a script never started"


@pytest.mark.slow
async def test_waiting_for_a_free_worker_does_not_count_against_the_timeout(
    tmp_path: Path, stop: Path
) -> None:
    quick = script(tmp_path, "quick.py", "def entrypoint(argv, ctx):\n    return 'quick'\n")
    hold = held(tmp_path)
    runner = ScriptRunner()
    ctx = make_ctx(tmp_path)
    # Every worker is taken until the test drops `stop`; one call more queues meanwhile for
    # longer than its own timeout, and still runs in full once a worker is free.
    marks = [tmp_path / f"started-{i}" for i in range(MAX_WORKERS)]
    holding = [
        asyncio.create_task(runner.run(hold, [str(m), str(stop)], ctx, timeout=GUARD))
        for m in marks
    ]
    await started(*marks)
    queued = asyncio.create_task(runner.run(quick, [], ctx, timeout=1))
    await asyncio.sleep(1.5)  # at least this long in the queue: past its 1 s timeout
    assert not queued.done()  # no worker took it
    await asyncio.to_thread(stop.touch)
    async with asyncio.timeout(GUARD):
        results = await asyncio.gather(*holding, queued)
    assert [r.output for r in results] == ["released"] * MAX_WORKERS + ["quick"]
    assert runner.stats()["timeouts"] == 0


async def test_workers_left_behind_by_timeouts_are_replaced(tmp_path: Path, stop: Path) -> None:
    hold = held(tmp_path)
    quick = script(tmp_path, "quick.py", "def entrypoint(argv, ctx):\n    return 'quick'\n")
    runner = ScriptRunner(quarantine_after=1000)
    ctx = make_ctx(tmp_path)
    marks = [tmp_path / f"started-{i}" for i in range(MAX_WORKERS)]
    async with asyncio.timeout(GUARD):  # each call holds its worker until the test ends
        stuck_results = await asyncio.gather(
            *(runner.run(hold, [str(m), str(stop)], ctx, timeout=0.1) for m in marks)
        )
    assert all(r.timed_out for r in stuck_results)
    await started(*marks)  # every worker is stuck (none was skipped before it started)
    async with asyncio.timeout(GUARD):  # queued behind the stuck workers, it never answers
        result = await runner.run(quick, [], ctx, timeout=5)
    assert result.output == "quick" and not await asyncio.to_thread(stop.exists)


async def test_a_cancelled_caller_leaves_its_sync_call_behind(tmp_path: Path, stop: Path) -> None:
    hold = held(tmp_path)
    quick = script(tmp_path, "quick.py", "def entrypoint(argv, ctx):\n    return 'quick'\n")
    runner = ScriptRunner()
    ctx = make_ctx(tmp_path)
    marks = [tmp_path / f"started-{i}" for i in range(MAX_WORKERS)]
    calls = [
        asyncio.create_task(runner.run(hold, [str(m), str(stop)], ctx, timeout=GUARD))
        for m in marks
    ]
    await started(*marks)  # every worker is now held
    for call in calls:
        call.cancel()
    for call in calls:
        with pytest.raises(asyncio.CancelledError):
            await call
    # The held workers were written off and replaced: a new call does not queue behind them
    # (it would wait until the test drops `stop`).
    async with asyncio.timeout(GUARD):
        result = await runner.run(quick, [], ctx, timeout=5)
    assert result.output == "quick" and not await asyncio.to_thread(stop.exists)


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
    try:
        async with asyncio.timeout(GUARD):  # the calls wait or run until the test ends
            results = await asyncio.gather(
                *(
                    runner.run(script, [str(release)], make_ctx(tmp_path, f"a-{i}"), timeout=0.5)
                    for i in range(40)
                )
            )
    finally:
        release.touch()
    # One timeout, not 40 / 8 workers of them: only the calls running when the second
    # overran were cut at their timeout; every other call was abandoned at that moment.
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
