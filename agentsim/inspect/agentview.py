"""One agent of a run, read-only: profile, skills over time, steps, prompts, files.

Only this agent's files and rows are read: its folder (``profile.json``, ``memory.jsonl``,
``state/``) and, in a layout-2 run, its rows in its host's shard (``agentsim.inspect._store``);
a layout-1 run kept its trace, skills and prompts in the folder too. The trace is streamed
once, keeping the last N steps, so looking at one agent costs the same in a run of ten
agents or of a million.
"""

from __future__ import annotations

import re
import stat
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsim.errors import ConfigError, RunError
from agentsim.inspect._files import iter_jsonl, open_file, read_json
from agentsim.inspect._store import AgentRows

__all__ = [
    "HISTORY_LAST",
    "AgentHistory",
    "AgentRecord",
    "Prompt",
    "StepRecord",
    "WorkspaceFile",
]

HISTORY_LAST = 5
"""How many steps ``AgentRecord.history()`` keeps unless told otherwise."""

_HOOKS_BLOCK = re.compile(r"<skill_hooks>.*?</skill_hooks>", re.S)


def _render_hooks(hooks: tuple[Mapping[str, Any], ...]) -> str:
    """The block from the trace's hook records, for steps whose prompt is not in the trace
    (a skipped step, or a run with --trace summary)."""
    from agentsim.skills.hooks import HookOutcome, render_skill_hooks

    outcomes = [
        HookOutcome(
            skill_id=str(h.get("skill", "")),
            hook=str(h.get("hook", "")),
            ok=bool(h.get("ok", True)),
            text=str(h.get("text", "")),
            error=h.get("error"),
        )
        for h in hooks
    ]
    return render_skill_hooks(outcomes)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """One step of an agent's trace (a trace row of its host's shard, or a line of a
    layout-1 ``trace.jsonl``)."""

    tick: int
    time: str
    action: str
    skill_hooks: str  # the <skill_hooks> block of the step's user message ("" if none)
    hooks: tuple[Mapping[str, Any], ...]
    post_hooks: tuple[Mapping[str, Any], ...]
    calls: tuple[Mapping[str, Any], ...]  # {tool, args, result}
    model_calls: int
    usage: Mapping[str, int]
    elapsed_ms: float
    system_sha: str | None
    limitation: str | None
    skipped: bool  # no model prompt: a pre_step hook decided to skip the step
    # What a reasoning model thought apart from its answers, one text per model call that
    # had some (``reasoning_content`` / ``reasoning``, ``<think>`` blocks); never an action.
    reasoning: tuple[str, ...] = ()

    @classmethod
    def from_trace(cls, d: Mapping[str, Any]) -> StepRecord:
        user = str(d.get("user") or "")
        m = _HOOKS_BLOCK.search(user)
        hooks = tuple(h for h in d.get("hooks") or () if isinstance(h, dict))
        return cls(
            tick=int(d.get("tick", -1)),
            time=str(d.get("time", "")),
            action=str(d.get("action", "")),
            skill_hooks=m.group(0) if m else _render_hooks(hooks),
            hooks=hooks,
            post_hooks=tuple(d.get("post_hooks") or ()),
            calls=tuple(d.get("calls") or ()),
            model_calls=int(d.get("model_calls", 0)),
            usage=dict(d.get("usage") or {}),
            elapsed_ms=float(d.get("elapsed_ms", 0.0)),
            system_sha=d.get("system_sha"),
            limitation=d.get("limitation"),
            skipped=d.get("system_sha") is None
            and any((h.get("decision") or {}).get("kind") == "skip" for h in hooks),
            reasoning=tuple(str(r) for r in d.get("reasoning") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tick": self.tick,
            "time": self.time,
            "action": self.action,
            "skipped": self.skipped,
            "skill_hooks": self.skill_hooks,
            "hooks": list(self.hooks),
            "post_hooks": list(self.post_hooks),
            "calls": list(self.calls),
            "model_calls": self.model_calls,
            "usage": dict(self.usage),
            "elapsed_ms": self.elapsed_ms,
            "system_sha": self.system_sha,
            "limitation": self.limitation,
            "reasoning": list(self.reasoning),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentHistory:
    """What one pass over the trace gives: skills over time, step count, the last steps."""

    skills_over_time: tuple[tuple[int, tuple[str, ...]], ...]
    steps_total: int
    last_steps: tuple[StepRecord, ...]

    @property
    def more(self) -> str:
        """How to see the steps left out ("" when every step is in ``last_steps``)."""
        left_out = self.steps_total - len(self.last_steps)
        if left_out <= 0:
            return ""
        return (
            f"the last {len(self.last_steps)} of {self.steps_total} steps ({left_out} left "
            "out); pass history(last=N) for more, or history(last=None) for all"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "skills_over_time": [
                {"tick": t, "active": list(active)} for t, active in self.skills_over_time
            ],
            "steps_total": self.steps_total,
            "last_steps": [s.to_dict() for s in self.last_steps],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceFile:
    path: str  # relative to the agent's folder, with /
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size}


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    """The messages an agent's model saw at the start of one step."""

    agent_id: str
    tick: int
    time: str
    system_sha: str
    system: str
    user: str

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "tick": self.tick,
            "time": self.time,
            "system_sha": self.system_sha,
            "system": self.system,
            "user": self.user,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRecord:
    """One agent of a run. Build it with ``Run.agent(agent_id)``."""

    agent_id: str
    root: Path  # the agent's folder
    store: AgentRows | None = None  # its rows in the shards; None in a layout-1 run

    def profile(self) -> dict[str, Any]:
        """``profile.json``: the profile fields plus agent_id, group and persona."""
        return read_json(self.root / "profile.json", what=f"profile of agent {self.agent_id!r}")

    def skills(self) -> dict[str, Any]:
        """{"active": [...], "step_count": n} as last written; {} before the first flush."""
        if self.store is not None:
            return self.store.skills()
        p = self.root / "skills.json"
        return read_json(p, what=f"skills of agent {self.agent_id!r}") if p.is_file() else {}

    def memory(self) -> list[dict[str, Any]]:
        return list(iter_jsonl(self.root / "memory.jsonl"))

    def trace(self) -> Iterator[dict[str, Any]]:
        """The raw trace lines, streamed."""
        if self.store is not None:
            return (d for d in self.store.rows("trace") if isinstance(d, dict))
        return iter_jsonl(self.root / "trace.jsonl")

    def history(self, *, last: int | None = HISTORY_LAST) -> AgentHistory:
        """One pass over the trace: the active set each time it changed, and the last steps.

        Only the last ``last`` steps are kept (default ``HISTORY_LAST`` = 5), so that a long
        trace costs little memory; ``last=N`` keeps more, ``last=None`` keeps every step.
        ``AgentHistory.more`` says how many were left out."""
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
            raise ConfigError(
                "last",
                f"history(last={last!r}) is not a step count",
                f"pass a whole number >= 0 (default {HISTORY_LAST}), or last=None for every step",
            )
        changes: list[tuple[int, tuple[str, ...]]] = []
        steps: deque[dict[str, Any]] = deque(maxlen=last)
        total = 0
        for d in self.trace():
            if "skills_active" in d:
                changes.append((int(d.get("tick", -1)), tuple(map(str, d["skills_active"]))))
            else:
                total += 1
                steps.append(d)
        return AgentHistory(
            skills_over_time=tuple(changes),
            steps_total=total,
            last_steps=tuple(StepRecord.from_trace(d) for d in steps),
        )

    def skills_at(self, tick: int) -> tuple[str, ...]:
        """The ids of the skills active for the agent at ``tick`` (its trace's last change
        of the active set at or before that tick; () before the first)."""
        active: tuple[str, ...] = ()
        for d in self.trace():
            if "skills_active" in d and int(d.get("tick", -1)) <= tick:
                active = tuple(map(str, d["skills_active"]))
        return active

    def files(self) -> list[WorkspaceFile]:
        """Every file under the agent's folder with its size, sorted by path; symbolic
        links are left out (never followed)."""
        found = self.root.rglob("*") if self.root.is_dir() else ()
        out = [
            WorkspaceFile(path=p.relative_to(self.root).as_posix(), size=st.st_size)
            for p in found
            if stat.S_ISREG((st := p.lstat()).st_mode)
        ]
        return sorted(out, key=lambda f: f.path)

    def _raw_step(self, tick: int) -> dict[str, Any]:
        for d in self.trace():
            if "skills_active" not in d and d.get("tick") == tick:
                return d
        ticks = [int(d["tick"]) for d in self.trace() if "skills_active" not in d and "tick" in d]
        span = f"ticks {ticks[0]}..{ticks[-1]}" if ticks else "no steps yet"
        raise RunError(
            f"agent {self.agent_id!r} has no step at tick {tick} in its trace ({span}); "
            "choose a tick in that range"
        )

    def _system(self, sha: str, tick: int) -> str:
        if self.store is not None:
            system = self.store.system_prompt(sha)
            where = f"the store of {self.store.reader.root.parent}"
        else:
            p = self.root / "prompts" / f"{sha}.txt"
            try:
                with open_file(p, what="system prompt") as f:
                    system = f.read().decode("utf-8")
            except FileNotFoundError:
                system = None
            where = str(p)
        if system is None:
            raise RunError(
                f"system prompt {sha} of agent {self.agent_id!r} at tick {tick} is missing from "
                f"{where}; the run may have died before writing it"
            )
        return system

    def step_at(self, tick: int) -> StepRecord:
        """The agent's step at ``tick``; a tick without one is a ``RunError``."""
        return StepRecord.from_trace(self._raw_step(tick))

    def prompt_at(self, tick: int) -> Prompt:
        """The system prompt and user message of the agent's step at ``tick``."""
        d = self._raw_step(tick)
        sha, user = d.get("system_sha"), d.get("user")
        if sha is None:
            why = StepRecord.from_trace(d).action or "no model call"
            raise RunError(
                f"agent {self.agent_id!r} saw no prompt at tick {tick}: it made no model call "
                f"that step ({why}); choose another tick (see `--agent {self.agent_id}`)"
            )
        if user is None:
            raise RunError(
                f"the trace of agent {self.agent_id!r} has no user message at tick {tick} (the "
                "run used --trace summary); re-run with --trace full to keep prompts"
            )
        system = self._system(str(sha), tick)
        return Prompt(
            agent_id=self.agent_id,
            tick=tick,
            time=str(d.get("time", "")),
            system_sha=str(sha),
            system=system,
            user=str(user),
        )
