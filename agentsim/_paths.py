"""The one check that a path stays inside a folder once symlinks and ``..`` are resolved."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["is_inside"]


def is_inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``folder`` or below it, both resolved (symlinks followed).

    A link inside the folder that points out of it is outside; a link that leaves and comes
    back in is inside. The path need not exist: what exists of it is resolved.
    """
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))
