"""Measures a skill records for its agent: a study's own variable (trust, say) per step.

A script or hook records one with ``ctx.record("trust", 0.4)``; a plain script (or any
program a script starts) prints the line ``AGENTSIM_MEASURE trust 0.4`` to its standard
output. Either way the line travels with the call's output, whatever tier ran it (in-process,
wrapper, subprocess, a child process), and the runner takes every such line out of the
output and the log before anyone reads them: the model never sees them, and each becomes a
``measure`` event (agent, tick, skill, name, value).
"""

from __future__ import annotations

import math
import re

__all__ = ["PREFIX", "Measure", "line", "split"]

PREFIX = "AGENTSIM_MEASURE"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_LINE = re.compile(rf"{PREFIX} (\S+) (\S+)[ \t]*")

Measure = tuple[str, float]
"""A measure's name and value."""


def _checked(name: object, value: object) -> Measure:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"measure name {name!r} is not valid: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or '_'"
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"measure {name!r}: the value must be a number, not {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"measure {name!r}: the value must be finite, not {number!r}")
    return name, number


def line(name: str, value: float) -> str:
    """The output line that records ``value`` for ``name`` (``ValueError`` if either is bad)."""
    name, number = _checked(name, value)
    return f"{PREFIX} {name} {number!r}"


def split(text: str) -> tuple[str, list[Measure]]:
    """``text`` without its measure lines, and the measures they recorded, in order. A line
    that starts with the prefix but does not parse stays in the text, so a script author
    sees it where the output goes."""
    if PREFIX not in text:
        return text, []
    kept: list[str] = []
    found: list[Measure] = []
    for raw in text.splitlines(keepends=True):
        m = _LINE.fullmatch(raw.rstrip("\r\n"))
        if m is not None:
            try:
                found.append(_checked(m.group(1), float(m.group(2))))
                continue
            except ValueError:
                pass
        kept.append(raw)
    return "".join(kept), found
