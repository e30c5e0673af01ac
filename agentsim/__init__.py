"""agentsim: a runtime for large multi-agent simulations whose LLM agents load skills lazily.

The public API is re-exported here and imported lazily, so ``import agentsim`` stays cheap
(no Ray, no pyarrow, no scanning). Everything not listed in ``__all__`` is private.
"""

from __future__ import annotations

from agentsim._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Agent": "agentsim.agent.agent",
    "AgentSettings": "agentsim.agent.step",
    "AgentSkillRuntime": "agentsim.skills.runtime",
    "CachedModel": "agentsim.llm.cache",
    "ChatModel": "agentsim.llm.base",
    "Completion": "agentsim.llm.base",
    "Engine": "agentsim.run.engine",
    "EnvModule": "agentsim.env.base",
    "EnvView": "agentsim.env.base",
    "ExperimentConfig": "agentsim.config.experiment",
    "HookContext": "agentsim.skills.hooks",
    "LocalExecutor": "agentsim.hosts.local",
    "OpenAIChatModel": "agentsim.llm.openai",
    "RateLimiter": "agentsim.llm.limiter",
    "ScriptResult": "agentsim.skills.scripts.runner",
    "ScriptRunner": "agentsim.skills.scripts.runner",
    "ScriptedModel": "agentsim.llm.scripted",
    "SimClock": "agentsim.env.clock",
    "SkillDescriptor": "agentsim.skills.scan",
    "SkillRegistry": "agentsim.skills.registry",
    "SkillScriptContext": "agentsim.skills.context",
    "SkillSpace": "agentsim.skills.space",
    "ToolCall": "agentsim.llm.base",
    "Usage": "agentsim.llm.base",
    "current_context": "agentsim.skills.context",
    "hook_context": "agentsim.skills.hooks",
    "load_experiment": "agentsim.config.experiment",
    "open_run": "agentsim.inspect.run",
    "parse_experiment": "agentsim.config.experiment",
    "parse_skill_md": "agentsim.skills.manifest",
}

__all__ = sorted([*_EXPORTS, "__version__"])


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
