"""The one token estimate every budget uses (catalog, memory, prompt cap)."""

from __future__ import annotations

__all__ = ["estimate_tokens"]


def estimate_tokens(text: str) -> int:
    """A cheap, deterministic token estimate (about four characters per token)."""
    return (len(text) + 3) // 4
