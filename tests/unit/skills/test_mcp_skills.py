"""Skills from MCP servers (``skills.mcp``): a real skills server on 127.0.0.1 (FastMCP's
``SkillsDirectoryProvider``) whose skills join the catalog under their namespace, are
activated and read by agents in scripted runs, are checked against the manifest's SHA-256
and kept by digest, are untrusted (no ``!`cmd```, no scripts unless allowed), and survive
the server going away mid-run."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.errors import ConfigError
from agentsim.hosts.protocol import SkillSources, build_registry
from agentsim.inspect import open_run
from agentsim.run.engine import Engine, Progress
from agentsim.skills.mcp import McpServer, McpSkillDescriptor, McpSkillSource, default_cache_dir
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
from tests.unit import helpers
from tests.unit.skills.mcp_servers import SkillsHttpServer, stdio_command

EXPERIMENT = """\
name: mcp-skills
seed: 1
clock: {{start: "2026-03-02T06:00:00", tick: 1h}}
ticks: {ticks}
agents:
  - group: people
    count: 2
    profile: {{template: generic}}
    skills: {{default: [{defaults}]}}
skills: {{mcp_cache: "{cache}", {skills}}}
model: {{backend: scripted}}
output: {{formats: [jsonl], flush_every: 1}}
{more}"""

GREET_BODY = "Say hello first. Marker: GREET-BODY-V1.\nToday: !`touch {flag}`\n"


def served_skills(root: Path, flag: Path) -> Path:
    """The two skills a server offers: ``greet`` (a body with a command line) and
    ``forecast`` (a script and a reference)."""
    helpers.write_skill(
        root, "greet", description="Greet the people you meet.", body=GREET_BODY.format(flag=flag)
    )
    helpers.write_skill(
        root,
        "forecast",
        description="Check the forecast before going out.",
        # It asks for a secret and the network: what only the experiment may grant.
        front="script: scripts/forecast.py\nenv: [MCP_TEST_SECRET]\nnetwork: true\n",
        body="Run the script; read references/notes.md.\n",
        files={
            "scripts/forecast.py": (
                "import os\n\n\ndef entrypoint(argv, ctx):\n"
                "    return 'sunny' + os.environ.get('MCP_TEST_SECRET', '')\n"
            ),
            "references/notes.md": "Forecast notes.\n",
        },
    )
    return root


def experiment(
    folder: Path,
    *,
    url: str | None,
    ticks: int = 1,
    defaults: str = "",
    server: str = "",
    more: str = "",
    name: str = "exp.yaml",
) -> Path:
    """An experiment of two agents with the skills of the server at ``url`` (its entry's
    ``server`` options added), or (``url=None``) with the built-in skills instead."""
    path = folder / name
    if url is None:
        skills = "builtin: true"
    else:
        skills = f"builtin: false, mcp: [{{url: '{url}', namespace: remote{server}}}]"
    path.write_text(
        EXPERIMENT.format(
            ticks=ticks, defaults=defaults, cache=folder / "cache", skills=skills, more=more
        )
    )
    return path


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_served_skill_is_activated_and_its_body_read_without_running_its_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flag = tmp_path / "command-ran"
    root = served_skills(tmp_path / "served", flag)
    with SkillsHttpServer(root) as server:
        exp = experiment(tmp_path, url=server.url, ticks=2, defaults="remote@greet")
        run_dir = tmp_path / "run"
        assert main(["run", str(exp), "--out", str(run_dir), "--no-preflight"]) == 0
        first_reads = sum(server.reads.values())
        # A second run fetches nothing: every file is in the cache by its digest.
        assert main(["run", str(exp), "--out", str(tmp_path / "run2"), "--no-preflight"]) == 0
        assert sum(server.reads.values()) == first_reads == 4  # each file once, ever
    out = capsys.readouterr().out
    assert "completed" in out
    events = read_events(run_dir)
    (start,) = [e for e in events if e["type"] == "run_start"]
    assert start["skills"] == 2 and start["skills_refused"] == {}
    activated = [(e["agent_id"], e["skill"]) for e in events if e["type"] == "skill_activated"]
    assert activated == [("people-00000", "remote@greet"), ("people-00001", "remote@greet")]
    run = open_run(run_dir)
    prompts = helpers.step_prompts(run.agent("people-00000"))
    for tick in (0, 1):
        assert "Marker: GREET-BODY-V1." in prompts[tick]
        assert "[command not run: namespace 'remote' is not trusted]" in prompts[tick]
        assert "remote@forecast" in prompts[tick]  # in the catalog
    assert not flag.exists()  # the command of an MCP skill never runs
    # Kept by digest: the cache holds each file once, named by its SHA-256.
    objects = {p.name for p in (tmp_path / "cache" / "objects").iterdir()}
    files = [p for p in root.rglob("*") if p.is_file()]
    assert objects == {sha(p) for p in files}
    # Recorded with the manifest's digests, each file kept in the run folder once.
    rows = [json.loads(x) for x in (run_dir / "skills" / "versions.jsonl").read_text().splitlines()]
    recorded = {r["skill_id"]: r["files"] for r in rows}
    assert recorded["remote@greet"] == {"SKILL.md": sha(root / "greet" / "SKILL.md")}
    assert recorded["remote@forecast"] == {
        rel: sha(root / "forecast" / rel)
        for rel in ("SKILL.md", "references/notes.md", "scripts/forecast.py")
    }
    kept = {p.name for p in (run_dir / "skills" / "objects").iterdir()}
    assert kept == objects


def test_the_manifest_digests_are_the_skills_digests_and_a_tampered_file_breaks_it(
    tmp_path: Path,
) -> None:
    root = served_skills(tmp_path / "served", tmp_path / "flag")
    with SkillsHttpServer(root, tamper=frozenset({"forecast/scripts/forecast.py"})) as server:
        source = McpSkillSource(McpServer(namespace="remote", url=server.url), tmp_path / "cache")
        try:
            scan, added, changed, removed = source.scan()
        finally:
            source.close()
    assert (added, changed, removed) == (["forecast", "greet"], [], [])
    greet = scan.entries["greet"].skill
    assert isinstance(greet, McpSkillDescriptor)
    assert greet.skill_id == "remote@greet" and greet.uri == "skill://greet/SKILL.md"
    assert greet.file_digests() == {"SKILL.md": sha(root / "greet" / "SKILL.md")}
    assert (Path(greet.path) / "SKILL.md").read_bytes() == (
        root / "greet" / "SKILL.md"
    ).read_bytes()
    forecast = scan.entries["forecast"]
    assert forecast.skill is None  # refused: no version of it is registered
    (diag,) = forecast.diagnostics
    digest = sha(root / "forecast" / "scripts" / "forecast.py")
    assert diag.file == "skill://forecast/SKILL.md"
    assert diag.message.startswith(
        f"skill 'forecast' of MCP skills server 'remote' ({server.url}): file "
        "scripts/forecast.py does not match the server's manifest (SHA-256 "
    )
    assert f"the manifest says {digest}, " in diag.message
    assert diag.message.endswith("so the skill is not loaded")


@pytest.mark.slow
def test_a_tampered_skill_is_told_and_left_out_of_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = served_skills(tmp_path / "served", tmp_path / "flag")
    with SkillsHttpServer(root, tamper=frozenset({"forecast/SKILL.md"})) as server:
        exp = experiment(tmp_path, url=server.url, defaults="remote@greet")
        run_dir = tmp_path / "run"
        assert main(["run", str(exp), "--out", str(run_dir), "--no-preflight"]) == 0
    err = capsys.readouterr().err
    (start,) = [e for e in read_events(run_dir) if e["type"] == "run_start"]
    assert start["skills"] == 1
    refused = start["skills_refused"]["remote@forecast"]
    assert "file SKILL.md does not match the server's manifest" in refused
    assert "remote@forecast" in err and "does not match the server's manifest" in err


def test_a_server_down_at_start_is_exit_2_naming_it_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refused_port: int
) -> None:
    url = f"http://127.0.0.1:{refused_port}/mcp"
    exp = experiment(tmp_path, url=url)
    run_dir = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(run_dir), "--no-preflight"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: skills.mcp.0: MCP skills server 'remote' ({url}) cannot be used: "
    ), err
    assert err.rstrip().endswith(
        "start the server, or fix its url / command (or remove it from skills.mcp)"
    )
    assert not run_dir.exists()


@pytest.mark.slow
def test_a_server_stopped_mid_run_keeps_the_last_good_version_then_comes_back(
    tmp_path: Path,
) -> None:
    root = served_skills(tmp_path / "served", tmp_path / "flag")
    md = root / "greet" / "SKILL.md"
    with SkillsHttpServer(root) as server:
        exp = experiment(tmp_path, url=server.url, ticks=4, defaults="remote@greet")
        config = parse_experiment(exp.read_text(), base_dir=tmp_path)

        def between_ticks(p: Progress) -> None:
            if p.tick == 1:
                server.stop()
            elif p.tick == 2:  # edited while it was down, then back
                helpers.touch(md, md.read_text().replace("GREET-BODY-V1", "GREET-BODY-V2"))
                server.start()

        told: list[str] = []
        run_dir = tmp_path / "run"
        engine = Engine(config, run_dir=run_dir, progress=between_ticks, notice=told.append)
        summary = asyncio.run(engine.run())
    assert summary.ticks == 4
    events = read_events(run_dir)
    broken = [(e["tick"], e["skill"]) for e in events if e["type"] == "skill_broken"]
    assert broken == [(1, "remote@forecast"), (1, "remote@greet")]
    (message,) = {e["message"] for e in events if e["type"] == "skill_broken"}
    assert message.startswith(f"MCP skills server 'remote' ({server.url}) did not answer (")
    assert message.endswith(
        "the last good version of this skill stays active until it answers again"
    )
    assert any(
        line.startswith("skill remote@greet is broken: skill://greet/SKILL.md:0: error: MCP ")
        for line in told
    ), told
    assert [e for e in events if e["type"] == "skill_deactivated"] == []
    reloads = [(e["tick"], e["changed"]) for e in events if e["type"] == "skills_reloaded"]
    assert reloads == [(2, ["remote@greet"])]
    prompts = helpers.step_prompts(open_run(run_dir).agent("people-00001"))
    assert "GREET-BODY-V1" in prompts[1]  # the last good version, while the server was down
    assert "GREET-BODY-V2" in prompts[2] and "GREET-BODY-V2" in prompts[3]


@pytest.mark.slow
def test_namespaces_and_first_wins_with_a_folder_skill_of_the_same_name(
    tmp_path: Path,
) -> None:
    root = served_skills(tmp_path / "served", tmp_path / "flag")
    custom = tmp_path / "custom" / "skills"  # searched by default, beside the experiment
    helpers.write_skill(custom, "greet", body="The folder's greeting. Marker: FOLDER-GREET.\n")
    with SkillsHttpServer(root) as server:
        exp = experiment(tmp_path, url=server.url, defaults="greet, remote@forecast")
        run_dir = tmp_path / "run"
        assert main(["run", str(exp), "--out", str(run_dir), "--no-preflight"]) == 0
    events = read_events(run_dir)
    (start,) = [e for e in events if e["type"] == "run_start"]
    assert start["skills"] == 3
    assert start["skills_shadowed"] == {"remote@greet": "custom@greet"}
    activated = {e["skill"] for e in events if e["type"] == "skill_activated"}
    assert activated == {"custom@greet", "remote@forecast"}
    prompt = helpers.step_prompts(open_run(run_dir).agent("people-00000"))[0]
    assert "FOLDER-GREET" in prompt and "GREET-BODY-V1" not in prompt
    assert "Forecast notes." not in prompt and "Run the script" in prompt


def _runtime(sources: SkillSources, tmp_path: Path) -> tuple[Any, AgentSkillRuntime]:
    registry = build_registry(sources)
    space = SkillSpace(registry, trusted_namespaces=sources.trusted_namespaces)
    (tmp_path / "ws").mkdir()
    runtime = AgentSkillRuntime(space, agent_id="a-1", workspace_root=tmp_path / "ws")
    return registry, runtime


@pytest.mark.parametrize("allowed", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_scripts_of_mcp_skills_run_only_where_allowed_and_then_in_a_process(
    tmp_path: Path, allowed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_TEST_SECRET", "-leaked")
    root = served_skills(tmp_path / "served", tmp_path / "flag")
    with SkillsHttpServer(root) as server:
        server_spec = McpServer(namespace="remote", url=server.url, scripts=allowed)
        sources = SkillSources(builtin=None, mcp=(server_spec,), mcp_cache=str(tmp_path / "c"))
        registry, runtime = _runtime(sources, tmp_path)
    try:
        desc = registry.get("remote@forecast")
        assert runtime.space.isolation(desc) == "process"
        # The served manifest asked for a secret and the network; a served skill gets neither.
        assert (desc.manifest.env, desc.manifest.network) == ((), False)
        assert runtime.view.read_skill_file("remote@forecast", "references/notes.md") == (
            "Forecast notes.\n"
        )

        async def call() -> Any:
            await runtime.activate("remote@forecast")
            return await runtime.call_script("remote@forecast", [], tick=1, time=helpers.T0)

        result = asyncio.run(call())
    finally:
        registry.close()
    if allowed:
        assert result.ok and result.output.strip() == "sunny" and result.isolation == "process"
    else:
        assert result.refused and not result.ok
        assert result.error == (
            "skill remote@forecast comes from an MCP server, and this experiment does not let "
            "that server's scripts run (scripts: true on its skills.mcp entry allows them, "
            "under process isolation)"
        )


@pytest.mark.slow
def test_a_stdio_server_given_as_a_command_serves_its_skills(tmp_path: Path) -> None:
    root = served_skills(tmp_path / "served", tmp_path / "flag")
    server = McpServer(namespace="local", command=tuple(stdio_command(root)), timeout=60)
    source = McpSkillSource(server, tmp_path / "cache")
    try:
        scan, added, _, _ = source.scan()
        again, added_again, changed, removed = source.scan(scan)
    finally:
        source.close()
    assert added == ["forecast", "greet"] and (added_again, changed, removed) == ([], [], [])
    assert (tmp_path / "cache" / "logs" / "local.log").is_file()  # its stderr, not the console
    assert again.entries["greet"] is scan.entries["greet"]  # same version: reused
    greet = scan.entries["greet"].skill
    assert greet is not None and greet.skill_id == "local@greet"
    assert "GREET-BODY-V1" in (Path(greet.path) / "SKILL.md").read_text()


@pytest.mark.slow
def test_the_shipped_skills_served_unchanged_over_mcp_load_activate_and_hook(
    tmp_path: Path,
) -> None:
    """daily-guidance (AgentSociety2's format: a script, pre_step and post_step hooks, a
    requirement on the city module) served as is, its scripts allowed for the server."""
    city = "environment: [{module: city}]\n"
    with SkillsHttpServer(helpers.REPO / "skills") as server:
        exp = experiment(
            tmp_path,
            url=server.url,
            ticks=2,
            defaults="remote@daily-guidance",
            server=", scripts: true",
            more=city,
        )
        run_dir = tmp_path / "run"
        assert main(["run", str(exp), "--out", str(run_dir), "--no-preflight"]) == 0
    events = read_events(run_dir)
    (start,) = [e for e in events if e["type"] == "run_start"]
    assert start["skills_refused"] == {}
    # Registered, and hidden as a folder's would be: they need the social module.
    assert sorted(start["skills_hidden"]) == ["remote@opinion-update", "remote@social-feed"]
    activated = [(e["agent_id"], e["skill"]) for e in events if e["type"] == "skill_activated"]
    assert ("people-00000", "remote@daily-guidance") in activated
    assert [e for e in events if e["type"] in ("hook_failed", "agent_error")] == []
    body = (helpers.REPO / "skills" / "daily-guidance" / "SKILL.md").read_text()
    first_line = next(line for line in body.split("---", 2)[2].splitlines() if line.strip())
    run = open_run(run_dir)
    prompts = [
        p
        for a in ("people-00000", "people-00001")
        for p in helpers.step_prompts(run.agent(a)).values()
    ]
    assert prompts and all(first_line.strip() in p for p in prompts)
    # The same run with the built-in copy (a folder) calls the hooks as often.
    folder = experiment(
        tmp_path, url=None, ticks=2, defaults="daily-guidance", more=city, name="folder.yaml"
    )
    assert main(["run", str(folder), "--out", str(tmp_path / "folder"), "--no-preflight"]) == 0

    def hook_calls(events: list[dict[str, Any]]) -> int:
        return sum(e.get("hook_calls", 0) for e in events if e["type"] == "tick_end")

    assert hook_calls(events) == hook_calls(read_events(tmp_path / "folder")) > 0


BASE = "name: x\nagents: [{group: people, count: 1}]\n"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "{namespace: remote}",
            "skills.mcp.0: needs exactly one of 'url' or 'command'",
        ),
        (
            "{url: 'http://127.0.0.1:1/mcp', command: [x], namespace: remote}",
            "skills.mcp.0: needs exactly one of 'url' or 'command'",
        ),
        (
            "{url: 'http://127.0.0.1:1/mcp', namespace: custom}",
            "skills.mcp.0.namespace: namespace 'custom' is reserved for skills folders",
        ),
        (
            "{url: 'http://127.0.0.1:1/mcp', namespace: built-in}",
            "skills.mcp.0.namespace: namespace 'built-in' is reserved for skills folders",
        ),
    ],
)
def test_a_bad_server_entry_is_refused_with_its_field(entry: str, message: str) -> None:
    text = f"{BASE}skills: {{mcp: [{entry}]}}\n"
    with pytest.raises(ConfigError) as err:
        parse_experiment(text)
    assert str(err.value).startswith(message), str(err.value)


def test_two_servers_in_one_namespace_or_a_trusted_one_are_refused() -> None:
    one = "{url: 'http://127.0.0.1:1/mcp', namespace: remote}"
    with pytest.raises(ConfigError) as err:
        parse_experiment(f"{BASE}skills: {{mcp: [{one}, {one}]}}\n")
    assert str(err.value).startswith(
        "skills.mcp.1.namespace: namespace 'remote' is used by two MCP servers"
    ), str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_experiment(
            f"{BASE}skills: {{mcp: [{one}], trusted_namespaces: [built-in, remote]}}\n"
        )
    assert str(err.value).startswith(
        "skills.mcp.0.namespace: MCP skills are untrusted, but namespace 'remote' is listed "
        "in trusted_namespaces"
    ), str(err.value)


@pytest.mark.slow
def test_a_source_follows_its_server_down_back_edited_and_a_skill_removed(tmp_path: Path) -> None:
    root = served_skills(tmp_path / "served", tmp_path / "flag")
    with SkillsHttpServer(root) as server:
        source = McpSkillSource(McpServer(namespace="remote", url=server.url), tmp_path / "c")
        try:
            first, *_ = source.scan()
            server.stop()
            down, *moves = source.scan(first)
            assert moves == [[], [], []] and source.down is not None
            assert all(
                e.stale and e.skill is first.entries[n].skill for n, e in down.entries.items()
            )
            assert source.scan(down)[0] is down  # still down: nothing new to say
            server.start()
            back, *moves = source.scan(down)
            assert moves == [[], [], []] and source.down is None
            assert all(not e.stale and not e.diagnostics for e in back.entries.values())
            assert back.entries["greet"].skill is first.entries["greet"].skill
            helpers.touch(
                root / "greet" / "SKILL.md", "---\nname: greet\ndescription: Hi.\n---\nV2\n"
            )
            (root / "forecast" / "SKILL.md").unlink()
            edited, *moves = source.scan(back)
        finally:
            source.close()
    assert moves == [[], ["greet"], ["forecast"]]
    greet = edited.entries["greet"].skill
    assert greet is not None and Path(greet.path, "SKILL.md").read_text().endswith("V2\n")
    assert Path(first.entries["greet"].skill.path).is_dir()  # an older version stays laid out


@pytest.mark.slow
def test_a_file_the_server_refuses_and_a_damaged_cache_copy_break_only_their_skill(
    tmp_path: Path,
) -> None:
    root = served_skills(tmp_path / "served", tmp_path / "flag")
    cache = tmp_path / "c"
    with SkillsHttpServer(root, refuse=frozenset({"forecast/references/notes.md"})) as server:
        source = McpSkillSource(McpServer(namespace="remote", url=server.url), cache)
        try:
            scan, added, _, _ = source.scan()
            assert added == ["forecast", "greet"] and scan.entries["greet"].skill is not None
            (diag,) = scan.entries["forecast"].diagnostics
            assert scan.entries["forecast"].skill is None
            assert "file references/notes.md could not be read: " in diag.message
            # A cached file damaged on disk is dropped, and read again at the next refresh.
            md = root / "greet" / "SKILL.md"
            (cache / "objects" / sha(md)).write_bytes(b"damaged")
            (root / "greet" / "extra.md").write_text("Extra.\n")  # a version needing it
            server.provider.refuse = frozenset()
            again, _, changed, _ = source.scan(scan)
            assert changed == ["forecast"]  # readable now
            greet = again.entries["greet"]
            assert greet.stale and greet.skill is scan.entries["greet"].skill  # last good
            (diag,) = greet.diagnostics
            assert "cannot lay out its files from the cache (the cached copy of SKILL.md is " in (
                diag.message
            )
            fixed, _, changed, _ = source.scan(again)
        finally:
            source.close()
    assert changed == ["greet"]
    new = fixed.entries["greet"].skill
    assert new is not None and Path(new.path, "extra.md").read_text() == "Extra.\n"
    assert (cache / "objects" / sha(md)).read_bytes() == md.read_bytes()


def test_a_server_without_the_skills_extension_is_refused_at_start(tmp_path: Path) -> None:
    with SkillsHttpServer(tmp_path, skills=False) as server:
        spec = McpServer(namespace="plain", url=server.url, field="skills.mcp.1")
        source = McpSkillSource(spec, tmp_path / "c")
        try:
            with pytest.raises(ConfigError) as err:
                source.scan()
        finally:
            source.close()
    assert str(err.value) == (
        f"skills.mcp.1: MCP skills server 'plain' ({server.url}) cannot be used: it does not "
        "offer the skills extension (io.modelcontextprotocol/skills); start the server, or fix "
        "its url / command (or remove it from skills.mcp)"
    )


def test_the_default_cache_folder_follows_xdg_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "agentsim" / "mcp-skills"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "agentsim" / "mcp-skills"


def test_a_cache_folder_that_cannot_be_written_refuses_the_skills_and_says_so(
    tmp_path: Path,
) -> None:
    root = served_skills(tmp_path / "served", tmp_path / "flag")
    cache = tmp_path / "not-a-folder"
    cache.write_text("a file where the cache should be\n")
    with SkillsHttpServer(root) as server:
        source = McpSkillSource(McpServer(namespace="remote", url=server.url), cache)
        try:
            scan, added, _, _ = source.scan()
        finally:
            source.close()
    assert added == ["forecast", "greet"]
    for name, entry in scan.entries.items():
        (diag,) = entry.diagnostics
        assert entry.skill is None
        assert diag.message.startswith(
            f"skill {name!r} of MCP skills server 'remote' ({server.url}): cannot keep its "
            f"files in {cache} ("
        ), diag.message
        assert diag.message.endswith("; fix skills.mcp_cache")


@pytest.mark.slow
def test_mcp_skills_keep_to_the_catalog_budget_and_are_found_by_search(tmp_path: Path) -> None:
    root = tmp_path / "served"
    for i in range(12):
        helpers.write_skill(
            root, f"errand-{i:02d}", description=f"Use when running errand number {i} in town."
        )
    helpers.write_skill(root, "tide-tables", description="Use when you need the tide tables.")
    with SkillsHttpServer(root) as server:
        spec = McpServer(namespace="remote", url=server.url)
        registry = build_registry(
            SkillSources(builtin=None, mcp=(spec,), mcp_cache=str(tmp_path / "c"))
        )
    try:
        space = SkillSpace(registry, catalog_budget_tokens=120)
        runtime = AgentSkillRuntime(space, agent_id="a-1", workspace_root=tmp_path)
        catalog = runtime.catalog("the tide tables")
        assert catalog.omitted > 0 and catalog.tokens <= 120
        # Over budget, the agent's picks follow the situation, as for folder skills.
        assert "remote@tide-tables" in catalog.shown
        assert all(sid.startswith("remote@") for sid in catalog.shown)
        hits = runtime.search("tide tables", limit=3)
        assert [h["name"] for h in hits] == ["tide-tables"]
    finally:
        registry.close()


@pytest.mark.slow
def test_a_fork_sees_the_parents_mcp_skill_version_after_the_server_changed_it(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "flag"
    root = served_skills(tmp_path / "served", flag)
    md = root / "greet" / "SKILL.md"
    v1 = sha(md)
    with SkillsHttpServer(root) as server:
        exp = experiment(tmp_path, url=server.url, ticks=3, defaults="remote@greet")
        exp.write_text(
            exp.read_text().replace("flush_every: 1}", "flush_every: 1, checkpoint_every: 1}")
        )
        parent = tmp_path / "parent"
        assert main(["run", str(exp), "--out", str(parent), "--no-preflight"]) == 0
        # The server's skill changes after the run.
        helpers.touch(md, md.read_text().replace("GREET-BODY-V1", "GREET-BODY-V2"))
        child = tmp_path / "child"
        argv = ["run", "--fork", str(parent), "--at", "2", "--out", str(child), "--no-preflight"]
        assert main(argv) == 0
    prompt = open_run(child).agent("people-00000").prompt_at(2)
    text = prompt.system + prompt.user
    assert "GREET-BODY-V1" in text and "GREET-BODY-V2" not in text
    assert "[command not run: namespace 'remote' is not trusted]" in text and not flag.exists()
    rows = [json.loads(x) for x in (child / "skills" / "versions.jsonl").read_text().splitlines()]
    restored = [r for r in rows if r.get("restored_from") and r["skill_id"] == "remote@greet"]
    assert [r["files"] for r in restored] == [{"SKILL.md": v1}]
    # With the server gone, an interview still has the agent's recorded skills.
    argv = ["interview", str(parent), "--agent", "people-00000", "How was your day?", "--json"]
    assert main(argv) == 0
