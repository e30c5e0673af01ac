"""Where the built-in skills are: the one lookup every command and the engine use."""

from __future__ import annotations

from pathlib import Path

__all__ = ["builtin_skills_dir"]


def builtin_skills_dir() -> Path | None:
    """``skills/`` beside the package in a source checkout, else the copy shipped in the wheel
    (``agentsim/_builtin_skills``); None when neither exists."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package.parent / "skills", package / "_builtin_skills"):
        if candidate.is_dir():
            return candidate
    return None
