"""What a skill script may reach: its own files, its siblings, the terminal, the environment.

Issue 13 item 5 (sibling imports in-process) and issue 14 items 4-6 (prints never reach
the terminal, secrets by allow-list, only a skill's own Python scripts run).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from agentsim.skills.context import SkillScriptContext, safe_env
from agentsim.skills.scripts import REFUSED_EXIT_CODE, Isolation, ScriptRunner
from tests.unit import helpers

SECRETS = {
    "OPENAI_API_KEY": "sk-live",
    "SMTP_PASS": "hunter2",
    "SESSION_COOKIE": "c00k1e",
    "MY_COOKIE_JAR": "jar",
}


def make_ctx(
    skill_dir: Path, agent_id: str = "a-1", *, env: dict[str, str] | None = None
) -> SkillScriptContext:
    return helpers.script_context(
        skill_dir, workspace=skill_dir.parent / "agents" / agent_id, agent_id=agent_id, env=env
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- sibling modules -------------------------------------------------------------------------


async def test_two_skills_import_their_own_same_named_sibling_in_process(tmp_path: Path) -> None:
    mains = []
    for skill, word in (("alpha", "from alpha"), ("beta", "from beta")):
        scripts = tmp_path / skill / "scripts"
        write(scripts / "util.py", f"from .helpers import shout\n\nWORD = shout({word!r})\n")
        write(scripts / "helpers.py", "def shout(text):\n    return text.upper()\n")
        mains.append(
            write(
                scripts / "main.py",
                "from . import util\n\ndef entrypoint(argv, ctx):\n    return util.WORD\n",
            )
        )
    runner = ScriptRunner()
    results = await asyncio.gather(
        *(runner.run(m, [], make_ctx(m.parent.parent)) for m in mains * 2)
    )
    assert [(r.tier, r.output) for r in results] == [
        ("entrypoint", "FROM ALPHA"),
        ("entrypoint", "FROM BETA"),
    ] * 2
    assert "util" not in sys.modules and "helpers" not in sys.modules
    assert runner.stats()["imports"] == 2


async def test_an_edited_sibling_is_imported_again(tmp_path: Path) -> None:
    scripts = tmp_path / "gamma" / "scripts"
    util = write(scripts / "util.py", "VALUE = 'one'\n")
    main = write(
        scripts / "main.py",
        "from .util import VALUE\n\ndef entrypoint(argv, ctx):\n    return VALUE\n",
    )
    runner = ScriptRunner()
    ctx = make_ctx(tmp_path / "gamma")
    assert (await runner.run(main, [], ctx)).output == "one"
    util.write_text("VALUE = 'two, longer'\n")
    assert (await runner.run(main, [], ctx)).output == "two, longer"


async def test_a_plain_script_imports_its_siblings_relatively_too(tmp_path: Path) -> None:
    scripts = tmp_path / "delta" / "scripts"
    write(scripts / "util.py", "NAME = 'delta-util'\n")
    plain = write(scripts / "plain.py", "from . import util\nprint(util.NAME)\n")
    result = await ScriptRunner().run(plain, [], make_ctx(tmp_path / "delta"), isolation="process")
    assert (result.ok, result.tier, result.output) == (True, "wrapper", "delta-util\n")


# -- prints never reach the terminal ---------------------------------------------------------

NOISY = {
    "sync.py": "import sys\n\ndef entrypoint(argv, ctx):\n"
    "    print('out', ctx.agent_id)\n    print('err', ctx.agent_id, file=sys.stderr)\n"
    "    return 'done'\n",
    "async_.py": "import asyncio, sys\n\nasync def entrypoint(argv, ctx):\n"
    "    await asyncio.sleep(0.01)\n    print('out', ctx.agent_id)\n"
    "    print('err', ctx.agent_id, file=sys.stderr)\n    return 'done'\n",
}


@pytest.mark.parametrize("isolation", ["inline", "thread", "process"])
@pytest.mark.parametrize("name", sorted(NOISY), ids=["async", "sync"])
async def test_prints_go_to_the_result_never_to_the_terminal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], isolation: str, name: str
) -> None:
    noisy = write(tmp_path / "noisy" / "scripts" / name, NOISY[name])
    result = await ScriptRunner().run(
        noisy,
        [],
        make_ctx(tmp_path / "noisy"),
        isolation=isolation,  # type: ignore[arg-type]
    )
    assert (result.ok, result.output) == (True, "done"), result.error
    assert result.log == "out a-1\nerr a-1\n"
    assert capfd.readouterr() == ("", "")


async def test_plain_and_subprocess_scripts_print_into_their_result(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    scripts = tmp_path / "loud" / "scripts"
    plain = write(
        scripts / "plain.py", "import sys\nprint('plain out')\nprint('e', file=sys.stderr)\n"
    )
    as_script = write(
        scripts / "as_script.py",
        "import sys\nimport loud_sibling_only_on_path\nprint('sub out')\n"
        "print('sub err', file=sys.stderr)\n",
    )
    write(scripts / "loud_sibling_only_on_path.py", "")
    runner = ScriptRunner()
    ctx = make_ctx(tmp_path / "loud")
    plain_result, sub_result = await asyncio.gather(
        runner.run(plain, [], ctx), runner.run(as_script, [], ctx)
    )
    assert (plain_result.tier, plain_result.output, plain_result.log) == (
        "subprocess",
        "plain out\n",
        "e\n",
    )
    assert (sub_result.tier, sub_result.output, sub_result.log) == (
        "subprocess",
        "sub out\n",
        "sub err\n",
    )
    assert capfd.readouterr() == ("", "")


async def test_concurrent_calls_each_keep_their_own_prints(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    noisy = write(tmp_path / "many" / "scripts" / "async_.py", NOISY["async_.py"])
    sync = write(tmp_path / "many" / "scripts" / "sync.py", NOISY["sync.py"])
    runner = ScriptRunner()
    ctxs = [make_ctx(tmp_path / "many", f"agent-{i:03d}") for i in range(200)]
    results = await asyncio.gather(
        *(runner.run(noisy if i % 2 else sync, [], c) for i, c in enumerate(ctxs))
    )
    for ctx, result in zip(ctxs, results, strict=True):
        assert result.log == f"out {ctx.agent_id}\nerr {ctx.agent_id}\n"
    assert capfd.readouterr() == ("", "")
    print("the host's own prints still reach the terminal")
    assert capfd.readouterr().out == "the host's own prints still reach the terminal\n"


async def test_the_log_is_capped(tmp_path: Path) -> None:
    chatty = write(
        tmp_path / "chat" / "scripts" / "chatty.py",
        "def entrypoint(argv, ctx):\n    print('x' * 100)\n    return 'ok'\n",
    )
    result = await ScriptRunner(output_cap=10).run(chatty, [], make_ctx(tmp_path / "chat"))
    assert result.log == "x" * 10 + "\n...[truncated 91 chars]"


# -- secrets by allow-list -------------------------------------------------------------------

ENV_DUMP = (
    "import json, os\n\n"
    "def entrypoint(argv, ctx):\n"
    "    return {'ctx': sorted(ctx.env), 'os': sorted(os.environ)}\n"
)


async def test_secrets_never_reach_ctx_env_or_a_child_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TZ", "UTC")
    skill = tmp_path / "envy"
    dump = write(skill / "scripts" / "dump.py", ENV_DUMP)
    as_script = write(
        skill / "scripts" / "as_script.py",
        "import json, os\nimport envy_sibling_only_on_path\n"
        "print(json.dumps(sorted(os.environ)))\n",
    )
    write(skill / "scripts" / "envy_sibling_only_on_path.py", "")
    ctx = make_ctx(skill)  # env defaults to safe_env(): the process's allow-listed part
    runner = ScriptRunner()
    inline = json.loads((await runner.run(dump, [], ctx)).output)
    child = await runner.run(dump, [], ctx, isolation="process")
    child_env = json.loads(child.output)
    sub = await runner.run(as_script, [], ctx)
    sub_env = json.loads(sub.output)
    assert sub.tier == "subprocess", sub.error
    for names in (inline["ctx"], child_env["ctx"], child_env["os"], sub_env):
        assert "TZ" in names
        assert not set(SECRETS) & set(names), names
    # Inline code is trusted code: it runs in the host and sees the host's environment.
    assert set(SECRETS) <= set(inline["os"])


async def test_declared_variables_reach_ctx_env_and_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WEATHER_ENDPOINT", "http://127.0.0.1:9/")
    dump = write(tmp_path / "decl" / "scripts" / "dump.py", ENV_DUMP)
    ctx = make_ctx(tmp_path / "decl", env=dict(safe_env()))
    runner = ScriptRunner()
    declared = ["WEATHER_ENDPOINT", "NOT_SET_ANYWHERE"]
    inline = json.loads((await runner.run(dump, [], ctx, env=declared)).output)
    child = json.loads((await runner.run(dump, [], ctx, env=declared, isolation="process")).output)
    for names in (inline["ctx"], child["ctx"], child["os"]):
        assert "WEATHER_ENDPOINT" in names and "NOT_SET_ANYWHERE" not in names
        assert not set(SECRETS) & set(names)


# -- only the skill's own Python scripts run -------------------------------------------------


@pytest.fixture
def skill(tmp_path: Path) -> Path:
    folder = tmp_path / "own"
    write(folder / "SKILL.md", "---\nname: own\ndescription: d\n---\nprint('pwned')\n")
    write(folder / "references" / "notes.md", "print('pwned')\n")
    write(folder / "scripts" / "ok.py", "def entrypoint(argv, ctx):\n    return 'ok'\n")
    write(tmp_path / "elsewhere" / "evil.py", "def entrypoint(argv, ctx):\n    return 'evil'\n")
    return folder


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("SKILL.md", r"SKILL\.md of skill custom@own is not a Python file; only a skill's own"),
        ("references/notes.md", r"notes\.md of skill custom@own is not a Python file"),
        ("scripts/../../elsewhere/evil.py", r"outside the folder .*own of skill custom@own"),
        ("scripts/link.py", r"resolves to .*evil\.py, outside the folder .*no symlink out"),
        ("scripts/md_link.py", r"md_link\.py of skill custom@own is not a Python file"),
        ("scripts/dir.py", r"dir\.py of skill custom@own is not a regular file"),
    ],
    ids=["skill-md", "reference", "dot-dot", "symlink-out", "symlink-to-md", "directory"],
)
async def test_only_the_skills_own_python_files_run(skill: Path, target: str, message: str) -> None:
    (skill / "scripts" / "link.py").symlink_to(skill.parent / "elsewhere" / "evil.py")
    (skill / "scripts" / "md_link.py").symlink_to(skill / "SKILL.md")
    (skill / "scripts" / "dir.py").mkdir()
    result = await ScriptRunner().run(skill / target, [], make_ctx(skill))
    assert (result.ok, result.exit_code) == (False, REFUSED_EXIT_CODE)
    assert result.error is not None
    assert re.search(message, result.error), result.error
    assert "pwned" not in result.output and "evil" not in result.output


async def test_a_symlink_inside_the_skill_runs(skill: Path) -> None:
    (skill / "scripts" / "alias.py").symlink_to(skill / "scripts" / "ok.py")
    result = await ScriptRunner().run(skill / "scripts" / "alias.py", [], make_ctx(skill))
    assert (result.ok, result.output) == (True, "ok")


async def test_refusals_apply_to_every_isolation(skill: Path) -> None:
    runner = ScriptRunner()
    isolations: tuple[Isolation, ...] = ("thread", "process")
    for isolation in isolations:
        result = await runner.run(skill / "SKILL.md", [], make_ctx(skill), isolation=isolation)
        assert (result.exit_code, result.isolation) == (REFUSED_EXIT_CODE, isolation)
