"""Hook outcomes, decisions, hook functions and the ``<skill_hooks>`` prompt block.

A hook is a skill script called with ``--args-json PAYLOAD`` at ``pre_step`` or
``post_step``. A script that defines a function named after the hook (``def pre_step()`` or
``async def pre_step()``, no parameters) has that function called instead (awaited when it
is async); it reads the payload with ``hook_context()``. A hook function written for
AgentSociety2 (it imports ``agentsociety2.agent.base.skill_hook_context``) is given
AgentSociety2's own hook context when that package is importable; otherwise its script's
``--args-json`` command runs, the lifecycle-hook command line every AgentSociety2 hook script
also answers. Its output is shown to the model. A hook may also *decide*: when its output
is a JSON object with a ``"decision"`` key, ``skip`` (pre_step: the agent sits out this step)
or ``retry`` (post_step: a quality gate; ``feedback`` goes back to the model for another
turn). The object's ``"message"`` (or, failing that, the whole object) is what the model sees.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.util
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from agentsim.errors import SkillError

if TYPE_CHECKING:
    from agentsim.skills.context import SkillScriptContext

__all__ = [
    "HOOK_TYPES",
    "HookContext",
    "HookDecision",
    "HookOutcome",
    "hook_caller",
    "hook_context",
    "hook_payload",
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
    # How the runner ran it (``ScriptResult.tier``, ``isolation``); empty when not run.
    tier: str = ""
    isolation: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "skill": self.skill_id,
            "hook": self.hook,
            "ok": self.ok,
            "text": self.text,
            "elapsed": round(self.elapsed, 6),
        }
        if self.tier:
            out["tier"] = self.tier
            out["isolation"] = self.isolation
        if self.decision is not None:
            out["decision"] = self.decision.to_dict()
        if self.error:
            out["error"] = self.error
        if self.timed_out:
            out["timed_out"] = True
        if self.quarantined:
            out["quarantined"] = True
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class HookContext:
    """What a hook function reads with ``hook_context()``: where it runs and its payload
    (``hook_type``, ``tick``, ``time``, ``agent_id``, ``step_count``). The names are those of
    AgentSociety2's hook context, so a hook ports by changing one import."""

    workspace_root: Path
    skill_dir: Path
    skill_id: str
    hook_type: str
    payload: Mapping[str, Any]


_HOOK: contextvars.ContextVar[HookContext | None] = contextvars.ContextVar(
    "agentsim_hook_context", default=None
)


def hook_context() -> HookContext:
    """The context of the hook function being called (in its own task or thread)."""
    ctx = _HOOK.get()
    if ctx is None:
        raise SkillError(
            "hook_context() was called outside a lifecycle hook; call it from a skill "
            "script's pre_step() or post_step() function (entrypoints get ctx as an argument)"
        )
    return ctx


def hook_payload(argv: Sequence[str]) -> dict[str, Any]:
    """The payload of a hook call's ``["--args-json", PAYLOAD]`` (empty when it has none)."""
    if len(argv) == 2 and argv[0] == "--args-json":
        try:
            loaded = json.loads(argv[1])
        except ValueError:
            return {}
        if isinstance(loaded, dict):
            return loaded
    return {}


# AgentSociety2's hook functions read their context from this module of theirs.
_AS2_HOOK_MODULE = "agentsociety2.agent.base.skill_hook_context"


@functools.cache
def _as2_hook_module() -> ModuleType | None:
    """AgentSociety2's hook-context module when it imports here (once per process)."""
    if importlib.util.find_spec("agentsociety2") is None:
        return None
    try:
        module = importlib.import_module(_AS2_HOOK_MODULE)
    except Exception:  # an install missing its dependencies: not usable
        return None
    needed = ("HookContext", "_set_hook_context", "_reset_hook_context")
    return module if all(hasattr(module, n) for n in needed) else None


def _reads_as2_context(fn: Callable[..., Any]) -> bool:
    code = getattr(fn, "__code__", None)
    return code is not None and _AS2_HOOK_MODULE in code.co_names


HookCall = Callable[[list[str], "SkillScriptContext"], Any]


def hook_caller(
    fn: Callable[..., Any], hook: str, argv: Sequence[str], ctx: SkillScriptContext
) -> HookCall | None:
    """``fn`` (a script's ``pre_step`` / ``post_step``) as an ``entrypoint(argv, ctx)``-style
    call that sets its hook context; None when it cannot run here (an AgentSociety2 hook
    without AgentSociety2 installed): the caller runs the script's hook command instead."""
    hctx = HookContext(
        workspace_root=ctx.workspace_root,
        skill_dir=ctx.skill_dir,
        skill_id=ctx.skill_id,
        hook_type=hook,
        payload=hook_payload(argv),
    )
    as2 = None
    if _reads_as2_context(fn):
        as2 = _as2_hook_module()
        if as2 is None:
            return None
    required = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        names = ", ".join(p.name for p in required)

        def refuse(argv: list[str], ctx: SkillScriptContext) -> Any:
            raise SkillError(
                f"hook function {hook}({names}) of skill {ctx.skill_id} takes arguments; "
                f"define {hook}() without parameters and read the payload with hook_context()"
            )

        return refuse

    def enter() -> tuple[contextvars.Token[HookContext | None], Any]:
        token = _HOOK.set(hctx)
        if as2 is None:
            return token, None
        theirs = as2.HookContext(
            workspace_root=hctx.workspace_root,
            skill_dir=hctx.skill_dir,
            skill_id=hctx.skill_id,
            hook_type=hook,
            payload=dict(hctx.payload),
        )
        return token, as2._set_hook_context(theirs)

    def leave(tokens: tuple[contextvars.Token[HookContext | None], Any]) -> None:
        if as2 is not None:
            as2._reset_hook_context(tokens[1])
        _HOOK.reset(tokens[0])

    if inspect.iscoroutinefunction(fn):
        afn: Callable[[], Awaitable[Any]] = fn

        async def call_async(argv: list[str], ctx: SkillScriptContext) -> Any:
            tokens = enter()
            try:
                return await afn()
            finally:
                leave(tokens)

        return call_async

    def call(argv: list[str], ctx: SkillScriptContext) -> Any:
        tokens = enter()
        try:
            return fn()
        finally:
            leave(tokens)

    return call


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
