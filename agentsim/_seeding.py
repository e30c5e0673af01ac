"""Reproducible randomness: one experiment seed determines every generator.

Each agent (or module) gets its own ``random.Random`` derived from the seed and a stable
hash of its id, so results never depend on ``hash()`` randomisation, on process layout or
on the order in which agents happen to be stepped.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["agent_rng", "derive_seed"]


def derive_seed(seed: int, *parts: str) -> int:
    """A 64-bit seed derived from ``seed`` and ``parts`` with SHA-256 (stable everywhere)."""
    text = ":".join([str(seed), *parts]).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def agent_rng(seed: int, agent_id: str, *, stream: str = "") -> random.Random:
    """The generator of one agent (or of one named stream of it, e.g. ``stream="model"``)."""
    return random.Random(derive_seed(seed, agent_id, stream))
