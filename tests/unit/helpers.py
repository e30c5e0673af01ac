"""Helpers shared by the unit tests: the repository's paths, the skill script context, skill
folders and the ScriptRunner fixtures scripts."""

from __future__ import annotations

import os
import shutil
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from agentsim.skills.context import SkillScriptContext, safe_env

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
SCRIPTS = FIXTURES / "scripts"

SECRET_ENVIRON = {
    "PATH": os.environ.get("PATH", "/usr/bin"),
    "LANG": "C.UTF-8",
    "AGENTSIM_MODE": "test",
    "AGENTSIM_API_KEY": "sk-agentsim",
    "OPENAI_API_KEY": "sk-openai",
    "HF_TOKEN": "hf-token",
    "DB_PASSWORD": "pw",
}

# Tests call ``fx`` from several threads at once; without this, two threads could both see
# the fixture missing and copy it, and one would truncate a script the other is running.
_COPY_LOCK = threading.Lock()


def make_ctx(root: Path, agent_id: str = "a-1", *, create: bool = True) -> SkillScriptContext:
    """A context whose skill folder is ``root``: the test's scripts live there (see ``fx``)."""
    workspace = root / "agents" / agent_id
    if create:
        workspace.mkdir(parents=True, exist_ok=True)
    return SkillScriptContext(
        workspace_root=workspace,
        skill_id="custom@demo",
        skill_name="demo",
        skill_dir=root,
        agent_id=agent_id,
        tick=7,
        time=datetime(2026, 3, 2, 6, 0, tzinfo=UTC),
        env=safe_env(SECRET_ENVIRON),
    )


def fx(root: Path, name: str) -> Path:
    """The fixture script ``name``, copied with its siblings into the test's skill folder."""
    with _COPY_LOCK:
        if not (root / name).exists():
            shutil.copytree(SCRIPTS, root, dirs_exist_ok=True)
    return root / name


def wait_for_file(path: Path) -> None:
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.005)


def write_script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path
