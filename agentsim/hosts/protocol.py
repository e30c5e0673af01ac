"""What the engine and the hosts exchange, and the one way an executor calls its hosts.

A host's capabilities are ``AgentHost``'s methods; an executor reaches them through one
generic ``call(method, ...)`` (a Python call in process, one actor method under Ray), and
the ``Executor`` protocol writes each capability once over it: what it sends, and how the
hosts' answers merge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from agentsim.agent.agent import AgentSettings
from agentsim.config.experiment import ModelConfig
from agentsim.config.profiles import AgentSpec
from agentsim.env.base import EnvView, Intent
from agentsim.env.loader import ModuleCode
from agentsim.instruments import Instrument
from agentsim.skills.mcp import McpServer, McpSkillSource, RestoredMcpSource
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.scripts.runner import ScriptRunner
from agentsim.skills.space import SkillSpace

__all__ = [
    "Answer",
    "Executor",
    "HostSpec",
    "SkillSources",
    "StepDone",
    "TickInput",
    "TickResult",
    "build_registry",
    "build_space",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillSources:
    """Where a process finds its skills (paths as str so the spec pickles small)."""

    builtin: str | None
    custom: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # (skills_dir, module name)
    catalog_budget_tokens: int = 2000
    trusted_namespaces: tuple[str, ...] = ("built-in",)
    # The run's environment modules: a skill requiring another is hidden. None: not known.
    modules: tuple[str, ...] | None = None
    # Servers of the MCP skills extension, after the folders; where their files are kept.
    mcp: tuple[McpServer, ...] = ()
    mcp_cache: str | None = None
    # A fork's: servers whose skills it restored from its parent (the folders), not listed.
    mcp_restored: tuple[tuple[McpServer, tuple[str, ...]], ...] = ()


def build_registry(src: SkillSources) -> SkillRegistry:
    """The registry of ``src``; an MCP server that cannot be reached raises ``ConfigError``
    (the registry's connections are then closed). ``SkillRegistry.close()`` ends them."""
    reg = SkillRegistry()
    if src.builtin:
        reg.scan_builtin(Path(src.builtin))
    for path in src.custom:
        reg.scan_custom(Path(path))
    for skills_dir, module in src.env:
        reg.scan_env_skills(Path(skills_dir), module)
    try:
        for server in src.mcp:
            reg.add_mcp(McpSkillSource(server, src.mcp_cache))
        for server, folders in src.mcp_restored:
            reg.add_mcp(RestoredMcpSource(server, folders))
    except BaseException:
        reg.close()
        raise
    return reg


def build_space(
    src: SkillSources, registry: SkillRegistry, *, runner: ScriptRunner | None = None
) -> SkillSpace:
    """The ``SkillSpace`` the agents of a process with skills from ``src`` share, over
    ``registry``'s current snapshot: their catalog budget, trusted namespaces and the run's
    environment modules (what the catalogs, trust and isolation of their skills follow)."""
    return SkillSpace(
        registry.snapshot(),
        runner=runner,
        catalog_budget_tokens=src.catalog_budget_tokens,
        trusted_namespaces=src.trusted_namespaces,
        env_modules=src.modules,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSpec:
    host_id: int
    run_dir: str
    seed: int
    # A study's sampled replicate: the model seeds differ by sample (0: the run's own).
    sample: int = 0
    skills: SkillSources
    model: ModelConfig
    settings: AgentSettings
    hosts: int = 1
    step_timeout: float = 120.0
    concurrent: bool = True  # False: step agents one after another
    flush_every: int = 1  # ticks between writes of agents' memory lines and store rows
    # Set up to be restored from a checkpoint (``set_state`` follows): the agents' default
    # skills are not activated (``set_state`` activates the saved ones), and the host must
    # hold the same agents as before (its shard holds their history).
    resume: bool = False
    # The experiment's own environment modules, for views unpickled in another process.
    env_code: ModuleCode = field(default_factory=ModuleCode)
    # Named models (``models:``) and the groups that use them; other groups use ``model``.
    models: Mapping[str, ModelConfig] = field(default_factory=dict)
    group_models: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class TickInput:
    tick: int
    time: datetime
    views: Mapping[str, EnvView]
    messages: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # ``views`` are the tick's complete views. If not (a step started before every agent
    # finished the tick before), an action marked ``reads_all`` waits for them
    # (``AgentHost.tick_final``).
    final: bool = True
    # Hot reload before the steps start. ``reload_skills``: bring every agent of the host up
    # to the registry first, as ``reload`` does (so no step of the host may be running);
    # ``refresh_skills``: rescan the own skills folder of each agent started.
    reload_skills: bool = False
    refresh_skills: bool = False
    # Ids the engine's own refresh found added or changed this tick. A host that shares the
    # engine's registry (local executor) cannot learn them from its own refresh, which then
    # finds nothing new; it needs them to re-render the bodies of edited active skills.
    skills_changed: tuple[str, ...] = ()


@dataclass(slots=True, kw_only=True)
class TickResult:
    host_id: int
    events: list[dict[str, Any]]
    intents: list[Intent]
    steps: int = 0
    model_calls: int = 0
    script_calls: int = 0
    hook_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    # Tool calls models wrote as text and the steps ran (``StepOutcome.recovered_calls``).
    recovered_calls: int = 0
    degraded: int = 0
    skipped: int = 0
    elapsed: float = 0.0
    # How its steps ended (outcome -> steps, see ``agentsim.agent.step.OUTCOMES``), how many
    # acted on the world, their tool calls by (tool, skill id or "", result).
    outcomes: dict[str, int] = field(default_factory=dict)
    acted: int = 0
    tool_results: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # The group and model (name in ``models:``, "default" for ``model:``) of its step, and
    # what the step did (``agent_action``'s action; "" for a step with none): a result
    # that ``collect`` hands back holds one agent's step.
    group: str = ""
    model: str = ""
    action: str = ""
    # The skill ids its step's catalog listed, and per skill [hook outputs shown, calls
    # they suggested, suggested calls made] (``StepOutcome.catalog`` and ``hooks_seen``).
    catalog: tuple[str, ...] = ()
    hooks_seen: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """One agent's answer to a survey or an interview: its text, its ``status`` (``ok``: the
    model answered; ``degraded`` or ``error``, with the ``reason``: a failed step, whose
    text is what the model said before it failed, if anything; ``invalid``, with the
    ``reason``: a typed answer that did not fit its form after one retry), whether it only
    copies its own prompt (``echo``, ``agentsim.agent.echo``) and, for a typed answer,
    its ``value`` (None unless ``ok``)."""

    text: str
    status: str = "ok"
    reason: str | None = None
    echo: bool = False
    value: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepDone:
    """One agent's finished step of one tick."""

    tick: int
    agent_id: str
    result: TickResult


class Executor(Protocol):
    """Places hosts somewhere and calls them. An executor provides ``start``, ``call`` and
    ``close``; it subclasses this protocol for the host capabilities below, each written
    once over ``call`` (what it sends the hosts, how their answers merge)."""

    kind: str

    async def connect(self, *, hosts: int, env_code: ModuleCode) -> None:
        """Before the run writes anything: reach where the hosts will run and check that
        ``hosts`` of them can be placed there (a ``ConfigError`` naming the numbers if not).
        ``env_code``: the experiment's own module code, which the hosts will load."""
        return None

    async def start(
        self,
        specs: Sequence[HostSpec],
        blocks: Sequence[Sequence[AgentSpec]],
        registry: SkillRegistry,
    ) -> None: ...

    async def call(
        self, method: str, *args: Any, hosts: Sequence[int] | None = None, what: str, **kw: Any
    ) -> list[Any]:
        """``AgentHost.<method>(*args, **kw)`` on each of ``hosts`` (by index; None: every
        host) at once; their results in that order. ``what`` names the call in errors."""
        ...

    async def close(self) -> None: ...

    async def setup(
        self, extra: Mapping[str, Mapping[str, Any]], *, tick: int, when: datetime
    ) -> list[dict[str, Any]]:
        parts = await self.call("setup", dict(extra), tick=tick, when=when, what="setup")
        return [e for p in parts for e in p]

    async def start_steps(
        self, tick: TickInput, by_host: Mapping[int, Sequence[str]] | None = None
    ) -> None:
        """Start these agents' steps of ``tick`` (by host index; None: every agent);
        ``collect`` hands back the finished ones."""
        hosts = None if by_host is None else list(by_host)
        ids = None if by_host is None else {h: list(a) for h, a in by_host.items()}
        await self.call("start_steps", tick, ids, hosts=hosts, what=f"tick {tick.tick}")

    async def collect(self, host: int | None = None, *, wait_all: bool = False) -> list[StepDone]:
        """The steps ``host`` (None: every host) finished since the last call: at least one
        of each host asked, or with ``wait_all`` every step started."""
        hosts = None if host is None else [host]
        parts = await self.call("collect", wait_all=wait_all, hosts=hosts, what="a tick's steps")
        return [d for p in parts for d in p]

    async def tick_final(self, tick: int, views: Mapping[str, EnvView]) -> None:
        await self.call("tick_final", tick, dict(views), what=f"tick {tick}")

    async def reload(self, tick: int, when: datetime, *, changed: Sequence[str]) -> None:
        await self.call("reload", tick, when, changed=list(changed), what="skill reload")

    async def ask(
        self,
        agent_ids: Sequence[str],
        question: str,
        *,
        tick: int,
        when: datetime,
        views: Mapping[str, EnvView],
        answer: Instrument | None = None,
    ) -> dict[str, Answer]:
        """Each agent's answer, with its status (``agentsim.hosts.host.answer_of``);
        ``answer``: a typed answer's form."""
        parts = await self.call(
            "ask",
            list(agent_ids),
            question,
            tick=tick,
            when=when,
            views=dict(views),
            answer=answer,
            what="survey",
        )
        return {aid: answer for p in parts for aid, answer in p.items()}

    async def answered(self) -> int:
        """Answers so far in the ``ask`` under way."""
        return sum(await self.call("answered", what="survey progress"))

    async def get_state(self) -> dict[str, Any]:
        parts = await self.call("get_state", what="checkpoint")
        return {aid: state for p in parts for aid, state in p.items()}

    async def set_state(self, state: Mapping[str, Any]) -> None:
        # Each host takes its own agents' states.
        await self.call("set_state", dict(state), what="restore")

    async def model_stats(self) -> list[dict[str, Any]]:
        return await self.call("model_stats", what="stats")
