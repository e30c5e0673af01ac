"""SKILL.md parsing: text -> ``SkillManifest`` + body, or diagnostics with file and line.

``SkillManifest`` is the one model of a skill's frontmatter: the Agent Skills fields plus
agentsim's own. ``parse_skill_md`` is pure; ``load_skill_md`` reads a file (size, encoding,
odd file types and the existence of declared scripts are checked there) and calls it.
Nothing here raises on a bad skill: problems are ``Diagnostic`` values whose line is the
line of the offending key, mapped back from pydantic's error locations.

The path rules of a skill's files and ``TOOL_NAMES`` (the tools an agent offers its model:
the vocabulary skills speak of in ``requires: [tool:ask_env]`` and that
``agentsim.agent.tools`` implements) live here, where the manifest checks them.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISLNK, S_ISREG
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails

from agentsim._paths import is_inside
from agentsim.skills.frontmatter import (
    Diagnostic,
    KeyLines,
    KeyPath,
    Severity,
    decode_skill_md,
    read_frontmatter,
    read_skill_bytes,
)

__all__ = [
    "AGENTSIM_KEYS",
    "HOOK_TYPES",
    "SPEC_KEYS",
    "Diagnostic",
    "HookSpec",
    "ParsedSkill",
    "SkillFile",
    "SkillManifest",
    "load_skill_md",
    "name_problem",
    "parse_skill_md",
    "read_skill",
    "render_skill_md",
]


def _name_char(c: str) -> bool:
    # The spec's "unicode lowercase alphanumeric": letters without an upper-case form in
    # the name (lowercase or caseless, like 'é' or '日'), and digits.
    return c == "-" or (c.isalnum() and c == c.lower())


def name_problem(value: str) -> str | None:
    """Why ``value`` is not a valid skill name (Agent Skills rules), or None."""
    if len(value) > 64:
        return f"{value!r} is {len(value)} characters long, over the limit of 64"
    if (
        not value
        or unicodedata.normalize("NFKC", value) != value
        or not all(map(_name_char, value))
        or value.startswith("-")
        or value.endswith("-")
        or "--" in value
    ):
        return (
            f"{value!r} is not a valid skill name; use lowercase letters, digits and single "
            "hyphens (like 'daily-guidance')"
        )
    return None


def _skill_name(value: str) -> str:
    problem = name_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _relative(value: str) -> str:
    problem = path_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _description(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty; say in one or two sentences when to use the skill")
    return value


def _schema(value: dict[str, Any]) -> dict[str, Any]:
    import jsonschema  # only skills that declare a schema pay for the import

    try:
        jsonschema.validators.validator_for(value).check_schema(value)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"is not a valid JSON Schema: {exc.message}") from None
    return value


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(
            f"{value!r} is not an environment variable name; use letters, digits and "
            "underscores (like MY_SERVICE_URL)"
        )
    return value


_REQUIRES_FIX = (
    "write a skill name (like opinion-update), env:<module> (like env:social) or "
    "tool:<tool> (like tool:ask_env)"
)


def _close(value: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, known, n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def _requirement(value: str) -> str:
    """A ``requires`` entry: a skill name, ``env:<module>`` or ``tool:<tool>``."""
    kind, sep, what = value.partition(":")
    if not sep:
        return _skill_name(value)
    if kind == "env":
        from agentsim.env.router import BUILTIN_MODULES  # only skills that need one pay

        known = sorted(BUILTIN_MODULES)
        # Any module name may be one of the user's own (a run without it hides the skill);
        # a near miss of a built-in one is a typo.
        mistyped = what not in BUILTIN_MODULES and difflib.get_close_matches(what, known, n=1)
        if not re.match(r"^[a-z][a-z0-9_]*$", what) or mistyped:
            raise ValueError(
                f"{value!r} names no environment module; {_close(what, known)}"
                f"known modules: {', '.join(known)}"
            )
        return value
    if kind == "tool":
        if what not in TOOL_NAMES:
            raise ValueError(
                f"{value!r} names no agent tool; {_close(what, TOOL_NAMES)}"
                f"known tools: {', '.join(TOOL_NAMES)}"
            )
        return value
    raise ValueError(f"{value!r} has an unknown kind {kind!r}; {_REQUIRES_FIX}")


def _split_tools(value: Any) -> Any:
    # The spec's form is one space-separated string; a YAML list is read too.
    return tuple(value.split()) if isinstance(value, str) else value


SkillName = Annotated[StrictStr, AfterValidator(_skill_name)]
RelPath = Annotated[StrictStr, AfterValidator(_relative)]
Schema = Annotated[dict[str, Any], AfterValidator(_schema)]
EnvName = Annotated[StrictStr, AfterValidator(_env_name)]
Requirement = Annotated[StrictStr, AfterValidator(_requirement)]


class HookSpec(BaseModel):
    """Scripts run at the start (``pre_step``) and end (``post_step``) of an agent's step."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    pre_step: RelPath | None = None
    post_step: RelPath | None = None


HOOK_TYPES = tuple(HookSpec.model_fields)


class SkillManifest(BaseModel):
    """The validated frontmatter of a SKILL.md. Unknown keys are kept in ``extra``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    # The Agent Skills specification
    name: SkillName
    description: Annotated[StrictStr, Field(max_length=1024), AfterValidator(_description)]
    license: Annotated[StrictStr, Field(max_length=1024)] | None = None
    compatibility: Annotated[StrictStr, Field(min_length=1, max_length=500)] | None = None
    metadata: dict[StrictStr, StrictStr] | None = None
    allowed_tools: Annotated[tuple[StrictStr, ...] | None, BeforeValidator(_split_tools)] = Field(
        default=None, alias="allowed-tools", strict=False
    )
    # agentsim's own
    script: RelPath | None = None
    hooks: HookSpec = HookSpec()
    version: StrictStr | None = None
    tags: tuple[StrictStr, ...] = Field(default=(), strict=False)
    # Skill names, plus env:<module> and tool:<tool> for what else the skill needs.
    requires: tuple[Requirement, ...] = Field(default=(), strict=False)
    timeout: float | None = Field(default=None, gt=0)
    isolation: Literal["inline", "thread", "process"] = "inline"
    # Under process isolation the sandboxed script has no network unless this is true.
    network: bool = False
    input_schema: Schema | None = None
    output_schema: Schema | None = None
    status: Literal["active", "deprecated"] = "active"
    idempotent: bool = False
    retries: int = Field(default=0, ge=0)
    # Environment variables this skill's scripts may read, beyond the runner's allow-list.
    env: tuple[EnvName, ...] = Field(default=(), strict=False)
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _matches_folder(cls, value: str, info: ValidationInfo) -> str:
        folder = (info.context or {}).get("folder_name")
        if folder is not None and value != folder:
            raise ValueError(
                f"{value!r} does not match its folder {folder!r}; rename the folder or the "
                "name so that they are equal"
            )
        return value

    def _required(self, kind: str) -> tuple[str, ...]:
        prefix = f"{kind}:"
        return tuple(r.removeprefix(prefix) for r in self.requires if r.startswith(prefix))

    @property
    def required_skills(self) -> tuple[str, ...]:
        """The skills named in ``requires`` (activated with this one)."""
        return tuple(r for r in self.requires if ":" not in r)

    @property
    def required_env(self) -> tuple[str, ...]:
        """The environment modules named in ``requires`` (``env:<module>``)."""
        return self._required("env")

    @property
    def required_tools(self) -> tuple[str, ...]:
        """The agent tools named in ``requires`` (``tool:<tool>``)."""
        return self._required("tool")

    def declared_files(self) -> list[tuple[str, str]]:
        """(label, relative path) of the default script and every hook script."""
        out = [("script", self.script)] if self.script else []
        out += [(f"hooks.{k}", v) for k, v in self.hooks if v is not None]
        return out

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


SPEC_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
AGENTSIM_KEYS = tuple(
    info.alias or key
    for key, info in SkillManifest.model_fields.items()
    if (info.alias or key) not in SPEC_KEYS and key != "extra"
)
_KNOWN_KEYS = SPEC_KEYS + AGENTSIM_KEYS


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


# -- pydantic errors -> diagnostics ----------------------------------------------------------


def _kind(value: Any) -> str:
    names = {
        dict: "mapping",
        list: "list",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


def _label(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_MAPPINGS = {
    "hooks": "hook type to script path",
    "metadata": "string keys to string values",
    "input_schema": "JSON Schema keywords",
    "output_schema": "JSON Schema keywords",
}


def _message(err: ErrorDetails, literal: str | None = None, *, label: str | None = None) -> str:
    """The message of one pydantic error; ``label`` names a value moved from ``metadata``."""
    loc, kind, value = err["loc"], err["type"], err["input"]
    if label is not None and kind == "string_type":
        return f"{label} must be a string, got {_kind(value)} {value!r}"
    label = label or _label(loc)
    ctx = err.get("ctx", {})
    top = loc[0] if loc else ""
    if kind == "missing":
        return f"the frontmatter has no {label}:; add it (both name and description are required)"
    if kind == "extra_forbidden" and top == "hooks":
        return f"hooks has unknown hook type {loc[-1]!r}; use {' or '.join(HOOK_TYPES)}"
    if kind == "value_error":
        return f"{label} {ctx.get('error', err['msg'])}"
    if kind in ("dict_type", "model_type"):
        what = _MAPPINGS.get(str(top), "keys to values")
        return f"{label} must be a mapping of {what}, got {_kind(value)}"
    if kind == "string_type":
        if top == "version" and isinstance(value, int | float) and not isinstance(value, bool):
            return f'version was read as the number {value!r}; quote it, like version: "{value}"'
        if isinstance(value, bool | int | float | type(None)) or top == "metadata":
            # YAML reads an unquoted off / yes / 123 / null as a boolean, number or null.
            quoted = f'"{literal or "..."}"'
            like = f"- {quoted}" if isinstance(loc[-1], int) else f"{loc[-1]}: {quoted}"
            return (
                f"{label} must be a string, got {_kind(value)} {value!r}; quote it, like "
                f"{like} (YAML reads unquoted yes, no, on, off, numbers and null as other types)"
            )
        return f"{label} must be a string, got {_kind(value)}"
    if kind in ("tuple_type", "list_type"):
        return f"{label} must be a list like [a, b], got {_kind(value)}"
    if kind == "literal_error":
        return f"{label} must be {ctx['expected']}, got {value!r}"
    if kind == "bool_type":
        return f"{label} must be true or false, got {value!r}"
    if kind == "int_type":
        return f"{label} must be a whole number, got {value!r}"
    if kind == "float_type":
        return f"{label} must be a number, got {value!r}"
    if kind == "string_too_short":
        most = 500 if top == "compatibility" else 1024
        return f"{label} is empty; give 1 to {most} characters, or remove the key"
    if kind == "string_too_long":
        return f"{label} is {len(value)} characters long, over the limit of {ctx['max_length']}"
    if top == "timeout" and kind == "greater_than":
        return f"{label} must be a positive number of seconds, got {value!r}"
    if kind in ("greater_than", "greater_than_equal"):
        sign, bound = (">", ctx["gt"]) if kind == "greater_than" else (">=", ctx["ge"])
        return f"{label} must be {sign} {bound}, got {value!r}"
    return f"{label}: {err['msg']}"


def _line(lines: KeyLines, loc: tuple[str | int, ...], default: int) -> int:
    """The line of the deepest key on ``loc`` that the frontmatter has."""
    for end in range(len(loc), 0, -1):
        line = lines.get(loc[:end])
        if line is not None:
            return line
    return default


_UNKNOWN = "unknown frontmatter key"

# -- the portable form: agentsim's keys under ``metadata`` as ``agentsim.<key>`` strings ------

PREFIX = "agentsim."
"""The prefix of agentsim's own keys under ``metadata`` (``agentsim.script``, ...)."""

# Keys whose value is text: the metadata string is the value as it is. Every other key's
# string is JSON text (``"5"``, ``"true"``, ``'["a", "b"]'``, ``'{"type": "object"}'``).
_TEXT_KEYS = frozenset({"script", "version", "isolation", "status"})


def metadata_key(path: KeyPath) -> str:
    """The ``metadata`` key of an agentsim key path: ``("hooks", "pre_step")`` ->
    ``agentsim.hooks.pre_step``."""
    return PREFIX + ".".join(map(str, path))


def metadata_value(key: str, value: Any) -> str:
    """A top-level value of agentsim key ``key`` as the string it takes under ``metadata``."""
    if key in _TEXT_KEYS or key == "hooks":
        return str(value)
    # default=str: YAML reads an unquoted date as a date, which JSON has no type for.
    return json.dumps(value, ensure_ascii=False, default=str)


_METADATA_KEYS = tuple(
    metadata_key(("hooks", h)) if key == "hooks" else metadata_key((key,))
    for key in AGENTSIM_KEYS
    for h in (HOOK_TYPES if key == "hooks" else ("",))
)


def _line_of(lines: KeyLines, path: KeyPath) -> int:
    return lines.get(path) or 2


def _lift(
    data: dict[Any, Any], lines: KeyLines, source: str
) -> tuple[dict[Any, Any], dict[KeyPath, KeyPath], list[Diagnostic]]:
    """Move the ``agentsim.*`` entries of ``metadata`` to the top level.

    Returns the frontmatter as if written in the top-level form, where each moved key came
    from (its path -> its path under ``metadata``) and the problems found. A key given both
    ways with different values is an error naming both; with equal values it is read once.
    """
    meta = data.get("metadata")
    if not isinstance(meta, dict) or not any(
        isinstance(k, str) and k.startswith(PREFIX) for k in meta
    ):
        return data, {}, []
    diags: list[Diagnostic] = []
    rest: dict[Any, Any] = {}
    lifted: dict[KeyPath, Any] = {}
    origin: dict[KeyPath, KeyPath] = {}

    def error(key: str, message: str, severity: Severity = "error") -> None:
        line = _line_of(lines, ("metadata", key))
        diags.append(Diagnostic(file=source, line=line, message=message, severity=severity))

    for key, value in meta.items():
        if not isinstance(key, str) or not key.startswith(PREFIX) or not isinstance(value, str):
            rest[key] = value  # not ours, or not a string: the model says what is wrong
            continue
        path: KeyPath = tuple(key[len(PREFIX) :].split("."))
        top = str(path[0])
        if top not in AGENTSIM_KEYS:
            rest[key] = value
            close = difflib.get_close_matches(key, _METADATA_KEYS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "see docs/skills.md"
            error(
                key, f"unknown agentsim metadata key {key!r} (kept as metadata); {hint}", "warning"
            )
            continue
        if top == "hooks" and (len(path) != 2 or path[1] not in HOOK_TYPES):
            each = " or ".join(metadata_key(("hooks", h)) for h in HOOK_TYPES)
            error(key, f"metadata key {key!r} names no hook; write one key per hook: {each}")
            continue
        if top != "hooks" and len(path) != 1:
            error(
                key,
                f"metadata key {key!r} has parts after {metadata_key((top,))!r}; "
                f"write {metadata_key((top,))}: with the whole value",
            )
            continue
        if top in _TEXT_KEYS or top == "hooks":
            parsed: Any = value
        else:
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                error(
                    key,
                    f"metadata.{key} is not JSON text ({exc.msg}), got {value!r}; agentsim "
                    'reads non-text values as JSON: numbers like "5", booleans as "true" or '
                    """"false", lists like '["a", "b"]', mappings like '{"type": "object"}'""",
                )
                continue
        lifted[path] = parsed
        origin[path] = ("metadata", key)

    out = {k: v for k, v in data.items() if k != "metadata"}
    if rest:
        out["metadata"] = rest
    top_hooks = data.get("hooks")
    where: KeyPath
    for path, value in lifted.items():
        if len(path) == 2:  # a hook: merged into the top-level hooks:
            if top_hooks is not None and not isinstance(top_hooks, dict):
                continue  # the top-level hooks: is not a mapping; the model says so
            given_top, given = (top_hooks or {}), (top_hooks or {}).get(path[1])
            where, label = path, f"hooks.{path[1]}"
            has = path[1] in given_top
        else:
            has, given, where, label = path[0] in data, data.get(str(path[0])), path, str(path[0])
        if has:
            if given != value:
                mkey = str(origin[path][1])
                line = _line_of(lines, origin[path])
                diags.append(
                    Diagnostic(
                        file=source,
                        line=line,
                        message=f"{label!r} is given twice with different values: {label}: "
                        f"{given!r} (line {_line_of(lines, where)}) and metadata {mkey}: "
                        f"{meta[mkey]!r} (line {line}); keep one of them",
                    )
                )
            del origin[path]  # read once, from the top-level key
        elif len(path) == 2:
            out["hooks"] = {**(out.get("hooks") or {}), path[1]: value}
        else:
            out[str(path[0])] = value
    return out, origin, diags


def _moved(loc: tuple[str | int, ...], origin: dict[KeyPath, KeyPath]) -> KeyPath | None:
    """Where under ``metadata`` the value at ``loc`` was written, if it was moved."""
    for n in (2, 1):
        if loc[:n] in origin:
            return (*origin[loc[:n]], *loc[n:])
    return None


def _validate(
    data: dict[Any, Any],
    lines: KeyLines,
    *,
    source: str,
    folder_name: str | None,
) -> tuple[SkillManifest | None, list[Diagnostic]]:
    data, origin, diags = _lift(data, lines, source)
    if any(d.severity == "error" for d in diags):
        return None, diags
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    ok = True
    for key, value in data.items():
        if key in _KNOWN_KEYS:
            known[key] = value
            continue
        line = lines.get((str(key),)) or 2
        if not isinstance(key, str):
            ok = False
            message = f"frontmatter key {key!r} is not a string; keys are words like name"
            diags.append(Diagnostic(file=source, line=line, message=message))
            continue
        extra[key] = value
        close = difflib.get_close_matches(key, _KNOWN_KEYS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(_KNOWN_KEYS)}"
        diags.append(
            Diagnostic(
                file=source,
                line=line,
                severity="warning",
                message=f"{_UNKNOWN} {key!r} (kept as extra); {hint}",
            )
        )
    try:
        manifest = SkillManifest.model_validate(
            {**known, "extra": extra}, context={"folder_name": folder_name}
        )
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            moved = _moved(err["loc"], origin)
            if moved is not None:
                line = _line(lines, moved, 2)
                message = _message(err, label="metadata." + _label(moved[1:]))
            else:
                line = _line(lines, err["loc"], 2)
                message = _message(err, lines.literal(tuple(err["loc"])))
            diags.append(Diagnostic(file=source, line=line, message=message))
        # In file order, whatever the order of the model's fields.
        return None, sorted(diags, key=lambda d: d.line)
    return (manifest if ok else None), diags


def _move_hint(key: str, value: Any) -> str:
    """How to write top-level agentsim key ``key`` under ``metadata``."""
    if key == "hooks" and isinstance(value, dict):
        keys = [metadata_key(("hooks", h)) for h in value if isinstance(h, str)]
        return f"write each hook under metadata instead: {', '.join(keys)}"
    text = metadata_value(key, value)
    if len(text) > 60:
        shown = "<the value as JSON>"
    elif '"' in text and "'" not in text:
        shown = f"'{text}'"  # YAML's single quotes keep JSON's double quotes as they are
    else:
        shown = json.dumps(text, ensure_ascii=False)
    return f"write it under metadata instead, as {metadata_key((key,))}: {shown}"


def _portability(
    data: dict[Any, Any], lines: KeyLines, source: str, *, portable: bool
) -> list[Diagnostic]:
    """What another Agent Skills client may not accept: ``skills validate --strict`` notes
    agentsim's own top-level keys; ``--portable`` makes them errors (the reference validator
    refuses every top-level key the specification does not define)."""
    out = []
    flow = {path[0] for path, _ in lines.flow() if path}
    for key, value in data.items():
        line = lines.get((str(key),)) or 2
        if key in AGENTSIM_KEYS and portable:
            out.append(
                Diagnostic(
                    file=source,
                    line=line,
                    message=f"{key!r} is agentsim's own key at the top level, where other "
                    f"Agent Skills clients refuse it as an unexpected field; "
                    f"{_move_hint(key, value)}",
                )
            )
        elif key in AGENTSIM_KEYS:
            how = " (and in flow style, which the reference validator refuses)"
            out.append(
                Diagnostic(
                    file=source,
                    line=line,
                    severity="note",
                    message=f"{key!r} is an agentsim extension, not an Agent Skills field; "
                    f"other clients may ignore or refuse it{how if key in flow else ''}",
                )
            )
        elif key == "allowed-tools" and not isinstance(value, str):
            out.append(
                Diagnostic(
                    file=source,
                    line=line,
                    message="allowed-tools is not portable as a list: the Agent Skills spec "
                    "wants one space-separated string, like 'allowed-tools: Read Bash'",
                )
            )
        elif key not in SPEC_KEYS:
            out.append(
                Diagnostic(
                    file=source,
                    line=line,
                    message=f"{key!r} is neither an Agent Skills field nor an agentsim one; "
                    "remove it, or keep it under metadata as a string value",
                )
            )
    return out


def _dashes(text: str, body_line: int, source: str) -> list[Diagnostic]:
    """'---' inside the frontmatter: the reference validator cuts the file at the first two
    '---' it finds anywhere, so a value holding one is cut short there."""
    found = []
    for i, row in enumerate(text.split("\n")[1 : body_line - 2], start=2):
        if "---" in row:
            found.append(
                Diagnostic(
                    file=source,
                    line=i,
                    message="this frontmatter line holds '---', where other clients end the "
                    "frontmatter (the reference validator cuts the file at the first '---' "
                    "after the opening one); write it another way, like '--' or an em dash",
                )
            )
    return found


_BOM = "SKILL.md starts with a UTF-8 byte-order mark"


def _strict_bom(diag: Diagnostic) -> Diagnostic:
    return Diagnostic(
        file=diag.file,
        line=diag.line,
        message=f"{_BOM}; the Agent Skills spec wants the file to start with '---' (save it "
        "as UTF-8 without BOM)",
    )


def _flow_style(lines: KeyLines, source: str, *, portable: bool) -> list[Diagnostic]:
    """Flow-style collections (``[a, b]``, ``{k: v}``): the reference validator refuses them."""
    return [
        Diagnostic(
            file=source,
            line=line,
            severity="error" if portable else "warning",
            message=f"{_label(path) or 'the frontmatter'} is written in flow style ([...] or "
            "{...}), which the Agent Skills reference validator refuses; write it in block "
            "style, one '- item' or 'key: value' per line",
        )
        for path, line in lines.flow()
        # agentsim's own keys are noted as such (``_portability``); a list of allowed-tools
        # is an error of its own.
        if not path or path[0] not in (*AGENTSIM_KEYS, "allowed-tools")
    ]


Mode = Literal["agentsim", "strict", "portable"]


def _parse(
    text: str, source: str, folder_name: str | None, mode: Mode
) -> tuple[ParsedSkill, KeyLines]:
    front = read_frontmatter(text, source=source)
    diags = list(front.diagnostics)
    manifest = None
    portable = mode == "portable"
    if front.data is not None:
        manifest, problems = _validate(
            front.data, front.lines, source=source, folder_name=folder_name
        )
        if portable:  # each unknown key is an error of ``_portability`` instead
            problems = [p for p in problems if not p.message.startswith(_UNKNOWN)]
        diags += problems
        if mode != "agentsim":
            found = _portability(front.data, front.lines, source, portable=portable)
            found += _flow_style(front.lines, source, portable=portable)
            if portable:
                found += _dashes(text, front.body_line, source)
            diags += sorted(found, key=lambda d: d.line)
    if mode != "agentsim":
        diags = [_strict_bom(d) if d.message.startswith(_BOM) else d for d in diags]
    parsed = ParsedSkill(
        manifest=manifest, body=front.body, body_line=front.body_line, diagnostics=tuple(diags)
    )
    return parsed, front.lines


def _mode(strict: bool, portable: bool) -> Mode:
    return "portable" if portable else "strict" if strict else "agentsim"


def parse_skill_md(
    text: str,
    *,
    source: str,
    folder_name: str | None = None,
    strict: bool = False,
    portable: bool = False,
) -> ParsedSkill:
    """Parse SKILL.md ``text``. ``source`` names the file in diagnostics; when
    ``folder_name`` is given, the skill's name must equal it. ``strict`` adds what is not
    portable under the Agent Skills specification (agentsim's own keys as notes);
    ``portable`` makes every such problem an error, agentsim's own top-level keys too (they
    belong under ``metadata`` as ``agentsim.<key>``)."""
    return _parse(text, source, folder_name, _mode(strict, portable))[0]


def _failed(diag: Diagnostic) -> ParsedSkill:
    return ParsedSkill(manifest=None, body="", body_line=1, diagnostics=(diag,))


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillFile:
    """A SKILL.md as read from disk: the parse, the stat of the file that was read (None
    if it could not be opened) and the declared script paths (also when one is missing)."""

    parsed: ParsedSkill
    stat: os.stat_result | None
    scripts: tuple[str, ...] = ()


def read_skill(md: str, *, strict: bool = False, portable: bool = False) -> SkillFile:
    """``load_skill_md`` for the path of a SKILL.md, with what a registry keeps of it."""
    got = read_skill_bytes(md)
    if isinstance(got, Diagnostic):
        return SkillFile(parsed=_failed(got), stat=None)
    raw, st = got
    text = decode_skill_md(raw, source=md)
    if isinstance(text, Diagnostic):
        return SkillFile(parsed=_failed(text), stat=st)
    folder = os.path.dirname(md)
    parsed, lines = _parse(text, md, os.path.basename(folder), _mode(strict, portable))
    if parsed.manifest is None:
        return SkillFile(parsed=parsed, stat=st)
    declared = parsed.manifest.declared_files()
    missing = []
    for label, rel in declared:
        problem = file_problem(folder, rel)
        if problem:
            line = _line(lines, tuple(label.split(".")), 2)
            missing.append(Diagnostic(file=md, line=line, message=f"{label} {rel!r} {problem}"))
    scripts = tuple(dict.fromkeys(rel for _, rel in declared))
    if missing:
        parsed = ParsedSkill(
            manifest=None,
            body=parsed.body,
            body_line=parsed.body_line,
            diagnostics=parsed.diagnostics + tuple(missing),
        )
    return SkillFile(parsed=parsed, stat=st, scripts=scripts)


def load_skill_md(
    path: str | os.PathLike[str], *, strict: bool = False, portable: bool = False
) -> ParsedSkill:
    """Read and parse a SKILL.md file, or a skill folder holding one.

    Besides ``parse_skill_md``'s checks: the file is a regular file of at most 1 MiB of
    UTF-8, the name equals the folder name, and the declared script and hook files exist
    inside the folder.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "SKILL.md"
    return read_skill(str(p), strict=strict, portable=portable).parsed


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


# -- path rules: relative paths that stay inside the skill folder ----------------------


def path_problem(value: Any) -> str | None:
    """Why ``value`` is not a safe path relative to the skill folder, or None."""
    if not isinstance(value, str) or not value.strip():
        kind = "null" if value is None else type(value).__name__
        return f"must be a relative path string, got {kind}"
    normal = value.replace("\\", "/")
    if normal.startswith("/") or (value[1:2] == ":" and value[0].isascii() and value[0].isalpha()):
        return f"{value!r} is absolute; give a path relative to the skill folder"
    if ".." in normal.split("/"):
        return f"{value!r} leaves the skill folder ('..'); keep scripts inside it"
    return None


def file_problem(folder: str, rel: str) -> str | None:
    """Why ``folder/rel`` is not a regular file inside ``folder``, or None.

    A symlink anywhere on the way is allowed while the file it reaches stays inside.
    """
    current = folder
    linked = False
    mode = 0
    for part in rel.replace("\\", "/").split("/"):
        if part and part != ".":
            current = os.path.join(current, part)
            try:
                mode = os.lstat(current).st_mode
            except OSError:
                return "does not exist; create it or fix the path"
            linked = linked or S_ISLNK(mode)
    if linked:
        if not is_inside(current, folder):
            return "is a symlink that leaves the skill folder; copy the file into the skill"
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return "is a broken symlink; point it at a file in the skill folder"
    if not S_ISREG(mode):  # also when ``rel`` names the folder itself (mode 0)
        return "is not a regular file"
    return None


# -- tool names ------------------------------------------------------------------------

TOOL_NAMES = (
    "activate_skill",
    "deactivate_skill",
    "read_skill_file",
    "execute_skill_script",
    "search_skills",
    "ask_env",
    "finish",
)
