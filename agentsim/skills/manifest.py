"""SKILL.md parsing: text -> ``SkillManifest`` + body, or diagnostics with file and line.

``parse_skill_md`` is pure; ``load_skill_md`` reads a file (size, encoding and the
existence of declared scripts are checked there) and calls it. Nothing here raises on a
bad skill: problems are ``Diagnostic`` values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from agentsim.skills._frontmatter import (
    MAX_SKILL_MD_BYTES,
    Diagnostic,
    decode_skill_md,
    read_frontmatter,
    too_big,
)
from agentsim.skills._validate import check_fields, check_skill_files

__all__ = [
    "Diagnostic",
    "HookSpec",
    "ParsedSkill",
    "SkillManifest",
    "load_skill_md",
    "parse_skill_md",
    "render_skill_md",
]

_NAME_REGEX = r"^[a-z0-9]+(-[a-z0-9]+)*$"


class HookSpec(BaseModel):
    """Scripts run at the start (``pre_step``) and end (``post_step``) of an agent's step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pre_step: str | None = None
    post_step: str | None = None


class SkillManifest(BaseModel):
    """The validated frontmatter of a SKILL.md. Unknown keys are kept in ``extra``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(pattern=_NAME_REGEX, max_length=64)
    description: str = Field(min_length=1, max_length=1024)
    script: str | None = None
    hooks: HookSpec = HookSpec()
    license: str | None = None
    compatibility: str | None = Field(default=None, max_length=500)
    metadata: dict[str, str] | None = None
    allowed_tools: tuple[str, ...] | None = Field(default=None, alias="allowed-tools")
    version: str | None = None
    tags: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    timeout: float | None = Field(default=None, gt=0)
    isolation: Literal["inline", "thread", "process"] = "inline"
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    status: Literal["active", "deprecated"] = "active"
    idempotent: bool = False
    retries: int = Field(default=0, ge=0)
    extra: dict[str, Any] = Field(default_factory=dict)

    def to_frontmatter(self) -> dict[str, Any]:
        """The manifest as SKILL.md keys (spec spelling), defaults and empty values left out."""
        out: dict[str, Any] = {}
        dumped = self.model_dump(by_alias=True, exclude_defaults=True, exclude={"extra"})
        hooks = dumped.pop("hooks", None)
        for key, value in dumped.items():
            out[key] = list(value) if isinstance(value, tuple) else value
        if hooks:
            out["hooks"] = {k: v for k, v in hooks.items() if v is not None}
        out.update(self.extra)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedSkill:
    """What ``parse_skill_md`` found: a manifest (None if any error) and the body."""

    manifest: SkillManifest | None
    body: str
    body_line: int
    diagnostics: tuple[Diagnostic, ...]

    @property
    def ok(self) -> bool:
        return self.manifest is not None

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")


def _manifest(fields: dict[str, Any]) -> SkillManifest:
    hooks = fields.pop("hooks", None)
    if hooks is not None:
        fields["hooks"] = HookSpec(**hooks)
    return SkillManifest.model_validate(fields)


def _parse(text: str, source: str, folder_name: str | None) -> tuple[ParsedSkill, dict[str, int]]:
    front = read_frontmatter(text, source=source)
    diags = list(front.diagnostics)
    body = front.text[front.body_start :]
    manifest = None
    if front.data is not None:
        fields, problems = check_fields(
            front.data,
            key_lines=front.key_lines,
            fm_line=front.fm_line,
            source=source,
            folder_name=folder_name,
        )
        diags.extend(problems)
        manifest = _manifest(fields) if fields is not None else None
    parsed = ParsedSkill(
        manifest=manifest, body=body, body_line=front.body_line, diagnostics=tuple(diags)
    )
    return parsed, front.key_lines


def parse_skill_md(text: str, *, source: str, folder_name: str | None = None) -> ParsedSkill:
    """Parse SKILL.md ``text``. ``source`` names the file in diagnostics; when
    ``folder_name`` is given, the skill's name must equal it."""
    return _parse(text, source, folder_name)[0]


def _failed(diags: list[Diagnostic]) -> ParsedSkill:
    return ParsedSkill(manifest=None, body="", body_line=1, diagnostics=tuple(diags))


def load_skill_md(path: str | os.PathLike[str]) -> ParsedSkill:
    """Read and parse a SKILL.md file, or a skill folder holding one.

    Besides ``parse_skill_md``'s checks: the file is at most 1 MiB of UTF-8, the name
    equals the folder name, and the declared script and hook files exist in the folder.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "SKILL.md"
    source = str(p)
    try:
        size = p.stat().st_size
        # The size is checked before reading so that a huge file is never loaded.
        raw = p.read_bytes() if size <= MAX_SKILL_MD_BYTES else b""
    except OSError as exc:
        problem = exc.strerror or type(exc).__name__
        return _failed(
            [Diagnostic(file=source, line=1, message=f"cannot read SKILL.md ({problem})")]
        )
    if size > MAX_SKILL_MD_BYTES:
        return _failed([too_big(source, size)])
    text, diags = decode_skill_md(raw, source=source)
    if text is None:
        return _failed(diags)
    parsed, key_lines = _parse(text, source, p.parent.name)
    if parsed.manifest is None:
        return parsed
    missing = check_skill_files(
        str(p.parent),
        {"script": parsed.manifest.script, "hooks": _hook_dict(parsed.manifest.hooks)},
        key_lines=key_lines,
        fm_line=2,
        source=source,
    )
    if not missing:
        return parsed
    return ParsedSkill(
        manifest=None,
        body=parsed.body,
        body_line=parsed.body_line,
        diagnostics=parsed.diagnostics + tuple(missing),
    )


def _hook_dict(hooks: HookSpec) -> dict[str, str]:
    return {k: v for k, v in (("pre_step", hooks.pre_step), ("post_step", hooks.post_step)) if v}


class _Dumper(yaml.SafeDumper):
    """Block style; long strings are never folded so one value stays on one line."""


def render_skill_md(manifest: SkillManifest, body: str) -> str:
    """Render a manifest and a body as SKILL.md text that ``parse_skill_md`` reads back."""
    front = yaml.dump(
        manifest.to_frontmatter(),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=1 << 30,
    )
    return f"---\n{front}---\n{body}"
