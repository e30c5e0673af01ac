"""``SkillDescriptor``: a registered skill, as the registry hands it out."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsim.skills.manifest import SkillManifest

__all__ = ["SkillDescriptor"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillDescriptor:
    """A registered skill: where it is, under which id, and its parsed frontmatter.

    The body is not kept: it is read on activation. The frontmatter fields are readable
    directly on the descriptor (``desc.timeout`` is ``desc.manifest.timeout``).
    """

    skill_id: str
    namespace: str
    path: str
    manifest: SkillManifest = field(hash=False)  # holds dicts: hashed by id and path
    body_line: int = 1

    @classmethod
    def create(
        cls, namespace: str, path: str, manifest: SkillManifest, body_line: int = 1
    ) -> SkillDescriptor:
        return cls(
            skill_id=f"{namespace}@{manifest.name}",
            namespace=namespace,
            path=path,
            manifest=manifest,
            body_line=body_line,
        )

    # The frontmatter fields, read through. ``isolation`` and ``status`` are typed ``str``
    # as before, so that callers' casts to the literal types stay meaningful.

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def description(self) -> str:
        return self.manifest.description

    @property
    def script(self) -> str | None:
        return self.manifest.script

    @property
    def tags(self) -> tuple[str, ...]:
        return self.manifest.tags

    @property
    def requires(self) -> tuple[str, ...]:
        """The skills this one requires; its env modules and tools are ``requires_env``
        and ``requires_tools`` (all three are the manifest's one ``requires`` list)."""
        return self.manifest.required_skills

    @property
    def requires_env(self) -> tuple[str, ...]:
        return self.manifest.required_env

    @property
    def requires_tools(self) -> tuple[str, ...]:
        return self.manifest.required_tools

    @property
    def timeout(self) -> float | None:
        return self.manifest.timeout

    @property
    def isolation(self) -> str:
        return self.manifest.isolation

    @property
    def status(self) -> str:
        return self.manifest.status

    @property
    def input_schema(self) -> dict[str, Any] | None:
        return self.manifest.input_schema

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return self.manifest.output_schema

    @property
    def idempotent(self) -> bool:
        return self.manifest.idempotent

    @property
    def retries(self) -> int:
        return self.manifest.retries

    @property
    def env(self) -> tuple[str, ...]:
        return self.manifest.env

    @property
    def version(self) -> str | None:
        return self.manifest.version

    @property
    def license(self) -> str | None:
        return self.manifest.license

    @property
    def compatibility(self) -> str | None:
        return self.manifest.compatibility

    @property
    def metadata(self) -> dict[str, str] | None:
        return self.manifest.metadata

    @property
    def allowed_tools(self) -> tuple[str, ...] | None:
        return self.manifest.allowed_tools

    @property
    def hooks(self) -> tuple[tuple[str, str], ...]:
        """(hook type, relative script) of every declared hook, pre_step first."""
        return tuple((kind, rel) for kind, rel in self.manifest.hooks if rel is not None)

    def hook_script(self, hook_type: str) -> str | None:
        """The relative script declared for ``hook_type``, or None."""
        rel: str | None = getattr(self.manifest.hooks, hook_type, None)
        return rel

    def script_path(self, rel: str | None = None) -> Path:
        """Absolute path of ``rel`` (default: the skill's ``script``) inside the skill."""
        target = rel if rel is not None else self.manifest.script
        if target is None:
            raise ValueError(
                f"skill {self.skill_id!r} declares no script; pass the relative path of one"
            )
        return Path(self.path, target)

    @property
    def skill_md(self) -> str:
        return os.path.join(self.path, "SKILL.md")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (used by ``agentsim skills list --json``)."""
        fields = self.manifest.model_dump(mode="json", exclude={"extra", "hooks"})
        return {
            "skill_id": self.skill_id,
            "namespace": self.namespace,
            "path": self.path,
            **fields,
            "hooks": dict(self.hooks),
        }
