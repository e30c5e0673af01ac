"""A warm ``pre_step`` hook call crosses few modules of the skills package.

The package is cut along its seams so that the hot path reads in a handful of files; this
test keeps it that way. It records the ``agentsim/skills/`` files whose Python frames run
during a second (warm) hook call, on every thread: inline scripts run on worker threads that
outlive a call, so the probe runs in a fresh interpreter where the profiler is installed
before the first worker starts."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.unit.helpers import FIXTURES

SKILLS = FIXTURES / "runtime_skills"
MAX_MODULES = 6

PROBE = """
import asyncio, json, sys, tempfile, threading
from datetime import datetime
from pathlib import Path

import agentsim.skills
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace

package = str(Path(agentsim.skills.__file__).resolve().parent) + "/"
seen, recording = set(), []

def profile(frame, event, arg):
    if recording and event == "call" and frame.f_code.co_filename.startswith(package):
        seen.add(frame.f_code.co_filename[len(package):])

async def main(fixtures, workspace):
    reg = SkillRegistry()
    reg.scan_builtin(Path(fixtures))
    rt = AgentSkillRuntime(SkillSpace(reg.snapshot()), agent_id="a-1", workspace_root=workspace)
    await rt.activate("hook-echo")
    when = datetime(2026, 3, 2, 9, 0)
    await rt.run_hooks("pre_step", tick=1, time=when, step_count=1)  # cold: imports, caches
    recording.append(True)
    out = await rt.run_hooks("pre_step", tick=2, time=when, step_count=2)
    recording.clear()
    return [o.ok for o in out]

sys.setprofile(profile)
threading.setprofile(profile)
with tempfile.TemporaryDirectory() as tmp:
    ok = asyncio.run(main(sys.argv[1], Path(tmp)))
sys.setprofile(None)
print(json.dumps({"ok": ok, "modules": sorted(seen)}))
"""


def test_a_warm_pre_step_hook_crosses_at_most_six_skills_modules() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(SKILLS / "builtin")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["ok"] == [True]
    assert len(found["modules"]) <= MAX_MODULES, ", ".join(found["modules"])
