"""What the test server can be told to do wrong: one ``Fault`` per chat request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["RETRYABLE_FAULTS", "Fault", "FaultKind"]

FaultKind = Literal["status", "drop", "malformed", "no_usage", "delay", "reply"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """One misbehaviour, applied to one chat request. Build it with the class methods."""

    kind: FaultKind
    status_code: int = 200
    retry_after: float | str | None = None
    message: str = ""
    seconds: float = 0.0
    body: Any = None

    @classmethod
    def status(
        cls, code: int, *, retry_after: float | str | None = None, message: str = ""
    ) -> Fault:
        """Answer HTTP ``code`` with an OpenAI-style error body; ``retry_after`` is sent as
        the ``Retry-After`` header (seconds, or a string such as an HTTP date, as is)."""
        return cls(kind="status", status_code=code, retry_after=retry_after, message=message)

    @classmethod
    def drop(cls) -> Fault:
        """Close the connection after the headers, before the body (a crashed upstream)."""
        return cls(kind="drop")

    @classmethod
    def malformed(cls) -> Fault:
        """Answer 200 with a body that is not JSON."""
        return cls(kind="malformed")

    @classmethod
    def no_usage(cls) -> Fault:
        """Answer normally, but without the ``usage`` object."""
        return cls(kind="no_usage")

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Wait ``seconds`` on top of the server's latency, then answer normally."""
        return cls(kind="delay", seconds=seconds)

    @classmethod
    def reply(cls, body: Any) -> Fault:
        """Answer 200 with this exact JSON body (a completion of the wrong shape, say)."""
        return cls(kind="reply", body=body)

    @property
    def label(self) -> str:
        """A short name for counting: ``429``, ``drop``, ``malformed``..."""
        return str(self.status_code) if self.kind == "status" else self.kind


RETRYABLE_FAULTS: tuple[Fault, ...] = (
    Fault.status(429, retry_after=0.05, message="rate limited"),
    Fault.status(500, message="internal error"),
    Fault.status(503, message="overloaded"),
    Fault.drop(),
)
"""Faults a correct client retries until it succeeds (the default for ``fault_rate``)."""
