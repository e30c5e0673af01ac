"""Whether an answer only copies its own prompt (an ``echo``).

A small model asked a survey question often answers with a sentence of its prompt (the
observation's "Your opinion on the new park is -0.67 (-1 against, +1 for).") instead of an
answer of its own. Such an answer is flagged, never changed: the researcher decides.
"""

from __future__ import annotations

import re

__all__ = ["MIN_ECHO_CHARS", "echoes"]

MIN_ECHO_CHARS = 12
"""An answer shorter than this (once its whitespace is collapsed) is never an echo: "Yes."
or "I agree" may well be in a prompt and still be the agent's own answer."""

_SPACE = re.compile(r"\s+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_QUOTES = "\"'` \u201c\u201d\u2018\u2019"


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def echoes(answer: str, prompt: str) -> bool:
    """True when ``answer`` (at least ``MIN_ECHO_CHARS`` long) is made only of lines or
    sentences found word for word in ``prompt`` (whitespace and case aside, quotes around
    a sentence ignored)."""
    whole = _norm(answer).strip(_QUOTES)
    if len(whole) < MIN_ECHO_CHARS:
        return False
    text = _norm(prompt)
    if whole in text:
        return True
    parts = [_norm(p).strip(_QUOTES) for p in _SENTENCE.split(answer)]
    parts = [p for p in parts if p]
    return bool(parts) and all(p in text for p in parts)
