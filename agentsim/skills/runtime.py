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
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import jsonschema

from agentsim.errors import SkillActivationError, SkillNotFoundError
from agentsim.skills.catalog import CatalogIndex, RenderedCatalog, render_catalog
from agentsim.skills.context import SkillScriptContext, safe_env
from agentsim.skills.hooks import HookOutcome, parse_hook_output
from agentsim.skills.scripts import ScriptResult, ScriptRunner

if TYPE_CHECKING:
    from agentsim.skills.registry import SkillDescriptor

__all__ = ["ActivationResult", "AgentSkillRuntime", "SkillSpace", "SkillView"]

_CMD = re.compile(r"!`([^`\n]+)`")
_ARG = re.compile(r"\$(ARGUMENTS|\d+)")


class SkillView(Protocol):
    """The read API shared by a registry snapshot and an agent-scoped overlay."""

    @property
    def generation(self) -> int: ...
    def list_all(self) -> list[SkillDescriptor]: ...
    def get(self, skill_id: str) -> SkillDescriptor: ...
    def read_skill_doc(self, skill_id: str) -> str: ...
    def read_skill_file(self, skill_id: str, relative_path: str) -> str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivationResult:
    skill_id: str
    handle: str
    newly_active: tuple[str, ...]  # this skill and the prerequisites it brought in
    warnings: tuple[str, ...] = ()


class _Resolved:
    """Name/id resolution tables for one view; built once per view generation."""

    __slots__ = ("by_handle", "by_id", "descriptors", "index")

    def __init__(self, descriptors: Sequence[SkillDescriptor]) -> None:
        self.descriptors = {d.skill_id: d for d in descriptors}
        self.index = CatalogIndex.build(descriptors)
        self.by_handle = {e.handle: e.skill_id for e in self.index.entries}
        self.by_id = {e.skill_id: e.handle for e in self.index.entries}


class SkillSpace:
    """Everything about skills that the agents of one process share."""

    def __init__(
        self,
        view: SkillView,
        *,
        runner: ScriptRunner | None = None,
        catalog_budget_tokens: int = 2000,
        trusted_namespaces: Iterable[str] = ("built-in",),
        command_timeout: float = 5.0,
        hook_output_cap: int = 2000,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.runner = runner or ScriptRunner()
        self.catalog_budget_tokens = catalog_budget_tokens
        self.trusted_namespaces = frozenset(trusted_namespaces)
        self.command_timeout = command_timeout
        self.hook_output_cap = hook_output_cap
        self.env = safe_env(environ)
        self._view = view
        self._resolved: dict[int, tuple[SkillView, _Resolved]] = {}
        self._catalog_cache: OrderedDict[tuple[Any, ...], RenderedCatalog] = OrderedDict()
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
        self._dirs: dict[str, Path] = {}

    @property
    def view(self) -> SkillView:
        return self._view

    def swap_view(self, view: SkillView) -> None:
        """Install a refreshed registry snapshot; agents see it from their next call on."""
        self._view = view
        self._resolved.clear()
        self._catalog_cache.clear()
        self._validators.clear()

    def resolved(self, view: SkillView) -> _Resolved:
        key = id(view)
        hit = self._resolved.get(key)
        if hit is None or hit[0] is not view:
            hit = (view, _Resolved(view.list_all()))
            self._resolved[key] = hit
        return hit[1]

    def skill_dir(self, desc: SkillDescriptor) -> Path:
        d = self._dirs.get(desc.path)
        if d is None:
            d = self._dirs[desc.path] = Path(desc.path)
        return d

    def catalog(
        self,
        view: SkillView,
        *,
        situation: str,
        active: tuple[str, ...],
        hidden: frozenset[str],
    ) -> RenderedCatalog:
        key = (id(view), view.generation, situation, active, hidden)
        hit = self._catalog_cache.get(key)
        if hit is not None:
            self._catalog_cache.move_to_end(key)
            return hit
        out = render_catalog(
            self.resolved(view).index,
            budget_tokens=self.catalog_budget_tokens,
            query=situation,
            active=active,
            hidden=hidden,
        )
        self._catalog_cache[key] = out
        if len(self._catalog_cache) > 1024:
            self._catalog_cache.popitem(last=False)
        return out

    def validator(self, desc: SkillDescriptor, which: str) -> jsonschema.protocols.Validator | None:
        schema = desc.input_schema if which == "input" else desc.output_schema
        if schema is None:
            return None
        key = (desc.skill_id, which)
        v = self._validators.get(key)
        if v is None:
            cls = jsonschema.validators.validator_for(schema)
            v = self._validators[key] = cls(schema)
        return v


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
        if a[:1] in "{[":
            try:
                return True, json.loads(a)
            except ValueError:
                continue
    return False, None


def _failed(message: str, *, elapsed: float = 0.0) -> ScriptResult:
    return ScriptResult(
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
        "_hidden",
        "_own_view",
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
        self._active: list[str] = []
        self._activation_args: dict[str, str] = {}
        self._bodies: dict[str, str] = {}
        self.warnings: list[str] = []
        res = space.resolved(self.view)
        hidden: set[str] = set()
        for name in disabled:
            sid = res.by_handle.get(name) or (name if name in res.descriptors else None)
            if sid is None:
                sid = next((d for d, v in res.descriptors.items() if v.name == name), None)
            if sid is not None:
                hidden.add(sid)
        self._hidden = frozenset(hidden)

    # -- what the agent can see ------------------------------------------------------------

    @property
    def view(self) -> SkillView:
        return self._own_view if self._own_view is not None else self._space.view

    def set_own_view(self, view: SkillView | None) -> None:
        self._own_view = view

    @property
    def active(self) -> tuple[str, ...]:
        """Activated skill ids, in activation order."""
        return tuple(self._active)

    def visible(self) -> list[SkillDescriptor]:
        res = self._space.resolved(self.view)
        return [d for sid, d in res.descriptors.items() if sid not in self._hidden]

    def handles(self) -> list[str]:
        """What the model may pass as a skill name (the enum of the skill tools)."""
        res = self._space.resolved(self.view)
        return [e.handle for e in res.index.entries if e.skill_id not in self._hidden]

    def handle_of(self, skill_id: str) -> str:
        return self._space.resolved(self.view).by_id.get(skill_id, skill_id)

    def resolve(self, name: str) -> SkillDescriptor:
        """A visible skill by handle, id or bare name; unknown names list close matches."""
        res = self._space.resolved(self.view)
        sid = res.by_handle.get(name) or (name if name in res.descriptors else None)
        if sid is None or sid in self._hidden:
            if sid in self._hidden:
                raise SkillActivationError(name, "it is disabled for this agent's group")
            handles = [h for h, s in res.by_handle.items() if s not in self._hidden]
            close = difflib.get_close_matches(name, handles, n=3, cutoff=0.6)
            raise SkillNotFoundError(name, close, "call search_skills(query) to find a skill")
        return res.descriptors[sid]

    def catalog(self, situation: str = "") -> RenderedCatalog:
        return self._space.catalog(
            self.view, situation=situation, active=tuple(self._active), hidden=self._hidden
        )

    def search(self, query: str, *, limit: int = 10) -> list[dict[str, Any]]:
        res = self._space.resolved(self.view)
        hits = res.index.search(query, limit=limit + len(self._hidden))
        out = [
            {"name": e.handle, "description": e.description, "active": e.skill_id in self._active}
            for e in hits
            if e.skill_id not in self._hidden
        ]
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
            newly.append(d.skill_id)
            if d.status == "deprecated":
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
            raise SkillActivationError(desc.name, f"its requirements form a cycle: {cycle}")
        for req in desc.requires:
            try:
                dep = self.resolve(req)
            except (SkillNotFoundError, SkillActivationError) as exc:
                raise SkillActivationError(
                    desc.name, f"it requires {req!r}, which is not available here ({exc})"
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
        self._bodies.pop(desc.skill_id, None)
        self._activation_args.pop(desc.skill_id, None)
        return True

    async def _render_body(self, desc: SkillDescriptor, arguments: str) -> str:
        body = self.view.read_skill_doc(desc.skill_id)
        parts = arguments.split()

        def sub(m: re.Match[str]) -> str:
            key = m.group(1)
            if key == "ARGUMENTS":
                return arguments
            i = int(key) - 1
            return parts[i] if 0 <= i < len(parts) else ""

        body = _ARG.sub(sub, body)
        if "!`" not in body:
            return body
        if desc.namespace not in self._space.trusted_namespaces:
            return _CMD.sub(
                lambda m: f"[command not run: namespace {desc.namespace!r} is not trusted]", body
            )
        outputs = [await self._run_command(m.group(1)) for m in _CMD.finditer(body)]
        it = iter(outputs)
        return _CMD.sub(lambda _m: next(it), body)

    async def _run_command(self, cmd: str) -> str:
        self.workspace_root.mkdir(parents=True, exist_ok=True)
        proc = await asyncio.create_subprocess_shell(
            cmd,
            cwd=self.workspace_root,
            env=dict(self._space.env),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), self._space.command_timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return f"[command timed out after {self._space.command_timeout:g}s: {cmd}]"
        text = out.decode("utf-8", "replace").strip()
        return text[:2000]

    def bodies(self) -> str:
        """The ``<skill_content>`` blocks of the active skills, each exactly once."""
        parts = []
        for sid in self._active:
            body = self._bodies.get(sid)
            if body is None:
                continue
            name = self.handle_of(sid)
            parts.append(f'<skill_content name="{name}">\n{body.strip()}\n</skill_content>')
        return "\n".join(parts)

    # -- scripts ---------------------------------------------------------------------------

    def _context(self, desc: SkillDescriptor, *, tick: int, time: datetime) -> SkillScriptContext:
        return SkillScriptContext(
            workspace_root=self.workspace_root,
            skill_id=desc.skill_id,
            skill_name=desc.name,
            skill_dir=self._space.skill_dir(desc),
            agent_id=self.agent_id,
            tick=tick,
            time=time,
            env=self._space.env,
        )

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
            return _failed(f"skill {desc.name!r} is not active; call activate_skill first")
        rel = script or desc.script
        if rel is None:
            return _failed(
                f"skill {desc.name!r} has no default script; pass `script` "
                f"(see its SKILL.md for the scripts it documents)"
            )
        space = self._space
        v_in = space.validator(desc, "input")
        if v_in is not None:
            found, payload = _json_argument(argv)
            if not found:
                return _failed(f"skill {desc.name!r} expects a JSON argument (its input_schema)")
            err = jsonschema.exceptions.best_match(v_in.iter_errors(payload))
            if err is not None:
                return _failed(
                    f"input does not match the input_schema of {desc.name}: {err.message}"
                )
        ctx = self._context(desc, tick=tick, time=time)
        path = desc.script_path(rel)
        attempts = 1 + (desc.retries if desc.idempotent else 0)
        result = await space.runner.run(
            path, argv, ctx, isolation=desc.isolation, timeout=desc.timeout
        )
        while not result.ok and not result.timed_out and attempts > 1:
            attempts -= 1
            result = await space.runner.run(
                path, argv, ctx, isolation=desc.isolation, timeout=desc.timeout
            )
        v_out = space.validator(desc, "output")
        if result.ok and v_out is not None:
            try:
                value = json.loads(result.output)
            except ValueError:
                return _failed(
                    f"output of {desc.name} is not JSON but the skill declares an output_schema",
                    elapsed=result.elapsed,
                )
            err = jsonschema.exceptions.best_match(v_out.iter_errors(value))
            if err is not None:
                return _failed(
                    f"output does not match the output_schema of {desc.name}: {err.message}",
                    elapsed=result.elapsed,
                )
        return result

    # -- hooks -----------------------------------------------------------------------------

    async def run_hooks(
        self, hook_type: str, *, tick: int, time: datetime, step_count: int
    ) -> list[HookOutcome]:
        """Run ``hook_type`` for every active skill declaring it, ordered by skill id."""
        hooked: list[tuple[SkillDescriptor, str]] = []
        descriptors = self._space.resolved(self.view).descriptors
        for sid in sorted(self._active):
            desc = descriptors.get(sid)
            if desc is None:
                continue  # removed by a hot reload; dropped from the active set below
            rel = desc.hook_script(hook_type)
            if rel is not None:
                hooked.append((desc, rel))
        self._active[:] = [sid for sid in self._active if sid in descriptors]
        if not hooked:
            return []
        payload = json.dumps(
            {
                "hook_type": hook_type,
                "tick": tick,
                "time": time.isoformat(),
                "agent_id": self.agent_id,
                "step_count": step_count,
            },
            separators=(",", ":"),
        )
        argv = ("--args-json", payload)
        runner = self._space.runner
        outcomes: list[HookOutcome] = []
        for desc, rel in hooked:
            ctx = self._context(desc, tick=tick, time=time)
            res = await runner.run(
                desc.script_path(rel), argv, ctx, isolation=desc.isolation, timeout=desc.timeout
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
                        error=res.error,
                    )
                )
        return outcomes

    # -- state -----------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        return {"active": list(self._active), "arguments": dict(self._activation_args)}

    async def set_state(self, state: Mapping[str, Any]) -> None:
        self._active.clear()
        self._bodies.clear()
        self._activation_args.clear()
        args: Mapping[str, str] = state.get("arguments", {})
        descriptors = self._space.resolved(self.view).descriptors
        for sid in state.get("active", []):
            desc = descriptors.get(sid)
            if desc is None:
                self.warnings.append(f"skill {sid} is no longer installed; not re-activated")
                continue
            self._bodies[sid] = await self._render_body(desc, args.get(sid, ""))
            self._activation_args[sid] = args.get(sid, "")
            self._active.append(sid)
