"""Path rules of a skill's files: relative paths that stay inside the skill folder."""

from __future__ import annotations

import os
from stat import S_ISLNK, S_ISREG
from typing import Any

from agentsim._paths import is_inside

__all__ = ["file_problem", "path_problem"]


def path_problem(value: Any) -> str | None:
    """Why ``value`` is not a safe path relative to the skill folder, or None."""
    if not isinstance(value, str) or not value.strip():
        kind = "null" if value is None else type(value).__name__
        return f"must be a relative path string, got {kind}"
    normal = value.replace("\\", "/")
    if normal.startswith("/") or (value[1:2] == ":" and value[0].isascii() and value[0].isalpha()):
        return f"{value!r} is absolute; give a path relative to the skill folder"
    if ".." in normal.split("/"):
        return f"{value!r} leaves the skill folder ('..'); keep scripts inside it"
    return None


def file_problem(folder: str, rel: str) -> str | None:
    """Why ``folder/rel`` is not a regular file inside ``folder``, or None.

    A symlink anywhere on the way is allowed while the file it reaches stays inside.
    """
    current = folder
    linked = False
    mode = 0
    for part in rel.replace("\\", "/").split("/"):
        if part and part != ".":
            current = os.path.join(current, part)
            try:
                mode = os.lstat(current).st_mode
            except OSError:
                return "does not exist; create it or fix the path"
            linked = linked or S_ISLNK(mode)
    if linked:
        if not is_inside(current, folder):
            return "is a symlink that leaves the skill folder; copy the file into the skill"
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return "is a broken symlink; point it at a file in the skill folder"
    if not S_ISREG(mode):  # also when ``rel`` names the folder itself (mode 0)
        return "is not a regular file"
    return None
