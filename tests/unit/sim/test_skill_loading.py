"""Loud skill loading in a run (issue 21, item 5): refused, shadowed and broken skills are
told on stderr, in ``run_start`` / ``skill_broken`` events and by ``agentsim inspect``; the
experiment's ``custom/skills`` is searched by default; a missing ``skills.paths`` entry and
a broken default skill stop the run at load with the file, line and problem."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.inspect import open_run
from agentsim.run.engine import Engine, Progress
from tests.unit import helpers

EXPERIMENT = """\
name: loading
seed: 1
clock: {{start: "2026-03-02T06:00:00", tick: 1h}}
ticks: {ticks}
agents:
  - group: people
    count: 2
    profile: {{template: generic}}
    skills: {{default: [{defaults}]}}
skills: {{{skills}}}
model: {{backend: scripted}}
output: {{formats: [jsonl], flush_every: 1}}
"""


def experiment(
    folder: Path, *, ticks: int = 1, defaults: str = "", skills: str = "builtin: false"
) -> Path:
    path = folder / "exp.yaml"
    path.write_text(EXPERIMENT.format(ticks=ticks, defaults=defaults, skills=skills))
    return path


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]


def test_custom_skills_beside_the_experiment_are_searched_refused_and_shadowed_are_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    custom = tmp_path / "custom" / "skills"
    helpers.write_skill(custom, "my-notes", body="My own notes.\n")
    helpers.write_skill(custom, "daily-guidance", body="Not the built-in one.\n")
    helpers.write_skill(custom, "claude-api", description="x" * 1068)
    exp = experiment(tmp_path, defaults="my-notes", skills="builtin: true")
    run_dir = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(run_dir), "--no-preflight"]) == 0
    err = capsys.readouterr().err
    md = custom / "claude-api" / "SKILL.md"
    assert (
        f"warning: skill custom@claude-api refused: {md}:3: error: description is 1068 "
        "characters long, over the limit of 1024\n"
    ) in err
    assert (
        "warning: skill name collision: custom@daily-guidance wins the name 'daily-guidance' "
        "over built-in@daily-guidance (call that one by its id)\n"
    ) in err
    (start,) = [e for e in read_events(run_dir) if e["type"] == "run_start"]
    assert start["skills_refused"] == {
        "custom@claude-api": f"{md}:3: error: description is 1068 characters long, over the "
        "limit of 1024"
    }
    assert start["skills_shadowed"] == {"built-in@daily-guidance": "custom@daily-guidance"}
    activated = {e["skill"] for e in read_events(run_dir) if e["type"] == "skill_activated"}
    assert activated == {"custom@my-notes"}  # found without listing custom/skills anywhere
    assert main(["inspect", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"  refused      custom@claude-api: {md}:3: error: description is 1068" in out
    assert "  collision    custom@daily-guidance wins the name over built-in@daily-guidance\n" in (
        out
    )
    assert main(["inspect", str(run_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["skills_refused"]) == ["custom@claude-api"]
    assert data["skills_shadowed"] == {"built-in@daily-guidance": "custom@daily-guidance"}


def test_a_skills_path_that_does_not_exist_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mine").mkdir()
    exp = experiment(tmp_path, skills="paths: [mine, nope], builtin: false")
    run_dir = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(run_dir), "--no-preflight"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: skills.paths.1: skills folder 'nope' does not exist (looked for "
        f"{tmp_path / 'nope'}); create it, fix the path, or remove the entry\n"
    )
    (tmp_path / "afile").write_text("x")
    exp = experiment(tmp_path, skills="paths: [afile], builtin: false")
    assert main(["run", str(exp), "--out", str(run_dir), "--no-preflight"]) == 2
    assert "skills.paths.0: skills folder 'afile' is not a folder" in capsys.readouterr().err
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("default", "front", "message"),
    [
        pytest.param(
            "alpha",
            "timeout: [1\n",
            r":4: error: invalid YAML in the frontmatter",
            id="yaml",
        ),
        pytest.param(
            "custom@alpha",
            "timeout: -1\n",
            r":4: error: timeout must be a positive number of seconds, got -1",
            id="by-id",
        ),
    ],
)
def test_a_broken_default_skill_is_reported_as_broken_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], default: str, front: str, message: str
) -> None:
    skills = tmp_path / "skills"
    helpers.write_skill(skills, "alpha", front=front)
    exp = experiment(tmp_path, defaults=default, skills=f'paths: ["{skills}"], builtin: false')
    assert main(["run", str(exp), "--out", str(tmp_path / "run"), "--no-preflight"]) == 2
    err = capsys.readouterr().err
    md = skills / "alpha" / "SKILL.md"
    assert err.startswith(
        f"error: agents.0.skills.default: default skill {default!r} is broken: {md}"
    ), err
    assert re.search(message, err), err
    assert err.endswith(f"; fix its SKILL.md (agentsim skills validate {md})\n")
    assert "not registered" not in err


def test_a_skill_broken_mid_run_keeps_its_last_good_version_until_fixed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skills = tmp_path / "skills"
    helpers.write_skill(skills, "alpha", body="Alpha body.\n")
    md = skills / "alpha" / "SKILL.md"
    good = md.read_text()
    exp = experiment(
        tmp_path, ticks=3, defaults="alpha", skills=f'paths: ["{skills}"], builtin: false'
    )
    config = parse_experiment(exp.read_text(), base_dir=tmp_path)
    seen: list[Progress] = []

    def between_ticks(p: Progress) -> None:
        seen.append(p)
        if p.tick == 1:  # a typo saved into the active skill
            helpers.touch(md, good.replace("description: ", "description: Use: "))
        elif p.tick == 2:  # the fix
            helpers.touch(md, good.replace("Alpha body.", "Alpha body, fixed."))

    told: list[str] = []
    run_dir = tmp_path / "run"
    engine = Engine(config, run_dir=run_dir, progress=between_ticks, notice=told.append)
    summary = asyncio.run(engine.run())
    events = read_events(run_dir)
    (broken,) = [e for e in events if e["type"] == "skill_broken"]
    assert (broken["tick"], broken["skill"], broken["file"]) == (1, "custom@alpha", str(md))
    assert broken["line"] == 3
    assert broken["message"].startswith(
        "invalid YAML in the frontmatter (mapping values are not allowed in this context)"
    )
    assert told == [
        f"skill custom@alpha is broken: {md}:3: error: {broken['message']}; its last good "
        "version stays active"
    ]
    assert [e for e in events if e["type"] == "skill_deactivated"] == []
    reloads = [(e["tick"], e["changed"]) for e in events if e["type"] == "skills_reloaded"]
    assert reloads == [(2, ["custom@alpha"])]  # the broken edit reloaded nothing
    # Counted as a problem: the run's errors, the progress line's counter, inspect's counts.
    assert summary.metrics["problems"]["skill_broken"] == 1 and summary.metrics["errors"] == 1
    assert [p.skills_broken for p in seen] == [0, 1, 1]
    run = open_run(run_dir)
    for agent_dir in sorted((run_dir / "agents").iterdir()):
        agent = run.agent(agent_dir.name)
        systems = helpers.step_prompts(agent)
        assert "Alpha body." in systems[1]  # the last good version, still active
        assert "Alpha body, fixed." in systems[2]
    assert main(["inspect", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "skill_broken 1" in out
    assert (
        f"  broken       custom@alpha at tick 1: {md}:3: {broken['message']} (its last good "
        "version stayed active)\n"
    ) in out


def test_a_default_skill_removed_mid_run_is_a_default_again_when_it_is_back(
    tmp_path: Path,
) -> None:
    skills = tmp_path / "skills"
    helpers.write_skill(skills, "alpha", body="Alpha body.\n")
    helpers.write_skill(skills, "beta", body="Beta body.\n")
    exp = experiment(
        tmp_path, ticks=3, defaults="alpha, beta", skills=f'paths: ["{skills}"], builtin: false'
    )
    config = parse_experiment(exp.read_text(), base_dir=tmp_path)
    saved = tmp_path / "saved-alpha"

    def between_ticks(p: Progress) -> None:
        if p.tick == 1:  # the folder goes away (moved out while being rewritten)
            (skills / "alpha").rename(saved)
        elif p.tick == 2:  # and comes back
            saved.rename(skills / "alpha")

    run_dir = tmp_path / "run"
    summary = asyncio.run(Engine(config, run_dir=run_dir, progress=between_ticks).run())
    assert summary.status == "completed" and summary.metrics["errors"] == 0
    moves = [
        (e["tick"], e["type"], e["agent_id"], e["skill"], e.get("default"))
        for e in read_events(run_dir)
        if e["type"] in ("skill_activated", "skill_deactivated") and e["tick"] > 0
    ]
    agents = ["people-00000", "people-00001"]
    assert moves == [
        *[(1, "skill_deactivated", a, "custom@alpha", None) for a in agents],
        *[(2, "skill_activated", a, "custom@alpha", True) for a in agents],
    ]
    run = open_run(run_dir)
    agent = run.agent(agents[0])
    systems = helpers.step_prompts(agent)
    assert "Alpha body." not in systems[1] and "Alpha body." in systems[2]


BREAKS_ITSELF = """from pathlib import Path


def entrypoint(argv, ctx):
    if ctx.tick == 1:  # a typo saved into its own SKILL.md, mid-run
        md = Path(ctx.skill_dir, "SKILL.md")
        md.write_text(md.read_text().replace("description: ", "description: Use: "))
    return "hook ran"
"""


def test_agentsim_run_tells_a_mid_run_break_on_stderr_the_progress_line_and_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skills = tmp_path / "skills"
    helpers.write_skill(
        skills,
        "alpha",
        front="hooks:\n  pre_step: scripts/hook.py\n",
        files={"scripts/hook.py": BREAKS_ITSELF},
    )
    exp = experiment(
        tmp_path, ticks=3, defaults="alpha", skills=f'paths: ["{skills}"], builtin: false'
    )
    run_dir = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(run_dir), "--no-preflight"]) == 0
    captured = capsys.readouterr()
    md = skills / "alpha" / "SKILL.md"
    assert (
        f"warning: skill custom@alpha is broken: {md}:3: error: invalid YAML in the frontmatter"
    ) in captured.err
    assert "its last good version stays active\n" in captured.err
    last = [line for line in captured.err.splitlines() if "tick 3/3" in line][-1]
    assert "errors 1  skills broken by edits 1" in last
    assert "  problems: skill_broken 1\n" in captured.out
    hooks = [e for e in read_events(run_dir) if e["type"] == "hook_failed"]
    assert hooks == []  # the last good version's hook went on running
