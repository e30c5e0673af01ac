"""A fast reader for the plain subset of YAML that almost every SKILL.md frontmatter uses.

PyYAML's C loader still builds Python objects in Python and costs ~90 us for a ten-line
frontmatter, which alone would blow the cold-scan budget (40 us per skill, file reads
included). Frontmatter is nearly always flat ``key: value`` lines, so this module reads that
subset directly and *declines* (returns ``None``) on anything it is not certain about; the
caller then uses the real YAML loader. Correctness rests on declining: every value it
accepts is one that PyYAML would load identically, which a property test checks against
``yaml.load``.

Accepted: top-level ``key: value`` lines at column 0; ``key:`` followed by an indented
one-level mapping or a block sequence of scalars; values that are plain scalars resolving
to strings (checked against the loader's own implicit resolvers), decimal integers,
quote-free single- or double-quoted strings without escapes, and flow sequences of those.
Comments, blank lines and printable text only: ASCII text may hold no control character
but the newline (one ``bytes.translate``), other text must pass ``str.isprintable`` per
line (which rejects tabs, control characters, line separators, surrogates and the BOM).

Lines are cut with ``str.partition`` and checked with ``str`` predicates rather than
regular expressions: a regex match plus its groups costs several times more per line.
The registry's scan reads frontmatter with these helpers too (``_validate.clean_fields``),
sharing one ``Memo`` per scan.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = [
    "ASCII_OK",
    "MEMO_MAX_LEN",
    "Decline",
    "Memo",
    "close_block",
    "fast_load",
    "resolve",
]

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
# A plain scalar may not start with an indicator or a space (a leading '-', '?' or ':' is
# legal before a non-space, but declining those costs nothing).
_PLAIN_START_BAD = frozenset("-?:,[]{}#&*!|>'\"%@` ")
_FLOW_ITEM_BAD = frozenset("[]{},:#\"'&*!|>%@`")
_QUOTES = frozenset("\"'")

MEMO_MAX_LEN = 96
"""Longer values and lines (descriptions) practically never repeat and are not memoised."""

# Printable ASCII plus the newline. ASCII text is checked in one ``bytes.translate`` that
# deletes these: several times cheaper than ``str.isprintable`` per line, which is kept for
# non-ASCII text.
ASCII_OK = bytes(range(0x20, 0x7F)) + b"\n"


class Memo:
    """What one scan has already read and checked, shared by its calls.

    Skills repeat the same keys, values and whole lines ("isolation: inline", "timeout: 5",
    "tags: [mobility, planning]"), and a dict hit is far cheaper than reading a line again.
    The caller owns it (one per scan), so nothing carries over from one scan to the next
    and a first scan is as cold as it looks.
    """

    __slots__ = ("fields", "keys", "values")

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.values: dict[str, str | int | tuple[str | int, ...]] = {}
        # whole top-level line -> (field, checked value); filled and read by the scan
        self.fields: dict[str, tuple[str, Any]] = {}


class Decline(Exception):
    """Raised when the text is outside the subset (callers turn it into a None result)."""


def _key_ok(key: str, memo: Memo) -> bool:
    """``[A-Za-z_][A-Za-z0-9_-]*`` (the caller has ruled out a leading '-' or space) and
    not a word YAML resolves to something else (``yes``, ``null``, ``on``, ...)."""
    if key in memo.keys:
        return True
    if not (key.isascii() and key.replace("-", "_").isidentifier()):
        return False
    resolvers = _LOADER.yaml_implicit_resolvers.get(key[0])
    if resolvers:
        for _, regexp in resolvers:
            if regexp.match(key):
                return False
    memo.keys.add(key)
    return True


def _scalar(value: str) -> str | int:
    """The value PyYAML builds for a one-line scalar, or decline."""
    first = value[0]
    if first == '"':
        # No escapes and no inner quote: the text between the quotes is the value.
        if len(value) < 2 or value[-1] != '"' or '"' in value[1:-1] or "\\" in value:
            raise Decline
        return value[1:-1]
    if first == "'":
        if len(value) < 2 or value[-1] != "'" or "'" in value[1:-1]:
            raise Decline
        return value[1:-1]
    # The common int without the resolvers' regexes; "007" is octal to YAML: left to them.
    if (
        "0" <= first <= "9"
        and value.isdigit()
        and value.isascii()
        and (first != "0" or value == "0")
    ):
        return int(value)
    # A plain scalar: no indicator first, nothing YAML reads as a mapping or a comment, and
    # no implicit type (bool, null, float, timestamp, ...) other than a decimal int.
    if first in _PLAIN_START_BAD or ": " in value or " #" in value or value[-1] == ":":
        raise Decline
    resolvers = _LOADER.yaml_implicit_resolvers.get(first)
    if resolvers:
        for tag, regexp in resolvers:
            if regexp.match(value):
                if tag == "tag:yaml.org,2002:int" and _DECIMAL.fullmatch(value):
                    return int(value)
                raise Decline
    return value


def resolve(value: str, memo: Memo) -> str | int | tuple[str | int, ...]:
    """A value in immutable form (a flow sequence as a tuple), or decline."""
    short = len(value) <= MEMO_MAX_LEN
    if short:
        hit = memo.values.get(value)
        if hit is not None:
            return hit
    result: str | int | tuple[str | int, ...]
    if value[0] == "[" and value[-1] == "]":
        inner = value[1:-1].strip()
        items: list[str | int] = []
        if inner:
            for raw in inner.split(","):
                item = raw.strip()
                if not item or (item[0] not in _QUOTES and not _FLOW_ITEM_BAD.isdisjoint(item)):
                    raise Decline
                items.append(_scalar(item))
        result = tuple(items)
    else:
        result = _scalar(value)
    if short:
        memo.values[value] = result
    return result


def _value(raw: str, memo: Memo) -> Any:
    """A block item's value as YAML builds it: sequences are fresh lists, never shared."""
    result = resolve(raw, memo)
    return list(result) if type(result) is tuple else result


def close_block(block: list[str], memo: Memo) -> Any:
    """The value of a ``key:`` line from its block lines (None when there are none): a
    sequence if the first line is an item, else a mapping; one indentation throughout.

    Each line is cut inline (no helper call per line): a hook block is read for nearly
    every skill.
    """
    if not block:
        return None
    first = block[0]
    indent = len(first) - len(first.lstrip(" "))
    if first[indent] == "-":
        seq: list[Any] = []
        for line in block:
            body = line.lstrip(" ")
            # an item: "- value", at the block's indentation
            if len(line) - len(body) != indent or body[:2] != "- ":
                raise Decline
            raw = body[2:].strip(" ")
            if not raw:
                raise Decline
            seq.append(_value(raw, memo))
        return seq
    if not indent:
        raise Decline
    keys = memo.keys
    mapping: dict[str, Any] = {}
    for line in block:
        body = line.lstrip(" ")
        key, sep, rest = body.partition(":")
        # "key: value" at the block's indentation, a plain word for a key, said once
        if (
            len(line) - len(body) != indent
            or body[0] == "-"
            or not sep
            or not rest
            or rest[0] != " "
            or key in mapping
            or (key not in keys and not _key_ok(key, memo))
        ):
            raise Decline
        raw = rest.strip(" ")
        if not raw:
            raise Decline
        mapping[key] = _value(raw, memo)
    return mapping


def fast_load(
    text: str, memo: Memo | None = None, *, first_line: int = 0
) -> tuple[dict[str, Any], dict[str, int]] | None:
    """Load ``text`` if it is inside the subset, else None.

    Returns (mapping, {top-level key: line}); lines count from ``first_line`` (0 gives
    0-based lines of ``text``). ``memo`` may be shared by the calls of one scan.
    """
    if memo is None:
        memo = Memo()
    ascii_text = text.isascii()  # O(1): CPython records it
    if ascii_text and text.encode().translate(None, ASCII_OK):
        return None  # a tab or a control character
    keys = memo.keys
    values = memo.values
    data: dict[str, Any] = {}
    key_lines: dict[str, int] = {}
    block: list[str] | None = None  # lines under the open ``key:``, if any
    block_key = ""
    try:
        for i, line in enumerate(text.split("\n"), first_line):
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
                    return None  # an indented line with no open block: a continuation
                block.append(line)
                continue
            if block is not None:
                data[block_key] = close_block(block, memo)
                block = None
            # A top-level ``key: value`` line (inlined: this loop is the scan's hot path).
            key, sep, rest = line.partition(":")
            if not sep or (key not in keys and not _key_ok(key, memo)) or key in data:
                return None
            key_lines[key] = i
            raw = rest.strip(" ")
            if raw:
                if rest[0] != " ":
                    return None
                value = values.get(raw)
                if value is None:
                    value = resolve(raw, memo)
                data[key] = list(value) if type(value) is tuple else value
            else:
                data[key] = None  # unless a block follows
                block = []
                block_key = key
        if block is not None:
            data[block_key] = close_block(block, memo)
    except Decline:
        return None
    if not data:
        return None
    return data, key_lines
