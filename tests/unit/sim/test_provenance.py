"""Skill provenance (issue 34): every skill a run loads is recorded in ``RUN/skills`` by
the SHA-256 of each file, hot reloads add versions with their tick, forks restore the
parent's versions, and ``agentsim skills diff`` compares two runs."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.inspect import open_run
from agentsim.run.engine import Engine, Progress
from agentsim.skills.provenance import read_provenance, version_of
from agentsim.skills.scan import builtin_skills_dir
from tests.unit import helpers

HOOK = 'def entrypoint(argv, ctx):\n    return "{text}"\n'

_YAML = """
name: prov
seed: 3
clock: {{start: "2026-03-02T06:00:00", tick: 1h}}
workflow:
  - run: {{ticks: {ticks}}}
agents:
  - group: people
    count: {count}
    profile: {{template: generic}}
    skills: {{default: [{default}]}}
skills: {{paths: ["{skills}"], builtin: {builtin}}}
model: {{backend: scripted}}
environment: {env}
output: {{formats: [jsonl], flush_every: 1, checkpoint_every: 1}}
"""


def _motto(root: Path, version: str, *, reference: str = "Walk more.\n") -> None:
    """A skill whose body, hook script output and reference name its version."""
    helpers.write_skill(
        root,
        "motto",
        description="Use for the town motto.",
        front="hooks:\n  pre_step: scripts/hook.py\n",
        body=f"MOTTO BODY {version}.\n",
        files={
            "scripts/hook.py": HOOK.replace("{text}", f"MOTTO HOOK {version}"),
            "references/motto.md": reference,
        },
    )


def _config(tmp_path: Path, skills: Path, **kw: Any) -> Any:
    fields = {"ticks": 2, "count": 3, "default": "motto", "builtin": "false", "env": "[]", **kw}
    return parse_experiment(_YAML.format(skills=skills, **fields), base_dir=tmp_path)


def _rows(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "skills" / "versions.jsonl").read_text().splitlines()]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _folder_shas(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): _sha(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _objects(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (run / "skills" / "objects").iterdir()}


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_shipped_skills_are_recorded_by_their_files_digests_and_stored_once(
    tmp_path: Path,
) -> None:
    # The shipped skills (AgentSociety2's format, unchanged), 5 agents sharing them.
    skills = tmp_path / "none"
    skills.mkdir()
    config = _config(
        tmp_path, skills, count=5, default="daily-guidance", builtin="true", env="[{module: city}]"
    )
    run = tmp_path / "run"
    summary = asyncio.run(Engine(config, run_dir=run).run())
    assert summary.status == "completed"
    builtin = builtin_skills_dir()
    assert builtin is not None
    rows = _rows(run)
    shipped = sorted(p.name for p in builtin.iterdir() if (p / "SKILL.md").is_file())
    ids = [r["skill_id"] for r in rows]
    assert ids[: len(shipped)] == [f"built-in@{n}" for n in shipped]
    assert {i.partition("@")[0] for i in ids[len(shipped) :]} == {"env:city"}
    expected: dict[str, bytes] = {}
    for row in rows:
        folder = Path(row["source"])
        if row["skill_id"].startswith("built-in@"):
            assert folder == builtin / row["skill_id"].partition("@")[2]
        assert row["files"] == _folder_shas(folder)  # hashlib of every file, caches left out
        assert row["tick"] == 0 and row["agent_id"] is None
        assert row["version"] == version_of(row["files"])
        for rel, digest in row["files"].items():
            expected[digest] = (folder / rel).read_bytes()
    # One object per distinct file, whatever the number of agents, holding the file's bytes.
    assert _objects(run) == expected
    prov = read_provenance(run)
    assert sorted(prov.at(1)) == [r["skill_id"] for r in rows]


def test_a_hot_reload_records_the_new_digests_with_its_tick(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    _motto(skills, "V1")
    helpers.write_skill(skills, "extra", body="Extra body.\n")
    config = _config(tmp_path, skills, ticks=4)
    folder = skills / "motto"

    def between_ticks(p: Progress) -> None:
        if p.tick == 1:  # before tick 1: the body and the script change
            _motto(skills, "V2")
        elif p.tick == 2:  # before tick 2: only a reference, which the registry never stats
            (folder / "references" / "motto.md").write_text("Cycle too.\n")
        elif p.tick == 3:  # before tick 3: a skill goes away
            shutil.rmtree(skills / "extra")

    run = tmp_path / "run"
    asyncio.run(Engine(config, run_dir=run, progress=between_ticks).run())
    motto = [r for r in _rows(run) if r["skill_id"] == "custom@motto"]
    assert [r["tick"] for r in motto] == [0, 1, 2]
    assert motto[-1]["files"] == _folder_shas(folder)
    changed = {k for k in motto[1]["files"] if motto[1]["files"][k] != motto[0]["files"][k]}
    assert changed == {"SKILL.md", "scripts/hook.py"}
    assert motto[2]["files"]["references/motto.md"] == _sha(folder / "references" / "motto.md")
    extra = [(r["tick"], r.get("removed", False)) for r in _rows(run) if "extra" in r["skill_id"]]
    assert extra == [(0, False), (3, True)]
    prov = read_provenance(run)
    assert "custom@extra" in prov.at(2) and "custom@extra" not in prov.at(3)
    assert prov.at(0)["custom@motto"].version == version_of(motto[0]["files"])
    # Each version's files are kept, once: 3 + 2 + 1 of motto's, 1 of extra's.
    assert len(_objects(run)) == 7
    # The agents saw V2 from tick 1: inspect names the version each step used.
    agent = open_run(run).agent("people-00000")
    assert agent.skills_at(0) == agent.skills_at(3) == ("custom@motto",)
    prompts = helpers.step_prompts(agent)
    assert "MOTTO BODY V1." in prompts[0] and "MOTTO BODY V2." in prompts[1]


@pytest.mark.slow
def test_a_fork_sees_the_parents_version_after_the_source_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skills = tmp_path / "skills"
    _motto(skills, "V1")
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        _YAML.format(skills=skills, ticks=3, count=2, default="motto", builtin="false", env="[]")
    )
    parent = tmp_path / "parent"
    assert main(["run", str(exp), "--out", str(parent)]) == 0
    # The source folder changes after the run: body, script and reference.
    _motto(skills, "V2", reference="Drive less.\n")
    child = tmp_path / "child"
    code, out, err = _cli(capsys, "run", "--fork", str(parent), "--at", "2", "--out", str(child))
    assert code == 0, err
    agent = open_run(child).agent("people-00000")
    prompt = agent.prompt_at(2)
    text = prompt.system + prompt.user
    assert "MOTTO BODY V1." in text and "MOTTO HOOK V1" in text
    assert "V2" not in text
    # The fork's rows: the parent's before the fork, then what it restored, at tick 2.
    rows = _rows(child)
    restored = [r for r in rows if r.get("restored_from")]
    assert [(r["skill_id"], r["tick"]) for r in restored] == [("custom@motto", 2)]
    assert restored[0]["restored_from"] == {"run": str(parent.resolve()), "tick": 2}
    assert restored[0]["files"] == _rows(parent)[0]["files"]
    assert restored[0]["source"] == str(skills / "motto")  # where it came from
    (copy,) = (child / "skills" / "restored").glob("*/motto")  # what the fork read
    assert (copy / "references" / "motto.md").read_text() == "Walk more.\n"
    assert _folder_shas(copy) == _rows(parent)[0]["files"]
    # A fork of the fork still restores V1 (its rows name the folders the skill came from).
    grandchild = tmp_path / "grandchild"
    assert main(["run", "--fork", str(child), "--at", "2", "--out", str(grandchild)]) == 0
    capsys.readouterr()
    prompt = open_run(grandchild).agent("people-00000").prompt_at(2)
    assert "MOTTO BODY V1." in prompt.user and "V2" not in prompt.system + prompt.user
    assert read_provenance(grandchild).at(2)["custom@motto"].version == restored[0]["version"]
    # inspect names the version of each active skill at that tick.
    code, out, _ = _cli(capsys, "inspect", str(child), "--agent", "people-00000", "--tick", "2")
    version = restored[0]["version"]
    assert code == 0
    assert (
        f"=== active skills (tick 2) ===\ncustom@motto  version {version}  {skills}/motto\n" in out
    )
    data = json.loads(_cli(capsys, "inspect", str(child), "--agent", "people-00000",
                           "--tick", "2", "--json")[1])  # fmt: skip
    assert [(v["skill_id"], v["version"]) for v in data["skill_versions"]] == [
        ("custom@motto", version)
    ]
    # Same skills as the parent; a new run from the changed source differs.
    assert _cli(capsys, "skills", "diff", str(parent), str(child))[0] == 0
    fresh = tmp_path / "fresh"
    assert main(["run", str(exp), "--out", str(fresh)]) == 0
    capsys.readouterr()
    code, out, _ = _cli(capsys, "skills", "diff", str(parent), str(fresh), "--text")
    old, new = _rows(parent)[0]["files"], _rows(fresh)[0]["files"]
    assert code == 1
    assert out.splitlines()[1:] == [
        f"  changed  custom@motto  {version_of(old)} -> {version_of(new)}",
        f"      changed  SKILL.md  {old['SKILL.md'][:12]} -> {new['SKILL.md'][:12]}",
        f"      changed  references/motto.md  {old['references/motto.md'][:12]} -> "
        f"{new['references/motto.md'][:12]}",
        f"      changed  scripts/hook.py  {old['scripts/hook.py'][:12]} -> "
        f"{new['scripts/hook.py'][:12]}",
        "      --- parent: custom@motto SKILL.md",
        "      +++ fresh: custom@motto SKILL.md",
        "      @@ -4,4 +4,4 @@",
        "       hooks:",
        "         pre_step: scripts/hook.py",
        "       ---",
        "      -MOTTO BODY V1.",
        "      +MOTTO BODY V2.",
        "1 skill(s) differ",
    ]


def test_identical_skills_of_agents_own_folders_are_stored_once(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    _motto(skills, "V1")
    config = _config(tmp_path, skills, ticks=3, count=4)
    run = tmp_path / "run"
    mine = {"scripts/note.py": HOOK.replace("{text}", "mine"), "notes.txt": "Same notes.\n"}

    def between_ticks(p: Progress) -> None:
        if p.tick == 1:  # each agent writes the same skill into its own folder
            for i in range(4):
                own = run / "agents" / f"people-{i:05d}" / "custom" / "skills"
                helpers.write_skill(own, "mine", body="My own way.\n", files=mine)
        elif p.tick == 2:  # one agent edits its copy
            own = run / "agents" / "people-00003" / "custom" / "skills" / "mine"
            (own / "notes.txt").write_text("Other notes.\n")

    asyncio.run(Engine(config, run_dir=run, progress=between_ticks).run())
    rows = [r for r in _rows(run) if r["agent_id"] is not None]
    assert [(r["agent_id"], r["skill_id"], r["tick"]) for r in rows] == [
        *((f"people-{i:05d}", "agent@mine", 1) for i in range(4)),
        ("people-00003", "agent@mine", 2),
    ]
    assert len({json.dumps(r["files"], sort_keys=True) for r in rows[:4]}) == 1
    own = run / "agents" / "people-00003" / "custom" / "skills" / "mine"
    assert rows[-1]["files"] == _folder_shas(own)
    # motto's 3 files, the agents' skill's 3 files once, and the one edited file.
    assert len(_objects(run)) == 3 + 3 + 1
    prov = read_provenance(run)
    assert prov.at(1, agent_id="people-00000")["agent@mine"].version == version_of(rows[0]["files"])
    assert "agent@mine" not in prov.at(1)  # an agent's own skill is its alone
    assert prov.agents() == [f"people-{i:05d}" for i in range(4)]
    # The agents' folders change after the run; a fork at tick 2 restores them as they were.
    for i in range(4):
        mine_dir = run / "agents" / f"people-{i:05d}" / "custom" / "skills" / "mine"
        (mine_dir / "notes.txt").write_text("Changed later.\n")
    child = tmp_path / "child"
    assert main(["run", "--fork", str(run), "--at", "2", "--out", str(child)]) == 0
    notes = [
        (child / "agents" / f"people-{i:05d}" / "custom/skills/mine/notes.txt").read_text()
        for i in range(4)
    ]
    assert notes == ["Same notes.\n"] * 3 + ["Other notes.\n"]
    own_rows = [r for r in _rows(child) if r["agent_id"] is not None and r["tick"] >= 2]
    assert [(r["agent_id"], r["restored_from"]["tick"]) for r in own_rows] == [
        (f"people-{i:05d}", 2) for i in range(4)
    ]  # restored, and nothing more recorded: the fork's agents have exactly those
    fork_prov = read_provenance(child)
    assert fork_prov.at(2, agent_id="people-00003")["agent@mine"].version == rows[-1]["version"]
    assert fork_prov.at(2, agent_id="people-00000")["agent@mine"].version == rows[0]["version"]
    # A parent whose objects are incomplete cannot be forked: nothing is written.
    (run / "skills" / "objects" / rows[-1]["files"]["notes.txt"]).unlink()
    code = main(["run", "--fork", str(run), "--at", "2", "--out", str(tmp_path / "x")])
    assert code == 2 and not (tmp_path / "x").exists()


def test_skills_diff_exit_codes_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skills = tmp_path / "skills"
    _motto(skills, "V1")
    config = _config(tmp_path, skills, ticks=1, count=1)
    a, b = tmp_path / "a", tmp_path / "b"
    asyncio.run(Engine(config, run_dir=a).run())
    helpers.write_skill(skills, "extra", body="Extra.\n")
    asyncio.run(Engine(config, run_dir=b).run())
    code, out, _ = _cli(capsys, "skills", "diff", str(a), str(a))
    assert (code, out) == (0, "same skills at the end of each run: 1 skill version(s) with "
                              "identical files\n")  # fmt: skip
    extra = _rows(b)[0]
    code, out, _ = _cli(capsys, "skills", "diff", str(a), str(b))
    assert code == 1
    assert out == (
        f"skills that differ at the end of each run ({a} -> {b}):\n"
        f"  added    custom@extra  - -> {extra['version']}\n"
        f"      added    SKILL.md  - -> {extra['files']['SKILL.md'][:12]}\n"
        "1 skill(s) differ\n"
    )
    code, out, _ = _cli(capsys, "skills", "diff", str(b), str(a), "--json", "--tick", "0", "--text")
    data = json.loads(out)
    assert data["skills"][0].pop("skill_md_diff").splitlines()[:3] == [
        "--- b: custom@extra SKILL.md",
        "+++ a: custom@extra SKILL.md",
        "@@ -1,5 +0,0 @@",
    ]
    assert code == 1 and data["same"] is False and data["tick"] == 0
    assert data["skills"] == [
        {
            "skill_id": "custom@extra",
            "agent_id": None,
            "change": "removed",
            "version_a": extra["version"],
            "version_b": None,
            "files": [
                {
                    "change": "removed",
                    "path": "SKILL.md",
                    "sha256_a": extra["files"]["SKILL.md"],
                    "sha256_b": None,
                }
            ],
        }
    ]
    # Errors: a folder that is missing, one that is not a run, a run from an older agentsim.
    code, _, err = _cli(capsys, "skills", "diff", str(a), str(tmp_path / "gone"))
    assert code == 2
    assert err == (
        f"agentsim skills diff: {tmp_path / 'gone'} does not exist; give a run folder "
        "(e.g. workspace/<name>-<timestamp>)\n"
    )
    code, _, err = _cli(capsys, "skills", "diff", str(skills), str(a))
    assert code == 2 and "is not a run folder (no manifest.json)" in err
    versions = b / "skills" / "versions.jsonl"
    good = versions.read_text()
    versions.write_text(good + '{"skill_id": "custom@x", "tick": 1, "fi')  # torn by a crash
    assert _cli(capsys, "skills", "diff", str(b), str(b))[0] == 0
    versions.write_text("{}\n" + good)
    code, _, err = _cli(capsys, "skills", "diff", str(a), str(b))
    assert code == 2
    assert err == (
        f"agentsim skills diff: {versions}:1: not a skill version row (KeyError: "
        "'skill_id'); the file was edited or damaged\n"
    )
    shutil.rmtree(b / "skills")
    code, _, err = _cli(capsys, "skills", "diff", str(a), str(b))
    assert code == 2
    assert err == (
        f"agentsim skills diff: run {b} has no skill provenance (skills/versions.jsonl is "
        "missing): it was made by an agentsim that did not record skill versions; run the "
        "experiment again to record them\n"
    )


def test_a_run_from_before_provenance_is_said_so_by_inspect_and_forks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skills = tmp_path / "skills"
    _motto(skills, "V1")
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        _YAML.format(skills=skills, ticks=2, count=1, default="motto", builtin="false", env="[]")
    )
    old = tmp_path / "old"
    assert main(["run", str(exp), "--out", str(old)]) == 0
    shutil.rmtree(old / "skills")  # as an older agentsim left it
    capsys.readouterr()
    code, out, _ = _cli(capsys, "inspect", str(old), "--agent", "people-00000", "--tick", "1")
    assert code == 0
    assert out.endswith(
        "=== active skills (tick 1) ===\ncustom@motto  version (not recorded)  \n"
        f"(run {old} has no skill provenance (skills/versions.jsonl is missing): it was made "
        "by an agentsim that did not record skill versions; run the experiment again to "
        "record them)\n"
    )
    _motto(skills, "V2")
    child = tmp_path / "child"
    code, _, err = _cli(capsys, "run", "--fork", str(old), "--at", "1", "--out", str(child))
    assert code == 0
    assert (
        f"run {old} recorded no skill versions (an older agentsim): the fork uses the skill "
        "folders as they are now"
    ) in err
    prompt = open_run(child).agent("people-00000").prompt_at(1)
    assert "MOTTO BODY V2." in prompt.user
    assert [r["tick"] for r in _rows(child)] == [1]


def test_a_resume_records_again_the_versions_of_the_ticks_it_runs_again(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    _motto(skills, "V1")
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        _YAML.format(skills=skills, ticks=4, count=1, default="motto", builtin="false", env="[]")
    )

    class Crash(Exception):
        pass

    def progress(p: Progress) -> None:
        if p.tick == 2:  # tick 2 runs with V2
            _motto(skills, "V2")
        elif p.tick == 3:
            raise Crash("the machine went away")

    run = tmp_path / "run"
    config = parse_experiment(exp.read_text(), base_dir=tmp_path)
    with pytest.raises(Crash):
        asyncio.run(Engine(config, run_dir=run, progress=progress).run())
    v1 = _rows(run)[0]["version"]
    assert [r["tick"] for r in _rows(run)] == [0, 2]
    _motto(skills, "V1")  # the edit undone before the resume
    cut = max(int(p.name.split("-")[1]) for p in (run / "checkpoints").iterdir())
    assert main(["run", "--resume", str(run)]) == 0
    prov = read_provenance(run)
    assert [r.tick for r in prov.rows] == ([0] if cut == 2 else [0, 2, cut])
    assert prov.at(1)["custom@motto"].version == v1
    assert prov.at(3)["custom@motto"].version == v1
    assert "MOTTO BODY V1." in open_run(run).agent("people-00000").prompt_at(3).user


def test_a_skill_folders_digests_cover_what_agents_can_read(tmp_path: Path) -> None:
    from agentsim.errors import SkillFileError
    from agentsim.skills.registry import SkillRegistry

    root = tmp_path / "skills"
    folder = helpers.write_skill(
        root, "tidy", files={"scripts/tidy.py": "X = 1\n", "references/a.md": "A\n"}
    )
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "tidy.cpython-313.pyc").write_bytes(b"\0cache")
    (folder / ".hidden").write_text("not read\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("outside\n")
    (folder / "leak.txt").symlink_to(outside)  # leaves the folder: never read
    (folder / "dangling.txt").symlink_to(tmp_path / "nothing")
    (folder / "inner.md").symlink_to(folder / "references" / "a.md")  # stays inside
    registry = SkillRegistry()
    registry.scan_custom(root)
    desc = registry.get("custom@tidy")
    digests = desc.file_digests()
    assert sorted(digests) == ["SKILL.md", "inner.md", "references/a.md", "scripts/tidy.py"]
    for rel, digest in digests.items():
        assert digest == _sha(folder / rel)
        assert hashlib.sha256(desc.file_bytes(rel)).hexdigest() == digest
    with pytest.raises(SkillFileError, match="refused: not a file of the skill folder"):
        desc.file_bytes("../secret.txt")


def test_hot_reload_in_a_fork_watches_the_restored_copy_not_the_source(tmp_path: Path) -> None:
    from agentsim.run.engine import ENGINE_STATE
    from agentsim.run.fork import fork_config, open_fork

    skills = tmp_path / "skills"
    _motto(skills, "V1")
    config = _config(tmp_path, skills, ticks=4, count=1)
    parent = tmp_path / "parent"
    asyncio.run(Engine(config, run_dir=parent).run())
    point = open_fork(parent, 1, engine_keys=ENGINE_STATE)
    child = tmp_path / "child"

    def between_ticks(p: Progress) -> None:
        if p.tick == 2:  # the source changes: the fork does not see it
            _motto(skills, "V2")
        elif p.tick == 3:  # its own copy changes: the fork reloads it
            (copy,) = (child / "skills" / "restored").glob("*/motto")
            text = (copy / "SKILL.md").read_text().replace("BODY V1", "BODY V3")
            (copy / "SKILL.md").write_text(text)

    fork = Engine(fork_config(point), run_dir=child, fork=point, progress=between_ticks)
    assert asyncio.run(fork.run()).status == "completed"
    prompts = helpers.step_prompts(open_run(child).agent("people-00000"))
    assert ["MOTTO BODY V1." in prompts[t] for t in (1, 2, 3)] == [True, True, False]
    assert "MOTTO BODY V3." in prompts[3] and "V2" not in "".join(prompts.values())
    rows = [r for r in _rows(child) if r["skill_id"] == "custom@motto"]
    assert [(r["tick"], "restored_from" in r) for r in rows] == [(0, False), (1, True), (3, False)]
    assert rows[-1]["source"] == str(skills / "motto")  # the folder it stands for


def test_the_fixture_skills_digests_are_their_files(tmp_path: Path) -> None:
    from agentsim.skills.registry import SkillRegistry

    fixtures = Path(__file__).parents[2] / "fixtures" / "skills" / "builtin"
    registry = SkillRegistry()
    registry.scan_builtin(fixtures)
    found = {d.skill_id: d.file_digests() for d in registry.list_all()}
    assert sorted(found) == ["built-in@daily-guidance", "built-in@weather-report"]
    for sid, digests in found.items():
        assert digests == _folder_shas(fixtures / sid.partition("@")[2])


def test_an_interview_gives_the_agent_its_recorded_skill_versions(tmp_path: Path) -> None:
    from agentsim.inspect.interview import interview
    from agentsim.testing import FunctionModel

    skills = tmp_path / "skills"
    _motto(skills, "V1")
    run = tmp_path / "run"
    asyncio.run(Engine(_config(tmp_path, skills, count=1), run_dir=run).run())
    _motto(skills, "V2")  # the folder changed after the run
    model = FunctionModel(lambda request: "A calm day.")
    res = asyncio.run(interview(run, "people-00000", "How was your day?", model=model))
    assert res.answer == "A calm day."
    text = "".join(str(m["content"]) for m in model.requests[0].messages)
    assert "MOTTO BODY V1." in text and "V2" not in text


def test_a_crafted_versions_file_cannot_reach_outside_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run folder may come from someone else: its rows name files a fork writes and objects
    # a diff reads, so a path that leaves its folder, a digest that is a path or an agent id
    # that is not a plain name is refused, and nothing is written outside.
    skills = tmp_path / "skills"
    _motto(skills, "V1")
    config = _config(tmp_path, skills, ticks=1, count=1)
    run = tmp_path / "run"
    asyncio.run(Engine(config, run_dir=run).run())
    versions = run / "skills" / "versions.jsonl"
    good = versions.read_text()
    row = json.loads(good.splitlines()[0])
    digest = next(iter(row["files"].values()))
    crafted = [
        ({**row, "files": {"../../../escaped.txt": digest}}, "leaves the skill folder"),
        ({**row, "files": {"/etc/escaped.txt": digest}}, "is absolute"),
        ({**row, "files": {"SKILL.md": "../../../../etc/passwd"}}, "is not a SHA-256 digest"),
        ({**row, "agent_id": "../../x"}, "is not a plain name"),
    ]
    for bad, why in crafted:
        versions.write_text(good + json.dumps(bad) + "\n")
        code, _, err = _cli(capsys, "skills", "diff", str(run), str(run))
        assert code == 2
        assert f"{versions}:{len(good.splitlines()) + 1}: not a skill version row" in err
        assert why in err
        code, _, err = _cli(
            capsys, "run", "--fork", str(run), "--at", "1", "--out", str(tmp_path / "fork")
        )
        assert code == 2 and why in err
        assert not (tmp_path / "fork").exists()
    assert not (tmp_path / "escaped.txt").exists()
