"""Field rules of SKILL.md frontmatter, checked by hand.

The scan loop validates thousands of manifests and cannot afford a pydantic model per
skill; these checks are the single statement of the rules. ``SkillManifest`` (pydantic)
is then built from their normalised output, so both agree by construction.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable
from stat import S_ISDIR, S_ISLNK, S_ISREG
from typing import Any

from agentsim.skills._fastyaml import (
    ASCII_OK,
    MEMO_MAX_LEN,
    Decline,
    Memo,
    close_block,
    resolve,
)
from agentsim.skills._frontmatter import Diagnostic, split_plain

__all__ = [
    "AGENTSIM_KEYS",
    "CHECKS",
    "HOOK_TYPES",
    "ISOLATIONS",
    "KNOWN_KEYS",
    "NAME_PATTERN",
    "SPEC_KEYS",
    "STATUSES",
    "check_fields",
    "check_skill_files",
    "clean_fields",
    "path_problem",
    "skill_files_ok",
]

NAME_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
HOOK_TYPES = ("pre_step", "post_step")
ISOLATIONS = ("inline", "thread", "process")
STATUSES = ("active", "deprecated")
SPEC_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
AGENTSIM_KEYS = (
    "script",
    "hooks",
    "version",
    "tags",
    "requires",
    "timeout",
    "isolation",
    "input_schema",
    "output_schema",
    "status",
    "idempotent",
    "retries",
)
KNOWN_KEYS = SPEC_KEYS + AGENTSIM_KEYS

Checker = Callable[[Any], tuple[Any, str | None]]


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def path_problem(value: Any) -> str | None:
    """Why ``value`` is not a safe path relative to the skill folder, or None."""
    if not isinstance(value, str) or not value or value.isspace():
        return f"must be a relative path string, got {_type_name(value)}"
    # A drive letter ("C:") is tested by hand: this runs for every declared script.
    if value[0] in "/\\" or (value[1:2] == ":" and value[0].isascii() and value[0].isalpha()):
        return f"{value!r} is absolute; give a path relative to the skill folder"
    if ".." in value and ".." in value.replace("\\", "/").split("/"):
        return f"{value!r} leaves the skill folder ('..'); keep scripts inside it"
    return None


def _str(limit: int) -> Checker:
    def check(value: Any) -> tuple[Any, str | None]:
        if not isinstance(value, str):
            return None, f"must be a string, got {_type_name(value)}"
        if len(value) > limit:
            return None, f"is {len(value)} characters long, over the limit of {limit}"
        return value, None

    return check


def _name(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, str):
        return None, f"must be a string, got {_type_name(value)}"
    if len(value) > 64:
        return None, f"{value!r} is {len(value)} characters long, over the limit of 64"
    if not NAME_PATTERN.fullmatch(value):
        return None, (
            f"{value!r} is not a valid skill name; use lowercase letters, digits and "
            "single hyphens (like 'daily-guidance')"
        )
    return sys.intern(value), None


def _description(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, str):
        return None, f"must be a string, got {_type_name(value)}"
    if not value or value.isspace():
        return None, "is empty; say in one or two sentences when to use the skill"
    if len(value) > 1024:
        return None, f"is {len(value)} characters long, over the limit of 1024; shorten it"
    return value, None


def _path(value: Any) -> tuple[Any, str | None]:
    problem = path_problem(value)
    return (None, problem) if problem else (value, None)


def _hooks(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, dict):
        return None, f"must be a mapping of hook type to script path, got {_type_name(value)}"
    hooks: dict[str, str] = {}
    for hook_type, script in value.items():
        if hook_type not in HOOK_TYPES:
            return None, (f"has unknown hook type {hook_type!r}; use {' or '.join(HOOK_TYPES)}")
        problem = path_problem(script)
        if problem:
            return None, f"{hook_type}: {problem}"
        hooks[sys.intern(hook_type)] = script
    return hooks, None


def _str_list(item_check: Callable[[str], str | None] | None = None) -> Checker:
    def check(value: Any) -> tuple[Any, str | None]:
        if not isinstance(value, list):
            return None, f"must be a list like [a, b], got {_type_name(value)}"
        out: list[str] = []
        for item in value:
            if not isinstance(item, str):
                return None, f"must hold strings only, got {_type_name(item)} {item!r}"
            problem = item_check(item) if item_check else None
            if problem:
                return None, problem
            out.append(sys.intern(item))
        return tuple(out), None

    return check


def _require_name(item: str) -> str | None:
    if NAME_PATTERN.fullmatch(item):
        return None
    return f"{item!r} is not a skill name; list the names of required skills"


def _allowed_tools(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, str):
        return tuple(value.split()), None
    return _str_list()(value)


def _metadata(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, dict):
        return None, f"must be a mapping of string keys to string values, got {_type_name(value)}"
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            return None, (
                f"entry {key!r}: {item!r} is not string to string; quote the value "
                "(the Agent Skills spec allows only strings here)"
            )
    return dict(value), None


def _version(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, str):
        return value, None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return None, f'was read as the number {value!r}; quote it, like version: "{value}"'
    return None, f"must be a string, got {_type_name(value)}"


def _timeout(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None, f"must be a positive number of seconds, got {value!r}"
    return float(value), None


def _choice(options: tuple[str, ...]) -> Checker:
    def check(value: Any) -> tuple[Any, str | None]:
        if value not in options:
            return None, f"must be one of {', '.join(options)}, got {value!r}"
        return sys.intern(value), None

    return check


def _bool(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, bool):
        return None, f"must be true or false, got {value!r}"
    return value, None


def _retries(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None, f"must be a whole number >= 0, got {value!r}"
    return value, None


def _schema(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, dict):
        return None, f"must be a JSON Schema mapping, got {_type_name(value)}"
    import jsonschema  # only skills that declare a schema pay for the import

    try:
        jsonschema.validators.validator_for(value).check_schema(value)
    except jsonschema.SchemaError as exc:
        return None, f"is not a valid JSON Schema: {exc.message}"
    return value, None


CHECKS: dict[str, tuple[str, Checker]] = {  # key -> (field name, check of the value alone)
    "name": ("name", _name),
    "description": ("description", _description),
    "script": ("script", _path),
    "hooks": ("hooks", _hooks),
    "license": ("license", _str(1024)),
    "compatibility": ("compatibility", _str(500)),
    "metadata": ("metadata", _metadata),
    "allowed-tools": ("allowed_tools", _allowed_tools),
    "version": ("version", _version),
    "tags": ("tags", _str_list()),
    "requires": ("requires", _str_list(_require_name)),
    "timeout": ("timeout", _timeout),
    "isolation": ("isolation", _choice(ISOLATIONS)),
    "input_schema": ("input_schema", _schema),
    "output_schema": ("output_schema", _schema),
    "status": ("status", _choice(STATUSES)),
    "idempotent": ("idempotent", _bool),
    "retries": ("retries", _retries),
}


def check_fields(
    data: dict[str, Any],
    *,
    key_lines: dict[str, int],
    fm_line: int,
    source: str,
    folder_name: str | None,
) -> tuple[dict[str, Any] | None, list[Diagnostic]]:
    """Validate a frontmatter mapping; return (normalised fields or None, diagnostics)."""
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    diags: list[Diagnostic] = []
    ok = True
    for key, value in data.items():
        entry = CHECKS.get(key)
        if entry is None:
            line = key_lines.get(key if isinstance(key, str) else str(key), fm_line)
            if not isinstance(key, str):
                ok = False
                diags.append(
                    Diagnostic(
                        file=source,
                        line=line,
                        message=f"frontmatter key {key!r} is not a string; keys are words "
                        "like name or description",
                    )
                )
                continue
            extra[key] = value
            close = difflib.get_close_matches(key, KNOWN_KEYS, n=1)
            hint = (
                f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(KNOWN_KEYS)}"
            )
            diags.append(
                Diagnostic(
                    file=source,
                    line=line,
                    severity="warning",
                    message=f"unknown frontmatter key {key!r} (kept as extra); {hint}",
                )
            )
            continue
        field, check = entry
        normal, problem = check(value)
        if problem:
            ok = False
            line = key_lines.get(key, fm_line)
            diags.append(Diagnostic(file=source, line=line, message=f"{key} {problem}"))
        else:
            fields[field] = normal
    for required in ("name", "description"):
        if required not in data:
            ok = False
            diags.append(
                Diagnostic(
                    file=source,
                    line=fm_line,
                    message=f"the frontmatter has no {required}:; add it (both name and "
                    "description are required)",
                )
            )
    name = fields.get("name")
    if name is not None and folder_name is not None and name != folder_name:
        ok = False
        diags.append(
            Diagnostic(
                file=source,
                line=key_lines.get("name", fm_line),
                message=f"name {name!r} does not match its folder {folder_name!r}; rename "
                "the folder or the name so that they are equal",
            )
        )
    if not ok:
        return None, diags
    fields["extra"] = extra
    return fields, diags


def _inside_check(folder: str, rel: str) -> str | None:
    """Why ``folder/rel`` is not a regular file inside ``folder``, or None.

    One ``lstat`` per path component: a symlink anywhere on the way is resolved and must
    stay inside the folder.
    """
    current = folder
    linked = False
    mode = 0
    for part in rel.replace("\\", "/").split("/"):
        if part and part != ".":
            current += os.sep + part
            try:
                mode = os.lstat(current).st_mode
            except OSError:
                return "does not exist; create it or fix the path"
            if S_ISLNK(mode):
                linked = True
    if linked:
        real_folder = os.path.realpath(folder)
        real = os.path.realpath(current)
        if not real.startswith(real_folder + os.sep):
            return "is a symlink that leaves the skill folder; copy the file into the skill"
        if not os.path.isfile(real):
            return "is not a regular file"
    elif not S_ISREG(mode):  # also when ``rel`` names the folder itself (mode 0)
        return "is not a regular file"
    return None


def _plain_file(folder: str, rel: str, dir_fd: int | None) -> bool:
    """Whether ``folder/rel`` is a regular file reached through real folders only: the
    common ``file`` or ``dir/file`` shape, one ``lstat`` per part. False means "not shown
    here", never "bad": ``_inside_check`` then decides (and follows links that stay in)."""
    head, sep, tail = rel.partition("/")
    if sep:
        if not head or head == "." or "/" in tail or "\\" in rel:
            return False
        try:
            if not S_ISDIR(os.lstat(folder + os.sep + head, dir_fd=dir_fd).st_mode):
                return False
        except OSError:
            return False
    try:
        return S_ISREG(os.lstat(folder + os.sep + rel, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def skill_files_ok(folder: str, fields: dict[str, Any], dir_fd: int | None = None) -> bool:
    """The scan's fast check: every declared script is a plain file inside ``folder``
    (relative to ``dir_fd`` when given). When it says False, ``check_skill_files`` finds
    out what is wrong (if anything)."""
    script = fields.get("script")
    if script is not None and not _plain_file(folder, script, dir_fd):
        return False
    hooks = fields.get("hooks")
    if hooks:
        for rel in hooks.values():
            if rel != script and not _plain_file(folder, rel, dir_fd):
                return False
    return True


def check_skill_files(
    folder: str, fields: dict[str, Any], *, key_lines: dict[str, int], fm_line: int, source: str
) -> list[Diagnostic]:
    """Scan-time check that the declared script and hook files exist inside ``folder``.

    Each distinct path is checked once (a hook usually names the default script).
    """
    script = fields.get("script")
    hooks = fields.get("hooks")
    problems: dict[str, str | None] = {}
    if script is not None:
        problems[script] = _inside_check(folder, script)
    if hooks:
        for rel in hooks.values():
            if rel not in problems:
                problems[rel] = _inside_check(folder, rel)
    if not any(problems.values()):
        return []
    diags: list[Diagnostic] = []
    wanted = [("script", script)] if script is not None else []
    wanted += [(f"hooks.{hook_type}", rel) for hook_type, rel in (hooks or {}).items()]
    for label, rel in wanted:
        problem = problems[rel]
        if problem:
            line = key_lines.get(label.split(".")[0], fm_line)
            diags.append(Diagnostic(file=source, line=line, message=f"{label} {rel!r} {problem}"))
    return diags


def _checked(entry: tuple[str, Checker], value: Any) -> Any:
    normal, problem = entry[1](value)
    if problem:
        raise Decline  # the careful path will say what is wrong
    return normal


def clean_fields(text: str, memo: Memo, folder_name: str) -> tuple[dict[str, Any], int] | None:
    """(fields, body line) of a plain SKILL.md whose frontmatter is entirely valid, else None.

    The scan's happy path, in one pass over the lines. It gives up (None) on anything that
    needs a diagnostic: a line outside the fast YAML subset, an unknown key, a failed
    check, a repeated key, a missing name or description, a name that is not the folder's.
    The careful path (``read_frontmatter`` + ``check_fields``) then says what is wrong, so
    the rules and messages live there alone; this function runs the same checks
    (``CHECKS``) and the same YAML helpers.

    A top-level ``key: value`` line that passed once in this scan is taken whole from
    ``memo.fields``: skills repeat lines such as "isolation: inline", and a dict hit is far
    cheaper than reading and checking the line again. Indented lines after such a line
    would make it something else in YAML; after such a line no block is open, so they
    send the skill to the careful path.
    """
    split = split_plain(text)
    if split is None:
        return None
    fm = split[0]
    ascii_text = fm.isascii()  # O(1): CPython records it
    if ascii_text and fm.encode().translate(None, ASCII_OK):
        return None  # a tab or a control character
    known = memo.fields
    fields: dict[str, Any] = {}
    block: list[str] | None = None  # lines under an open ``key:``
    block_entry = CHECKS["name"]  # the open key's (field, check); set with ``block``
    lines = fm.split("\n")
    try:
        for line in lines:
            hit = known.get(line)
            if hit is None:
                if not line:
                    continue
                if not ascii_text and not line.isprintable():
                    return None
                first = line[0]
                if first == " " or first == "-" or first == "#":
                    stripped = line.lstrip(" ")
                    if not stripped or stripped[0] == "#":
                        continue  # blank or comment
                    if block is None:
                        return None  # a continuation, or a block under a remembered line
                    block.append(line)
                    continue
            if block is not None:
                fields[block_entry[0]] = _checked(block_entry, close_block(block, memo))
                block = None
            if hit is not None:
                field, normal = hit
                if field in fields:
                    return None
                fields[field] = normal
                continue
            key, sep, rest = line.partition(":")
            # Every known key is a plain YAML word, so an unknown one (a warning) is the
            # only kind of key left to decline here.
            entry = CHECKS.get(key)
            if entry is None or not sep or entry[0] in fields:
                return None  # unknown, not a key, or repeated
            raw = rest.strip(" ")
            if not raw:
                block = []
                block_entry = entry
                continue
            if rest[0] != " ":
                return None
            value = resolve(raw, memo)
            normal, problem = entry[1](list(value) if type(value) is tuple else value)
            if problem:
                return None
            fields[entry[0]] = normal
            # A one-line value checks into a str, number, bool or tuple: safe to share. A
            # name line is left out: it equals its folder's name, unique in a root.
            if len(line) <= MEMO_MAX_LEN and key != "name":
                known[line] = (entry[0], normal)
        if block is not None:
            fields[block_entry[0]] = _checked(block_entry, close_block(block, memo))
    except Decline:
        return None
    if "description" not in fields or fields.get("name") != folder_name:
        return None
    fields["extra"] = {}
    return fields, len(lines) + 2  # the body follows the frontmatter and both fences
