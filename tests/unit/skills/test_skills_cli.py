"""`agentsim skills list|show|validate|new`, run in-process through main([...])."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path

import pytest

from agentsim.skills import load_skill_md
from agentsim.skills.cli import add_skills_commands, default_roots, main
from tests.unit import helpers

FIXTURES = helpers.FIXTURES / "skills"
ROOTS = ["--builtin", str(FIXTURES / "builtin"), "--custom", str(FIXTURES / "custom")]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_prints_skills_and_a_health_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "skills", "list", *ROOTS)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("custom@daily-guidance    The user's own daily guidance")
    assert lines[1].startswith("built-in@daily-guidance")
    assert lines[1].endswith("[shadowed by custom@daily-guidance]")
    assert lines[2].startswith("built-in@weather-report") and lines[2].endswith("[deprecated]")
    assert (
        "3 skills: custom 1 (1 active, 0 deprecated); built-in 2 (1 active, 1 deprecated); "
        "0 errors, 1 warnings"
    ) in out
    custom = FIXTURES / "custom" / "daily-guidance"
    assert (
        f"warning: name collision: built-in@daily-guidance and custom@daily-guidance ({custom}) "
        "are both named 'daily-guidance'; custom@daily-guidance wins the bare name, so call "
        "this one by its id (built-in@daily-guidance) or rename one of them"
    ) in out


def test_list_json_shape_and_filters(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "skills", "list", "--json", "--namespace", "built-in", *ROOTS)
    data = json.loads(out)
    assert code == 0 and set(data) == {"skills", "summary", "shadowed", "diagnostics"}
    assert data["shadowed"] == {"built-in@daily-guidance": "custom@daily-guidance"}
    assert [s["skill_id"] for s in data["skills"]] == [
        "built-in@daily-guidance",
        "built-in@weather-report",
    ]
    assert data["summary"] == {
        "total": 3,
        "by_namespace": {
            "custom": {"active": 1, "deprecated": 0},
            "built-in": {"active": 1, "deprecated": 1},
        },
        "errors": 0,
        "warnings": 1,
    }
    first = data["skills"][0]
    assert first["hooks"] == {"pre_step": "scripts/daily_guidance.py"}
    assert first["tags"] == ["mobility", "planning"] and first["timeout"] == 2.0
    _, out, _ = run(capsys, "skills", "list", "--json", "--tag", "env", *ROOTS)
    assert [s["name"] for s in json.loads(out)["skills"]] == ["weather-report"]
    _, out, _ = run(capsys, "skills", "list", "--json", "--status", "active", *ROOTS)
    assert len(json.loads(out)["skills"]) == 2


def test_list_reports_diagnostics(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "skills", "list", "--builtin", str(FIXTURES / "invalid"))
    assert code == 0
    assert "no skills found" in out and "1 errors, 0 warnings" in out
    assert "error: name 'right-name' does not match its folder 'wrong-folder'" in out
    _, out, _ = run(capsys, "skills", "list", "--tag", "nope", *ROOTS)
    assert out.startswith("no skills match")
    _, out, _ = run(capsys, "skills", "list", "--json", "--builtin", str(FIXTURES / "invalid"))
    (diag,) = json.loads(out)["diagnostics"]
    assert diag["line"] == 2 and diag["severity"] == "error"
    assert diag["file"].endswith("wrong-folder/SKILL.md")


def test_show_accepts_an_id_or_a_bare_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "skills", "show", "built-in@daily-guidance", *ROOTS)
    assert code == 0
    assert out.startswith("built-in@daily-guidance  (active, isolation inline)")
    assert "hook:        pre_step -> scripts/daily_guidance.py" in out
    assert "also named 'daily-guidance': custom@daily-guidance" in out
    assert "files:       SKILL.md, references/places.md, scripts/daily_guidance.py" in out
    assert out.rstrip().endswith("Call the script with the current hour.")
    code, out, _ = run(capsys, "skills", "show", "daily-guidance", "--json", *ROOTS)
    data = json.loads(out)
    assert code == 0 and set(data) == {"skill", "body", "files"}
    assert data["skill"]["skill_id"] == "custom@daily-guidance"
    assert data["body"] == "Prefer the user's own routine.\n" and data["files"] == ["SKILL.md"]


def test_show_unknown_skill_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "skills", "show", "daily-guidanse", *ROOTS)
    assert code == 2 and out == ""
    assert err == (
        "agentsim skills: skill 'daily-guidanse' is not registered (close matches: "
        "daily-guidance, custom@daily-guidance, built-in@daily-guidance); run `agentsim "
        "skills list` to see the registered skills\n"
    )


@pytest.mark.parametrize("flag", ["--builtin", "--custom"])
def test_missing_root_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str
) -> None:
    code, _, err = run(capsys, "skills", "list", flag, str(tmp_path / "nope"))
    assert code == 2
    assert f"{flag} {tmp_path / 'nope'}: no such folder; pass the folder" in err


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(FIXTURES / "builtin", id="folder-of-skills"),
        pytest.param(FIXTURES / "builtin" / "daily-guidance", id="skill-folder"),
        pytest.param(FIXTURES / "builtin" / "weather-report" / "SKILL.md", id="skill-md"),
    ],
)
def test_validate_accepts_three_kinds_of_path(
    capsys: pytest.CaptureFixture[str], target: Path
) -> None:
    code, out, _ = run(capsys, "skills", "validate", str(target))
    assert code == 0
    assert out.splitlines()[-1].endswith("skills checked: 0 errors, 0 warnings")
    assert out.startswith("ok   ")


def test_validate_json_and_errors_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "skills", "validate", "--json", str(FIXTURES / "invalid"), str(FIXTURES / "custom")
    )
    data = json.loads(out)
    assert code == 1
    assert {k: data[k] for k in ("ok", "checked", "errors", "warnings")} == {
        "ok": False,
        "checked": 2,
        "errors": 1,
        "warnings": 0,
    }
    bad, good = data["results"]
    assert bad["ok"] is False and bad["name"] is None
    assert bad["diagnostics"][0]["message"].startswith("name 'right-name' does not match")
    assert good == {
        "path": str(FIXTURES / "custom" / "daily-guidance" / "SKILL.md"),
        "name": "daily-guidance",
        "ok": True,
        "diagnostics": [],
    }
    code, out, _ = run(capsys, "skills", "validate", str(FIXTURES / "invalid"))
    assert code == 1 and out.startswith("FAIL ")


REPO_SKILLS = helpers.REPO / "skills"


def test_validate_strict_notes_agentsim_extensions_without_failing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = str(FIXTURES / "builtin")
    code, out, _ = run(capsys, "skills", "validate", "--strict", "--json", target)
    data = json.loads(out)
    assert code == 0 and (data["errors"], data["warnings"], data["notes"]) == (0, 0, 6)
    noted = [
        (Path(r["path"]).parent.name, d["line"], d["severity"], d["message"].split(" is ")[0])
        for r in data["results"]
        for d in r["diagnostics"]
    ]
    assert noted == [
        ("daily-guidance", 4, "note", "'script'"),
        ("daily-guidance", 5, "note", "'hooks'"),
        ("daily-guidance", 7, "note", "'tags'"),
        ("daily-guidance", 8, "note", "'timeout'"),
        ("weather-report", 4, "note", "'status'"),
        ("weather-report", 5, "note", "'tags'"),
    ]
    assert data["results"][0]["diagnostics"][0]["message"] == (
        "'script' is an agentsim extension, not an Agent Skills field; other clients may "
        "ignore or refuse it"
    )
    code, out, _ = run(capsys, "skills", "validate", "--strict", target)
    assert code == 0
    assert out.splitlines()[-1] == (
        "2 skills checked: 0 errors, 0 warnings, 6 notes (agentsim extensions)"
    )


def test_every_built_in_skill_passes_strict(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "skills", "validate", "--strict", "--json", str(REPO_SKILLS))
    data = json.loads(out)
    assert code == 0 and data["errors"] == 0 and data["warnings"] == 0
    assert data["checked"] == len([p for p in REPO_SKILLS.iterdir() if (p / "SKILL.md").is_file()])
    # Written in the portable form: agentsim's keys sit under metadata, nothing to note.
    assert [d for r in data["results"] for d in r["diagnostics"]] == []


def test_the_untouched_scaffold_passes_strict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(capsys, "skills", "new", "city-walk", "--dir", str(tmp_path))[0] == 0
    code, out, _ = run(capsys, "skills", "validate", "--strict", str(tmp_path / "city-walk"))
    assert code == 0 and out.startswith("ok   ")
    assert out.splitlines()[-1] == "1 skills checked: 0 errors, 0 warnings"


def test_validate_strict_reports_every_portability_problem_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "Odd_Name"
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: Odd_Name\ndescription: Use it.\nallowed-tools: [Read, Bash]\n"
        "metadata:\n  owner: lab\n  level: 3\ncolour: red\n---\nBody.\n"
    )
    code, out, _ = run(capsys, "skills", "validate", "--strict", "--json", str(folder))
    data = json.loads(out)
    assert code == 1
    found = [(d["line"], d["severity"], d["message"]) for d in data["results"][0]["diagnostics"]]
    md = folder / "SKILL.md"
    assert found == [
        (
            2,
            "error",
            "name 'Odd_Name' is not a valid skill name; use lowercase letters, digits and "
            "single hyphens (like 'daily-guidance')",
        ),
        (
            7,
            "error",
            'metadata.level must be a string, got number 3; quote it, like level: "3" (YAML '
            "reads unquoted yes, no, on, off, numbers and null as other types)",
        ),
        (8, "warning", found[2][2]),  # the unknown key, as without --strict
        (
            4,
            "error",
            "allowed-tools is not portable as a list: the Agent Skills spec wants one "
            "space-separated string, like 'allowed-tools: Read Bash'",
        ),
        (
            8,
            "error",
            "'colour' is neither an Agent Skills field nor an agentsim one; remove it, or keep "
            "it under metadata as a string value",
        ),
    ]
    assert found[2][2].startswith("unknown frontmatter key 'colour' (kept as extra); known")
    assert data["results"][0]["path"] == str(md)
    assert "move it under metadata" not in out


def test_a_fifo_and_symlink_loops_are_diagnostics_in_list_and_validate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = tmp_path / "skills"
    for name in ("fifo", "md-loop"):
        (root / name).mkdir(parents=True)
    os.mkfifo(root / "fifo" / "SKILL.md")
    (root / "md-loop" / "SKILL.md").symlink_to(root / "md-loop" / "OTHER.md")
    (root / "md-loop" / "OTHER.md").symlink_to(root / "md-loop" / "SKILL.md")
    (root / "ring-a").symlink_to(root / "ring-b")
    (root / "ring-b").symlink_to(root / "ring-a")
    fifo_msg = (
        "cannot read SKILL.md: it is a FIFO (named pipe), not a regular file; replace it "
        "with a text file"
    )
    loop_msg = (
        "cannot read SKILL.md (Too many levels of symbolic links); a symlink on the way "
        "loops back on itself; point it at a real file"
    )
    code, out, _ = run(capsys, "skills", "list", "--builtin", str(root))
    assert code == 0 and "no skills found" in out and "2 errors, 2 warnings" in out
    assert f"{root / 'fifo' / 'SKILL.md'}:1: error: {fifo_msg}" in out
    assert f"{root / 'md-loop' / 'SKILL.md'}:1: error: {loop_msg}" in out
    assert f"{root / 'ring-a'}:0: warning: skipped: cannot open this skill folder (Too many" in out
    code, out, _ = run(capsys, "skills", "validate", str(root))
    assert code == 1
    assert out.splitlines() == [
        f"FAIL {root / 'fifo' / 'SKILL.md'}",
        f"  {root / 'fifo' / 'SKILL.md'}:1: error: {fifo_msg}",
        f"FAIL {root / 'md-loop' / 'SKILL.md'}",
        f"  {root / 'md-loop' / 'SKILL.md'}:1: error: {loop_msg}",
        f"FAIL {root / 'ring-a' / 'SKILL.md'}",
        f"  {root / 'ring-a' / 'SKILL.md'}:1: error: {loop_msg}",
        f"FAIL {root / 'ring-b' / 'SKILL.md'}",
        f"  {root / 'ring-b' / 'SKILL.md'}:1: error: {loop_msg}",
        "4 skills checked: 4 errors, 0 warnings",
    ]
    # the odd file named directly
    code, out, _ = run(capsys, "skills", "validate", str(root / "fifo" / "SKILL.md"))
    assert code == 1 and fifo_msg in out
    code, out, _ = run(capsys, "skills", "validate", str(root / "ring-a"))
    assert code == 1 and loop_msg in out


@pytest.mark.parametrize(
    ("path", "pattern"),
    [
        pytest.param("nope", "nope: no such file or folder; pass a skill folder", id="missing"),
        pytest.param(".", r"\.: no SKILL.md in it or in its sub-folders", id="empty-folder"),
    ],
)
def test_validate_bad_paths_exit_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    pattern: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "skills", "validate", path)
    assert code == 2
    with pytest.raises(AssertionError, match=pattern):
        raise AssertionError(err)


def test_new_scaffolds_a_skill_that_validates_and_whose_test_passes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "skills", "new", "city-walk", "--dir", str(tmp_path))
    folder = tmp_path / "city-walk"
    assert code == 0 and f"created {folder}" in out
    assert load_skill_md(folder).ok
    assert run(capsys, "skills", "validate", str(folder))[0] == 0
    test_file = folder / "tests" / "test_city_walk.py"
    spec = importlib.util.spec_from_file_location("scaffold_test", test_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.test_entrypoint_echoes_its_arguments()
    assert module._load().entrypoint(["x"], None) == "city-walk: x"


def test_new_defaults_to_custom_skills(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "skills", "new", "mine")[0] == 0
    assert (tmp_path / "custom" / "skills" / "mine" / "scripts" / "mine.py").is_file()
    _, out, _ = run(capsys, "skills", "list", "--json", "--builtin", str(FIXTURES / "custom"))
    assert "custom@mine" in [s["skill_id"] for s in json.loads(out)["skills"]]


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        pytest.param(
            "Bad_Name", "skill name 'Bad_Name' is invalid; use at most 64 lowercase", id="bad"
        ),
        pytest.param("a" * 65, "is invalid", id="long"),
        pytest.param("exists", "exists already exists; choose another name", id="exists"),
    ],
)
def test_new_refuses_bad_names_and_existing_folders(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, pattern: str
) -> None:
    (tmp_path / "exists").mkdir()
    code, _, err = run(capsys, "skills", "new", name, "--dir", str(tmp_path))
    assert code == 2
    with pytest.raises(AssertionError, match=pattern):
        raise AssertionError(err)


def test_list_uses_agentsims_own_builtins_wherever_it_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another project's skills/ folder is not agentsim's built-ins.
    monkeypatch.chdir(tmp_path)
    helpers.write_skill(tmp_path / "skills", "their-skill")
    assert default_roots() == (helpers.REPO / "skills", tmp_path / "custom" / "skills")
    code, out, _ = run(capsys, "skills", "list", "--json")
    ids = [s["skill_id"] for s in json.loads(out)["skills"]]
    assert code == 0 and "built-in@daily-guidance" in ids
    assert not any(i.endswith("@their-skill") for i in ids)


def test_add_skills_commands_plugs_into_another_parser() -> None:
    parser = argparse.ArgumentParser(prog="agentsim")
    add_skills_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["skills", "validate", "x", "--strict"])
    assert args.paths == ["x"] and args.strict and callable(args.func)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["skills"])
    assert exc.value.code == 2
