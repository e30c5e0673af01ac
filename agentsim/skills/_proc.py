"""Child processes for skill scripts: spawn, feed stdin, read capped output, kill on timeout.

Private to ``agentsim.skills.scripts``. Every child gets its own session so that a timeout
kills the whole process group (a script's own children included), not only the Python
process we started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcOutcome", "run_process"]

_CHUNK = 65_536


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcOutcome:
    """What a finished (or killed) child left behind. ``returncode`` is None when killed."""

    returncode: int | None
    stdout: bytes
    stdout_dropped: int
    stderr: bytes
    stderr_dropped: int


async def _read_capped(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, int]:
    # Keep draining past the cap: a child blocked on a full pipe would never exit.
    kept = bytearray()
    dropped = 0
    if stream is None:  # pragma: no cover - both pipes are always requested
        return b"", 0
    while chunk := await stream.read(_CHUNK):
        room = limit - len(kept)
        if room > 0:
            kept += chunk[:room]
            dropped += max(0, len(chunk) - room)
        else:
            dropped += len(chunk)
    return bytes(kept), dropped


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    if proc.stdin is None:  # pragma: no cover - stdin is always a pipe
        return
    # A child that exits without reading its stdin closes the pipe: not our error.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data)
        await proc.stdin.drain()
    proc.stdin.close()


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # pragma: no cover - already gone
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: bytes,
    limit: float | None,
    stdout_limit: int,
    stderr_limit: int,
) -> ProcOutcome:
    """Run ``argv`` to completion or until ``limit`` seconds, then kill its process group.

    Raises ``OSError`` when the child cannot be started (missing cwd or interpreter).
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )

    async def communicate() -> tuple[tuple[bytes, int], tuple[bytes, int]]:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(_feed(proc, stdin))
            out = tg.create_task(_read_capped(proc.stdout, stdout_limit))
            err = tg.create_task(_read_capped(proc.stderr, stderr_limit))
        await proc.wait()
        return out.result(), err.result()

    try:
        (out, out_dropped), (err, err_dropped) = await asyncio.wait_for(communicate(), limit)
    except TimeoutError:
        _kill_group(proc)
        await proc.wait()
        return ProcOutcome(
            returncode=None, stdout=b"", stdout_dropped=0, stderr=b"", stderr_dropped=0
        )
    except BaseException:
        # Cancelled by our caller: never leave an orphan behind.
        _kill_group(proc)
        raise
    return ProcOutcome(
        returncode=proc.returncode,
        stdout=out,
        stdout_dropped=out_dropped,
        stderr=err,
        stderr_dropped=err_dropped,
    )
