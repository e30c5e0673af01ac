"""Per-agent skill runtime: what one agent sees, has activated, and runs.

``SkillSpace`` is the per-process part shared by every agent of a host (registry snapshot,
script runner, catalog indexes, settings). ``AgentSkillRuntime`` is the small per-agent
part: disabled and activated skills, activation arguments, and the step's hook outcomes.
Keeping the per-agent part tiny is what lets a host hold 100,000 agents.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import re
import signal
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema

from agentsim.errors import SkillActivationError, SkillNotFoundError
from agentsim.skills.catalog import (
    RenderedCatalog,
    render_selection,
)
from agentsim.skills.context import SkillScriptContext
from agentsim.skills.hooks import HookOutcome, parse_hook_output
from agentsim.skills.manifest import path_problem
from agentsim.skills.scripts.runner import ScriptResult
from agentsim.skills.space import SkillSpace, SkillView, _Resolved

if TYPE_CHECKING:
    from agentsim.skills.registry import SkillDescriptor

__all__ = ["ActivationResult", "AgentSkillRuntime", "SkillSpace", "SkillView"]

_CMD = re.compile(r"!`([^`\n]+)`")
_ARG = re.compile(r"\$(ARGUMENTS|\d+)")
_COMMAND_OUTPUT_CAP = 2000

# One hook of a plan: (skill, its hook script's path).
_HookCall = tuple["SkillDescriptor", str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivationResult:
    skill_id: str
    handle: str
    newly_active: tuple[str, ...]  # this skill and the prerequisites it brought in
    warnings: tuple[str, ...] = ()


def _json_argument(argv: Sequence[str]) -> tuple[bool, Any]:
    """The JSON argument of a call: after ``--json`` / ``--args-json``, else the first
    argument that parses as a JSON object or array."""
    for flag in ("--json", "--args-json"):
        if flag in argv:
            i = argv.index(flag)
            if i + 1 < len(argv):
                try:
                    return True, json.loads(argv[i + 1])
                except ValueError:
                    return True, argv[i + 1]
    for a in argv:
        if a[:1] in ("{", "["):
            try:
                return True, json.loads(a)
            except ValueError:
                continue
    return False, None


def _failed(message: str, *, elapsed: float = 0.0, refused: bool = False) -> ScriptResult:
    return ScriptResult(
        refused=refused,
        ok=False,
        output="",
        exit_code=2,
        error=message,
        elapsed=elapsed,
        tier="entrypoint",
        isolation="inline",
        truncated=False,
    )


class AgentSkillRuntime:
    """The skills of one agent. Cheap to create; holds no copies of shared data."""

    __slots__ = (
        "_activation_args",
        "_active",
        "_bodies",
        "_catalog_sel",
        "_disabled",
        "_hidden",
        "_own",
        "_own_catalog",
        "_own_view",
        "_plans",
        "_space",
        "agent_id",
        "warnings",
        "workspace_root",
    )

    def __init__(
        self,
        space: SkillSpace,
        *,
        agent_id: str,
        workspace_root: Path,
        disabled: Iterable[str] = (),
        own_view: SkillView | None = None,
    ) -> None:
        self._space = space
        self.agent_id = agent_id
        self.workspace_root = workspace_root
        self._own_view = own_view
        self._own: tuple[SkillView, int, _Resolved] | None = None
        self._own_catalog: tuple[tuple[Any, ...], RenderedCatalog] | None = None
        # (key, resolution, shown ids, omitted, tokens) of the last over-budget catalog: the
        # ranking is redone only when the key changes; the text is re-joined from entries.
        self._catalog_sel: tuple[Any, _Resolved, tuple[str, ...], int, int, int] | None = None
        self._active: list[str] = []
        self._activation_args: dict[str, str] = {}
        self._bodies: dict[str, str] = {}
        self._disabled = tuple(disabled)
        self._hidden: tuple[_Resolved, frozenset[str]] | None = None
        self._plans: dict[str, tuple[_Resolved, tuple[_HookCall, ...]]] | None = None
        self.warnings: list[str] = []

    # -- what the agent can see ------------------------------------------------------------

    @property
    def view(self) -> SkillView:
        return self._own_view if self._own_view is not None else self._space.view

    @property
    def space(self) -> SkillSpace:
        """The per-process part this runtime shares with the host's other agents."""
        return self._space

    @property
    def hook_output_cap(self) -> int:
        """Characters of one hook's output shown in ``<skill_hooks>``."""
        return self._space.hook_output_cap

    def set_own_view(self, view: SkillView | None) -> None:
        self._own_view = view

    def _res(self) -> _Resolved:
        view = self._own_view
        if view is None:
            return self._space.resolved(self._space.view)
        # An agent's own view is resolved here, never in the shared space: its skills are
        # visible to this agent only.
        own = self._own
        if own is None or own[0] is not view or own[1] != view.generation:
            res = _Resolved(view.list_all(), self._space.provides)
            own = self._own = (view, view.generation, res)
        return own[2]

    def _hidden_ids(self, res: _Resolved) -> frozenset[str]:
        """Ids of the disabled skills, recomputed when the view changes (a disabled name
        may appear after a hot reload). A name hides every skill of that name."""
        hit = self._hidden
        if hit is not None and hit[0] is res:
            return hit[1]
        out = self._space.hidden_ids(res, self._disabled)
        self._hidden = (res, out)
        return out

    @property
    def active(self) -> tuple[str, ...]:
        """Activated skill ids, in activation order."""
        return tuple(self._active)

    def visible(self) -> list[SkillDescriptor]:
        res = self._res()
        hidden = self._hidden_ids(res)
        return [d for sid, d in res.descriptors.items() if sid not in hidden]

    def visibility(self) -> tuple[object, frozenset[str]]:
        """What the visible set depends on (resolution, hidden ids): a cache key for things
        derived from ``handles()``, such as tool schemas."""
        res = self._res()
        return res, self._hidden_ids(res)

    def handles(self) -> list[str]:
        """What the model may pass as a skill name (the enum of the skill tools)."""
        res = self._res()
        hidden = self._hidden_ids(res)
        if not hidden:
            return list(res.by_handle)
        return [e.handle for e in res.index.entries if e.skill_id not in hidden]

    def handle_of(self, skill_id: str) -> str:
        return self._res().by_id.get(skill_id, skill_id)

    def resolve(self, name: str) -> SkillDescriptor:
        """A visible skill by handle, id or bare name (the highest-precedence skill of that
        name); unknown names list close matches."""
        res = self._res()
        hidden = self._hidden_ids(res)
        sid = res.by_handle.get(name) or (name if name in res.descriptors else None)
        if sid is None:
            # An ambiguous bare name: entries are in precedence order (agent, custom, ...).
            sid = next(
                (e.skill_id for e in res.index.entries if e.handle.endswith("@" + name)), None
            )
        if sid is not None and sid in res.unmet:
            raise SkillActivationError(name, f"it is not available in this run: {res.unmet[sid]}")
        if sid is not None and sid in hidden:
            raise SkillActivationError(name, "it is disabled for this agent's group")
        if sid is None:
            handles = [h for h, s in res.by_handle.items() if s not in hidden]
            close = difflib.get_close_matches(name, handles, n=3, cutoff=0.6)
            raise SkillNotFoundError(name, close, "call search_skills(query) to find a skill")
        return res.descriptors[sid]

    def catalog(self, situation: str = "") -> RenderedCatalog:
        """The ``<available_skills>`` block, ranked by ``situation`` when over budget."""
        res = self._res()
        hidden = self._hidden_ids(res)
        active = tuple(self._active)
        if self._own_view is None:
            space = self._space
            if space.fits(res, active):
                return space.catalog(res, situation=situation, active=active, hidden=hidden)
            sel_key = (situation, active, hidden)
            sel = self._catalog_sel
            if sel is not None and sel[1] is res and sel[0] == sel_key:
                shown, omitted, tokens, head = sel[2:]
                text, agent_text = render_selection(
                    res.index, shown, head=head, omitted=omitted, note=res.note
                )
                return RenderedCatalog(
                    text=text,
                    shown=shown,
                    omitted=omitted,
                    tokens=tokens,
                    head=head,
                    agent_text=agent_text,
                )
            out = space.catalog(res, situation=situation, active=active, hidden=hidden, cache=False)
            self._catalog_sel = (sel_key, res, out.shown, out.omitted, out.tokens, out.head)
            return out
        key = (res, situation, active, hidden)
        hit = self._own_catalog
        if hit is not None and hit[0] == key:
            return hit[1]
        out = self._space.catalog(
            res, situation=situation, active=active, hidden=hidden, cache=False
        )
        self._own_catalog = (key, out)
        return out

    def search(self, query: str, *, limit: int = 10) -> list[dict[str, Any]]:
        """BM25 matches over every visible skill (also those left out of the catalog)."""
        res = self._res()
        hidden = self._hidden_ids(res)
        hits = res.index.search(query, limit=limit + len(hidden))
        out: list[dict[str, Any]] = []
        for e in hits:
            if e.skill_id in hidden:
                continue
            hit: dict[str, Any] = {"name": e.handle, "description": e.description}
            hit["active"] = e.skill_id in self._active
            if res.descriptors[e.skill_id].manifest.status == "deprecated":
                hit["deprecated"] = True  # as the catalog marks it
            out.append(hit)
        return out[:limit]

    # -- activation ------------------------------------------------------------------------

    async def activate(self, name: str, *, arguments: str = "") -> ActivationResult:
        """Activate a skill and its prerequisites (idempotent)."""
        desc = self.resolve(name)
        order: list[SkillDescriptor] = []
        self._collect_requires(desc, order, trail=())
        newly: list[str] = []
        warnings: list[str] = []
        for d in order:
            if d.skill_id in self._active:
                continue
            args = arguments if d.skill_id == desc.skill_id else ""
            self._bodies[d.skill_id] = await self._render_body(d, args)
            self._activation_args[d.skill_id] = args
            self._active.append(d.skill_id)
            self._plans = None
            newly.append(d.skill_id)
            if d.manifest.status == "deprecated":
                msg = f"skill {d.skill_id} is deprecated; prefer another skill where one fits"
                warnings.append(msg)
                self.warnings.append(msg)
        return ActivationResult(
            skill_id=desc.skill_id,
            handle=self.handle_of(desc.skill_id),
            newly_active=tuple(newly),
            warnings=tuple(warnings),
        )

    def _collect_requires(
        self, desc: SkillDescriptor, order: list[SkillDescriptor], *, trail: tuple[str, ...]
    ) -> None:
        if desc.skill_id in trail:
            cycle = " -> ".join((*trail, desc.skill_id))
            raise SkillActivationError(
                desc.manifest.name, f"its requirements form a cycle: {cycle}"
            )
        for req in desc.manifest.required_skills:
            # A skill's own namespace first: a namesake elsewhere (a custom copy shadowing a
            # built-in) never stands in for what a built-in skill requires.
            own = f"{desc.namespace}@{req}"
            try:
                dep = self.resolve(own if own in self._res().descriptors else req)
            except (SkillNotFoundError, SkillActivationError) as exc:
                raise SkillActivationError(
                    desc.manifest.name, f"it requires {req!r}, which is not available here ({exc})"
                ) from None
            self._collect_requires(dep, order, trail=(*trail, desc.skill_id))
        if desc not in order:
            order.append(desc)

    def deactivate(self, name: str) -> bool:
        """Deactivate a skill; returns whether it was active (idempotent)."""
        desc = self.resolve(name)
        if desc.skill_id not in self._active:
            return False
        self._active.remove(desc.skill_id)
        self._plans = None
        self._bodies.pop(desc.skill_id, None)
        self._activation_args.pop(desc.skill_id, None)
        return True

    async def _render_body(self, desc: SkillDescriptor, arguments: str) -> str:
        """The body with ``$ARGUMENTS`` / ``$1``... substituted and ``!`cmd``` run.

        Commands come from the skill author only: they are found in the body *before* the
        arguments (model text) go in, and arguments are never substituted into them.
        """
        body = self.view.read_skill_doc(desc.skill_id)
        parts = arguments.split()

        def sub(m: re.Match[str]) -> str:
            key = m.group(1)
            if key == "ARGUMENTS":
                return arguments
            i = int(key) - 1
            return parts[i] if 0 <= i < len(parts) else ""

        if "!`" not in body:
            return _ARG.sub(sub, body) if "$" in body else body
        trusted = self._space.runs_commands(desc)
        out: list[str] = []
        pos = 0
        for m in _CMD.finditer(body):
            out.append(_ARG.sub(sub, body[pos : m.start()]))
            if trusted:
                out.append(await self._run_command(m.group(1)))
            else:
                out.append(f"[command not run: namespace {desc.namespace!r} is not trusted]")
            pos = m.end()
        out.append(_ARG.sub(sub, body[pos:]))
        return "".join(out)

    async def _run_command(self, cmd: str) -> str:
        self.workspace_root.mkdir(parents=True, exist_ok=True)
        # Own session, so that a timeout kills the command's children too, not just the shell.
        proc = await asyncio.create_subprocess_shell(
            cmd,
            cwd=self.workspace_root,
            env=dict(self._space.env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), self._space.command_timeout)
        except TimeoutError:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # pragma: no cover - it ended in between
                pass
            await proc.wait()
            return f"[command timed out after {self._space.command_timeout:g}s: {cmd}]"
        text = out.decode("utf-8", "replace").strip()
        return text[:_COMMAND_OUTPUT_CAP]

    async def sync(self, edited: Collection[str] = ()) -> list[str]:
        """Follow a reload: deactivate active skills the view no longer has, and re-render
        the bodies of active skills in ``edited`` (their SKILL.md changed on disk).

        Returns the ids deactivated, for the caller to report."""
        descriptors = self._res().descriptors
        gone = [sid for sid in self._active if sid not in descriptors]
        for sid in gone:
            self._active.remove(sid)
            self._bodies.pop(sid, None)
            self._activation_args.pop(sid, None)
            self.warnings.append(f"skill {sid} was removed from its folder; deactivated")
        if gone:
            self._plans = None
        for sid in self._active:
            if sid in edited:
                args = self._activation_args.get(sid, "")
                self._bodies[sid] = await self._render_body(descriptors[sid], args)
        return gone

    def bodies(self, skill_ids: Iterable[str] | None = None) -> str:
        """The ``<skill_content>`` blocks of the active skills (or of ``skill_ids``, e.g.
        those an activation just brought in), each exactly once."""
        parts = []
        for sid in self._active if skill_ids is None else dict.fromkeys(skill_ids):
            body = self._bodies.get(sid)
            if body is None:
                continue
            name = self.handle_of(sid)
            parts.append(f'<skill_content name="{name}">\n{body.strip()}\n</skill_content>')
        return "\n".join(parts)

    def drain_warnings(self) -> list[str]:
        """Warnings (deprecations, skills gone after a reload) not yet reported."""
        out, self.warnings = self.warnings, []
        return out

    # -- scripts ---------------------------------------------------------------------------

    async def call_script(
        self,
        name: str,
        argv: Sequence[str],
        *,
        tick: int,
        time: datetime,
        script: str | None = None,
    ) -> ScriptResult:
        """Run a script of an active skill; failures come back as a failed result."""
        desc = self.resolve(name)
        if desc.skill_id not in self._active:
            return _failed(
                f"skill {desc.manifest.name!r} is not active; call activate_skill first",
                refused=True,
            )
        refusal = self._space.script_refusal(desc)
        if refusal is not None:
            return _failed(refusal, refused=True)
        rel = script or desc.manifest.script
        if rel is None:
            return _failed(
                f"skill {desc.manifest.name!r} has no default script; pass `script` "
                f"(see its SKILL.md for the scripts it documents)",
                refused=True,
            )
        if script is not None:
            problem = path_problem(script)
            if problem:
                return _failed(
                    f"script of skill {desc.manifest.name!r} refused: {problem}", refused=True
                )
        space = self._space
        v_in = None if desc.manifest.input_schema is None else space.validator(desc, "input")
        if v_in is not None:
            found, payload = _json_argument(argv)
            if not found:
                return _failed(
                    f"skill {desc.manifest.name!r} expects a JSON argument (its input_schema)",
                    refused=True,
                )
            err = jsonschema.exceptions.best_match(v_in.iter_errors(payload))
            if err is not None:
                return _failed(
                    f"input does not match the input_schema of {desc.manifest.name}: {err.message}",
                    refused=True,
                )
        ctx = self._context(desc, tick=tick, time=time)
        path = os.path.join(desc.path, rel)
        isolation = space.isolation(desc)
        result = await space.runner.run(
            path,
            argv,
            ctx,
            isolation=isolation,
            timeout=desc.manifest.timeout,
            env=desc.manifest.env,
            network=desc.manifest.network,
        )
        if not result.ok and desc.manifest.idempotent:
            # Only an idempotent skill may be re-run: a failed call may have done half its work.
            attempts = desc.manifest.retries
            while not result.ok and not result.timed_out and attempts > 0:
                attempts -= 1
                result = await space.runner.run(
                    path,
                    argv,
                    ctx,
                    isolation=isolation,
                    timeout=desc.manifest.timeout,
                    env=desc.manifest.env,
                    network=desc.manifest.network,
                )
        if result.ok and desc.manifest.output_schema is not None:
            v_out = space.validator(desc, "output")
            try:
                value = json.loads(result.output)
            except ValueError:
                return _failed(
                    f"output of {desc.manifest.name} is not JSON"
                    " but the skill declares an output_schema",
                    elapsed=result.elapsed,
                )
            err = jsonschema.exceptions.best_match(v_out.iter_errors(value))
            if err is not None:
                return _failed(
                    "output does not match the output_schema of"
                    f" {desc.manifest.name}: {err.message}",
                    elapsed=result.elapsed,
                )
        return result

    # -- hooks -----------------------------------------------------------------------------

    def _hook_plan(self, hook_type: str) -> tuple[_HookCall, ...]:
        """The active skills that declare ``hook_type``, by skill id, with their scripts.

        Settled once per change of the active set (activate, deactivate, set_state, sync)
        or of the view (registry generation, agent overlay), not once per step."""
        res = self._res()
        plans = self._plans
        hit = plans.get(hook_type) if plans is not None else None
        if hit is not None and hit[0] is res:
            return hit[1]
        calls: list[_HookCall] = []
        # An active skill missing from the view was removed by a reload that ``sync`` has
        # not seen yet; it is deactivated there, with an event, and never run here.
        for sid in sorted(s for s in self._active if s in res.descriptors):
            desc = res.descriptors[sid]
            rel = desc.hook_script(hook_type)
            if rel is not None and self._space.script_refusal(desc) is None:
                calls.append((desc, os.path.join(desc.path, rel)))
        plan = tuple(calls)
        if plans is None:
            plans = self._plans = {}
        plans[hook_type] = (res, plan)
        return plan

    def _context(self, desc: SkillDescriptor, *, tick: int, time: datetime) -> SkillScriptContext:
        return SkillScriptContext(
            workspace_root=self.workspace_root,
            skill_id=desc.skill_id,
            skill_name=desc.manifest.name,
            skill_dir=Path(desc.path),
            agent_id=self.agent_id,
            tick=tick,
            time=time,
            env=self._space.env,
        )

    def has_hooks(self, hook_type: str) -> bool:
        """Whether an active skill declares ``hook_type`` (settled like the hook plan)."""
        return bool(self._hook_plan(hook_type))

    async def run_hooks(
        self, hook_type: str, *, tick: int, time: datetime, step_count: int
    ) -> list[HookOutcome]:
        """Run ``hook_type`` for every active skill declaring it, ordered by skill id."""
        plan = self._hook_plan(hook_type)
        if not plan:
            return []
        payload = {
            "hook_type": hook_type,
            "tick": tick,
            "time": time.isoformat(),
            "agent_id": self.agent_id,
            "step_count": step_count,
        }
        argv = ["--args-json", json.dumps(payload, separators=(",", ":"))]
        outcomes: list[HookOutcome] = []
        for desc, path in plan:
            res = await self._space.runner.run(
                path,
                argv,
                self._context(desc, tick=tick, time=time),
                isolation=self._space.isolation(desc),
                timeout=desc.manifest.timeout,
                env=desc.manifest.env,
                hook=hook_type,
                network=desc.manifest.network,
            )
            if res.ok:
                text, decision = parse_hook_output(
                    res.output, skill_id=desc.skill_id, hook=hook_type
                )
                outcomes.append(
                    HookOutcome(
                        skill_id=desc.skill_id,
                        hook=hook_type,
                        ok=True,
                        text=text,
                        decision=decision,
                        elapsed=res.elapsed,
                        tier=res.tier,
                        isolation=res.isolation,
                        log=res.log,
                        measures=res.measures,
                    )
                )
            else:
                outcomes.append(
                    HookOutcome(
                        skill_id=desc.skill_id,
                        hook=hook_type,
                        ok=False,
                        text=res.output,
                        elapsed=res.elapsed,
                        tier=res.tier,
                        isolation=res.isolation,
                        error=res.error,
                        script=desc.hook_script(hook_type) or "",
                        timed_out=res.timed_out,
                        # A refused call is quarantined too; only the overrun that caused
                        # the quarantine has timed out.
                        quarantined=res.quarantined and res.timed_out,
                        log=res.log,
                        measures=res.measures,
                    )
                )
        return outcomes

    # -- state -----------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        return {"active": list(self._active), "arguments": dict(self._activation_args)}

    async def set_state(self, state: Mapping[str, Any]) -> None:
        self._active.clear()
        self._plans = None
        self._bodies.clear()
        self._activation_args.clear()
        args: Mapping[str, str] = state.get("arguments", {})
        descriptors = self._res().descriptors
        for sid in state.get("active", []):
            desc = descriptors.get(sid)
            if desc is None:
                self.warnings.append(f"skill {sid} is no longer installed; not re-activated")
                continue
            self._bodies[sid] = await self._render_body(desc, args.get(sid, ""))
            self._activation_args[sid] = args.get(sid, "")
            self._active.append(sid)
