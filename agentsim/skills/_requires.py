"""Which skills a run cannot serve: ``requires`` checked against the run's modules and tools.

A skill is hidden when the run lacks an environment module (``env:social``) or an agent
tool (``tool:ask_env``) it requires, directly or through a skill it requires. A required
skill that is not installed does not hide anything here: the registry reports it, and
activation fails with a message naming it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentsim.skills._toolnames import TOOL_NAMES

if TYPE_CHECKING:
    from agentsim.skills._descriptor import SkillDescriptor

__all__ = ["RunProvides", "hidden_note", "unmet_requirements"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunProvides:
    """The environment modules and agent tools of one run."""

    env_modules: frozenset[str]
    tools: frozenset[str]

    @classmethod
    def for_modules(cls, env_modules: Collection[str]) -> RunProvides:
        """What a run with ``env_modules`` offers: every agent tool, but ``ask_env`` only
        when there is a module to ask."""
        tools = TOOL_NAMES if env_modules else tuple(t for t in TOOL_NAMES if t != "ask_env")
        return cls(env_modules=frozenset(env_modules), tools=frozenset(tools))


def unmet_requirements(
    descriptors: Iterable[SkillDescriptor], provides: RunProvides
) -> dict[str, str]:
    """Skill id -> why the run cannot serve it ("needs env module social"), for every
    skill whose requirements are not met; in the order of ``descriptors``."""
    descs = list(descriptors)
    # A required name means the first skill of that name (the precedence order of a view).
    by_name: dict[str, SkillDescriptor] = {}
    for d in descs:
        by_name.setdefault(d.name, d)
    needs: dict[str, list[str]] = {}
    for d in descs:
        own = [f"env module {m}" for m in d.requires_env if m not in provides.env_modules]
        own += [f"tool {t}" for t in d.requires_tools if t not in provides.tools]
        if own:
            needs[d.skill_id] = own
    # Then whoever requires a hidden skill, until nothing changes (cycles included).
    changed = bool(needs)
    while changed:
        changed = False
        for d in descs:
            hidden_deps = [
                f"skill {name}"
                for name in d.requires
                if (dep := by_name.get(name)) is not None and dep.skill_id in needs
            ]
            have = needs.get(d.skill_id, [])
            new = [h for h in hidden_deps if h not in have]
            if new:
                needs[d.skill_id] = have + new
                changed = True
    return {
        d.skill_id: "needs " + ", ".join(needs[d.skill_id]) for d in descs if d.skill_id in needs
    }


def hidden_note(unmet: Mapping[str, str], names: Mapping[str, str]) -> str:
    """The catalog's line about hidden skills (empty when none is hidden). ``names`` maps
    an id to what the catalog calls the skill."""
    if not unmet:
        return ""
    n = len(unmet)
    what = ", ".join(f"{names.get(sid, sid)} ({why})" for sid, why in unmet.items())
    return f"<!-- {n} skill{'s' if n != 1 else ''} hidden, not available in this run: {what} -->"
