"""Low-level SKILL.md reading: file -> bytes -> text -> frontmatter mapping + body position.

Nothing here raises on bad input: problems become ``Diagnostic`` values that carry the file
and the 1-based line. The YAML is read with PyYAML's C loader when it is available.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import asdict, dataclass
from typing import Any, Literal

import yaml

__all__ = [
    "MAX_SKILL_MD_BYTES",
    "Diagnostic",
    "Frontmatter",
    "KeyLines",
    "KeyPath",
    "decode_skill_md",
    "read_frontmatter",
    "read_skill_bytes",
]

MAX_SKILL_MD_BYTES = 1 << 20
"""SKILL.md files above 1 MiB are refused: a body that large cannot be meant for a prompt."""

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FENCE = re.compile(r"^---[ \t]*$", re.M)
# A document marker at the start of a line, as YAML sees one (also inside a quoted value).
_MARKER = re.compile(r"^(?:---|\.\.\.)(?=[ \t]|$)", re.M)
# O_NONBLOCK: opening a FIFO named SKILL.md must not wait for a writer.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)

Severity = Literal["error", "warning", "note"]
KeyPath = tuple[str | int, ...]
"""Where a value sits in the frontmatter: mapping keys and list indexes from the top."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnostic:
    """A problem found in a skill file; ``str()`` is ``file:line: severity: message``.

    ``note`` is for facts that are not problems here (an agentsim extension under
    ``skills validate --strict``)."""

    file: str
    line: int
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.severity}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class Frontmatter:
    """The result of reading a SKILL.md text up to its body."""

    data: dict[Any, Any] | None
    lines: KeyLines
    body: str
    body_line: int  # 1-based line of the body's first line
    diagnostics: tuple[Diagnostic, ...]


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def not_regular(source: str, mode: int) -> Diagnostic:
    return Diagnostic(
        file=source,
        line=1,
        message=f"cannot read SKILL.md: it is {_kind(mode)}, not a regular file; replace it "
        "with a text file",
    )


def cannot_read(source: str, exc: OSError) -> Diagnostic:
    problem = exc.strerror or type(exc).__name__
    if exc.errno == errno.ELOOP:
        fix = "a symlink on the way loops back on itself; point it at a real file"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        fix = "check the file's permissions"
    else:
        fix = "check that the file exists and is readable"
    return Diagnostic(file=source, line=1, message=f"cannot read SKILL.md ({problem}); {fix}")


def too_big(source: str, size: int) -> Diagnostic:
    return Diagnostic(
        file=source,
        line=1,
        message=(
            f"SKILL.md is {size} bytes, over the 1 MiB limit; move long material "
            "into references/ files"
        ),
    )


def read_skill_bytes(path: str) -> tuple[bytes, os.stat_result] | Diagnostic:
    """The bytes of a SKILL.md and the stat of the open file, or why they cannot be read.

    Never blocks on a FIFO, never raises on a symlink loop, a folder or a device, and
    never reads more than the 1 MiB limit (plus one byte to see that it is over).
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        return cannot_read(path, exc)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return not_regular(path, st.st_mode)
        if st.st_size > MAX_SKILL_MD_BYTES:
            return too_big(path, st.st_size)
        chunks: list[bytes] = []
        left = MAX_SKILL_MD_BYTES + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        return cannot_read(path, exc)
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > MAX_SKILL_MD_BYTES:  # it grew after the stat
        return too_big(path, len(raw))
    return raw, st


def decode_skill_md(raw: bytes, *, source: str) -> str | Diagnostic:
    """Decode SKILL.md bytes; invalid UTF-8 gives an error diagnostic at its line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        bad = raw[exc.start : exc.start + 1].hex()
        return Diagnostic(
            file=source,
            line=line,
            message=f"SKILL.md is not valid UTF-8 (byte 0x{bad} at offset {exc.start}); "
            "re-save the file as UTF-8",
        )


class _AliasError(Exception):
    """The frontmatter reuses a node (a YAML alias): refused, see ``_key_lines``."""

    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


class KeyLines:
    """The 1-based line of every mapping key and list item, by its path from the top.

    Only a diagnostic needs a line, so the YAML node tree is walked on first use. Aliases
    are refused during that walk: a frontmatter has no use for them, and a few nested ones
    expand into billions of values for whatever walks the result (a JSON Schema check).
    """

    __slots__ = ("_flow", "_lines", "_offset", "_plain", "_root")

    def __init__(self, root: yaml.Node | None, offset: int) -> None:
        self._root = root
        self._offset = offset
        self._lines: dict[KeyPath, int] | None = None
        self._flow: list[tuple[KeyPath, int]] = []
        self._plain: dict[KeyPath, str] = {}  # unquoted scalars YAML reads as non-strings

    def walk(self) -> dict[KeyPath, int]:
        if self._lines is not None:
            return self._lines
        lines: dict[KeyPath, int] = {}
        seen: set[int] = set()
        todo: list[tuple[yaml.Node, KeyPath]] = [(self._root, ())] if self._root else []
        while todo:
            node, path = todo.pop()
            if id(node) in seen:
                raise _AliasError(node.start_mark.line + self._offset)
            seen.add(id(node))
            if (
                isinstance(node, yaml.ScalarNode)
                and not node.style  # plain: None, or "" from the C loader
                and node.tag != "tag:yaml.org,2002:str"
            ):
                self._plain[path] = node.value  # as written: off, yes, 123
            if isinstance(node, yaml.CollectionNode) and node.flow_style:
                self._flow.append((path, node.start_mark.line + self._offset))
                # What sits inside is flow style too: reported once, at the outermost.
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    name = key.value if isinstance(key, yaml.ScalarNode) else str(key.value)
                    lines.setdefault((*path, name), key.start_mark.line + self._offset)
                    todo.append((value, (*path, name)))
            elif isinstance(node, yaml.SequenceNode):
                for i, item in enumerate(node.value):
                    lines.setdefault((*path, i), item.start_mark.line + self._offset)
                    todo.append((item, (*path, i)))
        self._lines = lines
        self._root = None  # the tree is no longer needed
        return lines

    def get(self, path: KeyPath) -> int | None:
        return self.walk().get(path)

    def literal(self, path: KeyPath) -> str | None:
        """The text of the unquoted scalar at ``path`` that YAML read as a boolean, number or
        null (``off``, ``123``), or None."""
        self.walk()
        return self._plain.get(path)

    def flow(self) -> list[tuple[KeyPath, int]]:
        """(path, line) of each outermost flow-style collection (``[a, b]``, ``{k: v}``)."""
        self.walk()
        found = sorted(self._flow, key=lambda item: item[1])
        return [
            (path, line)
            for path, line in found
            if not any(path[: len(p)] == p and path != p for p, _ in found)
        ]


def _yaml_load(fm: str, offset: int) -> tuple[Any, KeyLines]:
    loader = _LOADER(fm)
    try:
        node = loader.get_single_node()
        lines = KeyLines(node, offset)
        if "*" in fm:  # an alias needs a '*': only then must the tree be checked first
            lines.walk()
        return (loader.construct_document(node) if node is not None else None), lines
    finally:
        loader.dispose()


def _unclosed_quote(exc: yaml.YAMLError) -> bool:
    return (
        isinstance(exc, yaml.scanner.ScannerError)
        and "quoted scalar" in (exc.context or "")
        and "end of stream" in (exc.problem or "")
    )


def _marker_in_quote(exc: yaml.YAMLError) -> bool:
    """A '---' or '...' line inside a quoted value (YAML reads it as a document marker)."""
    return (
        isinstance(exc, yaml.scanner.ScannerError)
        and "quoted scalar" in (exc.context or "")
        and "document indicator" in (exc.problem or "")
    )


def _next_fence(text: str, newline: int) -> tuple[int, int] | None:
    """(start, end) of the first '---' line after the newline at ``newline``, or None."""
    for match in _FENCE.finditer(text, newline + 1):
        return match.start(), match.end()
    return None


def _yaml_problem(exc: yaml.YAMLError, fm: str) -> tuple[int, str]:
    """(0-based line in the frontmatter, message) of a YAML error."""
    mark = getattr(exc, "problem_mark", None)
    opened = getattr(exc, "context_mark", None)
    if opened is not None and (mark is None or mark.index >= len(fm.rstrip())):
        # The parser ran into the end of the frontmatter: the line that opened the
        # unfinished construct is the one to fix.
        mark = opened
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    what = f"{context}: {problem}" if context else problem
    return (mark.line if mark is not None else 0), (
        f"invalid YAML in the frontmatter ({what}); check the indentation and quote values "
        "that contain ': ' or start with a special character"
    )


def _normalise(text: str, source: str, diags: list[Diagnostic]) -> str:
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
    return text


def read_frontmatter(text: str, *, source: str) -> Frontmatter:
    """Split ``text`` at its frontmatter fences and load the YAML between them."""
    diags: list[Diagnostic] = []
    text = _normalise(text, source, diags)

    def failed(line: int, message: str, body: str = "") -> Frontmatter:
        diags.append(Diagnostic(file=source, line=line, message=message))
        return Frontmatter(
            data=None,
            lines=KeyLines(None, 2),
            body=body,
            body_line=line,
            diagnostics=tuple(diags),
        )

    if not text or text.isspace():
        return failed(
            1,
            "SKILL.md is empty; start it with a '---' line, then name: and description:, "
            "then a closing '---' line",
        )
    first_end = text.find("\n")
    first = text if first_end < 0 else text[:first_end]
    if first.rstrip(" \t") != "---":
        return failed(
            1,
            "SKILL.md has no YAML frontmatter: its first line must be '---', followed by "
            "name: and description: and a closing '---' line",
        )
    fence = _next_fence(text, first_end) if first_end >= 0 else None
    if fence is None:
        return failed(
            1,
            "the frontmatter opened on line 1 is never closed; add a '---' line after the "
            "last frontmatter key",
        )
    start = first_end + 1
    retried = False
    while True:
        fm = text[start : fence[0]]
        if retried:
            # Earlier '---' lines sat inside a quoted value: indenting them keeps the value
            # (flow scalars drop continuation-line indentation) and stops YAML reading them
            # as document markers.
            fm = _MARKER.sub(lambda m: " " + m.group(0), fm)
        try:
            data, lines = _yaml_load(fm, 2)
            break
        except yaml.YAMLError as exc:
            if _marker_in_quote(exc) and not retried:
                retried = True
                continue
            later = _next_fence(text, fence[1]) if _unclosed_quote(exc) else None
            if later is not None:
                fence, retried = later, True
                continue
            line, message = _yaml_problem(exc, fm)
            return failed(2 + line, message)
        except _AliasError as exc:
            return failed(
                exc.line,
                "the frontmatter reuses this value through a YAML anchor and alias "
                "(&name ... *name); write each value out in full",
            )
        except RecursionError:
            return failed(2, "the frontmatter is nested too deeply; flatten it")
    body_line = text.count("\n", 0, fence[0]) + 2
    body = text[min(fence[1] + 1, len(text)) :]
    if data is None:
        return failed(2, "the frontmatter is empty; add name: and description:", body)
    if not isinstance(data, dict):
        return failed(
            2,
            f"the frontmatter is a {type(data).__name__}, not a mapping; write it as "
            "'key: value' lines",
            body,
        )
    return Frontmatter(
        data=data,
        lines=lines,
        body=body,
        body_line=body_line,
        diagnostics=tuple(diags),
    )
