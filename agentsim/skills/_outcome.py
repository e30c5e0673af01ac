"""Results of skill-script calls: ``ScriptResult`` and the helpers that build it.

Private to ``agentsim.skills`` (``ScriptResult`` is re-exported by ``scripts``). Output and
tracebacks are capped here, with a visible truncation marker.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = [
    "CappedWriter",
    "Outcome",
    "ScriptResult",
    "Tier",
    "cap_text",
    "exit_status",
    "format_exc",
    "outcome_from_exception",
    "outcome_from_value",
]

Tier = Literal["entrypoint", "wrapper", "subprocess"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptResult:
    """The outcome of one script call. A failing script is a result, never an exception.

    ``tier`` is how the script ran and ``isolation`` how it was isolated. ``output`` is what
    the script returned (or, for a plain script, printed), cut to the runner's cap when
    ``truncated``. ``log`` holds what an entrypoint printed (and any script's stderr when it
    succeeded), capped as well: it belongs in the trace, never on the terminal.
    ``timed_out`` marks a call stopped (or walked away from) at its timeout;
    ``quarantined`` a call refused, or the overrun that got the script quarantined.
    """

    ok: bool
    output: str
    exit_code: int
    error: str | None
    elapsed: float
    tier: Tier
    timed_out: bool = False
    isolation: str = "inline"
    truncated: bool = False
    log: str = ""
    quarantined: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict, for traces."""
        return asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """A script call's result before timing, tier and isolation are attached."""

    ok: bool
    output: str
    exit_code: int
    error: str | None
    truncated: bool = False
    log: str = ""


class CappedWriter:
    """A text sink that keeps the first ``cap`` characters and counts the rest.

    Used for captured prints; writes come from one call's thread or task at a time, and a
    lost race between two threads of one script could only misorder its own lines."""

    def __init__(self, cap: int) -> None:
        self._parts: list[str] = []
        self._cap = cap
        self._room = cap
        self.dropped = 0

    def write(self, text: str) -> int:
        kept = text[: max(self._room, 0)]
        if kept:
            self._parts.append(kept)
            self._room -= len(kept)
        self.dropped += len(text) - len(kept)
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered."""

    def getvalue(self) -> str:
        return "".join(self._parts)

    def capped(self) -> tuple[str, bool]:
        """The text kept, with a truncation marker when something was dropped."""
        return cap_text(self.getvalue(), self._cap, self.dropped)


def exit_status(exc: SystemExit) -> tuple[int, str | None]:
    code = exc.code
    if code is None:
        return 0, None
    if isinstance(code, int):
        return code, None
    return 1, str(code)  # sys.exit("message") means failure with that message


def format_exc(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def cap_text(text: str, cap: int, dropped: int = 0) -> tuple[str, bool]:
    """``text`` cut to ``cap`` characters plus a marker naming how much was cut."""
    if len(text) <= cap and not dropped:
        return text, False
    extra = max(len(text) - cap, 0) + dropped
    return f"{text[:cap]}\n...[truncated {extra} chars]", True


def outcome_from_value(value: Any, cap: int) -> Outcome:
    """An entrypoint's return value as output: str as is, JSON data dumped, None empty."""
    if value is None:
        return Outcome(ok=True, output="", exit_code=0, error=None)
    if isinstance(value, dict | list | tuple):
        try:
            text = json.dumps(value, sort_keys=True)
        except (TypeError, ValueError) as exc:
            return Outcome(
                ok=False,
                output="",
                exit_code=1,
                error=f"entrypoint returned {type(value).__name__} that is not JSON "
                f"serialisable ({exc}); return a str or plain JSON data",
            )
    else:
        text = value if isinstance(value, str) else str(value)
    output, truncated = cap_text(text, cap)
    return Outcome(ok=True, output=output, exit_code=0, error=None, truncated=truncated)


def outcome_from_exception(exc: BaseException, cap: int) -> Outcome:
    """``SystemExit(n)`` gives exit code n; anything else exit code 1 and the traceback."""
    if isinstance(exc, SystemExit):
        code, message = exit_status(exc)
        return Outcome(ok=code == 0, output="", exit_code=code, error=message)
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None:
        # Drop the runner's own frame (the one that called the script): the trace starts at
        # the script, and reads the same whichever runner path made the call.
        exc = exc.with_traceback(tb.tb_next)
    error, _ = cap_text(format_exc(exc), cap)
    return Outcome(ok=False, output="", exit_code=1, error=error)
