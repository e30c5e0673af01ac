"""Skills: SKILL.md parsing, the registry, script execution (``scripts``) and the per-agent
runtime. ``docs/architecture.md`` lists the modules, one line each.

Names are imported lazily on first use, so ``import agentsim.skills`` stays cheap (no
pydantic or YAML until a parser or registry is actually needed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentsim._lazy import lazy_exports

if TYPE_CHECKING:
    from agentsim.skills.manifest import (
        Diagnostic,
        SkillManifest,
        load_skill_md,
        parse_skill_md,
        render_skill_md,
    )
    from agentsim.skills.registry import RefreshResult, SkillRegistry
    from agentsim.skills.scan import SkillDescriptor

__all__ = [
    "Diagnostic",
    "RefreshResult",
    "SkillDescriptor",
    "SkillManifest",
    "SkillRegistry",
    "load_skill_md",
    "parse_skill_md",
    "render_skill_md",
]

# public name -> module that defines it; other parts of the package add their own names here
_LAZY: dict[str, str] = {
    "Diagnostic": "agentsim.skills.manifest",
    "SkillManifest": "agentsim.skills.manifest",
    "load_skill_md": "agentsim.skills.manifest",
    "parse_skill_md": "agentsim.skills.manifest",
    "render_skill_md": "agentsim.skills.manifest",
    "RefreshResult": "agentsim.skills.registry",
    "SkillDescriptor": "agentsim.skills.scan",
    "SkillRegistry": "agentsim.skills.registry",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
