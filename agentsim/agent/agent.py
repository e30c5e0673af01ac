"""The agent: one ReAct step per tick over its skills, its memory and the environment.

Each step: pre_step hooks -> messages -> up to ``max_react_turns`` model calls with
tools -> post_step hooks (a ``retry`` decision gives the model another round, at most
``max_hook_retries`` times) -> memory and trace. A model that fails after its retries
degrades the step (recorded, the agent keeps its plan) instead of stopping the run.

The messages are laid out for an inference server's prefix cache: what many agents share
comes first and is byte-stable, what is one agent's next, the turn last. The blocks of each
part, their order and how each is rendered are declared in ``agentsim.llm.prompt_blocks``;
this module gives them their texts.

- system: the instructions and the catalog (``<available_skills>``, the same text for every
  agent that sees the same skills). Chat templates render the tool schemas right after it.
- the first user message opens with the agent's part, stable from step to step until its
  active skills change: the bodies of its active skills (sorted by name; a
  ``<skill_content>`` block marks its skill active), ``<active_skills>`` naming the active
  skills that have no body, ``<persona>`` and ``<profile>``, and over a catalog budget its own
  ``<more_skills>`` picks; then the turn: observation, messages, feedback, memory, question,
  ``<skill_hooks>``, and the per-step blocks of the step input where they are declared.
- the later turns of a ReAct step only append (assistant tool calls, tool results).
"""

from __future__ import annotations

import dataclasses
import json
import time as _time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentsim._tokens import estimate_tokens
from agentsim.agent.agent_json import agent_json, write_agent_json
from agentsim.agent.memory import Memory, append_lines
from agentsim.agent.step import (
    AgentSettings,
    EnvAccess,
    StepInput,
    StepInputs,
    StepOutcome,
    StepScratch,
    step_seed,
)
from agentsim.agent.tools import (
    INSTRUCTIONS,
    READ_ONLY_INSTRUCTIONS,
    WRITE_TOOLS,
    build_tools,
    describe_tools,
    skill_call_hint,
    text_results,
)
from agentsim.errors import EnvError, ModelError, SkillError
from agentsim.events import event
from agentsim.llm import prompt_blocks
from agentsim.llm.base import ChatModel, Completion, ToolCall
from agentsim.llm.scripted import suggested_calls
from agentsim.llm.textcalls import find_calls, split_thinking
from agentsim.skills.hooks import HookDecision, HookOutcome, render_skill_hooks
from agentsim.skills.runtime import AgentSkillRuntime
from agentsim.store.layout import part_hash, prompt_row, row, text_hash
from agentsim.store.pending import PendingLines

# The step's data types live in ``agentsim.agent.step``; they are re-exported here, where
# hosts and the interview code have always imported them.
__all__ = [
    "Agent",
    "AgentSettings",
    "EnvAccess",
    "StepInput",
    "StepInputs",
    "StepOutcome",
    "step_seed",
]

_RESULT_CAP = 4000
# The tool a call names that no tool is, in ``StepOutcome.tool_results``.
UNKNOWN_TOOL = "(unknown tool)"
_TRACE_RESULT_CAP = 600
_TRACE_REASONING_CAP = 4000
# What a step says to a model whose answer held reasoning and nothing else.
_NO_ANSWER = (
    "Your last answer held reasoning only, and no answer. Answer now: call a tool, or end "
    "the step with finish."
)


class Agent:
    """A resident agent. Small by design: shared things live in the host."""

    __slots__ = (
        "_agent_json",
        "_head",
        "_last_parts_key",
        "_last_skills",
        "_last_system_sha",
        "_pending_prompts",
        "_pending_trace",
        "_post_hooks",
        "_prompt_parts",
        "_skills_written",
        "agent_id",
        "group",
        "memory",
        "persona",
        "profile",
        "skills",
        "step_count",
        "workspace",
    )

    def __init__(
        self,
        *,
        agent_id: str,
        group: str,
        profile: Mapping[str, Any],
        persona: str,
        workspace: Path,
        skills: AgentSkillRuntime,
        prompt_parts: Callable[[str, str], None] | None = None,
    ) -> None:
        """``prompt_parts`` is called with (content hash, text) of every part of every new
        system prompt: the host stores each part once (``agentsim.store.layout``). Without
        it only the references are recorded."""
        self.agent_id = agent_id
        self.group = group
        self.profile = profile
        self.persona = persona
        self.workspace = workspace
        self.skills = skills
        self.memory = Memory()
        self.step_count = 0
        self._post_hooks: tuple[HookOutcome, ...] = ()
        self._pending_trace = PendingLines()
        self._prompt_parts = prompt_parts
        # (sha, part hashes) of system prompts not yet handed to the host's store.
        self._pending_prompts: list[tuple[str, list[str]]] = []
        self._last_system_sha = ""
        self._last_parts_key = ""  # the part hashes of that prompt, joined
        self._last_skills: tuple[str, ...] = ()
        # (active skills, step count) of the last skills record handed to the store.
        self._skills_written: tuple[tuple[str, ...], int] | None = None
        self._head: str | None = None  # the profile's JSON: fixed for the agent's life
        # (step count, active skills) of the AGENT.json on disk: written when skill code is
        # about to run and the file is not current, never for a step that runs none.
        self._agent_json: tuple[int, tuple[str, ...]] | None = None

    @property
    def last_hooks(self) -> tuple[HookOutcome, ...]:
        """The post_step hooks of the agent's last step: its next turn shows them."""
        return self._post_hooks

    # -- prompt ----------------------------------------------------------------------------

    def _situation(self) -> str:
        """What an over-budget catalog is ranked against: who the agent is (persona,
        occupation, interests). Kept stable across ticks on purpose: the ranked selection is
        then computed once per change of the agent's active skills, so a tick's cost does not
        grow with the number of installed skills; what the agent needs beyond it is one
        search_skills call away."""
        words = [self.persona]
        for key in ("occupation", "role", "interests"):
            value = self.profile.get(key)
            if isinstance(value, list):
                words.extend(str(v) for v in value)
            elif isinstance(value, str):
                words.append(value)
        return " ".join(words)

    def system_prompt(self, *, read_only: bool = False) -> str:
        return "\n".join(self.system_parts(read_only=read_only))

    def system_parts(self, *, read_only: bool = False) -> tuple[str, ...]:
        """The system prompt's parts, joined by newlines: the instructions and the catalog.
        Nothing in it is the agent's own: every agent that sees the same skills sends the
        same bytes. Stored apart (by content hash)."""
        return self._prompt_head(read_only)[0]

    def agent_prompt(self) -> str:
        """The agent's part, at the start of its first user message (module docstring)."""
        return self._prompt_head(False)[1]

    def _prompt_head(
        self, read_only: bool, tool_text: str | None = None
    ) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
        """(system parts, the agent's part, the skill ids the catalog lists): one catalog
        render for both parts. ``tool_text``: the ``<tool_calls>`` block
        (``model.tool_calls: text``)."""
        cat = self.skills.catalog(self._situation())
        profile = self._head
        if profile is None:
            # Encoded once: the profile does not change during a run, and encoding it
            # every step cost more than the rest of the prompt together.
            profile = self._head = json.dumps(self.profile, sort_keys=True, ensure_ascii=False)
        skills = self.skills
        bodies = bare = None
        active = skills.active
        if active:
            named = sorted((skills.handle_of(sid), sid) for sid in active)
            bodies = skills.bodies(sid for _, sid in named) or None
            # A <skill_content> block says its skill is active; the list names the rest
            # (skills whose body is empty), so the prompt says it once per skill.
            bare = [n for n, sid in named if f'<skill_content name="{n}">' not in (bodies or "")]
        blocks = prompt_blocks.BLOCKS
        instructions = READ_ONLY_INSTRUCTIONS if read_only else INSTRUCTIONS
        system = blocks.parts(
            "system",
            {"instructions": instructions, "tool_calls": tool_text, "available_skills": cat.text},
        )
        mine = blocks.render(
            "agent",
            {
                "skill_content": bodies,
                "active_skills": ", ".join(bare) if bare else None,
                "persona": self.persona,
                "profile": profile,
                "more_skills": cat.agent_text or None,
            },
        )
        return tuple(system), mine, cat.shown

    def user_prompt(
        self,
        inp: StepInput,
        hooks: Sequence[HookOutcome],
        *,
        feedback: str = "",
        memory_tokens: int,
        hook_cap: int | None = None,
        observation: str | None = None,
    ) -> str:
        """The turn: the step's blocks in their declared order (``agentsim.llm.prompt_blocks``),
        each left out when it has nothing to say."""
        obs = [f"tick: {inp.tick}", inp.stamp]
        if observation is None and inp.env is not None:
            observation = inp.env.observe(self.agent_id)
        if observation:
            obs.append(observation)
        mem = self.memory.render(prompt_tokens=memory_tokens)
        cap = self.skills.hook_output_cap if hook_cap is None else hook_cap
        texts: dict[str, str | None] = {
            "observation": "\n".join(obs),
            "messages": "\n".join(inp.messages) if inp.messages else None,
            "feedback": feedback or None,
            "memory": mem or None,
            "question": inp.question,
            "skill_hooks": render_skill_hooks(hooks, cap=cap) or None,
        }
        if inp.blocks:
            texts.update(inp.blocks)
        return prompt_blocks.BLOCKS.render("turn", texts)

    # -- the step --------------------------------------------------------------------------

    async def step(
        self, inp: StepInput, *, model: ChatModel, settings: AgentSettings, seed: int
    ) -> StepOutcome:
        """One step. Raises only on bugs; model and script failures are recorded."""
        t0 = _time.perf_counter()
        st = StepScratch(inp=inp, out=StepOutcome(agent_id=self.agent_id))
        trace: dict[str, Any] = {"tick": inp.tick, "time": inp.iso}
        if inp.read_only:
            await self._react(st, model, settings, seed, hooks=(), feedback="", trace=trace)
            _decide_outcome(st)
            return st.out
        self.step_count += 1
        if self.skills.has_hooks("pre_step"):
            self.write_memory()
            self.write_agent_json(inp)
        pre = await self.skills.run_hooks(
            "pre_step", tick=inp.tick, time=inp.time, step_count=self.step_count
        )
        self._hook_problems(st, pre)
        hooks = (*self._post_hooks, *pre)
        full = settings.trace == "full"
        if full:
            trace["hooks"] = [h.to_dict() for h in hooks]
        skip = next((h.decision for h in pre if h.decision and h.decision.kind == "skip"), None)
        if skip is not None:
            self._decided(st, skip)
            st.out.skipped = True
            st.out.action = skip.feedback or "sat out the step"
            self._post_hooks = ()
        else:
            feedback = ""
            retries = 0
            while True:
                await self._react(
                    st, model, settings, seed + retries, hooks=hooks, feedback=feedback, trace=trace
                )
                if st.out.degraded:
                    post: list[HookOutcome] = []
                    break
                if self.skills.has_hooks("post_step"):
                    self.write_memory()
                    self.write_agent_json(inp)
                post = await self.skills.run_hooks(
                    "post_step", tick=inp.tick, time=inp.time, step_count=self.step_count
                )
                self._hook_problems(st, post)
                retry = next(
                    (h.decision for h in post if h.decision and h.decision.kind == "retry"), None
                )
                if retry is None:
                    break
                # ``retried``: whether the gate made the model answer again (a full prompt).
                self._decided(st, retry, retried=retries < settings.max_hook_retries)
                if retries >= settings.max_hook_retries:
                    trace["limitation"] = (
                        f"post_step quality gate of {retry.skill_id} still failing after "
                        f"{retries} retries: {retry.feedback}"
                    )
                    self._emit(st, "hook_gate_failed", skill=retry.skill_id, retries=retries)
                    break
                retries += 1
                feedback, hooks = retry.feedback, ()
            self._post_hooks = tuple(post)
            trace["post_hooks"] = [h.to_dict() for h in post]
        _decide_outcome(st)
        self._remember(st)
        self._record_skills(st)
        warnings = self.skills.drain_warnings()
        if warnings:
            trace["warnings"] = warnings
        if st.logs:
            trace["script_logs"] = st.logs
        trace["action"] = st.out.action
        trace["outcome"] = st.out.outcome
        trace["model_calls"] = st.out.model_calls
        trace["usage"] = {
            "prompt_tokens": st.out.usage.prompt_tokens,
            "completion_tokens": st.out.usage.completion_tokens,
        }
        if st.out.usage.cached_prompt_tokens:
            trace["usage"]["cached_prompt_tokens"] = st.out.usage.cached_prompt_tokens
        trace["elapsed_ms"] = round((_time.perf_counter() - t0) * 1000, 3)
        if settings.trace != "off":
            self._pending_trace.append(json.dumps(trace, ensure_ascii=False, default=str))
        return st.out

    def write_agent_json(self, inp: StepInput) -> None:
        """Make ``AGENT.json`` current for this step (skills written for AgentSociety2 read
        it); a no-op when it already is."""
        key = (self.step_count, self.skills.active)
        if key == self._agent_json:
            return
        write_agent_json(
            self.workspace,
            agent_json(
                agent_id=self.agent_id,
                group=self.group,
                profile=self.profile,
                persona=self.persona,
                workspace=self.workspace,
                time_iso=inp.iso,
                tick=inp.tick,
                step_count=self.step_count,
                visible=[d.skill_id for d in self.skills.visible()],
                activated=key[1],
                facts=inp.env.facts(self.agent_id) if inp.env is not None else None,
            ),
        )
        self._agent_json = key

    def _emit(self, st: StepScratch, kind: str, **data: Any) -> None:
        """Add one of this agent's events to the step's outcome, at the step's tick and
        time: every event of a step is built here."""
        inp = st.inp
        st.out.events.append(
            event(kind, tick=inp.tick, time=inp.iso, agent_id=self.agent_id, **data)
        )

    def _decided(self, st: StepScratch, decision: HookDecision, **extra: Any) -> None:
        self._emit(
            st,
            "hook_decision",
            skill=decision.skill_id,
            hook=decision.hook,
            decision=decision.kind,
            **extra,
        )

    def _measured(self, st: StepScratch, skill: str, found: Sequence[tuple[str, float]]) -> None:
        """A ``measure`` event per measure a script or hook recorded (``ctx.record``)."""
        for name, value in found:
            self._emit(st, "measure", skill=skill, name=name, value=value, group=self.group)

    def _hook_problems(self, st: StepScratch, outcomes: Sequence[HookOutcome]) -> None:
        """A failed hook is an event (counted as a problem); so is the overrun that got
        its script quarantined."""
        st.out.hook_calls += len(outcomes)
        for h in outcomes:
            if h.log:
                st.logs.append({"skill": h.skill_id, "hook": h.hook, "log": h.log})
            self._measured(st, h.skill_id, h.measures)
            if h.ok:
                continue
            lines = (h.error or "").strip().splitlines()
            self._emit(
                st,
                "hook_failed",
                skill=h.skill_id,
                hook=h.hook,
                timed_out=h.timed_out,
                error=(lines[-1] if lines else "failed")[:300],
            )
            if h.quarantined:
                self._emit(st, "skill_quarantined", skill=h.skill_id, script=h.script, hook=h.hook)

    async def _react(
        self,
        st: StepScratch,
        model: ChatModel,
        settings: AgentSettings,
        seed: int,
        *,
        hooks: Sequence[HookOutcome],
        feedback: str,
        trace: dict[str, Any],
    ) -> None:
        inp = st.inp
        read_only = inp.read_only
        observation = inp.env.observe(self.agent_id) if inp.env is not None else ""
        tools = self._tools(inp.env, read_only=read_only)
        mode = settings.tool_calls
        tool_text = _described(tools) if mode == "text" else None
        system_parts, mine, shown = self._prompt_head(read_only, tool_text)
        if not (read_only or st.counted):
            st.counted = True
            _count_seen(st, shown, hooks)
        system = "\n".join(system_parts)
        mem_tokens = settings.memory_prompt_tokens
        turn = self.user_prompt(
            inp, hooks, feedback=feedback, memory_tokens=mem_tokens, observation=observation
        )
        fixed = estimate_tokens(system) + estimate_tokens(mine)
        if fixed + estimate_tokens(turn) > settings.prompt_cap_tokens:
            # Over the cap: memory is the part we can drop without losing the task.
            turn = self.user_prompt(
                inp, hooks, feedback=feedback, memory_tokens=0, observation=observation
            )
        user = f"{mine}\n{turn}"
        # The parts' hashes (cached per part) tell whether the prompt changed; the sha of
        # the whole text is computed only when it did.
        hashes = [part_hash(t) for t in system_parts]
        parts_key = "".join(hashes)
        same = parts_key == self._last_parts_key
        sha = self._last_system_sha if same else text_hash(system)
        if sha != self._last_system_sha and not read_only:
            # The parts go to the host now, the reference waits for the flush: holding an
            # over-budget catalog (~5 KB, rendered per step) until then would cost more
            # memory per agent than the rest of the agent.
            if self._prompt_parts is not None:
                for h, text in zip(hashes, system_parts, strict=True):
                    self._prompt_parts(h, text)
            self._pending_prompts.append((sha, hashes))
            self._last_system_sha = sha
        if not read_only:
            self._last_parts_key = parts_key
        full = settings.trace == "full"
        trace.setdefault("system_sha", sha)
        if full:
            trace.setdefault("user", user)
        trace.setdefault("prompt_tokens_est", estimate_tokens(system) + estimate_tokens(user))
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        # Tool calls go into the trace in full mode only: in summary mode they are not built.
        calls: list[dict[str, Any]] | None = trace.setdefault("calls", []) if full else None
        st.finished = st.finish_called = False
        for answer_no in range(settings.max_react_turns):
            try:
                completion: Completion = await model.complete(messages, tools, seed=seed)
            except ModelError as exc:
                self._degrade(st, trace, str(exc))
                return
            st.out.model_calls += 1
            st.out.usage = st.out.usage + completion.usage
            tool_calls, message = completion.tool_calls, completion.message
            recovered = False
            if not tool_calls:
                # Reasoning is kept in the trace and never becomes an action or an answer.
                thought, text = split_thinking(completion.content or "")
                thought = "\n\n".join(t for t in (completion.reasoning, thought) if t)
                if thought and full:
                    trace.setdefault("reasoning", []).append(thought[:_TRACE_REASONING_CAP])
                found = find_calls(text, self._call_names(tools)) if mode != "native" else None
                if found is not None and found.calls:
                    # Ids unique within the step's conversation (servers check them).
                    tool_calls = tuple(
                        dataclasses.replace(c, id=f"text_call_{answer_no}_{i}")
                        for i, c in enumerate(found.calls)
                    )
                    recovered = True
                    st.out.recovered_calls += len(tool_calls)
                    message = {"role": "assistant", "content": found.rest or None}
                    if mode == "text":
                        message["content"] = text
                    else:
                        message["tool_calls"] = [c.to_message_part() for c in tool_calls]
                elif found is not None and found.problems:
                    # A call it tried to write and got wrong: say so, and let it try again.
                    if full:
                        trace.setdefault("unread_calls", []).extend(found.problems)
                    messages.append({"role": "assistant", "content": text})
                    problems = "; ".join(found.problems)
                    messages.append({"role": "user", "content": f"error: {problems}"})
                    continue
                elif not text and thought:
                    messages.append({"role": "assistant", "content": ""})
                    messages.append({"role": "user", "content": _NO_ANSWER})
                    continue
                else:
                    st.out.action = text.strip()[:200] or "did nothing"
                    st.out.answer = st.out.answer or text or None
                    st.finished = True
                    return
            elif completion.reasoning and full:
                trace.setdefault("reasoning", []).append(
                    completion.reasoning[:_TRACE_REASONING_CAP]
                )
            messages.append(message)
            results: list[tuple[str, str]] = []
            for call in tool_calls:
                content = await self._dispatch(st, call, read_only=read_only)
                if calls is not None:
                    entry: dict[str, Any] = {
                        "tool": call.name,
                        "args": call.arguments[:_TRACE_RESULT_CAP],
                        "result": content[:_TRACE_RESULT_CAP],
                    }
                    if recovered:
                        entry["recovered"] = True
                    calls.append(entry)
                if recovered and mode == "text":
                    results.append((call.name, content))
                else:
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            if results:
                messages.append({"role": "user", "content": text_results(results)})
            if st.finished:
                return
        st.out.action = st.out.action or "ran out of turns"
        trace["limitation"] = f"step ended after max_react_turns={settings.max_react_turns}"

    def _tools(self, env: EnvAccess | None, *, read_only: bool) -> list[dict[str, Any]]:
        """Tool schemas, shared by every agent that sees the same skills and environment."""
        res, hidden = self.skills.visibility()
        key = (id(res), hidden, read_only, id(env))
        hit = _TOOLS_CACHE.get(key)
        if hit is not None and hit[0] is res and hit[1] is env:
            return hit[2]
        env_actions = env.describe() if env is not None else {}
        tools = build_tools(self.skills.handles(), env_actions, read_only=read_only)
        if len(_TOOLS_CACHE) >= 64:
            _TOOLS_CACHE.clear()
        _TOOLS_CACHE[key] = (res, env, tools)
        return tools

    def _call_names(self, tools: Sequence[Mapping[str, Any]]) -> frozenset[str]:
        """What a call written as text may name: the tools offered, and the skills (which
        models call as if they were tools; the answer then says what to call instead)."""
        return frozenset([*(t["function"]["name"] for t in tools), *self.skills.handles()])

    def _degrade(self, st: StepScratch, trace: dict[str, Any], reason: str) -> None:
        st.out.degraded = True
        st.out.action = "kept its plan (model unavailable)"
        trace["limitation"] = f"model failed after its retries: {reason}; the agent kept its plan"
        self._emit(st, "agent_degraded", reason=reason[:300])

    async def _dispatch(self, st: StepScratch, call: ToolCall, *, read_only: bool) -> str:
        """Run one tool call and count it by (tool, skill, result) in the step's
        ``tool_results``: ``refused`` before it ran, ``failed`` when it ran and failed (see
        ``TOOL_RESULTS``). Every failure becomes an ``error: ...`` text for the model."""
        st.call_result, st.call_skill = "ok", ""
        text = await self._call(st, call, read_only=read_only)
        if st.suggested:
            _count_followed(st, call)
        tool = call.name if call.name in _HANDLERS else UNKNOWN_TOOL
        key = (tool, st.call_skill, st.call_result)
        results = st.out.tool_results
        results[key] = results.get(key, 0) + 1
        return text

    async def _call(self, st: StepScratch, call: ToolCall, *, read_only: bool) -> str:
        st.call_result = "refused"  # until a handler runs
        if call.name not in _HANDLERS:
            return self._not_a_tool(call)
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError as exc:
            return f"error: the arguments of {call.name} are not valid JSON ({exc}); send an object"
        if not isinstance(args, dict):
            return f"error: the arguments of {call.name} must be a JSON object"
        if read_only and call.name in WRITE_TOOLS:
            return f"error: {call.name} is not available in read-only mode"
        try:
            st.call_result = "ok"  # a handler says otherwise where it returns an error
            return await _HANDLERS[call.name](self, st, args)
        except (SkillError, EnvError) as exc:
            # An unknown or inactive skill, an unknown module, action or argument: refused.
            st.call_result = "refused"
            return f"error: {exc}"
        except (KeyError, TypeError, ValueError) as exc:
            st.call_result = "refused"
            return f"error: bad arguments for {call.name}: {exc}"

    def _not_a_tool(self, call: ToolCall) -> str:
        """The error for a call to an unknown tool; for a skill called by its name, the
        calls that do what the model meant."""
        try:
            desc = self.skills.resolve(call.name)
        except SkillError:
            known = ", ".join(sorted(_HANDLERS))
            return f"error: unknown tool {call.name!r} (tools: {known})"
        try:
            args: Any = json.loads(call.arguments or "{}")
        except ValueError:
            args = call.arguments
        return skill_call_hint(
            self.skills.handle_of(desc.skill_id),
            args,
            active=desc.skill_id in self.skills.active,
            has_script=bool(desc.manifest.script),
        )

    async def _t_activate(self, st: StepScratch, args: dict[str, Any]) -> str:
        res = await self.skills.activate(
            str(args["name"]), arguments=str(args.get("arguments", ""))
        )
        st.call_skill = res.skill_id
        for sid in res.newly_active:
            self._emit(st, "skill_activated", skill=sid)
        warn = "".join(f"\nwarning: {w}" for w in res.warnings)
        if not res.newly_active:
            return f"{res.handle} is already active; its instructions are in your context{warn}"
        # This step's prompt was built before the activation: the new bodies come back
        # here, and join the agent's part of the prompt from the next step on.
        bodies = self.skills.bodies(res.newly_active)
        return f"activated {res.handle}{warn}\n{bodies}"

    async def _t_deactivate(self, st: StepScratch, args: dict[str, Any]) -> str:
        desc = self.skills.resolve(str(args["name"]))
        st.call_skill = desc.skill_id
        was = self.skills.deactivate(desc.skill_id)
        if was:
            self._emit(st, "skill_deactivated", skill=desc.skill_id)
        return f"deactivated {args['name']}" if was else f"{args['name']} was not active"

    async def _t_read_file(self, st: StepScratch, args: dict[str, Any]) -> str:
        desc = self.skills.resolve(str(args["name"]))
        st.call_skill = desc.skill_id
        text = self.skills.view.read_skill_file(desc.skill_id, str(args["path"]))
        return text[:_RESULT_CAP]

    async def _t_execute(self, st: StepScratch, args: dict[str, Any]) -> str:
        argv = args.get("args", [])
        if not isinstance(argv, list):
            argv = [str(argv)]
        desc = self.skills.resolve(str(args["name"]))
        st.call_skill = desc.skill_id
        script = args.get("script")
        if desc.namespace.startswith("env:") and desc.manifest.script is None and not script:
            # An environment module's skill without a script is one of its actions: the call
            # is ``ask_env`` on that module, with ``args[0]`` as the action's JSON arguments.
            module = desc.namespace[4:]
            try:
                payload = json.loads(argv[0]) if argv else {}
            except ValueError as exc:
                st.call_result = "refused"
                return (
                    f"error: {desc.skill_id} has no script: execute_skill_script calls "
                    f"ask_env(module={module!r}, action={desc.manifest.name!r}) with args[0] "
                    f"as the action's arguments, which is not valid JSON ({exc}); send a JSON "
                    "object, or call ask_env directly"
                )
            return await self._t_ask_env(
                st, {"module": module, "action": desc.manifest.name, "args": payload}
            )
        self.write_memory()
        self.write_agent_json(st.inp)
        res = await self.skills.call_script(
            desc.skill_id,
            [str(a) for a in argv],
            tick=st.inp.tick,
            time=st.inp.time,
            script=script,
        )
        st.out.script_calls += 1
        if res.log:
            st.logs.append(
                {
                    "skill": desc.skill_id,
                    "script": str(script or desc.manifest.script),
                    "log": res.log,
                }
            )
        self._emit(
            st,
            "script_called",
            skill=desc.skill_id,
            ok=res.ok,
            exit_code=res.exit_code,
            tier=res.tier,
            isolation=res.isolation,
            **({"truncated": True} if res.truncated else {}),
        )
        self._measured(st, desc.skill_id, res.measures)
        if res.quarantined and res.timed_out:  # the overrun that caused it, not a refusal
            self._emit(
                st,
                "skill_quarantined",
                skill=desc.skill_id,
                script=str(script or desc.manifest.script),
                hook=None,
            )
        if res.ok:
            st.out.acted = True  # a skill script ran
            return res.output[:_RESULT_CAP] or "(no output)"
        st.call_result = "refused" if res.refused else "failed"
        detail = (res.error or "").strip().splitlines()
        tail = detail[-1] if detail else ""
        return f"error: script failed (exit {res.exit_code}): {tail}\n{res.output[:_RESULT_CAP]}"

    async def _t_search(self, st: StepScratch, args: dict[str, Any]) -> str:
        hits = self.skills.search(str(args["query"]))
        return json.dumps({"results": hits}, ensure_ascii=False)

    async def _t_ask_env(self, st: StepScratch, args: dict[str, Any]) -> str:
        env = st.inp.env
        if env is None:
            st.call_result = "refused"
            return "error: this simulation has no environment modules"
        sub = args.get("args") or {}
        if not isinstance(sub, dict):
            st.call_result = "refused"
            return "error: ask_env `args` must be an object"
        st.seq += 1
        answer = await env.aask(
            self.agent_id, str(args["module"]), str(args["action"]), sub, seq=st.seq
        )
        if answer.intent is not None:
            if st.inp.read_only:
                st.call_result = "refused"
                return f"error: {args['action']} changes the world; not allowed in read-only mode"
            st.out.intents.append(answer.intent)
            st.out.acted = True  # an environment write
        return json.dumps(answer.result, ensure_ascii=False, sort_keys=True, default=str)

    async def _t_finish(self, st: StepScratch, args: dict[str, Any]) -> str:
        st.out.action = str(args.get("action", ""))[:300] or "finished"
        if "answer" in args:
            st.out.answer = str(args["answer"])
        st.finished = st.finish_called = True
        return "ok"

    # -- memory, trace, workspace ----------------------------------------------------------

    def _remember(self, st: StepScratch) -> None:
        inp = st.inp
        if st.out.skipped:
            return
        self.memory.add(tick=inp.tick, time=inp.iso, kind="action", text=st.out.action)
        out = st.out
        self._emit(
            st,
            "agent_action",
            action=out.action,
            degraded=out.degraded,
            outcome=out.outcome,
            acted=out.acted,
        )

    def _record_skills(self, st: StepScratch) -> None:
        active = self.skills.active
        if active != self._last_skills:
            self._last_skills = active
            self._pending_trace.append(
                json.dumps({"tick": st.inp.tick, "skills_active": list(active)})
            )

    def remember(self, *, tick: int, time: str, kind: str, text: str) -> None:
        """Add to memory from outside a step (messages delivered, interventions)."""
        self.memory.add(tick=tick, time=time, kind=kind, text=text)

    def write_memory(self) -> None:
        """Append the buffered memory lines to ``memory.jsonl`` now: a hook or script about
        to run reads the agent's current memory, whatever ``output.flush_every`` says. Only
        agents that run one pay the write, and only when lines are waiting."""
        mem = self.memory.drain()
        if mem:
            append_lines(self.workspace / "memory.jsonl", mem)

    def flush(self, *, force: bool = False) -> list[str]:
        """Append buffered memory lines to ``memory.jsonl`` (skills read that file), and
        return the agent's rows for its host's store (``agentsim.store.layout``): trace
        lines, a skills record, references to the parts of new system prompts.

        The skills record is written when the active set changed, or, with ``force``
        (checkpoints, the end of a run), when the step count moved since the last one."""
        self.write_memory()
        aid = self.agent_id
        rows = [row(aid, "trace", line) for line in self._pending_trace.drain()]
        rows.extend(prompt_row(aid, sha, hashes) for sha, hashes in self._pending_prompts)
        self._pending_prompts = []
        active = self.skills.active
        written = self._skills_written
        if written is None or active != written[0] or (force and written[1] != self.step_count):
            skills = {"active": list(active), "step_count": self.step_count}
            rows.append(row(aid, "skills", json.dumps(skills)))
            self._skills_written = (active, self.step_count)
        return rows

    def get_state(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "step_count": self.step_count,
            "memory": self.memory.get_state(),
            "skills": self.skills.get_state(),
            "post_hooks": [h.to_dict() for h in self._post_hooks],
            "last_system_sha": self._last_system_sha,
        }

    async def set_state(self, state: Mapping[str, Any]) -> None:
        self.step_count = int(state["step_count"])
        self.memory.set_state(state["memory"])
        await self.skills.set_state(state["skills"])
        self._post_hooks = tuple(
            HookOutcome(
                skill_id=h["skill"],
                hook=h["hook"],
                ok=h["ok"],
                text=h["text"],
                tier=h.get("tier", ""),
                isolation=h.get("isolation", ""),
            )
            for h in state.get("post_hooks", [])
        )
        self._last_system_sha = str(state.get("last_system_sha", ""))
        self._last_skills = self.skills.active
        self._pending_trace.clear()
        self._pending_prompts = []
        # The checkpoint this comes from flushed (with force) a skills record of this state.
        self._skills_written = (self.skills.active, self.step_count)


def _count_seen(st: StepScratch, shown: tuple[str, ...], hooks: Sequence[HookOutcome]) -> None:
    """Count what the step's first model round was shown: the skills its catalog listed,
    and each hook output with text (with the calls its ``SUGGESTED:`` lines propose)."""
    st.out.catalog = shown
    seen = st.out.hooks_seen
    for h in hooks:
        if not (h.ok and h.text.strip()):
            continue
        counts = seen.setdefault(h.skill_id, [0, 0, 0])
        counts[0] += 1
        for tool, args in suggested_calls(h.text):
            counts[1] += 1
            st.suggested.append((h.skill_id, tool, args))


def _count_followed(st: StepScratch, call: ToolCall) -> None:
    """A call the step made that a shown hook output suggested (same tool, same arguments)
    counts as followed, once per suggestion."""
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return
    for i, (skill, tool, wanted) in enumerate(st.suggested):
        if tool == call.name and wanted == args:
            st.out.hooks_seen[skill][2] += 1
            del st.suggested[i]
            return


def _decide_outcome(st: StepScratch) -> None:
    """Set how the step ended (``OUTCOMES``), once, when it ends. A ``post_step`` gate's
    retry makes the model answer again: its last round decides."""
    out = st.out
    if out.skipped:
        out.outcome = "skipped"
    elif out.degraded:
        out.outcome = "degraded"
    elif st.finish_called:
        out.outcome = "finished"
    elif st.finished:
        out.outcome = "answered"
    else:
        out.outcome = "out_of_turns"


# (resolution, env router, schemas) by identity: one router per host and tick, one
# resolution per registry generation, so this holds a handful of entries.
_TOOLS_CACHE: dict[tuple[Any, ...], tuple[object, object, list[dict[str, Any]]]] = {}

# The ``<tool_calls>`` block of a tool list (by identity: the lists are cached above).
_DESCRIBED: dict[int, tuple[object, str]] = {}


def _described(tools: list[dict[str, Any]]) -> str:
    hit = _DESCRIBED.get(id(tools))
    if hit is not None and hit[0] is tools:
        return hit[1]
    if len(_DESCRIBED) >= 64:
        _DESCRIBED.clear()
    text = describe_tools(tools)
    _DESCRIBED[id(tools)] = (tools, text)
    return text


_HANDLERS = {
    "activate_skill": Agent._t_activate,
    "deactivate_skill": Agent._t_deactivate,
    "read_skill_file": Agent._t_read_file,
    "execute_skill_script": Agent._t_execute,
    "search_skills": Agent._t_search,
    "ask_env": Agent._t_ask_env,
    "finish": Agent._t_finish,
}
