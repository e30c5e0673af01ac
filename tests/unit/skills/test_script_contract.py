"""AgentSociety2's script contract, with skills of our own written to it: both entrypoint
arities, ``(stdout, stderr)`` returns, the context's fields and environment, async
entrypoints, and plain scripts that behave as a subprocess in every isolation."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from agentsim.skills.context import SkillScriptContext
from agentsim.skills.scripts import ScriptRunner
from tests.unit.helpers import T0, fx, make_ctx, write_script

ISOLATIONS = ["inline", "thread", "process"]

# As AS2's docs and its daily-guidance example read the context.
AS2_STYLE = """
import json
from pathlib import Path


def entrypoint(argv, ctx):
    root = Path(str(getattr(ctx, "workspace_root"))).resolve()
    (root / "note.txt").write_text(argv[0])
    return json.dumps({
        "root": str(root),
        "joined": str(ctx.workspace_root / "note.txt"),
        "skill_id": ctx.skill_id,
        "skill_name": ctx.skill_name,
        "env": {k: ctx.env[k] for k in ("AGENT_WORK_DIR", "SKILL_ID", "SKILL_NAME", "SKILL_DIR")},
    })
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_as2_context_fields_and_env(tmp_path: Path, isolation: str) -> None:
    script = write_script(tmp_path, "as2_ctx.py", AS2_STYLE)
    ctx = make_ctx(tmp_path)
    result = await ScriptRunner().run(script, ["hi"], ctx, isolation=isolation)  # type: ignore[arg-type]
    assert result.ok, result.error
    data = json.loads(result.output)
    root = str(ctx.workspace_root.resolve())
    assert data["root"] == root
    assert data["joined"] == str(ctx.workspace_root / "note.txt")
    assert (data["skill_id"], data["skill_name"]) == ("custom@demo", "demo")
    assert data["env"] == {
        "AGENT_WORK_DIR": str(ctx.workspace_root),
        "SKILL_ID": "custom@demo",
        "SKILL_NAME": "demo",
        "SKILL_DIR": str(tmp_path),
    }
    assert (ctx.workspace_root / "note.txt").read_text() == "hi"


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize(
    "source",
    [
        "def entrypoint(argv):\n    return 'one:' + ','.join(argv)\n",
        "async def entrypoint(argv):\n    return 'one:' + ','.join(argv)\n",
        "def entrypoint(*args):\n    return 'one:' + ','.join(args[0])\n",
    ],
    ids=["sync-argv-only", "async-argv-only", "star-args"],
)
async def test_entrypoint_with_argv_only(tmp_path: Path, isolation: str, source: str) -> None:
    script = write_script(tmp_path, "argv_only.py", source)
    result = await ScriptRunner().run(script, ["a", "b"], make_ctx(tmp_path), isolation=isolation)  # type: ignore[arg-type]
    assert (result.ok, result.tier, result.output) == (True, "entrypoint", "one:a,b"), result.error


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_stdout_stderr_pair_is_output_and_log(tmp_path: Path, isolation: str) -> None:
    script = write_script(
        tmp_path, "pair.py", "def entrypoint(argv, ctx):\n    return ('ok: true\\n', 'note\\n')\n"
    )
    result = await ScriptRunner().run(script, [], make_ctx(tmp_path), isolation=isolation)  # type: ignore[arg-type]
    assert (result.ok, result.output, result.log) == (True, "ok: true\n", "note\n"), result.error


async def test_other_tuples_are_still_json(tmp_path: Path) -> None:
    script = write_script(
        tmp_path, "triple.py", "def entrypoint(argv, ctx):\n    return ('a', 1)\n"
    )
    result = await ScriptRunner().run(script, [], make_ctx(tmp_path))
    assert result.output == '["a", 1]'


def test_a_str_workspace_root_is_a_path() -> None:
    ctx = SkillScriptContext(
        workspace_root="/tmp/ws",  # type: ignore[arg-type]
        skill_id="custom@s",
        skill_name="s",
        skill_dir=Path("/tmp/s"),
        agent_id="a",
        tick=0,
        time=T0,
    )
    assert ctx.workspace_root == Path("/tmp/ws") and str(ctx.workspace_root) == "/tmp/ws"


async def test_async_entrypoints_of_many_agents_overlap(tmp_path: Path) -> None:
    """An async entrypoint runs on the agent's loop without blocking the others: each of
    50 calls returns only once all 50 are in (calls run one after another would never all
    be in, and the first would time out)."""
    script = write_script(
        tmp_path,
        "together.py",
        "import asyncio\n\nINSIDE = []\nALL_IN = asyncio.Event()\n\n"
        "async def entrypoint(argv, ctx):\n"
        "    INSIDE.append(ctx.agent_id)\n"
        "    if len(INSIDE) == 50:\n        ALL_IN.set()\n"
        "    await ALL_IN.wait()\n    return ctx.agent_id\n",
    )
    runner = ScriptRunner()
    results = await asyncio.gather(
        *(runner.run(script, [], make_ctx(tmp_path, f"a-{i}"), timeout=60) for i in range(50))
    )
    assert [r.output for r in results] == [f"a-{i}" for i in range(50)]
    assert [r.timed_out for r in results] == [False] * 50


@pytest.mark.parametrize(
    ("isolation", "tier"),
    [("inline", "subprocess"), ("thread", "subprocess"), ("process", "wrapper")],
)
async def test_a_plain_script_runs_as_a_subprocess_would(
    tmp_path: Path, isolation: str, tier: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cwd = the agent's workspace, environment = the call's snapshot (no host secrets),
    sys.argv and __name__ == "__main__" set, whichever isolation the skill asks for."""
    ctx = make_ctx(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host")  # the host's, never the script's
    result = await ScriptRunner().run(
        fx(tmp_path, "where.py"),
        ["--x", "1"],
        ctx,
        isolation=isolation,  # type: ignore[arg-type]
    )
    assert (result.ok, result.tier) == (True, tier), result.error
    data = json.loads(result.output)
    real = os.path.realpath  # blocking, but trivial in a test
    assert real(data["cwd"]) == real(ctx.workspace_root)
    assert (data["argv"], data["name"]) == (["--x", "1"], "__main__")
    assert (data["work_dir"], data["skill_id"], data["secret"]) == (
        str(ctx.workspace_root),
        "custom@demo",
        None,
    )
    assert (ctx.workspace_root / "relative.txt").read_text() == "here"
    assert not (Path.cwd() / "relative.txt").exists()
