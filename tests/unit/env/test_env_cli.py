"""``agentsim env new``: the scaffolded module, skill, experiment and test work as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.config.experiment import load_experiment
from agentsim.run.world import build_world


def test_the_scaffold_loads_with_its_own_skill(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["env", "new", "harbour", "--dir", str(tmp_path)]) == 0
    assert f"created {tmp_path / 'harbour'}" in capsys.readouterr().out
    folder = tmp_path / "harbour"
    world = build_world(load_experiment(folder / "experiment.yaml", environ={}))
    assert type(world.modules["harbour"]).__name__ == "HarbourModule"
    assert world.skills.env == ((str(folder / "envs" / "skills"), "harbour"),)
    assert "harbour_added" in world.events


@pytest.mark.slow
def test_the_scaffolded_test_passes_as_written(tmp_path: Path) -> None:
    assert main(["env", "new", "harbour", "--dir", str(tmp_path)]) == 0
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "harbour"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("Harbour", "module name 'Harbour' is invalid; use at most 40", id="bad-name"),
        pytest.param("taken", "taken already exists; choose another name", id="exists"),
    ],
)
def test_a_bad_name_or_an_existing_folder_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    (tmp_path / "taken").mkdir()
    assert main(["env", "new", name, "--dir", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
