"""Running a script in a process of its own: ``process`` isolation and the subprocess tier.

``run_process`` starts a child, and ``run_in_child`` uses it for the two ways the runner
needs one. Every child gets its own session so that a timeout kills the whole process group
(a script's own children included), not only the Python process we started.

``python -m agentsim.skills.scripts.child`` is the child of ``process`` isolation (``main``):
it reads a pickled request ``{script, argv, ctx, output_cap, hook}`` from stdin, runs the script
inline with a fresh ``ScriptRunner`` (the parent enforces the timeout by killing the process
group) and writes the ``ScriptResult`` as one JSON object to the original stdout. Anything
written to file descriptor 1 by the script (or by C code it calls) goes to stderr instead,
so it cannot corrupt that reply. The host never imports the script: the child does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import pickle
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from agentsim.skills.context import CONTEXT_ENV_VAR, SkillScriptContext
from agentsim.skills.scripts.inprocess import Outcome, Tier, cap_text

__all__ = ["ProcOutcome", "run_in_child", "run_process"]

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


@functools.cache
def _package_root() -> str:
    """The folder holding the ``agentsim`` package, for the isolation child's PYTHONPATH."""
    return str(Path(__file__).resolve().parents[3])  # agentsim/skills/scripts/child.py


async def run_in_child(
    python: str,
    path: str,
    argv: Sequence[str],
    ctx: SkillScriptContext,
    *,
    output_cap: int,
    limit: float,
    isolated: bool,
    hook: str | None = None,
) -> tuple[Outcome, Tier] | None:
    """Run script ``path`` in a fresh Python process in the agent's workspace, with the
    context's scrubbed environment; its process group is killed at ``limit``.

    ``isolated``: ``process`` isolation, the call made by ``python -m
    agentsim.skills.scripts.child`` in whichever tier that child finds. Otherwise the subprocess
    tier: ``python script.py argv...`` with the context as JSON in ``AGENTSIM_CONTEXT_JSON``.
    Returns the outcome and the tier used, None when the child was killed at ``limit``;
    raises ``OSError`` when it cannot be started."""
    env = dict(ctx.env)
    # Skill folders may be shared or read-only: never leave __pycache__ behind in them.
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    if isolated:
        cmd = [python, "-m", "agentsim.skills.scripts.child"]
        stdin = pickle.dumps(
            {
                "script": path,
                "argv": list(argv),
                "ctx": ctx,
                "output_cap": output_cap,
                "hook": hook,
            }
        )
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_package_root(), env.get("PYTHONPATH")) if p
        )
        # JSON escaping can grow text; the child already capped output and error.
        stdout_limit, stderr_limit = 16 * output_cap + 65_536, 4 * output_cap
    else:
        cmd, stdin = [python, path, *argv], b""
        env[CONTEXT_ENV_VAR] = json.dumps(ctx.to_dict(), sort_keys=True)
        # Bytes, not characters: 4 bytes per character covers any UTF-8 text within the cap.
        stdout_limit = stderr_limit = 4 * output_cap + 4
    proc = await run_process(
        cmd,
        cwd=ctx.workspace_root,
        env=env,
        stdin=stdin,
        limit=None if math.isinf(limit) else limit,
        stdout_limit=stdout_limit,
        stderr_limit=stderr_limit,
    )
    if proc.returncode is None:
        return None
    if isolated:
        return _isolated_outcome(proc, path, output_cap)
    return _script_outcome(proc, output_cap), "subprocess"


def _isolated_outcome(proc: ProcOutcome, path: str, output_cap: int) -> tuple[Outcome, Tier]:
    """What the isolation child reported as JSON on stdout, or its crash."""
    try:
        data = json.loads(proc.stdout.decode("utf-8"))
        outcome = Outcome(
            ok=bool(data["ok"]),
            output=str(data["output"]),
            exit_code=int(data["exit_code"]),
            error=data["error"],
            truncated=bool(data["truncated"]),
            log=str(data.get("log", "")),
        )
        return outcome, cast(Tier, data["tier"])
    except (ValueError, KeyError, TypeError):
        stderr, _ = cap_text(
            proc.stderr.decode("utf-8", "replace"), output_cap, proc.stderr_dropped
        )
        crashed = Outcome(
            ok=False,
            output="",
            exit_code=proc.returncode or 1,
            error=f"script {path} crashed its isolation process (exit code "
            f"{proc.returncode}); stderr:\n{stderr}",
        )
        return crashed, "entrypoint"


def _script_outcome(proc: ProcOutcome, output_cap: int) -> Outcome:
    """A plain script's run: what it printed is its output, its stderr its log or error."""
    output, truncated = cap_text(
        proc.stdout.decode("utf-8", "replace"), output_cap, proc.stdout_dropped
    )
    stderr, _ = cap_text(proc.stderr.decode("utf-8", "replace"), output_cap, proc.stderr_dropped)
    failed = proc.returncode != 0
    return Outcome(
        ok=not failed,
        output=output,
        exit_code=proc.returncode or 0,
        error=stderr if failed else None,
        truncated=truncated,
        log="" if failed else stderr,
    )


# -- the child's side of process isolation ---------------------------------------------


def serve(request: bytes) -> str:
    """Run the pickled request and return the JSON reply (the child's whole job, minus fds)."""
    from agentsim.skills.scripts.runner import ScriptRunner

    data: dict[str, Any] = pickle.loads(request)
    runner = ScriptRunner(output_cap=data["output_cap"], default_timeout=math.inf)
    call = runner.run(data["script"], data["argv"], data["ctx"], hook=data.get("hook"))
    result = asyncio.run(call)
    return json.dumps(result.to_dict(), ensure_ascii=False)


def main() -> int:
    reply = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    reply.write(serve(sys.stdin.buffer.read()))
    reply.close()
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a child process, see run_in_child
    sys.exit(main())
