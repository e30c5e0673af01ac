"""What a skill script knows about its call: ``SkillScriptContext`` and ``current_context()``.

The runner hands the context to ``entrypoint(argv, ctx)`` and also publishes it in a
contextvar, so helper code deep inside a script can call ``current_context()`` without
threading ``ctx`` through.

``env`` is what a subprocess of the call sees: an allow-listed snapshot of the host's
environment (``safe_env``: the few variables a script needs to behave like a normal program,
``PATH``, ``HOME``, locale, time zone, temp folder, Python's own settings), the variables its
skill declares, and the call's own variables (``call_env``: ``AGENT_WORK_DIR``, ``SKILL_ID``,
``SKILL_NAME``, ``SKILL_DIR``, as AgentSociety2's runtime sets them, plus the context as JSON
and ``PYTHONDONTWRITEBYTECODE``). Nothing else reaches it, however harmless or secret its name
looks. The same mapping is the whole environment of the subprocess tier and of ``process``
isolation. Inline and thread scripts run inside the host process and can still read
``os.environ`` themselves: inline code is trusted code.
"""

from __future__ import annotations

import contextvars
import fnmatch
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agentsim.skills import measures

__all__ = [
    "CALL_VARS",
    "CONTEXT_ENV_VAR",
    "DEFAULT_ALLOW",
    "SkillScriptContext",
    "call_env",
    "current_context",
    "looks_secret",
    "safe_env",
]

CONTEXT_ENV_VAR = "AGENTSIM_CONTEXT_JSON"
"""Environment variable that carries the context (as JSON) into a subprocess-tier script."""

CALL_VARS: tuple[str, ...] = (
    "AGENT_WORK_DIR",
    "SKILL_ID",
    "SKILL_NAME",
    "SKILL_DIR",
    CONTEXT_ENV_VAR,
    "PYTHONDONTWRITEBYTECODE",
)
"""The variables ``call_env`` sets for every call (AgentSociety2's four, then agentsim's)."""

DEFAULT_ALLOW: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
)
"""Names (``fnmatch`` patterns allowed) every script's environment may hold.

``PYTHONPATH`` is kept so that a subprocess script imports what the host imports (a
development checkout, say); it names folders, not secrets."""

# Only a diagnostic now (the allow-list is the protection): `agentsim skills validate` and
# the docs use it to warn that a declared variable looks like a credential.
_SECRET_RE = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS$|_PASS_|COOKIE|SESSION|CREDENTIAL|AUTH",
    re.IGNORECASE,
)

_CURRENT: contextvars.ContextVar[SkillScriptContext] = contextvars.ContextVar(
    "agentsim_skill_script_context"
)


def looks_secret(name: str) -> bool:
    """True when an environment variable's name suggests it holds a credential."""
    return _SECRET_RE.search(name) is not None


def _allowed(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def safe_env(
    environ: Mapping[str, str] | None = None,
    *,
    allow: Iterable[str] = DEFAULT_ALLOW,
    declared: Iterable[str] = (),
) -> Mapping[str, str]:
    """A read-only copy of the allow-listed part of ``environ`` (default ``os.environ``).

    Kept: names matching ``allow`` (exact or ``fnmatch`` patterns such as ``LC_*``) and the
    exact names in ``declared`` (the variables a skill asks for). Everything else is dropped.
    """
    source = os.environ if environ is None else environ
    patterns = tuple(allow)
    wanted = frozenset(declared)
    kept = {
        name: value for name, value in source.items() if name in wanted or _allowed(name, patterns)
    }
    return MappingProxyType(kept)


def _default_env() -> Mapping[str, str]:
    return safe_env()


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillScriptContext:
    """The calling agent and skill, as seen by one script call. Immutable and picklable.

    ``env`` is stored as a read-only mapping; build it with ``safe_env`` (the default).
    """

    workspace_root: Path  # a str is accepted and stored as a Path
    skill_id: str
    skill_name: str
    skill_dir: Path
    agent_id: str
    tick: int
    time: datetime
    env: Mapping[str, str] = field(default_factory=_default_env)

    def __post_init__(self) -> None:
        if not isinstance(self.workspace_root, Path):
            object.__setattr__(self, "workspace_root", Path(self.workspace_root))
        if not isinstance(self.env, MappingProxyType):
            object.__setattr__(self, "env", MappingProxyType(dict(self.env)))

    def state_dir(self, *parts: str) -> Path:
        """``workspace_root/state/<namespace>/<skill_name>/<parts>``; creates nothing. Two
        skills of one name in different namespaces never share it (``env:x`` -> ``env-x``)."""
        namespace = self.skill_id.rpartition("@")[0].replace(":", "-")
        return self.workspace_root.joinpath("state", namespace, self.skill_name, *parts)

    def record(self, name: str, value: float) -> None:
        """Record a measure of this agent at this tick (``ctx.record("trust", 0.4)``): it
        becomes a ``measure`` event, a column of ``open_run(...).events()`` and a plot of the
        report. Written as one line to the call's standard output, which the runner takes
        out before the output is read, so it works the same in every tier. A bad name or a
        value that is not a finite number raises ``ValueError``."""
        print(measures.line(name, value), flush=True)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (without ``env``), as shipped to subprocess scripts."""
        return {
            "workspace_root": str(self.workspace_root),
            "skill_id": self.skill_id,
            "skill_name": self.skill_name,
            "skill_dir": str(self.skill_dir),
            "agent_id": self.agent_id,
            "tick": self.tick,
            "time": self.time.isoformat(),
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, env: Mapping[str, str] | None = None
    ) -> SkillScriptContext:
        """Rebuild a context from ``to_dict()`` output (``env`` defaults to ``safe_env()``)."""
        return cls(
            workspace_root=Path(data["workspace_root"]),
            skill_id=str(data["skill_id"]),
            skill_name=str(data["skill_name"]),
            skill_dir=Path(data["skill_dir"]),
            agent_id=str(data["agent_id"]),
            tick=int(data["tick"]),
            time=datetime.fromisoformat(data["time"]),
            env=safe_env() if env is None else env,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # MappingProxyType does not pickle; ship a plain dict and re-wrap on arrival.
        return (_rebuild, (self.to_dict(), dict(self.env)))


def _rebuild(data: dict[str, Any], env: dict[str, str]) -> SkillScriptContext:
    return SkillScriptContext.from_dict(data, env=env)


def call_env(
    ctx: SkillScriptContext, extra: Mapping[str, str] = MappingProxyType({})
) -> SkillScriptContext:
    """``ctx`` with ``env`` completed into what a subprocess of this call sees: ``ctx.env``,
    then ``extra`` (the skill's declared variables), then the call's own ``CALL_VARS``.

    The runner applies it to every call, in every tier, so ``ctx.env["AGENT_WORK_DIR"]`` is
    the agent's workspace whichever way the script runs."""
    own = {
        "AGENT_WORK_DIR": str(ctx.workspace_root),
        "SKILL_ID": ctx.skill_id,
        "SKILL_NAME": ctx.skill_name,
        "SKILL_DIR": str(ctx.skill_dir),
        CONTEXT_ENV_VAR: json.dumps(ctx.to_dict(), sort_keys=True),
        # Skill folders may be shared or read-only: never leave __pycache__ behind in them.
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return replace(ctx, env={**ctx.env, **extra, **own})


def current_context() -> SkillScriptContext:
    """The context of the script call running now.

    Inside ``ScriptRunner.run`` this comes from a contextvar (so it is right per agent even
    with thousands of concurrent calls); in a subprocess-tier script it is read from the
    ``AGENTSIM_CONTEXT_JSON`` variable. Anywhere else it raises ``LookupError``.
    """
    try:
        return _CURRENT.get()
    except LookupError:
        raw = os.environ.get(CONTEXT_ENV_VAR)
        if raw is None:
            raise LookupError(
                "no skill script context: current_context() was called outside a script "
                "call; call it from code run by ScriptRunner.run (or use the ctx argument "
                "of entrypoint)"
            ) from None
        # A subprocess's whole environment is the one the runner gave it (``call_env``).
        return SkillScriptContext.from_dict(json.loads(raw), env=dict(os.environ))
