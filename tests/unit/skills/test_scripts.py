"""ScriptRunner in-process: the entrypoint and plain-script tiers, caching, the context."""

from __future__ import annotations

import asyncio
import json
import math
import os
import pickle
import sys
import threading
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from agentsim.errors import SkillError
from agentsim.skills.context import current_context
from agentsim.skills.scripts import ScriptResult, ScriptRunner
from tests.unit.helpers import fx, make_ctx, wait_for_file, write_script

# -- entrypoint tier ------------------------------------------------------------------------


async def test_entrypoint_returns_output_and_metadata(tmp_path: Path) -> None:
    runner = ScriptRunner()
    result = await runner.run(fx(tmp_path, "echo.py"), ["x", "y"], make_ctx(tmp_path))
    assert result == ScriptResult(
        ok=True,
        output="a-1:7:x y",
        exit_code=0,
        error=None,
        elapsed=result.elapsed,
        tier="entrypoint",
        isolation="inline",
        truncated=False,
    )
    assert result.elapsed > 0
    assert result.to_dict()["tier"] == "entrypoint"
    assert json.loads(json.dumps(result.to_dict()))["output"] == "a-1:7:x y"


async def test_inline_path_leaves_environ_and_cwd_alone_and_keeps_prints_in_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write_script(
        tmp_path,
        "talks.py",
        "import os\n\n"
        "def entrypoint(argv, ctx):\n"
        "    print('to the real stdout')\n"
        "    return os.getcwd()\n",
    )
    environ, cwd = dict(os.environ), os.getcwd()
    result = await ScriptRunner().run(script, [], make_ctx(tmp_path))
    assert result.output == cwd  # the script saw the caller's cwd: no chdir
    assert result.log == "to the real stdout\n"
    assert capsys.readouterr().out == ""  # never on the terminal
    assert dict(os.environ) == environ
    assert os.getcwd() == cwd


@pytest.mark.slow
async def test_thousand_agents_write_only_their_own_workspace(tmp_path: Path) -> None:
    runner = ScriptRunner()
    # A fresh copy, so that this runner's own import is the only one for this path.
    script = write_script(tmp_path, "write_own.py", (fx(tmp_path, "write_own.py")).read_text())
    ctxs = [make_ctx(tmp_path, f"agent-{i:04d}") for i in range(1000)]
    results = await asyncio.gather(*(runner.run(script, [], ctx) for ctx in ctxs))
    for ctx, result in zip(ctxs, results, strict=True):
        assert result.ok, result.error
        data = json.loads(result.output)
        assert data == {
            "agent": ctx.agent_id,
            "same_before": True,
            "same_after": True,
            "file": ctx.agent_id,
        }
        assert (ctx.workspace_root / "own.txt").read_text() == ctx.agent_id
    stats = runner.stats()
    assert stats["calls_entrypoint"] == 1000
    assert stats["imports"] == 1  # one import shared by all 1,000 agents


@pytest.mark.parametrize(
    ("argv", "output"),
    [
        (["dict"], '{"a": [1, 2], "b": 2}'),
        (["list"], '[3, "x"]'),
        (["none"], ""),
        (["other"], "opaque-object"),
    ],
    ids=["dict-sorted-json", "list-json", "none-empty", "other-str"],
)
async def test_return_values_become_output(tmp_path: Path, argv: list[str], output: str) -> None:
    result = await ScriptRunner().run(fx(tmp_path, "returns.py"), argv, make_ctx(tmp_path))
    assert (result.ok, result.output) == (True, output)


async def test_unserialisable_return_value_is_an_error(tmp_path: Path) -> None:
    result = await ScriptRunner().run(fx(tmp_path, "returns.py"), ["bad-json"], make_ctx(tmp_path))
    assert not result.ok
    assert result.exit_code == 1
    assert result.error is not None
    assert "returned dict that is not JSON serialisable" in result.error


async def test_output_is_capped_with_a_marker(tmp_path: Path) -> None:
    runner = ScriptRunner(output_cap=100)
    result = await runner.run(fx(tmp_path, "returns.py"), ["big", "250"], make_ctx(tmp_path))
    assert result.ok and result.truncated
    assert result.output == "x" * 100 + "\n...[truncated 150 chars]"


async def test_raising_script_gives_exit_1_and_traceback(tmp_path: Path) -> None:
    runner = ScriptRunner()
    result = await runner.run(fx(tmp_path, "raising.py"), [], make_ctx(tmp_path))
    assert (result.ok, result.exit_code, result.tier) == (False, 1, "entrypoint")
    assert result.error is not None
    assert result.error.startswith("Traceback")
    assert "ValueError: boom from raising.py" in result.error
    assert runner.stats()["errors"] == 1


async def test_traceback_is_capped(tmp_path: Path) -> None:
    result = await ScriptRunner(output_cap=30).run(
        fx(tmp_path, "raising.py"), [], make_ctx(tmp_path)
    )
    assert result.error is not None
    assert result.error.startswith("Traceback")
    assert "...[truncated" in result.error


@pytest.mark.parametrize(
    ("arg", "ok", "code", "error"),
    [
        ("0", True, 0, None),
        ("3", False, 3, None),
        ("none", True, 0, None),
        ("bad", False, 1, "bad"),
    ],
    ids=["exit-0", "exit-3", "exit-none", "exit-message"],
)
async def test_system_exit_sets_the_exit_code(
    tmp_path: Path, arg: str, ok: bool, code: int, error: str | None
) -> None:
    result = await ScriptRunner().run(fx(tmp_path, "exits.py"), [arg], make_ctx(tmp_path))
    assert (result.ok, result.exit_code, result.error) == (ok, code, error)


async def test_async_entrypoint_runs_in_the_callers_loop(tmp_path: Path) -> None:
    result = await ScriptRunner().run(fx(tmp_path, "async_sleepy.py"), ["0"], make_ctx(tmp_path))
    assert (result.ok, result.output, result.tier) == (True, '["slept", "a-1"]', "entrypoint")


async def test_no_timeout_when_the_default_is_infinite(tmp_path: Path) -> None:
    runner = ScriptRunner(default_timeout=math.inf)
    result = await runner.run(fx(tmp_path, "async_sleepy.py"), ["0"], make_ctx(tmp_path))
    assert result.ok


async def test_scripts_own_timeout_error_is_an_ordinary_failure(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "own_timeout.py",
        "async def entrypoint(argv, ctx):\n    raise TimeoutError('mine')\n",
    )
    result = await ScriptRunner().run(script, [], make_ctx(tmp_path), timeout=5)
    assert (result.ok, result.timed_out, result.exit_code) == (False, False, 1)
    assert result.error is not None and "TimeoutError: mine" in result.error


async def test_edited_script_is_reimported(tmp_path: Path) -> None:
    runner = ScriptRunner()
    script = write_script(tmp_path, "edit_me.py", "def entrypoint(argv, ctx):\n    return 'v1'\n")
    ctx = make_ctx(tmp_path)
    assert (await runner.run(script, [], ctx)).output == "v1"
    assert (await runner.run(script, [], ctx)).output == "v1"
    # A different size guarantees a different key even on a coarse-mtime filesystem.
    script.write_text("def entrypoint(argv, ctx):\n    return 'version two'\n")
    assert (await runner.run(script, [], ctx)).output == "version two"
    assert runner.stats()["imports"] == 2


async def test_host_mode_sees_an_edit_from_the_next_tick_on(tmp_path: Path) -> None:
    runner = ScriptRunner(check_every_call=False)
    script = write_script(tmp_path, "tick_me.py", "def entrypoint(argv, ctx):\n    return 'v1'\n")
    ctx = make_ctx(tmp_path)
    assert (await runner.run(script, [], ctx)).output == "v1"
    script.write_text("def entrypoint(argv, ctx):\n    return 'version two'\n")
    assert (await runner.run(script, [], ctx)).output == "v1"  # same tick: not stat'ed again
    runner.new_tick()
    assert (await runner.run(script, [], ctx)).output == "version two"
    script.unlink()
    assert (await runner.run(script, [], ctx)).output == "version two"
    runner.new_tick()
    missing = await runner.run(script, [], ctx)
    assert (missing.ok, missing.exit_code) == (False, 127)
    assert missing.error is not None and "tick_me.py cannot be read" in missing.error


# -- later calls of a script already seen ----------------------------------------------------


@pytest.mark.parametrize("host_mode", [False, True], ids=["per-call-stat", "host-mode"])
@pytest.mark.parametrize(
    ("script", "argv"),
    [
        ("echo.py", ["x"]),
        ("returns.py", ["dict"]),
        ("returns.py", ["none"]),
        ("returns.py", ["big", "250"]),
        ("returns.py", ["bad-json"]),
        ("raising.py", []),
        ("exits.py", ["3"]),
        ("exits.py", ["0"]),
    ],
    ids=["str", "dict", "none", "over-cap", "bad-json", "raises", "exit-3", "exit-0"],
)
async def test_later_calls_give_the_same_result_as_the_first(
    tmp_path: Path, host_mode: bool, script: str, argv: list[str]
) -> None:
    runner = ScriptRunner(output_cap=100, check_every_call=not host_mode)
    ctx = make_ctx(tmp_path)
    first = await runner.run(fx(tmp_path, script), argv, ctx)
    again = [await runner.run(fx(tmp_path, script), argv, ctx) for _ in range(2)]
    for later in again:
        assert replace(later, elapsed=first.elapsed) == first
    stats = runner.stats()
    assert stats["calls_entrypoint"] == 3
    assert stats["errors"] == (0 if first.ok else 3)
    assert stats["imports"] == 1


async def test_results_are_frozen_and_pickle(tmp_path: Path) -> None:
    runner = ScriptRunner()
    ctx = make_ctx(tmp_path)
    await runner.run(fx(tmp_path, "echo.py"), ["x"], ctx)
    result = await runner.run(fx(tmp_path, "echo.py"), ["x"], ctx)
    assert type(result) is ScriptResult
    with pytest.raises(FrozenInstanceError, match="cannot assign to field 'output'"):
        result.output = "changed"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(result)) == result
    assert result.to_dict()["output"] == "a-1:7:x"


async def test_a_script_deleted_after_use_is_reported_on_the_next_call(tmp_path: Path) -> None:
    runner = ScriptRunner()
    script = write_script(tmp_path, "gone.py", "def entrypoint(argv, ctx):\n    return 'here'\n")
    ctx = make_ctx(tmp_path)
    assert (await runner.run(script, [], ctx)).output == "here"
    script.unlink()
    missing = await runner.run(script, [], ctx)
    assert (missing.ok, missing.exit_code) == (False, 127)
    assert missing.error is not None and "gone.py cannot be read" in missing.error


async def test_the_context_is_current_during_every_call(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "who.py",
        "from agentsim.skills.context import current_context\n\n"
        "def entrypoint(argv, ctx):\n"
        "    return current_context().agent_id + ':' + str(current_context() is ctx)\n",
    )
    runner = ScriptRunner(check_every_call=False)
    outputs = [
        (await runner.run(script, [], make_ctx(tmp_path, f"a-{i}"))).output for i in range(3)
    ]
    assert outputs == ["a-0:True", "a-1:True", "a-2:True"]
    with pytest.raises(LookupError, match="outside a script call"):
        current_context()


async def test_a_script_that_mutates_argv_does_not_change_the_callers(tmp_path: Path) -> None:
    script = write_script(tmp_path, "pop.py", "def entrypoint(argv, ctx):\n    return argv.pop()\n")
    runner = ScriptRunner()
    argv = ["a", "b"]
    outputs = [(await runner.run(script, argv, make_ctx(tmp_path))).output for _ in range(3)]
    assert (outputs, argv) == (["b", "b", "b"], ["a", "b"])


async def test_a_hot_script_edited_into_a_plain_script_runs_as_one(tmp_path: Path) -> None:
    runner = ScriptRunner()
    script = write_script(tmp_path, "turns.py", "def entrypoint(argv, ctx):\n    return 'e'\n")
    ctx = make_ctx(tmp_path)
    assert [(await runner.run(script, [], ctx)).tier for _ in range(2)] == ["entrypoint"] * 2
    script.write_text("print('now a plain script')\n")
    for _ in range(2):
        result = await runner.run(script, [], ctx)
        assert (result.tier, result.output) == ("subprocess", "now a plain script\n")


class _UnhashablePath:
    """A path-like with value equality and no hash: the runner must not need one."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _UnhashablePath) and other.path == self.path

    __hash__ = None  # type: ignore[assignment]


async def test_unhashable_path_like_scripts_run(tmp_path: Path) -> None:
    runner = ScriptRunner()
    script = _UnhashablePath(fx(tmp_path, "echo.py"))
    outputs = [(await runner.run(script, ["u"], make_ctx(tmp_path))).output for _ in range(2)]
    assert outputs == ["a-1:7:u", "a-1:7:u"]


async def test_missing_script_is_a_result_not_an_exception(tmp_path: Path) -> None:
    result = await ScriptRunner().run(tmp_path / "nope.py", [], make_ctx(tmp_path))
    assert (result.ok, result.exit_code) == (False, 127)
    assert result.error is not None
    assert "nope.py cannot be read" in result.error
    assert "check the skill's script path" in result.error


async def test_relative_script_path_is_resolved_against_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fx(tmp_path, "echo.py")
    monkeypatch.chdir(tmp_path)
    result = await ScriptRunner().run("echo.py", ["rel"], make_ctx(tmp_path))
    assert result.output == "a-1:7:rel"


async def test_keyboard_interrupt_propagates(tmp_path: Path) -> None:
    script = write_script(
        tmp_path, "ctrl_c.py", "def entrypoint(argv, ctx):\n    raise KeyboardInterrupt\n"
    )
    with pytest.raises(KeyboardInterrupt):
        await ScriptRunner().run(script, [], make_ctx(tmp_path))


async def test_cancellation_propagates(tmp_path: Path) -> None:
    runner = ScriptRunner()
    task = asyncio.create_task(
        runner.run(fx(tmp_path, "async_sleepy.py"), ["30"], make_ctx(tmp_path))
    )
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- options --------------------------------------------------------------------------------


async def test_unknown_isolation_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match=r"isolation 'jail' for script .* is not one of inline"):
        await ScriptRunner().run(fx(tmp_path, "echo.py"), [], make_ctx(tmp_path), isolation="jail")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"output_cap": 0}, r"output_cap=0 must be >= 1"),
        ({"default_timeout": 0}, r"default_timeout=0 must be > 0 seconds"),
    ],
    ids=["cap", "timeout"],
)
def test_runner_options_are_checked(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(SkillError, match=message):
        ScriptRunner(**kwargs)  # type: ignore[arg-type]


# -- plain scripts --------------------------------------------------------------------------------


async def test_plain_script_runs_as_main_with_captured_stdout(tmp_path: Path) -> None:
    saved_argv = sys.argv
    result = await ScriptRunner().run(fx(tmp_path, "plain.py"), ["x", "y"], make_ctx(tmp_path))
    assert (result.ok, result.tier) == (True, "subprocess")
    assert result.output == "argv=x,y\nagent=a-1\n"
    assert sys.argv is saved_argv


async def test_plain_script_exit_code_and_partial_output(tmp_path: Path) -> None:
    result = await ScriptRunner().run(fx(tmp_path, "plain_exit.py"), ["2"], make_ctx(tmp_path))
    assert (result.ok, result.exit_code, result.output) == (False, 2, "before exit\n")


async def test_wrapper_output_is_capped(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "chatty.py",
        "import sys\nprint(sys.stdout.writable())\nfor _ in range(30):\n    print('abcdefghi')\n",
    )
    result = await ScriptRunner(output_cap=25).run(script, [], make_ctx(tmp_path))
    assert result.truncated
    assert result.output == "True\nabcdefghi\nabcdefghi\n\n...[truncated 280 chars]"


async def test_stderr_of_a_plain_script_goes_to_its_log(tmp_path: Path) -> None:
    script = write_script(
        tmp_path, "warns.py", "import sys\nprint('out')\nprint('careful', file=sys.stderr)\n"
    )
    result = await ScriptRunner().run(script, [], make_ctx(tmp_path))
    assert (result.ok, result.output, result.log) == (True, "out\n", "careful\n")


async def test_star_import_is_imported_then_run_as_a_plain_script(tmp_path: Path) -> None:
    script = write_script(
        tmp_path, "star.py", "from json import *\n\nif __name__ == '__main__':\n    print('star')\n"
    )
    result = await ScriptRunner().run(script, [], make_ctx(tmp_path))
    assert (result.tier, result.output) == ("subprocess", "star\n")


async def test_non_callable_entrypoint_runs_as_a_plain_script(tmp_path: Path) -> None:
    result = await ScriptRunner().run(fx(tmp_path, "not_callable.py"), [], make_ctx(tmp_path))
    assert (result.tier, result.output) == ("subprocess", "ran as main\n")


def test_wrapper_works_from_two_event_loops_in_turn(tmp_path: Path) -> None:
    runner = ScriptRunner()
    first = asyncio.run(runner.run(fx(tmp_path, "plain.py"), ["1"], make_ctx(tmp_path, "loop-1")))
    second = asyncio.run(runner.run(fx(tmp_path, "plain.py"), ["2"], make_ctx(tmp_path, "loop-2")))
    assert first.output == "argv=1\nagent=loop-1\n"
    assert second.output == "argv=2\nagent=loop-2\n"


def test_wrapper_works_from_threads_concurrently(tmp_path: Path) -> None:
    runner = ScriptRunner()
    # Copied before the threads start: a copy made while another thread runs the script
    # would truncate it under that thread (the run would then print nothing).
    script = fx(tmp_path, "plain.py")
    outputs: dict[str, list[tuple[bool, str]]] = {}

    def worker(name: str) -> None:
        async def calls() -> list[tuple[bool, str]]:
            ctx = make_ctx(tmp_path, name)
            results = [await runner.run(script, [name], ctx) for _ in range(3)]
            return [(r.ok, r.output) for r in results]

        outputs[name] = asyncio.run(calls())

    threads = [threading.Thread(target=worker, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)  # a guard: 12 Python start-ups on a loaded machine take a while
    assert sorted(outputs) == ["t0", "t1", "t2", "t3"]
    for name, got in outputs.items():
        assert got == [(True, f"argv={name}\nagent={name}\n")] * 3


async def test_script_rewritten_between_calls_runs_its_new_text(tmp_path: Path) -> None:
    """What the flaky run above saw, made deterministic: a plain script emptied (as a copy
    over it truncates it) prints nothing, and its full text runs again once restored."""
    runner = ScriptRunner()
    script = fx(tmp_path, "plain.py")
    text = script.read_text()
    ctx = make_ctx(tmp_path, "a")
    first = await runner.run(script, ["x"], ctx)
    script.write_text("")
    emptied = await runner.run(script, ["x"], ctx)
    script.write_text(text)
    restored = await runner.run(script, ["x"], ctx)
    assert (first.ok, first.output) == (True, "argv=x\nagent=a\n")
    assert (emptied.ok, emptied.output) == (True, "")
    assert (restored.ok, restored.output) == (True, "argv=x\nagent=a\n")


async def test_a_hanging_plain_script_never_delays_another(tmp_path: Path) -> None:
    """Plain scripts run in processes of their own: no lock, so no wait behind a hung one
    (and so no wait counted as a timeout)."""
    started, release = tmp_path / "started", tmp_path / "release"
    blocker = write_script(
        tmp_path,
        "blocker.py",
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        f"while not pathlib.Path({str(release)!r}).exists():\n"
        "    time.sleep(0.01)\n"
        "print('blocker done')\n",
    )
    runner = ScriptRunner()
    held = asyncio.create_task(runner.run(blocker, [], make_ctx(tmp_path, "b")))
    await asyncio.to_thread(wait_for_file, started)
    result = await runner.run(fx(tmp_path, "plain.py"), ["q"], make_ctx(tmp_path), timeout=20)
    assert not held.done()
    release.touch()
    assert (result.ok, result.timed_out, result.output) == (True, False, "argv=q\nagent=a-1\n")
    assert (await held).output == "blocker done\n"
    assert runner.stats()["timeouts"] == 0
