"""`agentsim skills list|show --experiment FILE`: the skills an experiment's agents would see,
MCP servers' included (a real FastMCP skills server on 127.0.0.1), with each skill's origin,
trust and the groups offered it, through ``agentsim.cli.main``."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from tests.unit import helpers
from tests.unit.skills.mcp_servers import SkillsHttpServer, stdio_command

EXPERIMENT = """\
name: skills-preview
seed: 1
clock: {{start: "2026-03-02T06:00:00", tick: 1h}}
ticks: 1
agents:
  - {{group: people, count: 2, skills: {{default: [{default}]}}}}
  - {{group: staff, count: 1, skills: {{disabled: [greet]}}}}
skills: {{builtin: false, mcp_cache: cache, {skills}}}
model: {{backend: scripted}}
"""


def served(root: Path) -> Path:
    """What the server offers: ``greet`` (a body with a command line) and ``forecast`` (a
    script)."""
    helpers.write_skill(
        root, "greet", description="Greet the people you meet.", body="Hi. !`date`\n"
    )
    helpers.write_skill(
        root,
        "forecast",
        description="Check the forecast before going out.",
        front="script: scripts/forecast.py\n",
        files={"scripts/forecast.py": "def entrypoint(argv, ctx):\n    return 'sunny'\n"},
    )
    return root


def write_experiment(
    folder: Path, server: str, *, default: str = "remote@forecast", more: str = ""
) -> Path:
    """An experiment in ``folder`` with a ``custom/skills/greet`` of its own and the MCP
    server entry ``server`` (``url: ...`` or ``command: [...]``) as namespace ``remote``."""
    helpers.write_skill(folder / "custom" / "skills", "greet", description="Greet by folder.")
    path = folder / "exp.yaml"
    skills = f"mcp: [{{{server}, namespace: remote{more}}}]"
    path.write_text(EXPERIMENT.format(default=default, skills=skills))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_list_shows_the_mcp_skills_with_their_origin_trust_and_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = served(tmp_path / "served")
    with SkillsHttpServer(root) as server:
        exp = write_experiment(tmp_path, f"url: '{server.url}'")
        code, out, err = run(capsys, "skills", "list", "--experiment", str(exp))
        _, as_json, _ = run(capsys, "skills", "list", "--experiment", str(exp), "--json")
        url = server.url
    assert (code, err) == (0, "")
    folder = tmp_path / "custom" / "skills" / "greet"
    # What each group's first catalog takes (the text says what the JSON says); staff's,
    # without the greet skills its group disables, is the smaller.
    people, staff = (g["catalog_tokens"] for g in json.loads(as_json)["groups"])
    assert 0 < staff < people < 2000
    lines = out.splitlines()
    assert lines[:11] == [
        "custom@greet     Greet by folder. [disabled for group staff]",
        f"    folder {folder}; namespace not trusted: its !`cmd` lines do not run; no scripts",
        "remote@forecast  Check the forecast before going out. [default for group people]",
        f"    MCP server skills.mcp.0 ({url}); untrusted (from an MCP server): its !`cmd` lines "
        "never run; scripts not allowed (scripts: true on skills.mcp.0 allows them)",
        "remote@greet     Greet the people you meet. [shadowed by custom@greet] [disabled for "
        "group staff]",
        f"    MCP server skills.mcp.0 ({url}); untrusted (from an MCP server): its !`cmd` lines "
        "never run; no scripts",
        "",
        "3 skills: custom 1 (1 active, 0 deprecated); remote 2 (2 active, 0 deprecated); "
        "0 errors, 1 warnings",
        f"group people: 3 skills offered; its catalog lists them all in {people} of 2,000 tokens",
        f"group staff: 1 skill offered; its catalog lists them all in {staff} of 2,000 tokens",
        f"MCP server skills.mcp.0 ({url}): 2 skills as remote@..., untrusted, scripts not allowed",
    ]
    # Then the diagnostics, as a run tells them: the two skills named greet.
    (collision,) = lines[11:]
    assert "warning: name collision: remote@greet and custom@greet" in collision
    # Fetched as a run fetches them: each file kept once by its digest in the experiment's
    # cache, where its runs will find them.
    objects = {p.name for p in (tmp_path / "cache" / "objects").iterdir()}
    assert objects == {sha(p) for p in root.rglob("*") if p.is_file()}


def test_list_json_gives_origin_trust_offers_groups_and_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = served(tmp_path / "served")
    with SkillsHttpServer(root) as server:
        exp = write_experiment(tmp_path, f"url: '{server.url}'", more=", scripts: true")
        code, out, _ = run(
            capsys, "skills", "list", "--experiment", str(exp), "--json", "--namespace", "remote"
        )
        url = server.url
    assert code == 0
    data = json.loads(out)
    assert data["experiment"] == str(exp)
    skills: dict[str, Any] = {s["skill_id"]: s for s in data["skills"]}
    assert list(skills) == ["remote@forecast", "remote@greet"]
    forecast, greet = skills["remote@forecast"], skills["remote@greet"]
    assert forecast["namespace"] == "remote" and forecast["script"] == "scripts/forecast.py"
    assert forecast["origin"] == {
        "kind": "mcp",
        "server": "skills.mcp.0",
        "url": url,
        "command": None,
        "uri": "skill://forecast/SKILL.md",
    }
    # scripts: true on the server lets its scripts run, always in a process of their own.
    assert forecast["trust"] == {
        "trusted": False,
        "scripts": "allowed",
        "isolation": "process",
        "refusal": None,
    }
    assert forecast["offers"] == {
        "offered_to": ["people", "staff"],
        "disabled_for": [],
        "default_for": ["people"],
        "unavailable": None,
    }
    assert greet["trust"] == {
        "trusted": False,
        "scripts": "none",
        "isolation": None,
        "refusal": None,
    }
    assert greet["offers"]["offered_to"] == ["people"]
    assert greet["offers"]["disabled_for"] == ["staff"]
    assert data["shadowed"] == {"remote@greet": "custom@greet"}
    people, staff = data["groups"]
    assert people == {
        "group": "people",
        "offered": 3,
        "catalog_tokens": people["catalog_tokens"],
        "budget_tokens": 2000,
        "fits": True,
        "shared_head": 3,
    }
    assert staff == {
        "group": "staff",
        "offered": 1,
        "catalog_tokens": staff["catalog_tokens"],
        "budget_tokens": 2000,
        "fits": True,
        "shared_head": 1,
    }
    assert 0 < staff["catalog_tokens"] < people["catalog_tokens"] < 2000
    assert data["servers"] == [
        {
            "server": "skills.mcp.0",
            "namespace": "remote",
            "url": url,
            "command": None,
            "scripts": True,
            "skills": 2,
        }
    ]


def test_show_gives_an_mcp_skills_origin_trust_and_body(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = served(tmp_path / "served")
    with SkillsHttpServer(root) as server:
        exp = write_experiment(tmp_path, f"url: '{server.url}'")
        code, out, err = run(capsys, "skills", "show", "remote@greet", "--experiment", str(exp))
        json_code, json_out, _ = run(
            capsys, "skills", "show", "greet", "--experiment", str(exp), "--json"
        )
        unknown = run(capsys, "skills", "show", "remote@greetings", "--experiment", str(exp))
        url = server.url
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "remote@greet  (active, isolation inline)"
    assert lines[1].startswith(f"path:        {tmp_path / 'cache' / 'skills'}")
    assert lines[2:6] == [
        f"origin:      MCP server skills.mcp.0 ({url})",
        "trust:       untrusted (from an MCP server): its !`cmd` lines never run; no scripts",
        "offered to:  group people [disabled for group staff]",
        "description: Greet the people you meet.",
    ]
    assert "also named 'greet': custom@greet" in lines
    assert lines[-1] == "Hi. !`date`"  # the body as served; a run never runs its command
    assert unknown == (
        2,
        "",
        "agentsim skills: skill 'remote@greetings' is not registered (close matches: "
        f"remote@greet, remote@forecast); run `agentsim skills list --experiment {exp}` to "
        "see its skills\n",
    )
    # The bare name resolves as in a run: the folder skill wins it.
    assert json_code == 0
    data = json.loads(json_out)
    assert data["skill"]["skill_id"] == "custom@greet"
    assert data["origin"] == {
        "kind": "folder",
        "path": str(tmp_path / "custom" / "skills" / "greet"),
    }
    assert data["trust"] == {
        "trusted": False,
        "scripts": "none",
        "isolation": None,
        "refusal": None,
    }
    assert data["offers"]["offered_to"] == ["people"]
    assert data["files"] == ["SKILL.md"]


@pytest.mark.parametrize("command", ["list", "show"])
def test_a_server_that_cannot_be_reached_is_exit_2_naming_it_as_a_run_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    url = f"http://127.0.0.1:{helpers.free_port()}/mcp"
    exp = write_experiment(tmp_path, f"url: '{url}'")
    argv = [command, "remote@greet"] if command == "show" else [command]
    code, out, err = run(capsys, "skills", *argv, "--experiment", str(exp))
    assert (code, out) == (2, "")
    assert err.startswith(
        f"error: skills.mcp.0: MCP skills server 'remote' ({url}) cannot be used: "
    ), err
    assert err.endswith(
        "; start the server, or fix its url / command (or remove it from skills.mcp)\n"
    )
    assert "Traceback" not in err
    # The same message, and exit code, as the run's own start gives.
    run_code, _, run_err = run(capsys, "run", str(exp), "--out", str(tmp_path / "run"))
    assert (run_code, run_err) == (code, err)


def test_an_over_budget_catalog_hidden_and_trusted_skills_from_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skills = tmp_path / "custom" / "skills"
    for i in range(8):
        helpers.write_skill(skills, f"tool-{i}", description=f"Use for task {i}. " * 6)
    helpers.write_skill(
        skills, "social", description="Use with the feed.", front="requires: [env:social]\n"
    )
    helpers.write_skill(
        skills,
        "helper",
        description="A helper.",
        front="script: scripts/h.py\nisolation: thread\n",
        files={"scripts/h.py": "def entrypoint(argv, ctx):\n    return 'ok'\n"},
    )
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        EXPERIMENT.format(
            # A default that names no skill: the run refuses it at its start; the list goes on.
            default="helper, no-such-skill",
            skills="catalog_budget_tokens: 200, trusted_namespaces: [built-in, custom]",
        )
    )
    code, out, err = run(capsys, "skills", "list", "--experiment", str(exp))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    helper = lines.index("custom@helper  A helper. [default for group people]")
    assert lines[helper + 1] == (
        f"    folder {skills / 'helper'}; trusted: its !`cmd` lines run; scripts run under "
        "thread isolation"
    )
    assert "custom@social  Use with the feed. [not offered: needs env module social]" in lines
    assert lines[-2:] == [
        "group people: 9 skills offered, over the catalog budget of 200 tokens: 2 listed for "
        "every agent, the other 7 picked per agent or found with search_skills",
        "group staff: 9 skills offered, over the catalog budget of 200 tokens: 2 listed for "
        "every agent, the other 7 picked per agent or found with search_skills",
    ]
    _, out, _ = run(capsys, "skills", "list", "--experiment", str(exp), "--json")
    groups = json.loads(out)["groups"]
    assert [(g["offered"], g["fits"], g["shared_head"]) for g in groups] == [(9, False, 2)] * 2
    assert json.loads(out)["servers"] == []


def test_experiment_with_folder_options_or_a_missing_file_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT.format(default="", skills="catalog_budget_tokens: 2000"))
    code, out, err = run(
        capsys, "skills", "list", "--experiment", str(exp), "--builtin", str(tmp_path)
    )
    assert (code, out) == (2, "")
    assert err == (
        "agentsim skills: --experiment takes its skill folders from the experiment file; "
        "drop --builtin and --custom\n"
    )
    missing = tmp_path / "nope.yaml"
    code, out, err = run(capsys, "skills", "show", "x", "--experiment", str(missing))
    assert (code, out) == (2, "")
    assert err == (
        f"error: experiment file {missing} does not exist; check the path and the current folder\n"
    )


@pytest.mark.slow
def test_a_stdio_server_is_named_by_its_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = served(tmp_path / "served")
    command = stdio_command(root)
    exp = write_experiment(tmp_path, f"command: {json.dumps(command)}, timeout: 60")
    code, out, err = run(capsys, "skills", "list", "--experiment", str(exp), "--json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    greet = next(s for s in data["skills"] if s["skill_id"] == "remote@greet")
    assert greet["origin"]["command"] == command and greet["origin"]["url"] is None
    assert data["servers"][0]["command"] == command
    code, out, _ = run(capsys, "skills", "list", "--experiment", str(exp))
    assert code == 0
    assert (
        f"MCP server skills.mcp.0 ({shlex.join(command)}): 2 skills as remote@..., untrusted, "
        "scripts not allowed"
    ) in out.splitlines()


def test_a_servers_control_characters_never_reach_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An MCP server is untrusted: a description (YAML's "\e" escapes) or a body with
    # terminal escapes (a title change, a cleared screen, a hidden line) is printed with
    # them made visible, never as codes the terminal would act on.
    root = tmp_path / "served"
    helpers.write_skill(
        root,
        "greet",
        description='"Greet.\\e]0;owned\\a\\e[2J\\rFake line\\x9b31m"',
        body="Hi.\x1b[8m hidden\x1b[0m\ttab\x07\n",
    )
    with SkillsHttpServer(root) as server:
        exp = write_experiment(tmp_path, f"url: '{server.url}'", default="remote@greet")
        listed = run(capsys, "skills", "list", "--experiment", str(exp))
        shown = run(capsys, "skills", "show", "remote@greet", "--experiment", str(exp))
        as_json = run(capsys, "skills", "show", "remote@greet", "--experiment", str(exp), "--json")
    for code, out, err in (listed, shown):
        assert code == 0, err
        bad = [c for c in out if c not in "\n\t" and (ord(c) < 32 or 127 <= ord(c) < 160)]
        assert bad == [], out
    assert "Greet.\\x1b]0;owned\\x07\\x1b[2J\\x0dFake line\\x9b31m" in shown[1]
    assert "Hi.\\x1b[8m hidden\\x1b[0m\ttab\\x07" in shown[1]
    # JSON escapes them already, and keeps the text as served.
    data = json.loads(as_json[1])
    assert data["skill"]["description"] == "Greet.\x1b]0;owned\x07\x1b[2J\rFake line\x9b31m"


def test_an_unknown_ids_hint_quotes_the_experiment_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The hint is a command to paste: a path with a space is quoted, or it would be two
    # arguments.
    folder = tmp_path / "my study"
    folder.mkdir()
    helpers.write_skill(folder / "custom" / "skills", "greet", description="Greet by folder.")
    exp = folder / "exp.yaml"
    exp.write_text(EXPERIMENT.format(default="greet", skills="mcp: []"))
    code, out, err = run(capsys, "skills", "show", "nope", "--experiment", str(exp))
    assert (code, out) == (2, "")
    assert f"run `agentsim skills list --experiment {shlex.quote(str(exp))}` to see" in err
    assert "'" in shlex.quote(str(exp))
