"""A fast reader for the plain subset of YAML that almost every SKILL.md frontmatter uses.

PyYAML's C loader still builds Python objects in Python and costs ~90 us for a ten-line
frontmatter, which alone would blow the cold-scan budget (40 us per skill). Frontmatter
is nearly always flat ``key: value`` lines, so this module reads that subset directly and
*declines* (returns ``None``) on anything it is not certain about; the caller then uses
the real YAML loader. Correctness rests on declining: every value it accepts is one that
PyYAML would load identically, which a property test checks against ``yaml.load``.

Accepted: top-level ``key: value`` lines at column 0; ``key:`` followed by an indented
one-level mapping or a block sequence of scalars; values that are plain scalars resolving
to strings (checked against the loader's own implicit resolvers), decimal integers,
quote-free single- or double-quoted strings without escapes, and flow sequences of those.
Comments, blank lines and ASCII / BMP printable text only.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["fast_load"]

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Characters YAML treats specially as line breaks or rejects outright; any of them -> decline.
_ODD_CHARS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")
# Greedy tails, stripped afterwards: a lazy ``(.*?) *$`` backtracks at every character.
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*):(?: +(.*))?")
_CHILD_KEY = re.compile(r"( +)([A-Za-z_][A-Za-z0-9_-]*):(?: +(.*))?")
_ITEM = re.compile(r"( *)-(?: +(.*))?")
_DQ = re.compile(r'"([^"\\]*)"')
_SQ = re.compile(r"'([^']*)'")
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
# A plain scalar may not start with an indicator or a space (a leading '-', '?' or ':' is
# legal before a non-space, but declining those costs nothing).
_PLAIN_START_BAD = frozenset("-?:,[]{}#&*!|>'\"%@` ")
_FLOW_ITEM_BAD = re.compile(r"[\[\]{},:#\"'&*!|>%@`]")


class _Decline(Exception):
    """Raised internally when the text is outside the subset."""


# Results for values seen before: skills repeat the same keys and many of the same values
# ("inline", "active", "5", "[mobility, planning]"), and a dict hit is far cheaper than the
# resolver regexes. Only immutable results are kept; the size is capped.
_MEMO: dict[str, str | int | tuple[str | int, ...]] = {}
_MEMO_CAP = 8192


def _resolve_plain(value: str) -> str | int:
    """Return the value PyYAML would build for a plain scalar, or decline."""
    if value[0] in _PLAIN_START_BAD or ": " in value or " #" in value or value.endswith(":"):
        raise _Decline
    resolvers = _LOADER.yaml_implicit_resolvers.get(value[0])
    if resolvers:
        for tag, regexp in resolvers:
            if regexp.match(value):
                if tag == "tag:yaml.org,2002:int" and _DECIMAL.fullmatch(value):
                    return int(value)
                raise _Decline
    return value


def _key(key: str) -> str:
    """Decline keys that YAML would not read as that string (``yes``, ``null``, ...)."""
    if key in _MEMO:
        return key
    if _resolve_plain(key) != key:
        raise _Decline
    if len(_MEMO) < _MEMO_CAP:
        _MEMO[key] = key
    return key


def _scalar(value: str) -> str | int:
    first = value[0]
    if first == '"':
        m = _DQ.fullmatch(value)
        if m is None:
            raise _Decline
        return m.group(1)
    if first == "'":
        m = _SQ.fullmatch(value)
        if m is None:
            raise _Decline
        return m.group(1)
    return _resolve_plain(value)


def _value(value: str) -> Any:
    hit = _MEMO.get(value)
    if hit is not None:
        return list(hit) if isinstance(hit, tuple) else hit
    result: str | int | tuple[str | int, ...]
    if value[0] == "[" and value[-1] == "]":
        inner = value[1:-1].strip()
        items: list[str | int] = []
        if inner:
            for raw in inner.split(","):
                item = raw.strip()
                if not item or (item[0] not in "\"'" and _FLOW_ITEM_BAD.search(item)):
                    raise _Decline
                items.append(_scalar(item))
        result = tuple(items)
    else:
        result = _scalar(value)
    if len(value) <= 64 and len(_MEMO) < _MEMO_CAP:
        _MEMO[value] = result
    return list(result) if isinstance(result, tuple) else result


def _block(lines: list[str], start: int) -> tuple[Any, int]:
    """Read the block under a ``key:`` line; return (value, index of the next top line)."""
    i = start
    n = len(lines)
    children: list[tuple[int, str]] = []
    while i < n:
        line = lines[i]
        stripped = line.lstrip(" ")
        if not stripped or stripped[0] == "#":
            i += 1
            continue
        if line[0] != " " and line[0] != "-":
            break
        children.append((i, line))
        i += 1
    if not children:
        return None, i
    first = children[0][1]
    if first.lstrip(" ").startswith("-"):
        seq: list[Any] = []
        indent = -1
        for _, line in children:
            m = _ITEM.fullmatch(line)
            raw = m.group(2).rstrip(" ") if m is not None and m.group(2) else ""
            if m is None or not raw:
                raise _Decline
            if indent < 0:
                indent = len(m.group(1))
            elif len(m.group(1)) != indent:
                raise _Decline
            seq.append(_value(raw))
        return seq, i
    mapping: dict[str, Any] = {}
    indent = -1
    for _, line in children:
        m = _CHILD_KEY.fullmatch(line)
        raw = m.group(3).rstrip(" ") if m is not None and m.group(3) else ""
        if m is None or not raw:
            raise _Decline
        if indent < 0:
            indent = len(m.group(1))
        elif len(m.group(1)) != indent:
            raise _Decline
        key = _key(m.group(2))
        if key in mapping:
            raise _Decline
        mapping[key] = _value(raw)
    return mapping, i


def fast_load(text: str) -> tuple[dict[str, Any], dict[str, int]] | None:
    """Load ``text`` if it is inside the subset: (mapping, {key: 0-based line}), else None."""
    if _ODD_CHARS.search(text):
        return None
    lines = text.split("\n")
    data: dict[str, Any] = {}
    key_lines: dict[str, int] = {}
    i = 0
    n = len(lines)
    try:
        while i < n:
            line = lines[i]
            if not line or line[0] == "#" or not line.strip(" "):
                i += 1
                continue
            m = _KEY.fullmatch(line)
            if m is None:
                return None
            key = _key(m.group(1))
            if key in data:
                return None
            key_lines[key] = i
            raw = m.group(2)
            if raw:
                raw = raw.rstrip(" ")
            if not raw:
                data[key], i = _block(lines, i + 1)
                continue
            data[key] = _value(raw)
            i += 1
    except _Decline:
        return None
    if not data:
        return None
    return data, key_lines
