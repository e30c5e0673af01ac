"""Small readers shared by the inspection modules.

A run folder may hold files a skill script wrote, so its readers never follow a symbolic
link: a link where a file of the run should be (``profile.json`` pointing at a file outside
the run, say) is refused with a ``RunError`` naming it (``open_file``)."""

from __future__ import annotations

import difflib
import errno
import json
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from agentsim.errors import RunError
from agentsim.run.checkpoints import read_agents_state

__all__ = ["close_matches", "iter_jsonl", "open_file", "read_checkpoint_agents", "read_json"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_file(path: Path, *, what: str = "file") -> IO[bytes]:
    """``path`` opened for reading, never through a symbolic link and only if it is a
    regular file. ``FileNotFoundError`` when it is missing; a link or anything but a file is
    a ``RunError``."""
    try:
        # Non-blocking: a FIFO planted in its place must not hang the reader.
        flags = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno != errno.ENOENT and os.path.islink(path)):
            raise RunError(
                f"{what} {path} is a symbolic link; links inside a run folder are never "
                "followed: replace it by the file itself"
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunError(f"{what} {path} is not a regular file; it is not read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of the complete lines of ``path`` as it is now, streamed.

    The size is taken once at the start, so lines a live writer appends meanwhile are not
    read; a last line without its newline (a write in progress, or a crash) is skipped, and
    so is a line that is not a JSON object. A symbolic link is a ``RunError``."""
    try:
        f = open_file(path)
    except FileNotFoundError:
        return
    with f:
        size = os.fstat(f.fileno()).st_size
        done = 0
        for raw in f:
            done += len(raw)
            if done > size or not raw.endswith(b"\n"):
                return
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


def read_json(path: Path, *, what: str) -> dict[str, Any]:
    """A JSON object file; a missing or broken one, or a symbolic link, is a ``RunError``
    naming it."""
    try:
        with open_file(path, what=what) as f:
            data = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise RunError(f"{what} {path} is missing; the run folder is incomplete") from None
    except ValueError as exc:
        raise RunError(f"{what} {path} is not valid JSON ({exc}); it may be damaged") from None
    if not isinstance(data, dict):
        raise RunError(f"{what} {path} does not hold a JSON object; it may be damaged")
    return data


def read_checkpoint_agents(cp: Path) -> dict[str, Any]:
    """The agents' states a checkpoint folder saved (``read_agents_state``), with errors a
    reader can act on."""
    try:
        data = read_agents_state(cp)
    except FileNotFoundError:
        raise RunError(f"checkpoint {cp} holds no agents' states; it is incomplete") from None
    except (OSError, EOFError, ValueError) as exc:
        raise RunError(f"checkpoint {cp} cannot be read ({exc}); it may be damaged") from None
    if not isinstance(data, dict):
        raise RunError(f"checkpoint {cp} does not hold a JSON object; it may be damaged")
    return data


def close_matches(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return f" (close matches: {', '.join(close)})" if close else f" ({len(known)} agents)"
