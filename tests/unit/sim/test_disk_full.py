"""A run whose folder cannot be written any more (here: a file size limit, as a full disk
would do) stops with one error line, says ``failed`` in its manifest, leaves no temp files,
and ``--resume`` after the limit is lifted gives the outputs of an uninterrupted run."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.run.workspace import RunWorkspace

_YAML = """
name: disk
seed: 9
clock: {start: "2026-03-02T09:00:00", tick: 1h}
ticks: 8
agents:
  - group: people
    count: 8
    profile: {template: generic}
    skills: {default: [], disabled: [daily-guidance]}
model: {backend: scripted}
environment:
  - {module: social}
output: {dir: ws, formats: [jsonl], checkpoint_every: 2}
"""

# Every file the process writes is capped at this size: events.jsonl (about 6 KB a tick
# here; 28,017 bytes at the end of tick 4, 34,750 at the end of tick 5) passes it during
# tick 5, after the checkpoint of tick 4; every other file stays below it. Writing past it
# fails with EFBIG, as a full disk fails with ENOSPC.
_LIMIT = 31_000

_LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
from agentsim.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.slow
def test_a_full_disk_is_one_error_line_and_resume_gives_the_same_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(_YAML, encoding="utf-8")
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(["run", str(exp), "--out", str(ref), "--trace", "off"]) == 0
    capsys.readouterr()

    argv = ["run", str(exp), "--out", str(run), "--trace", "off", "--json"]
    script = _LIMITED.format(limit=_LIMIT)
    proc = subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"error: cannot write the run folder {run}: File too large; free space (or raise the "
        f"quota or file size limit), then resume with: agentsim run --resume {run}"
    ]
    manifest = json.loads((run / "manifest.json").read_text("utf-8"))
    assert manifest["status"] == "failed" and "File too large" in manifest["reason"]
    assert manifest["ticks_done"] == 5
    assert not list(run.rglob("*.tmp-*")) and not list(run.rglob(".tmp-*"))

    # Space is back: the run continues from its checkpoint of tick 4.
    assert main(["run", "--resume", str(run)]) == 0
    assert capsys.readouterr().out.startswith(f"completed: {run}  ticks=8")
    assert (run / "events.jsonl").read_bytes() == (ref / "events.jsonl").read_bytes()
    for name in ("memory.jsonl", "profile.json"):
        for agent in sorted((ref / "agents").iterdir()):
            got = (run / "agents" / agent.name / name).read_bytes()
            assert got == (agent / name).read_bytes(), (agent.name, name)
    assert json.loads((run / "manifest.json").read_text("utf-8"))["status"] == "completed"


class _Disk:
    """Fills up at the ``full_at``-th append to events.jsonl: from then on every append,
    and every temp file of an atomic write (after half its text), fails with ENOSPC."""

    def __init__(self, full_at: int) -> None:
        self.appends = 0
        self.full_at = full_at

    @property
    def full(self) -> bool:
        return self.appends >= self.full_at

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        append = RunWorkspace.append_events
        write_text = Path.write_text

        def append_events(ws: RunWorkspace, events: Any) -> int:
            self.appends += 1
            if self.full:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return append(ws, events)

        def write(path: Path, text: str, *args: Any, **kw: Any) -> int:
            if self.full and ".tmp-" in path.name:
                write_text(path, text[: len(text) // 2], *args, **kw)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            return write_text(path, text, *args, **kw)

        monkeypatch.setattr(RunWorkspace, "append_events", append_events)
        monkeypatch.setattr(Path, "write_text", write)


@pytest.mark.slow
def test_no_space_left_leaves_no_temp_files_and_resume_completes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(_YAML, encoding="utf-8")
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(["run", str(exp), "--out", str(ref)]) == 0
    capsys.readouterr()
    with monkeypatch.context() as patch:
        # Appends: the set-up events, then one per tick: the disk fills up in tick 6.
        _Disk(full_at=7).install(patch)
        code = main(["run", str(exp), "--out", str(run)])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err and out == ""
    assert err.strip().splitlines()[-1] == (
        f"error: cannot write the run folder {run}: No space left on device; free space (or "
        f"raise the quota or file size limit), then resume with: agentsim run --resume {run}"
    )
    assert not list(run.rglob("*.tmp-*")) and not list(run.rglob(".tmp-*"))
    assert main(["run", "--resume", str(run)]) == 0
    assert (run / "events.jsonl").read_bytes() == (ref / "events.jsonl").read_bytes()
