"""Small readers shared by the inspection modules."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentsim.errors import RunError
from agentsim.run.checkpoints import read_agents_state

__all__ = ["close_matches", "iter_jsonl", "read_checkpoint_agents", "read_json"]


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of the complete lines of ``path`` as it is now, streamed.

    The size is taken once at the start, so lines a live writer appends meanwhile are not
    read; a last line without its newline (a write in progress, or a crash) is skipped, and
    so is a line that is not a JSON object."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    done = 0
    with open(path, "rb") as f:
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
    """A JSON object file; a missing or broken one is a ``RunError`` naming it."""
    try:
        data = json.loads(path.read_text("utf-8"))
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
