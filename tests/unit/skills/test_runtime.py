"""AgentSkillRuntime / SkillSpace: visibility, activation, bodies, commands, scripts, state."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from agentsim.errors import SkillActivationError, SkillNotFoundError
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace, SkillView
from tests.unit import helpers

FIXTURES = helpers.FIXTURES / "runtime_skills"
WHEN = datetime(2026, 3, 2, 9, 0)


def fixture_registry() -> SkillRegistry:
    reg = SkillRegistry()
    reg.scan_builtin(FIXTURES / "builtin")
    reg.scan_custom(FIXTURES / "custom")
    return reg


def make_skill(root: Path, name: str, *, front: str = "", body: str = "Body.\n") -> Path:
    return helpers.write_skill(root, name, front=front, body=body)


@pytest.fixture
def registry() -> SkillRegistry:
    return fixture_registry()


@pytest.fixture
def space(registry: SkillRegistry) -> SkillSpace:
    return SkillSpace(registry.snapshot(), command_timeout=0.3)


def runtime(
    space: SkillSpace,
    tmp_path: Path,
    agent_id: str = "a-1",
    *,
    disabled: tuple[str, ...] = (),
    own_view: SkillView | None = None,
) -> AgentSkillRuntime:
    workspace = tmp_path / "agents" / agent_id
    workspace.mkdir(parents=True, exist_ok=True)  # the host makes it before any step
    return AgentSkillRuntime(
        space,
        agent_id=agent_id,
        workspace_root=workspace,
        disabled=disabled,
        own_view=own_view,
    )


# -- visibility -------------------------------------------------------------------------------


def test_disabled_skills_are_invisible_everywhere(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path, disabled=("old-skill", "custom@untrusted-cmd"))
    handles = rt.handles()
    assert "old-skill" not in handles and "untrusted-cmd" not in handles
    assert "args-skill" in handles
    assert "built-in@old-skill" not in rt.catalog().text
    assert all(d.manifest.name != "old-skill" for d in rt.visible())
    assert all(h["name"] != "old-skill" for h in rt.search("old way of doing things"))
    with pytest.raises(SkillActivationError, match=r"'old-skill'.*disabled for this agent"):
        rt.resolve("old-skill")


async def test_unknown_name_lists_close_matches(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    with pytest.raises(SkillNotFoundError, match=r"'args-skil'.*close matches: args-skill"):
        await rt.activate("args-skil")
    with pytest.raises(SkillNotFoundError, match=r"'zzz' is not registered; call search_skills"):
        rt.deactivate("zzz")


async def test_activate_and_deactivate_are_idempotent(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    first = await rt.activate("base-skill")
    again = await rt.activate("built-in@base-skill")
    assert first.newly_active == ("built-in@base-skill",) and first.handle == "base-skill"
    assert again.newly_active == ()
    assert rt.active == ("built-in@base-skill",)
    assert rt.bodies().count("<skill_content") == 1
    assert rt.deactivate("base-skill") is True
    assert rt.deactivate("base-skill") is False
    assert rt.active == () and rt.bodies() == ""


async def test_own_custom_skills_do_not_leak_between_agents(
    registry: SkillRegistry, space: SkillSpace, tmp_path: Path
) -> None:
    dir_a, dir_b = tmp_path / "a" / "skills", tmp_path / "b" / "skills"
    make_skill(dir_a, "secret-a", body="A's secret.\n")
    make_skill(dir_b, "secret-b", body="B's secret.\n")
    make_skill(dir_a, "mine", body="Mine of A.\n")
    make_skill(dir_b, "mine", body="Mine of B.\n")
    a = runtime(space, tmp_path, "a", own_view=registry.view(dir_a))
    b = runtime(space, tmp_path, "b", own_view=registry.view(dir_b))
    plain = runtime(space, tmp_path, "c")
    assert "secret-a" in a.catalog().text and "secret-b" not in a.catalog().text
    assert "secret-b" in b.catalog().text and "secret-a" not in b.catalog().text
    assert "secret" not in plain.catalog().text and "mine" not in plain.handles()
    with pytest.raises(SkillNotFoundError, match="'secret-b' is not registered"):
        await a.activate("secret-b")
    await a.activate("mine")
    await b.activate("mine")
    assert "Mine of A." in a.bodies() and "Mine of B." not in a.bodies()
    assert "Mine of B." in b.bodies() and "Mine of A." not in b.bodies()
    assert [h["name"] for h in b.search("secret")] == ["secret-b"]
    # A new view for the same agent (the host makes one per reload) sees new skills.
    make_skill(dir_a, "later-a")
    a.set_own_view(registry.view(dir_a))
    assert "later-a" in a.handles() and "later-a" not in b.handles()


async def test_ambiguous_names_use_ids_and_resolve_by_precedence(tmp_path: Path) -> None:
    make_skill(tmp_path / "b", "dup", body="Built-in dup.\n")
    make_skill(tmp_path / "c", "dup", body="Custom dup.\n")
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path / "b")
    reg.scan_custom(tmp_path / "c")
    rt = runtime(SkillSpace(reg.snapshot()), tmp_path)
    assert sorted(rt.handles()) == ["built-in@dup", "custom@dup"]
    assert rt.resolve("dup").skill_id == "custom@dup"
    res = await rt.activate("built-in@dup")
    assert res.handle == "built-in@dup"
    assert '<skill_content name="built-in@dup">\nBuilt-in dup.' in rt.bodies()


async def test_disabling_a_name_hides_every_skill_of_that_name(tmp_path: Path) -> None:
    make_skill(tmp_path / "b", "dup")
    make_skill(tmp_path / "c", "dup")
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path / "b")
    reg.scan_custom(tmp_path / "c")
    rt = runtime(SkillSpace(reg.snapshot()), tmp_path, disabled=("dup",))
    assert rt.handles() == []
    with pytest.raises(SkillActivationError, match="disabled"):
        rt.resolve("custom@dup")


# -- requires, deprecation --------------------------------------------------------------------


async def test_requires_brings_in_the_chain_in_order(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    await rt.activate("base-skill")
    res = await rt.activate("top-skill")
    assert res.newly_active == ("built-in@mid-skill", "built-in@top-skill")
    assert rt.active == ("built-in@base-skill", "built-in@mid-skill", "built-in@top-skill")
    bodies = rt.bodies()
    assert bodies.index("Base body.") < bodies.index("Mid body.") < bodies.index("Top body.")


async def test_missing_prerequisite_is_named(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    with pytest.raises(
        SkillActivationError,
        match=r"cannot activate skill 'broken-req': it requires 'nowhere-skill', which is not "
        r"available here",
    ):
        await rt.activate("broken-req")
    assert rt.active == ()


async def test_disabled_prerequisite_blocks_activation(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path, disabled=("base-skill",))
    with pytest.raises(SkillActivationError, match=r"requires 'base-skill'.*disabled"):
        await rt.activate("top-skill")


async def test_requires_cycle_fails_activation(tmp_path: Path) -> None:
    make_skill(tmp_path / "b", "ping", front="requires: [pong]\n")
    make_skill(tmp_path / "b", "pong", front="requires: [ping]\n")
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path / "b")
    assert any("requires cycle" in d.message for d in reg.diagnostics)
    rt = runtime(SkillSpace(reg.snapshot()), tmp_path)
    with pytest.raises(SkillActivationError, match="cycle: built-in@ping -> built-in@pong"):
        await rt.activate("ping")


async def test_deprecated_skill_works_and_warns(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    res = await rt.activate("old-skill")
    assert res.warnings == (
        "skill built-in@old-skill is deprecated; prefer another skill where one fits",
    )
    out = await rt.call_script("old-skill", ["still", "works"], tick=1, time=WHEN)
    assert out.ok and out.output == "still works"
    assert rt.drain_warnings() == list(res.warnings)
    assert rt.drain_warnings() == []


# -- bodies: arguments and commands -----------------------------------------------------------


async def test_arguments_are_substituted(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    await rt.activate("args-skill", arguments="alpha beta")
    body = rt.bodies()
    assert "All: alpha beta\nFirst: alpha\nSecond: beta\nMissing: []" in body
    assert rt.get_state()["arguments"] == {"built-in@args-skill": "alpha beta"}


async def test_trusted_command_runs_and_times_out(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    t0 = time.perf_counter()
    await rt.activate("cmd-skill", arguments="!`echo pwned`")
    # The 60 s sleep was cut at the 0.3 s timeout: a guard far from both, for a loaded machine.
    assert time.perf_counter() - t0 < 30
    body = rt.bodies()
    assert "Ran: ran-42" in body
    assert "[command timed out after 0.3s: sleep 60; echo never]" in body
    # Model-supplied arguments are text: a command in them is never run.
    assert "Args stay text: !`echo pwned`" in body


async def test_untrusted_command_does_not_run(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    await rt.activate("untrusted-cmd")
    body = rt.bodies()
    assert "[command not run: namespace 'custom' is not trusted]" in body
    assert "should-not-run" not in body


async def test_trusted_namespaces_are_configurable(registry: SkillRegistry, tmp_path: Path) -> None:
    space = SkillSpace(registry.snapshot(), trusted_namespaces=("built-in", "custom"))
    rt = runtime(space, tmp_path)
    await rt.activate("untrusted-cmd")
    assert "Would run: should-not-run" in rt.bodies()


# -- scripts ----------------------------------------------------------------------------------


async def test_script_needs_an_active_skill(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    res = await rt.call_script("old-skill", [], tick=1, time=WHEN)
    assert not res.ok and res.error == "skill 'old-skill' is not active; call activate_skill first"
    await rt.activate("base-skill")
    res = await rt.call_script("base-skill", [], tick=1, time=WHEN)
    assert not res.ok and "has no default script; pass `script`" in (res.error or "")


@pytest.mark.parametrize(
    ("script", "problem"),
    [("../../mid-skill/SKILL.md", "leaves the skill folder"), ("/etc/passwd", "is absolute")],
    ids=["dotdot", "absolute"],
)
async def test_script_path_must_stay_in_the_skill(
    space: SkillSpace, tmp_path: Path, script: str, problem: str
) -> None:
    rt = runtime(space, tmp_path)
    await rt.activate("old-skill")
    res = await rt.call_script("old-skill", [], tick=1, time=WHEN, script=script)
    assert not res.ok and f"script of skill 'old-skill' refused: {script!r} {problem}" in (
        res.error or ""
    )


@pytest.mark.parametrize(
    ("argv", "ok", "expected"),
    [
        (["--json", '{"n": 2}'], True, '{"double": 4}'),
        (['{"n": 3}'], True, '{"double": 6}'),
        (
            ["--json", '{"n": "x"}'],
            False,
            "input does not match the input_schema of schema-skill: 'x' is not of type 'integer'",
        ),
        (["--json", "{}"], False, "'n' is a required property"),
        (["--json", "not-json"], False, "'not-json' is not of type 'object'"),
        (["plain"], False, "skill 'schema-skill' expects a JSON argument (its input_schema)"),
        (
            ["--json", '{"n": 2}', "--text"],
            False,
            "output of schema-skill is not JSON but the skill declares an output_schema",
        ),
        (
            ["--json", '{"n": 2}', "--wrong"],
            False,
            "output does not match the output_schema of schema-skill: '4' is not of type 'integer'",
        ),
    ],
    ids=["ok", "bare-json", "bad-type", "missing", "not-json", "no-json", "text-out", "bad-out"],
)
async def test_schemas_are_checked(
    space: SkillSpace, tmp_path: Path, argv: list[str], ok: bool, expected: str
) -> None:
    rt = runtime(space, tmp_path)
    await rt.activate("schema-skill")
    res = await rt.call_script("schema-skill", argv, tick=1, time=WHEN)
    assert res.ok is ok
    assert expected in (res.output if ok else (res.error or ""))


@pytest.mark.parametrize(
    ("skill", "needed", "ok", "calls"),
    [
        ("flaky-skill", "3", True, 3),  # idempotent, retries: 2 -> three attempts
        ("flaky-skill", "4", False, 3),
        ("flaky-once", "2", False, 1),  # retries without idempotent: never re-run
    ],
    ids=["recovers", "gives-up", "not-idempotent"],
)
async def test_only_idempotent_skills_are_retried(
    space: SkillSpace, tmp_path: Path, skill: str, needed: str, ok: bool, calls: int
) -> None:
    rt = runtime(space, tmp_path)
    await rt.activate(skill)
    res = await rt.call_script(skill, [needed], tick=1, time=WHEN)
    assert res.ok is ok
    if ok:
        assert res.output == f"ok after {calls} calls"
    else:
        assert f"flaky failure {calls}" in (res.error or "")
    assert (tmp_path / "agents" / "a-1" / f"{skill}.count").read_text() == str(calls)


# -- catalog and search -----------------------------------------------------------------------


async def test_catalog_over_budget_keeps_active_and_reports_omitted(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    space = SkillSpace(registry.snapshot(), catalog_budget_tokens=150)
    rt = runtime(space, tmp_path)
    await rt.activate("old-skill")
    cat = rt.catalog("double a number with schema checks")
    picks = cat.shown[cat.head :]
    assert "built-in@old-skill" in cat.shown and "built-in@schema-skill" in picks[:3]
    assert 'id="built-in@old-skill" status="deprecated">' in cat.text + cat.agent_text
    assert cat.omitted == len(rt.visible()) - len(cat.shown) > 0
    assert f"<!-- {cat.omitted} more skills not listed" in cat.agent_text
    assert "search_skills(query)" in cat.agent_text
    assert cat.tokens <= 150
    # The agent keeps its selection and re-renders it: the same text, no new ranking.
    assert rt.catalog("double a number with schema checks") == cat
    # A different situation ranks again; the shared head stays.
    other = rt.catalog("greet people")
    assert "built-in@old-skill" in other.shown and other.shown != cat.shown
    assert other.text == cat.text


def test_catalog_under_budget_lists_everything(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    cat = rt.catalog("anything")
    assert cat.omitted == 0 and len(cat.shown) == len(rt.visible()) == 17
    assert "more skill" not in cat.text
    assert rt.catalog("something else") is cat  # relevance cannot matter: one cache entry


def test_search_ranks_and_marks_active(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    hits = rt.search("requires chain", limit=2)
    assert len(hits) == 2
    assert {h["name"] for h in hits} <= {"base-skill", "mid-skill", "top-skill", "broken-req"}
    assert rt.search("no such words at all") == []


# -- hooks, reload, state ---------------------------------------------------------------------


async def test_hooks_skip_inactive_and_drop_removed_skills(tmp_path: Path) -> None:
    root = tmp_path / "b"
    folder = make_skill(
        root, "hooked", front="hooks:\n  pre_step: scripts/h.py\n", body="Hooked.\n"
    )
    (folder / "scripts").mkdir()
    (folder / "scripts" / "h.py").write_text("def entrypoint(argv, ctx):\n    return 'hi'\n")
    reg = SkillRegistry()
    reg.scan_builtin(root)
    space = SkillSpace(reg.snapshot())
    rt = runtime(space, tmp_path)
    assert await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1) == []
    await rt.activate("hooked")
    out = await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1)
    assert [(o.skill_id, o.ok, o.text) for o in out] == [("built-in@hooked", True, "hi")]
    for f in (folder / "scripts" / "h.py", folder / "SKILL.md"):
        f.unlink()
    (folder / "scripts").rmdir()
    folder.rmdir()
    assert reg.refresh().removed == ("built-in@hooked",)
    space.swap_view(reg.snapshot())
    # Gone from the view: never run, even before sync() deactivates it.
    assert await rt.run_hooks("pre_step", tick=2, time=WHEN, step_count=2) == []
    assert await rt.sync() == ["built-in@hooked"]
    assert rt.active == () and rt.bodies() == ""
    assert await rt.run_hooks("pre_step", tick=2, time=WHEN, step_count=2) == []
    assert rt.drain_warnings() == ["skill built-in@hooked was removed from its folder; deactivated"]
    assert await rt.sync() == []


async def test_sync_rerenders_the_bodies_of_edited_skills_only(tmp_path: Path) -> None:
    root = tmp_path / "b"
    make_skill(root, "first", body="First $ARGUMENTS, version 1.\n")
    make_skill(root, "second", body="Second, version 1.\n")
    reg = SkillRegistry()
    reg.scan_builtin(root)
    space = SkillSpace(reg.snapshot())
    rt = runtime(space, tmp_path)
    await rt.activate("first", arguments="alpha")
    await rt.activate("second")
    make_skill(root, "first", body="First $ARGUMENTS, version 2, a longer body.\n")
    make_skill(root, "second", body="Second, version 2, a longer body.\n")
    res = reg.refresh()
    assert set(res.changed) == {"built-in@first", "built-in@second"}
    space.swap_view(reg.snapshot())
    assert await rt.sync(["built-in@first"]) == []
    bodies = rt.bodies()
    assert "First alpha, version 2, a longer body." in bodies  # arguments kept
    assert "Second, version 1." in bodies  # not reported as edited: left alone


async def test_state_round_trips(space: SkillSpace, tmp_path: Path) -> None:
    rt = runtime(space, tmp_path)
    await rt.activate("args-skill", arguments="x y")
    await rt.activate("top-skill")
    state = json.loads(json.dumps(rt.get_state()))
    other = runtime(space, tmp_path, "a-2")
    state["active"].append("built-in@gone")
    await other.set_state(state)
    assert other.active == rt.active
    assert other.bodies() == rt.bodies()
    assert other.warnings == ["skill built-in@gone is no longer installed; not re-activated"]


# -- declared environment ---------------------------------------------------------------------


async def test_a_skill_sees_only_the_variables_it_declares(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    for name, front in (("reader", "env: [SERVICE_URL]\n"), ("plain", "")):
        folder = make_skill(root, name, front=f"script: scripts/show.py\n{front}")
        (folder / "scripts").mkdir()
        (folder / "scripts" / "show.py").write_text(
            "def entrypoint(argv, ctx):\n"
            "    return ','.join(f'{k}={ctx.env[k]}' for k in sorted(ctx.env)"
            " if k in ('SERVICE_URL', 'DB_PASS'))\n"
        )
    reg = SkillRegistry()
    reg.scan_custom(root)
    environ = {"PATH": "/usr/bin", "SERVICE_URL": "http://127.0.0.1:9", "DB_PASS": "hunter2"}
    from agentsim.skills.scripts import ScriptRunner

    space = SkillSpace(reg.snapshot(), runner=ScriptRunner(environ=environ), environ=environ)
    rt = runtime(space, tmp_path)
    when = datetime(2026, 3, 2, 6)
    for name in ("reader", "plain"):
        await rt.activate(name)
    declared = await rt.call_script("reader", [], tick=0, time=when)
    undeclared = await rt.call_script("plain", [], tick=0, time=when)
    assert (declared.ok, declared.output) == (True, "SERVICE_URL=http://127.0.0.1:9")
    assert (undeclared.ok, undeclared.output) == (True, "")


def test_a_declared_variable_must_be_a_name(tmp_path: Path) -> None:
    make_skill(tmp_path / "skills", "bad", front="env: [SERVICE-URL]\n")
    reg = SkillRegistry()
    reg.scan_custom(tmp_path / "skills")
    assert reg.list_all() == ()
    assert any(
        "'SERVICE-URL' is not an environment variable name" in d.message for d in reg.diagnostics
    )
