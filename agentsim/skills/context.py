"""What a skill script knows about its call: ``SkillScriptContext`` and ``current_context()``.

The runner hands the context to ``entrypoint(argv, ctx)`` and also publishes it in a
contextvar, so helper code deep inside a script can call ``current_context()`` without
threading ``ctx`` through. Nothing here reads or writes ``os.environ`` on the call path:
``env`` is a snapshot taken by ``safe_env``, cached once per process.
"""

from __future__ import annotations

import contextvars
import fnmatch
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from agentsim._draft import draft_class

__all__ = [
    "CONTEXT_ENV_VAR",
    "DEFAULT_ALLOW",
    "SkillScriptContext",
    "current_context",
    "looks_secret",
    "safe_env",
]

CONTEXT_ENV_VAR = "AGENTSIM_CONTEXT_JSON"
"""Environment variable that carries the context (as JSON) into a subprocess-tier script."""

DEFAULT_ALLOW: frozenset[str] = frozenset(
    {
        "PATH",
        "HOME",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "PYTHONIOENCODING",
        "TMPDIR",
        "USER",
        "AGENTSIM_*",
    }
)
"""Names (``fnmatch`` patterns allowed) copied into a script's environment snapshot."""

# Substrings, matched case-insensitively; deliberately broad (KEY also hits KEYBOARD) because
# leaking one credential into thousands of agent workspaces costs more than a lost variable.
_SECRET_RE = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)

_CURRENT: contextvars.ContextVar[SkillScriptContext] = contextvars.ContextVar(
    "agentsim_skill_script_context"
)

_default_env: Mapping[str, str] | None = None


def looks_secret(name: str) -> bool:
    """True when an environment variable's name suggests it holds a credential."""
    return _SECRET_RE.search(name) is not None


def _filter_env(environ: Mapping[str, str], allow: Iterable[str]) -> Mapping[str, str]:
    exact = {a for a in allow if not any(c in a for c in "*?[")}
    patterns = [a for a in allow if a not in exact]
    out = {
        name: value
        for name, value in environ.items()
        if (name in exact or any(fnmatch.fnmatchcase(name, p) for p in patterns))
        and not looks_secret(name)
    }
    return MappingProxyType(out)


def safe_env(
    environ: Mapping[str, str] | None = None, *, allow: Iterable[str] = DEFAULT_ALLOW
) -> Mapping[str, str]:
    """A read-only, allow-listed copy of ``environ`` (default ``os.environ``) without secrets.

    Only names in ``allow`` (exact or ``fnmatch`` patterns such as ``AGENTSIM_*``) are kept,
    and of those every name matching ``looks_secret`` is dropped. The default call (no
    arguments) is computed once per process and shared, since every agent builds contexts:
    later changes to ``os.environ`` are not seen by it.
    """
    global _default_env
    if environ is None and allow is DEFAULT_ALLOW:
        if _default_env is None:
            _default_env = _filter_env(os.environ, DEFAULT_ALLOW)
        return _default_env
    return _filter_env(os.environ if environ is None else environ, allow)


def _default_env_factory() -> Mapping[str, str]:
    return safe_env()


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillScriptContext:
    """The calling agent and skill, as seen by one script call. Immutable and picklable.

    ``env`` is always a read-only mapping without secret-looking names: a plain mapping
    passed in is copied and filtered with ``looks_secret`` (the allow-list is ``safe_env``'s
    job; the secret filter is enforced here as a second line of defence).
    """

    workspace_root: Path
    skill_id: str
    skill_name: str
    skill_dir: Path
    agent_id: str
    tick: int
    time: datetime
    env: Mapping[str, str] = field(default_factory=_default_env_factory)

    def __post_init__(self) -> None:
        # The shared default snapshot is already clean; skipping it keeps construction
        # cheap for the common case of one context per agent per call.
        if self.env is not _default_env:
            clean = {k: v for k, v in self.env.items() if not looks_secret(k)}
            object.__setattr__(self, "env", MappingProxyType(clean))

    def state_dir(self, *parts: str) -> Path:
        """``workspace_root/state/<skill_name with _>/<parts>``; creates nothing."""
        return self.workspace_root.joinpath("state", self.skill_name.replace("-", "_"), *parts)

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


_ContextDraft = draft_class(SkillScriptContext)
_new = object.__new__


def make_context(
    workspace_root: Path,
    skill_id: str,
    skill_name: str,
    skill_dir: Path,
    agent_id: str,
    tick: int,
    time: datetime,
    env: Mapping[str, str],
) -> SkillScriptContext:
    """A context built without the dataclass ``__init__`` (~0.4 µs instead of ~3 µs): for
    the runtime's hot path, which makes one per hook call. ``env`` must come from
    ``safe_env`` (already filtered and read-only): nothing is checked here."""
    ctx = _new(_ContextDraft)
    ctx.workspace_root = workspace_root
    ctx.skill_id = skill_id
    ctx.skill_name = skill_name
    ctx.skill_dir = skill_dir
    ctx.agent_id = agent_id
    ctx.tick = tick
    ctx.time = time
    ctx.env = env
    ctx.__class__ = SkillScriptContext
    return cast(SkillScriptContext, ctx)


def _rebuild(data: dict[str, Any], env: dict[str, str]) -> SkillScriptContext:
    return SkillScriptContext.from_dict(data, env=env)


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
        return SkillScriptContext.from_dict(json.loads(raw))
