"""Hook functions: a script's ``pre_step()`` / ``post_step()`` (sync or async) called by name,
their context, their failures, and AgentSociety2's hook contract (skills of our own written
to it: an async hook, ``int(payload["agent_id"])``, its ``--args-json`` command)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from agentsim.errors import SkillError
from agentsim.skills import hooks
from agentsim.skills.hooks import hook_context, hook_payload
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
from tests.unit import helpers

WHEN = datetime(2026, 3, 2, 9, 30)

NATIVE = """\
import asyncio
from agentsim.skills.hooks import hook_context


async def pre_step():
    await asyncio.sleep(0)
    c = hook_context()
    p = c.payload
    return f"async {c.hook_type} of {c.skill_id} step {p['step_count']} at {p['time']}"


def post_step():
    c = hook_context()
    (c.workspace_root / "post.txt").write_text(c.payload["hook_type"])
    return "sync post_step"


if __name__ == "__main__":
    print("ran as a plain script")
"""

# The contract of AgentSociety2's hook scripts: an ``entrypoint`` answering the lifecycle
# command ``--args-json PAYLOAD``, and an async ``pre_step()`` reading AgentSociety2's hook
# context. Written here from its documented contract, not copied.
AS2_STYLE = """\
import json


def entrypoint(argv, ctx):
    if argv[:1] == ["--args-json"]:
        payload = json.loads(argv[1])
        return f"cli agent {int(payload['agent_id']):04d} {payload['hook_type']}"
    return "command " + " ".join(argv)


async def pre_step():
    from agentsociety2.agent.base.skill_hook_context import get_hook_context

    ctx = get_hook_context()
    agent = int(ctx.payload["agent_id"])
    return f"function agent {agent:04d} in {ctx.workspace_root.name} for {ctx.skill_id}"
"""

# A stand-in for AgentSociety2's hook-context module, as its public contract describes it.
FAKE_AS2_CONTEXT = """\
import contextvars
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class HookContext:
    workspace_root: Path
    skill_dir: Path
    skill_id: str
    hook_type: str
    payload: dict[str, Any]


_var = contextvars.ContextVar("hook", default=None)


def get_hook_context():
    ctx = _var.get()
    if ctx is None:
        raise RuntimeError("outside a lifecycle hook")
    return ctx


def _set_hook_context(ctx):
    return _var.set(ctx)


def _reset_hook_context(token):
    _var.reset(token)
"""


def runtime(tmp_path: Path, agent_id: str = "7") -> AgentSkillRuntime:
    reg = SkillRegistry()
    reg.scan_custom(tmp_path / "skills")
    workspace = tmp_path / "agents" / agent_id
    workspace.mkdir(parents=True)
    space = SkillSpace(reg.snapshot(), hook_output_cap=1000)
    return AgentSkillRuntime(space, agent_id=agent_id, workspace_root=workspace)


def hook_skill(tmp_path: Path, name: str, code: str, *, front: str = "") -> None:
    helpers.write_skill(
        tmp_path / "skills",
        name,
        front=f"script: scripts/hook.py\nhooks:\n  pre_step: scripts/hook.py\n"
        f"  post_step: scripts/hook.py\n{front}",
        files={"scripts/hook.py": code},
    )


@pytest.fixture(autouse=True)
def _fresh_as2_lookup() -> Iterator[None]:
    hooks._as2_hook_module.cache_clear()
    yield
    hooks._as2_hook_module.cache_clear()


async def test_async_and_sync_hook_functions_are_called_by_name(tmp_path: Path) -> None:
    hook_skill(tmp_path, "native", NATIVE)
    rt = runtime(tmp_path)
    await rt.activate("native")
    (pre,) = await rt.run_hooks("pre_step", tick=3, time=WHEN, step_count=4)
    assert pre.ok, pre.error
    assert pre.text == "async pre_step of custom@native step 4 at 2026-03-02T09:30:00"
    (post,) = await rt.run_hooks("post_step", tick=3, time=WHEN, step_count=4)
    assert (post.ok, post.text) == (True, "sync post_step")
    assert (rt.workspace_root / "post.txt").read_text() == "post_step"
    # A call that is not a hook runs the script as before: as a plain script.
    res = await rt.call_script("native", [], tick=3, time=WHEN)
    assert (res.ok, res.output.strip(), res.tier) == (True, "ran as a plain script", "subprocess")


async def test_hook_functions_run_under_thread_isolation(tmp_path: Path) -> None:
    hook_skill(tmp_path, "native", NATIVE, front="isolation: thread\n")
    rt = runtime(tmp_path)
    await rt.activate("native")
    (pre,) = await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1)
    assert (pre.ok, pre.text) == (
        True,
        f"async pre_step of custom@native step 1 at {WHEN:%Y-%m-%dT%H:%M:%S}",
    )
    (post,) = await rt.run_hooks("post_step", tick=1, time=WHEN, step_count=1)
    assert (post.ok, post.text) == (True, "sync post_step")
    assert rt.space.runner.stats()["calls_hook"] == 2


@pytest.mark.slow
async def test_hook_function_under_process_isolation_runs_in_the_child(tmp_path: Path) -> None:
    hook_skill(tmp_path, "native", NATIVE, front="isolation: process\n")
    rt = runtime(tmp_path)
    await rt.activate("native")
    (pre,) = await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=2)
    assert pre.ok, pre.error
    assert pre.text == "async pre_step of custom@native step 2 at " + WHEN.isoformat()
    (post,) = await rt.run_hooks("post_step", tick=1, time=WHEN, step_count=2)
    assert (post.ok, post.text) == (True, "sync post_step")
    assert (rt.workspace_root / "post.txt").read_text() == "post_step"


async def test_a_hook_function_past_its_timeout_is_cut(tmp_path: Path) -> None:
    code = "import asyncio\n\nasync def pre_step():\n    await asyncio.sleep(30)\n"
    hook_skill(tmp_path, "sleepy", code, front="timeout: 0.2\n")
    rt = runtime(tmp_path)
    await rt.activate("sleepy")
    (pre,) = await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1)
    assert not pre.ok and pre.timed_out
    assert "timed out after 0.2s under inline isolation" in (pre.error or "")


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            "def pre_step(payload):\n    return 'x'\n",
            "SkillError: hook function pre_step(payload) of skill custom@bad takes arguments; "
            "define pre_step() without parameters and read the payload with hook_context()",
        ),
        (
            "async def pre_step():\n    raise ValueError('no plan yet')\n",
            "ValueError: no plan yet",
        ),
    ],
    ids=["takes-arguments", "raises"],
)
async def test_a_failing_hook_function_is_a_failed_hook(
    tmp_path: Path, code: str, message: str
) -> None:
    hook_skill(tmp_path, "bad", code)
    rt = runtime(tmp_path)
    await rt.activate("bad")
    (pre,) = await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1)
    assert not pre.ok
    assert message in (pre.error or "")


def test_hook_context_outside_a_hook_says_where_to_call_it() -> None:
    with pytest.raises(SkillError) as err:
        hook_context()
    assert str(err.value) == (
        "hook_context() was called outside a lifecycle hook; call it from a skill script's "
        "pre_step() or post_step() function (entrypoints get ctx as an argument)"
    )


@pytest.mark.parametrize(
    ("argv", "payload"),
    [
        (["--args-json", '{"agent_id": "7"}'], {"agent_id": "7"}),
        (["--args-json", "[1]"], {}),
        (["--args-json", "{not json"], {}),
        (["plan", "--json", "{}"], {}),
    ],
    ids=["payload", "not-object", "bad-json", "not-a-hook"],
)
def test_hook_payload(argv: list[str], payload: dict[str, str]) -> None:
    assert hook_payload(argv) == payload


async def test_as2_hook_without_as2_runs_its_args_json_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # However this machine is set up, the AgentSociety2 package is not importable here.
    monkeypatch.setitem(sys.modules, "agentsociety2", None)
    hook_skill(tmp_path, "as2-style", AS2_STYLE)
    rt = runtime(tmp_path, agent_id="12")
    await rt.activate("as2-style")
    (pre,) = await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1)
    assert (pre.ok, pre.text) == (True, "cli agent 0012 pre_step"), pre.error


async def test_as2_hook_gets_as2s_own_context_when_it_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    module = site / "agentsociety2" / "agent" / "base" / "skill_hook_context.py"
    module.parent.mkdir(parents=True)
    for pkg in (module.parents[2], module.parents[1], module.parent):
        (pkg / "__init__.py").write_text("")
    module.write_text(FAKE_AS2_CONTEXT)
    monkeypatch.syspath_prepend(str(site))
    assert not [m for m in sys.modules if m.startswith("agentsociety2")]
    hook_skill(tmp_path, "as2-style", AS2_STYLE)
    rt = runtime(tmp_path, agent_id="12")
    await rt.activate("as2-style")
    try:
        (pre,) = await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1)
        # Its post_step has no function: the lifecycle command answers.
        (post,) = await rt.run_hooks("post_step", tick=1, time=WHEN, step_count=1)
    finally:
        for name in [m for m in sys.modules if m.startswith("agentsociety2")]:
            del sys.modules[name]
    assert (pre.ok, pre.text) == (True, "function agent 0012 in 12 for custom@as2-style"), pre.error
    assert (post.ok, post.text) == (True, "cli agent 0012 post_step")


@pytest.mark.parametrize(
    ("package_init", "context_module"),
    [
        ("raise ModuleNotFoundError(\"No module named 'litellm'\")\n", FAKE_AS2_CONTEXT),
        ("", "def get_hook_context():\n    raise RuntimeError('other version')\n"),
    ],
    ids=["missing-dependencies", "other-version"],
)
async def test_an_unusable_as2_install_falls_back_to_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package_init: str, context_module: str
) -> None:
    site = tmp_path / "site"
    module = site / "agentsociety2" / "agent" / "base" / "skill_hook_context.py"
    module.parent.mkdir(parents=True)
    (module.parents[2] / "__init__.py").write_text(package_init)
    for pkg in (module.parents[1], module.parent):
        (pkg / "__init__.py").write_text("")
    module.write_text(context_module)
    monkeypatch.syspath_prepend(str(site))
    hook_skill(tmp_path, "as2-style", AS2_STYLE)
    rt = runtime(tmp_path, agent_id="3")
    await rt.activate("as2-style")
    try:
        (pre,) = await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1)
    finally:
        for name in [m for m in sys.modules if m.startswith("agentsociety2")]:
            del sys.modules[name]
    assert (pre.ok, pre.text) == (True, "cli agent 0003 pre_step"), pre.error
