"""Low-level SKILL.md reading: bytes -> text, text -> frontmatter mapping + body position.

Shared by the public parser (``manifest``) and the registry's scan loop, which must not pay
for pydantic or keep bodies. Nothing here raises on bad input: problems become
``Diagnostic`` values that carry the file and the 1-based line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from agentsim.skills._fastyaml import fast_load

__all__ = [
    "MAX_SKILL_MD_BYTES",
    "Diagnostic",
    "Frontmatter",
    "decode_skill_md",
    "plain_frontmatter",
    "read_frontmatter",
    "split_plain",
    "too_big",
]

MAX_SKILL_MD_BYTES = 1 << 20
"""SKILL.md files above 1 MiB are refused: a body that large cannot be meant for a prompt."""

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FENCE = re.compile(r"^---[ \t]*$", re.M)

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnostic:
    """A problem found in a skill file; ``str()`` is ``file:line: severity: message``."""

    file: str
    line: int
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.severity}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "message": self.message,
            "severity": self.severity,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Frontmatter:
    """The result of reading a SKILL.md text up to its body."""

    data: dict[str, Any] | None
    key_lines: dict[str, int]  # top-level key -> 1-based line in the file
    fm_line: int  # 1-based line of the first frontmatter line
    body_start: int  # character offset of the body in the normalised text
    body_line: int  # 1-based line of the body's first line
    text: str  # the normalised text (BOM removed, LF line endings)
    diagnostics: tuple[Diagnostic, ...]


def decode_skill_md(raw: bytes, *, source: str) -> tuple[str | None, list[Diagnostic]]:
    """Decode SKILL.md bytes; a size over 1 MiB or invalid UTF-8 gives an error diagnostic."""
    if len(raw) > MAX_SKILL_MD_BYTES:
        return None, [too_big(source, len(raw))]
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        bad = raw[exc.start : exc.start + 1].hex()
        msg = (
            f"SKILL.md is not valid UTF-8 (byte 0x{bad} at offset {exc.start}); "
            "re-save the file as UTF-8"
        )
        return None, [Diagnostic(file=source, line=line, message=msg)]


def too_big(source: str, size: int) -> Diagnostic:
    return Diagnostic(
        file=source,
        line=1,
        message=(
            f"SKILL.md is {size} bytes, over the 1 MiB limit; move long material "
            "into references/ files"
        ),
    )


def _empty(text: str, source: str, diags: list[Diagnostic], line: int, msg: str) -> Frontmatter:
    diags.append(Diagnostic(file=source, line=line, message=msg))
    return Frontmatter(
        data=None,
        key_lines={},
        fm_line=2,
        body_start=len(text),
        body_line=line,
        text=text,
        diagnostics=tuple(diags),
    )


def _yaml_load(fm: str) -> tuple[Any, dict[str, int]]:
    loader = _LOADER(fm)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                lines.setdefault(key_node.value, key_node.start_mark.line)
    return data, lines


def _unclosed_quote(exc: yaml.YAMLError) -> bool:
    return (
        isinstance(exc, yaml.scanner.ScannerError)
        and "quoted scalar" in (exc.context or "")
        and "end of stream" in (exc.problem or "")
    )


def _next_fence(text: str, newline: int) -> tuple[int, int] | None:
    """(start, end) of the first '---' line after the newline at ``newline``, or None.

    ``str.find`` instead of a multi-line regex: this runs once per skill in the scan.
    """
    while True:
        pos = text.find("\n---", newline)
        if pos < 0:
            return None
        start = pos + 1
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        if not text[start + 3 : end].strip(" \t"):
            return start, end
        newline = end


def split_plain(text: str) -> tuple[str, int] | None:
    """(frontmatter text, end of the closing fence line) in the common case, or None.

    The common case: the text starts with a bare ``---`` line and has no CR (hence no
    BOM either, which would come before the fence). The first later ``---`` line closes
    the frontmatter; if that line sat inside a quoted value, the fast YAML reader declines
    the unclosed quote and the caller falls back to ``read_frontmatter``. The body line is
    the frontmatter's line count plus 2 (both fences), its start ``min(end + 1, len(text))``.
    """
    if not text.startswith("---\n") or "\r" in text:
        return None
    start = text.find("\n---", 3) + 1
    end = start + 3
    if not start or text[end : end + 1] not in ("\n", ""):
        # No '---' line, or one with trailing blanks or text: let the loop decide.
        fence = _next_fence(text, 3)
        if fence is None:
            return None
        start, end = fence
    return text[4:start], end


def plain_frontmatter(text: str) -> tuple[dict[str, Any], dict[str, int], int, int] | None:
    """The common case only: (data, key lines, body start, body line), or None.

    Applies when ``split_plain`` does and the frontmatter is inside the fast YAML subset.
    It gives what ``read_frontmatter`` would, without the diagnostics machinery; anything
    else returns None and the caller uses ``read_frontmatter``, the careful path.
    """
    split = split_plain(text)
    if split is None:
        return None
    fm, end = split
    fast = fast_load(fm, first_line=2)
    if fast is None:
        return None
    return fast[0], fast[1], min(end + 1, len(text)), fm.count("\n") + 3


def read_frontmatter(text: str, *, source: str) -> Frontmatter:
    """Split ``text`` at its frontmatter fences and load the YAML between them."""
    plain = plain_frontmatter(text)
    if plain is not None:
        return Frontmatter(
            data=plain[0],
            key_lines=plain[1],
            fm_line=2,
            body_start=plain[2],
            body_line=plain[3],
            text=text,
            diagnostics=(),
        )
    diags: list[Diagnostic] = []
    if text.startswith("\ufeff"):
        text = text[1:]
        diags.append(
            Diagnostic(
                file=source,
                line=1,
                severity="warning",
                message="SKILL.md starts with a UTF-8 byte-order mark; it was ignored "
                "(save the file as UTF-8 without BOM)",
            )
        )
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        diags.append(
            Diagnostic(
                file=source,
                line=1,
                severity="warning",
                message="SKILL.md uses CR or CRLF line endings; they were read as LF "
                "(save the file with LF endings)",
            )
        )
    if not text or text.isspace():
        return _empty(
            text,
            source,
            diags,
            1,
            "SKILL.md is empty; start it with a '---' line, then name: and "
            "description:, then a closing '---' line",
        )
    first_end = text.find("\n")
    first = text if first_end < 0 else text[:first_end]
    if first.rstrip(" \t") != "---":
        return _empty(
            text,
            source,
            diags,
            1,
            "SKILL.md has no YAML frontmatter: its first line must be '---', followed "
            "by name: and description: and a closing '---' line",
        )
    start = first_end + 1
    fence = _next_fence(text, first_end) if first_end >= 0 else None
    if fence is None:
        return _empty(
            text,
            source,
            diags,
            1,
            "the frontmatter opened on line 1 is never closed; add a '---' line "
            "after the last frontmatter key",
        )
    fm_line = 2
    data: Any = None
    key_lines: dict[str, int] = {}
    retried = False
    failed = False
    while True:
        fm = text[start : fence[0]]
        if retried:
            # Earlier '---' lines sat inside a quoted value: indenting them keeps the value
            # (flow scalars drop continuation-line indentation) and stops YAML reading them
            # as document markers.
            fm = _FENCE.sub(lambda m: " " + m.group(0), fm)
        fast = fast_load(fm)
        if fast is not None:
            data, key_lines = fast
            break
        try:
            data, key_lines = _yaml_load(fm)
            break
        except yaml.YAMLError as exc:
            later = _next_fence(text, fence[1]) if _unclosed_quote(exc) else None
            if later is not None:
                fence = later
                retried = True
                continue
            mark = getattr(exc, "problem_mark", None)
            opened = getattr(exc, "context_mark", None)
            if opened is not None and (mark is None or mark.index >= len(fm.rstrip())):
                # The parser ran into the end of the frontmatter: the line that opened the
                # unfinished construct is the one to fix.
                mark = opened
            line = fm_line + (mark.line if mark is not None else 0)
            problem = getattr(exc, "problem", None) or str(exc)
            context = getattr(exc, "context", None)
            what = f"{context}: {problem}" if context else problem
            diags.append(
                Diagnostic(
                    file=source,
                    line=line,
                    message=f"invalid YAML in the frontmatter ({what}); check the "
                    "indentation and quote values that contain ': ' or start with a "
                    "special character",
                )
            )
            failed = True
            break
    fence_line = text.count("\n", 0, fence[0]) + 1
    body_start = min(fence[1] + 1, len(text))
    lines = {k: v + fm_line for k, v in key_lines.items()}
    if failed:
        data = None
    elif data is None:
        diags.append(
            Diagnostic(
                file=source,
                line=fm_line,
                message="the frontmatter is empty; add name: and description:",
            )
        )
    elif not isinstance(data, dict):
        diags.append(
            Diagnostic(
                file=source,
                line=fm_line,
                message=f"the frontmatter is a {type(data).__name__}, not a mapping; "
                "write it as 'key: value' lines",
            )
        )
        data = None
    return Frontmatter(
        data=data,
        key_lines=lines,
        fm_line=fm_line,
        body_start=body_start,
        body_line=fence_line + 1,
        text=text,
        diagnostics=tuple(diags),
    )
