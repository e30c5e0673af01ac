"""Interview one agent of a run, in read-only mode, without changing anything in the run.

The agent is rebuilt in this process from the run's world (``agentsim.run.world``, as
the engine builds it: same agents, modules, skills and settings; the skills in the versions
the run recorded, ``agentsim.skills.provenance``) in an ``AgentHost``, then
given the state it had: its memory replayed from ``memory.jsonl``, its active skills as last
recorded (with their activation arguments from the latest checkpoint), and an environment
restored from the latest checkpoint. It then takes one read-only step
(``StepInput(question=..., read_only=True)``): no tool that writes is offered, nothing is
appended to its memory or trace, and the agent is never flushed.

Nothing is written into the run folder. The host works on a scratch copy of the agent's
folder in a temporary directory (so even a trusted skill's ``!`command` `` runs there), and a
model cache is copied there too and opened in replay mode: ``record`` becomes replay with
fall-through to the configured model (new questions are answered but not recorded),
``replay`` stays replay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsim.errors import ConfigError, RunError
from agentsim.inspect._files import iter_jsonl, read_checkpoint_agents, read_json
from agentsim.inspect.run import Run, open_run
from agentsim.llm.backends import backend_of
from agentsim.llm.base import ChatModel

__all__ = ["InterviewResult", "interview"]

# Large and never read by an interview: left out of the scratch copy.
# What a layout-1 agent folder holds besides what skills use (layout 2 keeps it in shards).
_NOT_COPIED = ("trace.jsonl", "prompts")


@dataclass(frozen=True, slots=True, kw_only=True)
class InterviewResult:
    agent_id: str
    question: str
    answer: str
    action: str
    tick: int  # the simulated moment of the interview: the run's last tick boundary
    time: str
    environment: str  # "checkpoint tick-N", "fresh" or "none"
    model: str  # the model settings used, e.g. "scripted" or "gpt-4o-mini (cache: replay ...)"
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    problems: tuple[str, ...]  # degraded model, step errors: why the answer may be empty
    # ``ok`` (the model answered), ``degraded`` (its model failed) or ``error`` (the step
    # failed): an answer that is not ``ok`` is not the agent's (see ``answer``).
    status: str = "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "question": self.question,
            "answer": self.answer,
            "action": self.action,
            "tick": self.tick,
            "time": self.time,
            "environment": self.environment,
            "model": self.model,
            "model_calls": self.model_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "problems": list(self.problems),
            "status": self.status,
        }


def _model_config(
    cfg: Any, run_dir: Path, scratch: Path, *, file: str = "model_cache.sqlite"
) -> tuple[Any, str]:
    """The run's model settings with the cache moved to a read-only replay in ``scratch``."""
    name = str(cfg.model) if backend_of(cfg).serves else cfg.backend
    if cfg.cache == "off":
        return cfg, name
    src = Path(cfg.cache_path) if cfg.cache_path else run_dir / file
    if not src.is_file():
        if cfg.cache == "record":  # nothing recorded yet: call the model directly
            return cfg.model_copy(update={"cache": "off"}), f"{name} (cache: none recorded yet)"
        raise RunError(
            f"the run replays model answers from {src}, which is missing; restore the file or "
            "change model.cache in the run's config.yaml"
        )
    dst = scratch / "model_cache.sqlite"
    for suffix in ("", "-wal"):  # a live recording may still hold answers in its WAL file
        part = Path(f"{src}{suffix}")
        if part.is_file():
            shutil.copyfile(part, Path(f"{dst}{suffix}"))
    fallthrough = True if cfg.cache == "record" else bool(cfg.cache_fallthrough)
    new = cfg.model_copy(
        update={"cache": "replay", "cache_path": str(dst), "cache_fallthrough": fallthrough}
    )
    how = "replay, new questions go to the model" if fallthrough else "replay only"
    return new, f"{name} (cache: {how}; copy of {src})"


def _memory_state(path: Path) -> dict[str, Any]:
    from agentsim.agent.memory import Memory

    mem = Memory()
    for d in iter_jsonl(path):
        try:
            mem.add(
                tick=int(d["tick"]), time=str(d["time"]), kind=str(d["kind"]), text=str(d["text"])
            )
        except (KeyError, TypeError, ValueError):
            continue  # a damaged line is not worth failing an interview for
    mem.drain()  # nothing of this is ever written
    return mem.get_state()


async def interview(
    run: Run | str | Path,
    agent_id: str,
    question: str,
    *,
    model: ChatModel | None = None,
) -> InterviewResult:
    """Ask ``agent_id`` of ``run`` a question; the run folder is left untouched.

    ``model`` replaces the model built from the run's settings (e.g. a fake in tests)."""
    from agentsim.agent.agent import StepInputs, StepOutcome, step_seed
    from agentsim.env.clock import SimClock
    from agentsim.env.router import EnvRouter
    from agentsim.hosts.host import AgentHost, HostSpec, answer_of, build_registry
    from agentsim.llm.models import build_model, cache_file
    from agentsim.run.world import build_world
    from agentsim.skills.provenance import plan_restore, restore

    if not question.strip():
        raise ConfigError(
            "question", "the question is empty", 'ask something, e.g. "How was your day?"'
        )
    r = run if isinstance(run, Run) else open_run(run)
    record = r.agent(agent_id)
    config = r.config()
    manifest = r.manifest()
    world = build_world(config, trace="off")
    spec = next((s for s in world.agents if s.agent_id == agent_id), None)
    if spec is None:
        raise RunError(
            f"agent {agent_id!r} has a folder in {r.path} but is not in its config.yaml; the "
            "experiment file has changed since the run; interview an agent the config defines"
        )

    clock = SimClock(config.clock.start, config.clock.tick)
    ticks_done = manifest.get("ticks_done")
    if isinstance(ticks_done, int) and ticks_done > 0:
        clock.advance(ticks_done)
    modules = world.modules
    checkpoints = [(t, p) for t, p in r.checkpoints() if t <= clock.tick]
    skill_args: dict[str, str] = {}
    environment = "none" if not modules else "fresh"
    if checkpoints:
        tick, cp = checkpoints[-1]
        engine_state = read_json(cp / "engine.json", what="checkpoint")
        for name, st in engine_state.get("modules", {}).items():
            if name in modules:
                modules[name].set_state(st)
        if modules:
            environment = f"checkpoint tick-{tick}"
        agents_state = read_checkpoint_agents(cp)
        skill_args = dict((agents_state.get(agent_id) or {}).get("skills", {}).get("arguments", {}))

    skills_json = record.skills()
    profile = {
        k: v for k, v in record.profile().items() if k not in ("agent_id", "group", "persona")
    }
    sources, settings = world.skills, world.settings
    with tempfile.TemporaryDirectory(prefix="agentsim-interview-") as tmp:
        scratch = Path(tmp)
        shutil.copytree(
            record.root,
            scratch / "agents" / agent_id,
            symlinks=True,
            ignore=lambda _d, names: [n for n in names if n in _NOT_COPIED],
        )
        # The skills as the run's agents last had them (its recorded versions), whatever
        # their folders hold now; a run from before provenance uses the folders.
        plan = plan_restore(r.path, clock.tick, agents=[agent_id])
        if plan is not None:
            restore(plan, scratch)
            sources = plan.remap_sources(sources)
        # The agent's own model: its group's (``agents[].model``) or the default one.
        model_name = config.group_models().get(spec.group, "default")
        model_cfg, model_note = _model_config(
            config.model_named(model_name), r.path, scratch, file=cache_file(model_name)
        )
        settings = dataclasses.replace(settings, tool_calls=model_cfg.tool_calls)
        host_spec = HostSpec(
            host_id=0,
            run_dir=str(scratch),
            seed=config.seed,
            skills=sources,
            model=model_cfg,
            settings=settings,
            step_timeout=config.executor.step_timeout,
            concurrent=False,
        )
        the_model = model if model is not None else build_model(model_cfg, run_dir=scratch)
        host = AgentHost(host_spec, [spec], registry=build_registry(sources), model=the_model)
        try:
            await host.setup({agent_id: profile}, tick=clock.tick, when=clock.now)
            await host.set_state(
                {
                    agent_id: {
                        "step_count": int(skills_json.get("step_count", 0)),
                        "memory": _memory_state(record.root / "memory.jsonl"),
                        "skills": {
                            "active": list(skills_json.get("active", [])),
                            "arguments": skill_args,
                        },
                    }
                }
            )
            agent = host.agents[agent_id]
            router = EnvRouter({name: mod.view(clock) for name, mod in modules.items()})
            inp = StepInputs(tick=clock.tick, time=clock.now, env=router).question(question)
            seed = step_seed(config.seed, agent_id, clock.tick)
            try:
                async with asyncio.timeout(config.executor.step_timeout):
                    out = await agent.step(inp, model=host.model, settings=settings, seed=seed)
            except TimeoutError:
                out = StepOutcome(agent_id=agent_id, action="no answer")
                out.events.append(
                    {
                        "type": "agent_error",
                        "error": f"the interview timed out after "
                        f"{config.executor.step_timeout:g}s (executor.step_timeout)",
                    }
                )
        finally:
            # Not host.close(): that flushes the agents, and an interviewed agent never is.
            host.registry.close()
            if model is None:
                await the_model.aclose()
    problems = tuple(
        str(e.get("error") or e.get("reason") or e["type"])
        for e in out.events
        if e.get("type") in ("agent_error", "agent_degraded")
    )
    given = answer_of(out)
    return InterviewResult(
        agent_id=agent_id,
        question=question,
        answer=given.text,
        status=given.status,
        action=out.action,
        tick=clock.tick,
        time=clock.now.isoformat(),
        environment=environment,
        model="custom model" if model is not None else model_note,
        model_calls=out.model_calls,
        prompt_tokens=out.usage.prompt_tokens,
        completion_tokens=out.usage.completion_tokens,
        problems=problems,
    )
