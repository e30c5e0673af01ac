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
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from agentsim.skills.context import CONTEXT_ENV_VAR, SkillScriptContext, call_env
from agentsim.skills.scripts.inprocess import Outcome, Tier, cap_text
from agentsim.skills.scripts.sandbox import wrap

__all__ = ["CALL_ID_VAR", "ProcOutcome", "kill_all", "run_in_child", "run_process"]

_CHUNK = 65_536
_PIPE_GRACE = 0.2
"""Seconds to keep reading a child's pipes after it exited (what it wrote is there)."""
_KILL_ROUNDS = 5

CALL_ID_VAR = "AGENTSIM_CALL_ID"
"""Set in every script process's environment: comma-separated tags of the calls it runs for.
Processes it starts inherit it, even past ``setsid`` and double forks, so that a timeout (and
``process`` isolation, after every call) finds and kills them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcOutcome:
    """What a finished (or killed) child left behind. ``returncode`` is None when killed."""

    returncode: int | None
    stdout: bytes
    stdout_dropped: int
    stderr: bytes
    stderr_dropped: int


class _Capped:
    """What one pipe delivered, kept up to ``limit`` bytes; filled as it arrives, so that a
    reader cut short still holds what it read."""

    __slots__ = ("dropped", "kept", "limit")

    def __init__(self, limit: int) -> None:
        self.kept = bytearray()
        self.dropped = 0
        self.limit = limit

    async def drain(self, stream: asyncio.StreamReader) -> None:
        # Keep draining past the cap: a child blocked on a full pipe would never exit.
        while chunk := await stream.read(_CHUNK):
            room = self.limit - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
                self.dropped += max(0, len(chunk) - room)
            else:
                self.dropped += len(chunk)


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    if proc.stdin is None:  # pragma: no cover - stdin is always a pipe
        return
    # A child that exits without reading its stdin closes the pipe: not our error.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data)
        await proc.stdin.drain()
    proc.stdin.close()


def _scan(tags: Sequence[bytes], root: int) -> set[int]:
    """Live processes started for a call: those whose environment carries one of ``tags``
    (``CALL_ID_VAR``, inherited through ``setsid`` and double forks) and the descendants of
    ``root`` (whatever their environment). Linux's ``/proc``; elsewhere, nothing."""
    try:
        names = os.listdir("/proc")
    except OSError:  # pragma: no cover - not Linux: the process group kill is all we have
        return set()
    me = os.getpid()
    parents: dict[int, list[int]] = {}
    found: set[int] = set()
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z":
                continue  # a zombie: already dead, waiting for its parent
            parents.setdefault(int(fields[1]), []).append(pid)
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
        if any(tag in environ for tag in tags):
            found.add(pid)
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    found.discard(me)
    return found


def kill_all(proc: asyncio.subprocess.Process, tag: bytes) -> None:
    """SIGKILL the child's process group and every process started for it, in rounds until
    none is left (a process may fork while we look)."""
    # Look before the first kill: once the child is dead its children lose their parent
    # link (only the tag still finds them).
    pids = _scan((tag,), proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for _ in range(_KILL_ROUNDS):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        pids = _scan((tag,), proc.pid)
        if not pids:
            return


def _call_tag() -> tuple[str, bytes]:
    """The ``CALL_ID_VAR`` value for a new child (the tags of the calls this process runs
    for, plus a new one) and the new tag to look for."""
    new = uuid.uuid4().hex
    inherited = os.environ.get(CALL_ID_VAR)
    return (f"{inherited},{new}" if inherited else new), new.encode()


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: bytes,
    limit: float | None,
    stdout_limit: int,
    stderr_limit: int,
    leave_nothing: bool = False,
) -> ProcOutcome:
    """Run ``argv`` to completion or until ``limit`` seconds; at the limit, kill it and
    everything it started (``kill_all``). ``leave_nothing``: do that after a normal exit too.

    Output is read until the child exits, then for ``_PIPE_GRACE`` seconds more: a daemon
    it started may hold the pipes open for ever. Raises ``OSError`` when the child cannot be
    started (missing cwd or interpreter).
    """
    loop = asyncio.get_running_loop()
    value, tag = _call_tag()
    # Our own pipes, not asyncio's: we close them when we stop reading, whoever holds the
    # other end (with asyncio's, waiting for the child can wait for its pipes too).
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env={**env, CALL_ID_VAR: value},
            stdin=asyncio.subprocess.PIPE,
            stdout=out_w,
            stderr=err_w,
            start_new_session=True,
        )
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    out, err = _Capped(stdout_limit), _Capped(stderr_limit)
    transports: list[asyncio.ReadTransport] = []
    readers: list[asyncio.Task[None]] = []
    try:
        for fd, sink in ((out_r, out), (err_r, err)):
            reader = asyncio.StreamReader(limit=_CHUNK)
            pipe = os.fdopen(fd, "rb", buffering=0)
            transport, _ = await loop.connect_read_pipe(
                functools.partial(asyncio.StreamReaderProtocol, reader), pipe
            )
            transports.append(transport)
            readers.append(loop.create_task(sink.drain(reader)))

        async def exited() -> None:
            await _feed(proc, stdin)
            await proc.wait()

        try:
            await asyncio.wait_for(exited(), limit)
        except TimeoutError:
            kill_all(proc, tag)
            await proc.wait()
            return ProcOutcome(
                returncode=None, stdout=b"", stdout_dropped=0, stderr=b"", stderr_dropped=0
            )
        if leave_nothing:
            kill_all(proc, tag)
        # What the child wrote before it exited is in the pipes; a daemon's later writes,
        # and a daemon that never closes them, are not waited for.
        await asyncio.wait(readers, timeout=_PIPE_GRACE)
    except BaseException:
        # Cancelled by our caller: never leave an orphan behind.
        kill_all(proc, tag)
        raise
    finally:
        for task in readers:
            task.cancel()
        for transport in transports:
            transport.close()
        if readers:
            await asyncio.wait(readers)
    return ProcOutcome(
        returncode=proc.returncode,
        stdout=bytes(out.kept),
        stdout_dropped=out.dropped,
        stderr=bytes(err.kept),
        stderr_dropped=err.dropped,
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
    network: bool = False,
) -> tuple[Outcome, Tier] | None:
    """Run script ``path`` in a fresh Python process in the agent's workspace, with the
    context's scrubbed environment; its process group is killed at ``limit``.

    ``isolated``: ``process`` isolation, the call made by ``python -m
    agentsim.skills.scripts.child`` in whichever tier that child finds, inside the
    operating system's sandbox (``sandbox``; ``network``: whether it keeps the network) when
    this machine has one. Otherwise the subprocess
    tier: ``python script.py argv...`` with the context as JSON in ``AGENTSIM_CONTEXT_JSON``.
    Returns the outcome and the tier used, None when the child was killed at ``limit``;
    raises ``OSError`` when it cannot be started."""
    env = dict(call_env(ctx).env if CONTEXT_ENV_VAR not in ctx.env else ctx.env)
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
        cmd, env = wrap(
            cmd,
            env,
            workspace=ctx.workspace_root,
            readable=(ctx.skill_dir, *env["PYTHONPATH"].split(os.pathsep)),
            network=network,
        )
        # JSON escaping can grow text; the child already capped output and error.
        stdout_limit, stderr_limit = 16 * output_cap + 65_536, 4 * output_cap
    else:
        cmd, stdin = [python, path, *argv], b""
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
        leave_nothing=isolated,
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


def serve(request: bytes, *, own_process: bool = False) -> str:
    """Run the pickled request and return the JSON reply (the child's whole job, minus fds).

    ``own_process``: this process exists for this one call (as started by ``run_in_child``),
    so its environment becomes the call's and a plain script runs here as ``__main__``."""
    from agentsim.skills.scripts.runner import ScriptRunner

    data: dict[str, Any] = pickle.loads(request)
    ctx: SkillScriptContext = data["ctx"]
    runner = ScriptRunner(output_cap=data["output_cap"], default_timeout=math.inf)
    if own_process:
        # The call's environment exactly (PYTHONPATH was only for finding agentsim), plus
        # the tag that lets the parent find what the script starts.
        tag = os.environ.get(CALL_ID_VAR)
        os.environ.clear()
        os.environ.update(ctx.env)
        if tag is not None:
            os.environ[CALL_ID_VAR] = tag
        runner.plain_in_process = True
    call = runner.run(data["script"], data["argv"], ctx, hook=data.get("hook"))
    result = asyncio.run(call)
    return json.dumps(result.to_dict(), ensure_ascii=False)


def main(*, own_process: bool = False) -> int:
    reply = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    reply.write(serve(sys.stdin.buffer.read(), own_process=own_process))
    reply.close()
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a child process, see run_in_child
    sys.exit(main(own_process=True))
