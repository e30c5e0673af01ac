"""Skill scripts are checked when skills load, without running them: a syntax error, or a
top-level import of a package that is not installed, in a default skill's script stops
``agentsim run`` before anything is written (exit 2, file and line); another skill's is told
on stderr and in ``run_start``; ``agentsim skills validate`` reports both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.skills import load_skill_md
from agentsim.skills.scan import SkillDescriptor, check_scripts
from tests.unit.helpers import read_events, write_skill

_YAML = """
name: broken-scripts
seed: 1
clock: {start: "2026-03-02T09:00:00", tick: 1h}
ticks: 2
agents:
  - group: people
    count: 2
    skills: {default: [DEFAULTS], disabled: [daily-guidance]}
model: {backend: scripted}
output: {dir: ws, formats: [jsonl]}
"""

_BROKEN = "def entrypoint(argv, ctx):\n    return 'ok'\n\ndef oops(:\n    pass\n"
_MISSING = (
    "import json\nimport not_a_module_anywhere_xyz\n\ndef entrypoint(argv, ctx):\n    return 'x'\n"
)
_FINE = (
    "from . import helper\n"
    "try:\n    import not_installed_but_guarded\nexcept ImportError:\n    pass\n\n"
    "def entrypoint(argv, ctx):\n    import also_not_installed\n    return helper.X\n"
)


def _experiment(tmp: Path, defaults: str) -> Path:
    skills = tmp / "custom" / "skills"
    write_skill(
        skills, "broken", front="script: scripts/broken.py\n", files={"scripts/broken.py": _BROKEN}
    )
    write_skill(
        skills,
        "missing",
        front="hooks: {pre_step: scripts/missing.py}\n",
        files={"scripts/missing.py": _MISSING},
    )
    write_skill(
        skills,
        "fine",
        front="script: scripts/fine.py\n",
        files={"scripts/fine.py": _FINE, "scripts/helper.py": "X = 1\n"},
    )
    exp = tmp / "exp.yaml"
    exp.write_text(_YAML.replace("DEFAULTS", defaults), encoding="utf-8")
    return exp


def test_a_default_skills_syntax_error_is_exit_2_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path, "fine, broken")
    run = tmp_path / "run"
    code = main(["run", str(exp), "--out", str(run)])
    err = capsys.readouterr().err
    assert code == 2
    script = tmp_path / "custom" / "skills" / "broken" / "scripts" / "broken.py"
    assert (
        f"agents.0.skills.default: default skill 'broken' has a script that cannot load: "
        f"{script}:4: SyntaxError: invalid syntax" in err
    ), err
    assert f"agentsim skills validate {script.parent.parent}" in err
    assert not run.exists()  # nothing written


def test_a_default_skills_missing_import_is_exit_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path, "missing")
    code = main(["run", str(exp), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    script = tmp_path / "custom" / "skills" / "missing" / "scripts" / "missing.py"
    assert (
        f"{script}:2: ModuleNotFoundError: it imports 'not_a_module_anywhere_xyz', but no "
        "module named 'not_a_module_anywhere_xyz' is installed in this Python" in err
    ), err
    assert not (tmp_path / "run").exists()


def test_other_skills_broken_scripts_are_told_and_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path, "fine")
    run = tmp_path / "run"
    code = main(["run", str(exp), "--out", str(run)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert f"completed: {run}  ticks=2 agents=2" in out
    root = tmp_path / "custom" / "skills"
    broken = f"{root}/broken/scripts/broken.py:4: error: SyntaxError: invalid syntax"
    assert f"skill custom@broken: a script cannot load ({broken}); calling it fails" in err
    start = read_events(run)[0]
    assert start["type"] == "run_start"
    assert set(start["skills_broken_scripts"]) == {"custom@broken", "custom@missing"}
    assert start["skills_broken_scripts"]["custom@broken"] == broken


def test_a_clean_run_writes_no_broken_list(tmp_path: Path) -> None:
    skills = tmp_path / "custom" / "skills"
    write_skill(
        skills,
        "fine",
        front="script: scripts/fine.py\n",
        files={"scripts/fine.py": _FINE, "scripts/helper.py": "X = 1\n"},
    )
    exp = tmp_path / "exp.yaml"
    exp.write_text(_YAML.replace("DEFAULTS", "fine"), encoding="utf-8")
    assert main(["run", str(exp), "--out", str(tmp_path / "run")]) == 0
    assert "skills_broken_scripts" not in read_events(tmp_path / "run")[0]


def test_skills_validate_reports_scripts_that_cannot_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _experiment(tmp_path, "fine")
    root = tmp_path / "custom" / "skills"
    code = main(["skills", "validate", str(root), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["errors"] == 2
    by_name = {r["name"]: r for r in report["results"]}
    assert by_name["fine"]["ok"] is True
    (diag,) = by_name["broken"]["diagnostics"]
    assert (diag["line"], diag["message"]) == (4, "SyntaxError: invalid syntax")
    assert diag["file"] == str(root / "broken" / "scripts" / "broken.py")
    (diag,) = by_name["missing"]["diagnostics"]
    assert diag["line"] == 2 and "not_a_module_anywhere_xyz" in diag["message"]


def test_checking_runs_no_top_level_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    folder = write_skill(
        tmp_path / "skills",
        "side-effect",
        front="script: scripts/s.py\n",
        files={"scripts/s.py": f"open({str(marker)!r}, 'w').write('ran')\n"},
    )
    parsed = load_skill_md(folder)
    assert parsed.manifest is not None
    desc = SkillDescriptor.create("custom", str(folder), parsed.manifest)
    assert check_scripts(desc) == ()
    assert not marker.exists()
