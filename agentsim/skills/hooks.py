"""Hook outcomes, decisions and the ``<skill_hooks>`` prompt block.

A hook is a skill script called with ``--args-json PAYLOAD`` at ``pre_step`` or
``post_step``. Its output is shown to the model. A hook may also *decide*: when its output
is a JSON object with a ``"decision"`` key, ``skip`` (pre_step: the agent sits out this step)
or ``retry`` (post_step: a quality gate; ``feedback`` goes back to the model for another
turn). The object's ``"message"`` (or, failing that, the whole object) is what the model sees.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any, Literal

__all__ = [
    "HOOK_TYPES",
    "HookDecision",
    "HookOutcome",
    "parse_hook_output",
    "render_skill_hooks",
]

HookType = Literal["pre_step", "post_step"]
HOOK_TYPES: tuple[HookType, ...] = ("pre_step", "post_step")
DecisionKind = Literal["skip", "retry"]
# What each hook may decide besides "continue" (a plain message).
_DECISIONS: dict[str, frozenset[DecisionKind]] = {
    "pre_step": frozenset({"skip"}),
    "post_step": frozenset({"retry"}),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class HookDecision:
    kind: DecisionKind
    skill_id: str
    hook: str
    feedback: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "skill": self.skill_id,
            "hook": self.hook,
            "feedback": self.feedback,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class HookOutcome:
    skill_id: str
    hook: str
    ok: bool
    text: str
    decision: HookDecision | None = None
    elapsed: float = 0.0
    error: str | None = None
    # ``script`` is the hook's script (relative to its skill folder); ``timed_out`` marks a
    # call stopped at its timeout, and ``quarantined`` the overrun that got the script
    # quarantined (reported once, as a ``skill_quarantined`` event).
    script: str = ""
    timed_out: bool = False
    quarantined: bool = False
    log: str = ""  # what the hook's script printed (capped by the runner)
    measures: tuple[tuple[str, float], ...] = ()  # what it recorded (``ctx.record``)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "skill": self.skill_id,
            "hook": self.hook,
            "ok": self.ok,
            "text": self.text,
            "elapsed": round(self.elapsed, 6),
        }
        if self.decision is not None:
            out["decision"] = self.decision.to_dict()
        if self.error:
            out["error"] = self.error
        if self.timed_out:
            out["timed_out"] = True
        if self.quarantined:
            out["quarantined"] = True
        return out


def parse_hook_output(output: str, *, skill_id: str, hook: str) -> tuple[str, HookDecision | None]:
    """Split a hook's output into the text the model sees and an optional decision.

    A malformed decision (unknown kind, wrong hook) is not obeyed; the text says why, so
    the skill author sees the problem in the trace.
    """
    stripped = output.strip()
    if not stripped.startswith("{"):
        return output, None
    try:
        obj = json.loads(stripped)
    except ValueError:
        return output, None
    if not isinstance(obj, dict) or "decision" not in obj:
        return output, None
    kind = obj.get("decision")
    text = str(obj.get("message", "")) or output
    if kind == "continue":
        return text, None
    allowed = _DECISIONS.get(hook, frozenset())
    for decided in allowed:
        if kind == decided:
            feedback = str(obj.get("feedback", "")) or text
            return text, HookDecision(kind=decided, skill_id=skill_id, hook=hook, feedback=feedback)
    known = ", ".join(sorted({"continue", *allowed}))
    return f"{text}\n[ignored decision {kind!r}: a {hook} hook may return {known}]", None


def _truncate(text: str, cap: int) -> str:
    return f"{text[:cap]}\n[... truncated {len(text) - cap} characters]"


def _failure(error: str | None) -> str:
    # The last traceback line names the exception; the full traceback is in the trace.
    lines = (error or "").strip().splitlines()
    return f"hook failed: {lines[-1]}" if lines else "hook failed"


def render_skill_hooks(outcomes: Sequence[HookOutcome], *, cap: int = 2000) -> str:
    """The ``<skill_hooks>`` block of DESIGN.md: escaped, each hook capped at ``cap`` chars."""
    if not outcomes:
        return ""
    parts = []
    for o in outcomes:
        if o.ok:
            body = o.text.strip()
            state = "true"
        else:
            body = (o.text or _failure(o.error)).strip()
            state = "false"
        if len(body) > cap:
            body = _truncate(body, cap)
        body = escape(body, quote=False)
        parts.append(
            f'<skill_hook skill="{escape(o.skill_id)}" hook="{escape(o.hook)}" ok="{state}">\n'
            f"{body}\n</skill_hook>"
        )
    return "<skill_hooks>\n" + "\n".join(parts) + "\n</skill_hooks>"
