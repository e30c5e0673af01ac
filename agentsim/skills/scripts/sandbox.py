"""The operating system's sandbox around ``process`` isolation: bubblewrap (``bwrap``).

A process-isolated script runs as ``bwrap [mounts and namespaces] -- python -m
agentsim.skills.scripts.child``. Inside it:

- a new PID namespace with its own ``/proc``: no other process of the machine is visible, so
  ``/proc/<pid>/environ`` and ``/proc/<pid>/mem`` of the host cannot be read (its PID 1 is
  bubblewrap's own init, which carries only the call's scrubbed environment);
- a new user namespace in which the script is ``nobody`` with no capabilities and cannot
  create user namespaces of its own; ``no_new_privs`` is set (set-uid programs gain
  nothing); a new session (no terminal to inject keystrokes into);
- the whole file system read-only; the agent's workspace the one writable folder; ``/tmp``,
  ``/var/tmp``, ``/run`` and the user's home are empty private folders (``/tmp`` is the
  script's temp, ``TMPDIR``), discarded at the end of the call; the folders Python and the
  skill need that lie under them are mounted back read-only;
- no network (a network namespace with only a down loopback) unless the skill declares
  ``network: true``; IPC and host name namespaces of its own.

``sandbox()`` finds out once per process, by starting a sandboxed ``python -c`` with exactly
these options, whether this machine can do it (bubblewrap installed, user namespaces allowed).
When it cannot, ``process`` isolation still runs the script in a process of its own with the
scrubbed environment but without that containment: ``warn_unsandboxed()`` says so on stderr
and the run's ``run_start`` event records it (``sandbox``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from agentsim._paths import is_inside

__all__ = [
    "SANDBOX_TMP",
    "Sandbox",
    "sandbox",
    "sandbox_argv",
    "sandbox_env",
    "warn_unsandboxed",
    "wrap",
]

SANDBOX_TMP = "/tmp"
"""The script's temp folder inside the sandbox (``TMPDIR``): empty at each call."""

_PROBE_TIMEOUT = 20.0
_FIX = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow unprivileged "
    "user namespaces (sysctl kernel.unprivileged_userns_clone=1), or run only trusted skills"
)
_warned = False


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What this machine gives ``process`` isolation: ``bwrap`` (the program's path) when
    the sandbox works, else None and ``problem`` (why not)."""

    bwrap: str | None
    problem: str | None = None
    # bubblewrap older than 0.8 has no --disable-userns: the sandbox goes without it.
    disable_userns: bool = True

    @property
    def available(self) -> bool:
        return self.bwrap is not None

    def describe(self) -> str:
        """``bubblewrap`` or ``none: <why>``, as recorded in the ``run_start`` event."""
        return "bubblewrap" if self.bwrap is not None else f"none: {self.problem}"


def _masked() -> tuple[str, ...]:
    """The folders replaced by empty private ones inside the sandbox."""
    out = [SANDBOX_TMP, "/var/tmp", "/run"]
    home = os.environ.get("HOME", "")
    if os.path.isabs(home) and os.path.realpath(home) != "/":
        out.append(os.path.realpath(home))
    return tuple(p for p in out if os.path.isdir(p))


def _needed(extra: Iterable[str | os.PathLike[str]], network: bool) -> list[str]:
    """The folders a sandboxed Python needs to read, absolute and resolved."""
    paths: list[str] = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *(p for p in sys.path if p),
        *(os.fspath(p) for p in extra),
    ]
    if network:  # the resolver's configuration may live under /run
        paths.append(os.path.dirname(os.path.realpath("/etc/resolv.conf")))
    out = {os.path.realpath(p) for p in paths if os.path.isabs(os.fspath(p))}
    return sorted(p for p in out if os.path.exists(p))


def sandbox_argv(
    bwrap: str,
    *,
    workspace: str | os.PathLike[str],
    readable: Iterable[str | os.PathLike[str]] = (),
    network: bool = False,
    disable_userns: bool = True,
) -> list[str]:
    """The ``bwrap`` command line (up to and including ``--``) that runs a program in the
    sandbox described above, ``workspace`` its one writable folder and its working folder;
    ``readable``: more folders it must read (the skill's folder, ``PYTHONPATH``)."""
    work = os.path.abspath(workspace)
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    masked = _masked()
    for folder in masked:
        argv += ["--tmpfs", folder]
    for path in _needed(readable, network):
        if any(is_inside(path, m) for m in masked) and not is_inside(path, work):
            argv += ["--ro-bind", path, path]
    argv += ["--bind", work, work, "--chdir", work]
    argv += ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--uid", "65534", "--gid", "65534"]
    argv += ["--disable-userns"] if disable_userns else []
    argv += ["--cap-drop", "ALL", "--new-session", "--die-with-parent"]
    if not network:
        argv.append("--unshare-net")
    argv.append("--")
    return argv


def sandbox_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as a sandboxed script sees it: its temp folder is the private one."""
    return {**env, "TMPDIR": SANDBOX_TMP}


@functools.cache
def sandbox() -> Sandbox:
    """Whether this machine can sandbox ``process`` isolation, found by trying (once)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Sandbox(None, f"bwrap is not installed (not found on PATH); {_FIX}")
    detail = ""
    with tempfile.TemporaryDirectory(prefix="agentsim-sandbox-") as work:
        for disable_userns in (True, False):
            argv = sandbox_argv(bwrap, workspace=work, disable_userns=disable_userns)
            try:
                done = subprocess.run(
                    [*argv, sys.executable, "-c", "pass"],
                    capture_output=True,
                    timeout=_PROBE_TIMEOUT,
                    env={"PATH": os.environ.get("PATH", os.defpath)},
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                return Sandbox(None, f"{bwrap} cannot run ({exc}); {_FIX}")
            if done.returncode == 0:
                return Sandbox(bwrap, disable_userns=disable_userns)
            why = done.stderr.decode("utf-8", "replace").strip().splitlines()
            detail = detail or (why[-1] if why else f"exit code {done.returncode}")
    return Sandbox(None, f"{bwrap} fails on this machine ({detail}); {_FIX}")


def warn_unsandboxed(found: Sandbox, *, stream: TextIO | None = None) -> bool:
    """Say once per process, on stderr, that ``process`` isolation runs without the sandbox;
    True when this call said it."""
    global _warned
    if found.available or _warned:
        return False
    _warned = True
    out = sys.stderr if stream is None else stream
    print(
        "WARNING: isolation: process runs skill scripts WITHOUT a sandbox on this machine "
        f"({found.problem}). Such a script can read the host's environment and memory "
        "and write anywhere this user can.",
        file=out,
        flush=True,
    )
    return True


def wrap(
    cmd: Sequence[str],
    env: Mapping[str, str],
    *,
    workspace: str | os.PathLike[str],
    readable: Iterable[str | os.PathLike[str]],
    network: bool,
) -> tuple[list[str], dict[str, str]]:
    """``cmd`` and ``env`` to run in the sandbox, or unchanged (with the warning) without."""
    found = sandbox()
    if not found.available or found.bwrap is None:
        warn_unsandboxed(found)
        return list(cmd), dict(env)
    argv = sandbox_argv(
        found.bwrap,
        workspace=workspace,
        readable=readable,
        network=network,
        disable_userns=found.disable_userns,
    )
    return [*argv, *cmd], sandbox_env(env)
