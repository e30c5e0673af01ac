"""Running skill scripts: ``runner`` decides and dispatches, ``inprocess`` runs a script in
this process (import cache, entrypoint calls, print capture, worker threads), ``child`` in a
subprocess or an isolated child interpreter.

Names are imported lazily: ``python -m agentsim.skills.scripts.child`` must not have imported
its own module before it runs as ``__main__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentsim._lazy import lazy_exports

if TYPE_CHECKING:
    from agentsim.skills.scripts.runner import (
        REFUSED_EXIT_CODE,
        TIMEOUT_EXIT_CODE,
        Isolation,
        Quarantined,
        ScriptResult,
        ScriptRunner,
        Tier,
    )

__all__ = [
    "REFUSED_EXIT_CODE",
    "TIMEOUT_EXIT_CODE",
    "Isolation",
    "Quarantined",
    "ScriptResult",
    "ScriptRunner",
    "Tier",
]

_LAZY: dict[str, str] = {name: "agentsim.skills.scripts.runner" for name in __all__}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
