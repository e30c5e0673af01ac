"""Tool calls a model wrote as text, and the reasoning it wrote in its answer.

Models served without a tool-call parser, small instruct models and models asked through
a chat template that does not match their training often answer a tool call as text: a
```` ```json ```` block, bare JSON with ``name`` and ``arguments`` (or ``parameters``),
``<tool_call>{...}</tool_call>`` (Qwen, Hermes), ``<function=name>{...}</function>`` (Llama)
or a list of such objects. ``find_calls`` reads them back as ``ToolCall``s. Pure functions:
no I/O, no state, nothing here depends on which model wrote the text.

What counts as a call:

- inside ``<tool_call>`` or ``<function=...>`` tags, any call-shaped object (a call to a
  tool that does not exist is still the model's attempt at a call: running it tells the
  model what exists); JSON the tags hold that cannot be read even after repair (a cut-off
  answer, single quotes, trailing commas; ``json_repair``) is a *problem*;
- in a fenced block or bare in the text, only a call-shaped object whose name is one of
  ``names`` (the tools offered, and the skills, which models call as if they were tools):
  prose that shows or mentions JSON is not a call. A fenced block that names a tool but
  cannot be read is a problem.

Call-shaped: ``{"name": N, "arguments": A}`` (``parameters`` or ``args`` for
``arguments``; none means no arguments), ``{"function": {"name": N, "arguments": A}}`` (the
OpenAI shape), ``{"tool_calls": [...]}``, or a list of those. ``A`` may be an object, a
JSON string of one, or anything else (passed on as JSON, for the tool to refuse).

``split_thinking`` takes ``<think>...</think>`` blocks out of an answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Iterator
from dataclasses import dataclass
from typing import Any

from json_repair import repair_json

from agentsim.llm.base import ToolCall

__all__ = ["TextCalls", "find_calls", "split_thinking"]

# Tags some chat templates leave in the text around a call; they are not prose.
_MARKERS = ("<|python_tag|>", "<|eom_id|>", "<|eot_id|>", "[TOOL_CALLS]", "<|im_end|>")
_FENCE = re.compile(r"```[ \t]*([A-Za-z_]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_FENCE_LANGS = frozenset({"", "json", "jsonc", "json5", "tool_call", "tool_code", "tool"})
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.S)
_FUNCTION = re.compile(
    r"<function=([^>\s]+)>(.*?)(?:</function>|(?=<function=)|(?=</tool_call>)|\Z)", re.S
)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.S)
_THINK = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.S)
_ARGUMENT_KEYS = ("arguments", "parameters", "args")
_SPACES = re.compile(r"\n{3,}")


@dataclass(frozen=True, slots=True)
class TextCalls:
    """What ``find_calls`` found: the calls in order, the text without them, and the
    call-shaped text it could not read (one line each, to tell the model)."""

    calls: tuple[ToolCall, ...] = ()
    rest: str = ""
    problems: tuple[str, ...] = ()


def find_calls(content: str, names: Container[str]) -> TextCalls:
    """The tool calls written in ``content`` (see the module docstring); ``names``: the
    tools offered and the skills visible. Calls get ids ``text_call_0``, ``text_call_1``..."""
    if not content:
        return TextCalls()
    found: list[tuple[int, str, Any]] = []  # (position, name, arguments)
    problems: list[str] = []
    taken: list[tuple[int, int]] = []  # spans of the content that held calls

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in taken)

    for m in _TOOL_CALL.finditer(content):
        payload = m.group(1)
        if "<function=" in payload:
            continue  # the <function=...> pass reads it
        calls = _read(payload, names=None, repair=True)
        if calls is None:
            problems.append(f"could not read the call in <tool_call>{_clip(payload)}</tool_call>")
        else:
            found.extend((m.start(), n, a) for n, a in calls)
        taken.append(m.span())
    for m in _FUNCTION.finditer(content):
        name, payload = m.group(1), m.group(2)
        args = _function_arguments(payload)
        if args is None:
            problems.append(f"could not read the arguments of <function={name}>{_clip(payload)}")
        else:
            found.append((m.start(), name, args))
        taken.append(_widen(content, m.span()))
    for m in _FENCE.finditer(content):
        if m.group(1).lower() not in _FENCE_LANGS or not free(*m.span()):
            continue
        payload = m.group(2)
        calls = _read(payload, names=names, repair=True)
        if calls:
            found.extend((m.start(), n, a) for n, a in calls)
            taken.append(m.span())
        elif calls is None and _names_one(payload, names):
            problems.append(f"could not read the call in the fenced block {_clip(payload)}")
            taken.append(m.span())
    for start, end, calls in _bare(content, names, free):
        found.extend((start, n, a) for n, a in calls)
        taken.append((start, end))
    if not found and not problems:
        return TextCalls(rest=content.strip())
    found.sort(key=lambda f: f[0])
    tool_calls = tuple(
        ToolCall(id=f"text_call_{i}", name=name, arguments=_arguments_text(args))
        for i, (_, name, args) in enumerate(found)
    )
    return TextCalls(calls=tool_calls, rest=_rest(content, taken), problems=tuple(problems))


def split_thinking(content: str) -> tuple[str, str]:
    """(reasoning, answer) of ``content``: the text of its ``<think>...</think>`` blocks, and
    the rest. An unclosed ``<think>`` runs to the end (the answer was cut off while
    thinking); a ``</think>`` without an opening tag (templates that open it in the prompt)
    makes everything before it reasoning."""
    if "<think>" not in content and "</think>" not in content:
        return "", content
    thoughts: list[str] = []
    head, sep, tail = content.partition("</think>")
    if sep and "<think>" not in head:
        thoughts.append(head.strip())
        content = tail

    def keep(m: re.Match[str]) -> str:
        thoughts.append(m.group(1).strip())
        return ""

    answer = _THINK.sub(keep, content).replace("</think>", "")
    return "\n\n".join(t for t in thoughts if t), answer.strip()


# -- reading ---------------------------------------------------------------------------------


def _read(payload: str, *, names: Container[str] | None, repair: bool) -> list[Any] | None:
    """The calls in ``payload`` (a JSON object or list): ``None`` when it is not readable
    JSON or not call-shaped; only calls named in ``names`` (all, when None)."""
    text = payload.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        if not repair or text[0] not in "{[":
            return None
        value = repair_json(text, return_objects=True)
    calls = _shape(value)
    if calls is None:
        return None
    if names is not None:
        calls = [(n, a) for n, a in calls if n in names]
    return calls


def _shape(value: Any) -> list[tuple[str, Any]] | None:
    """The (name, arguments) of a call-shaped value; ``None`` when it is not one."""
    if isinstance(value, list):
        out: list[tuple[str, Any]] = []
        for item in value:
            calls = _shape(item)
            if calls is None:
                return None
            out.extend(calls)
        return out or None
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("tool_calls"), list):
        return _shape(value["tool_calls"])
    fn = value.get("function")
    if isinstance(fn, dict):
        value = fn
    elif isinstance(fn, str) and "name" not in value:
        value = {**value, "name": fn}
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    extra = set(value) - {"name", "type", "id", "function", *_ARGUMENT_KEYS}
    if extra:
        return None  # an object that happens to have a name: a record, not a call
    args: Any = next((value[k] for k in _ARGUMENT_KEYS if k in value), {})
    return [(name.strip(), args)]


def _function_arguments(payload: str) -> Any:
    """The arguments after ``<function=name>``: a JSON object, ``<parameter=k>v`` pairs,
    or nothing; ``None`` when they cannot be read."""
    text = payload.strip()
    if not text:
        return {}
    if "<parameter=" in text:
        params: dict[str, Any] = {}
        for m in _PARAMETER.finditer(text):
            raw = m.group(2).strip()
            try:
                params[m.group(1)] = json.loads(raw)
            except ValueError:
                params[m.group(1)] = raw
        return params
    if text[0] not in "{[":
        return None
    try:
        return json.loads(text)
    except ValueError:
        value = repair_json(text, return_objects=True)
        return value if isinstance(value, dict) else None


def _bare(
    content: str, names: Container[str], free: Any
) -> Iterator[tuple[int, int, list[tuple[str, Any]]]]:
    """Call-shaped JSON values outside tags and fences, named in ``names``: (start, end,
    calls) of each. A value that does not parse is repaired only when it runs to the end
    of the content (an answer cut off in the middle of a call)."""
    decoder = json.JSONDecoder()
    i = _next_open(content, 0)
    while i >= 0:
        if not free(i, i + 1):
            i = _next_open(content, i + 1)
            continue
        try:
            value, end = decoder.raw_decode(content, i)
        except ValueError:
            tail = content[i:]
            if content[i] == "{" and free(i, len(content)) and _names_one(tail, names):
                calls = _read(tail, names=names, repair=True)
                if calls:
                    yield i, len(content), calls
                    return
            i = _next_open(content, i + 1)
            continue
        calls = _shape(value)
        named = [(n, a) for n, a in calls or () if n in names]
        if named and free(i, end):
            yield i, end, named
            i = _next_open(content, end)
        else:
            i = _next_open(content, i + 1)


def _next_open(text: str, start: int) -> int:
    a, b = text.find("{", start), text.find("[", start)
    return b if a < 0 else a if b < 0 else min(a, b)


def _names_one(text: str, names: Container[str]) -> bool:
    """Whether ``text`` holds ``"name": "<one of names>"`` (a call it failed to write)."""
    for m in re.finditer(r'["\']name["\']\s*:\s*["\']([^"\']+)["\']', text):
        if m.group(1) in names:
            return True
    return False


def _widen(content: str, span: tuple[int, int]) -> tuple[int, int]:
    """A ``<function=...>`` span with the ``<tool_call>`` tags around it, if any."""
    start, end = span
    before = content[:start].rstrip()
    if before.endswith("<tool_call>"):
        start = len(before) - len("<tool_call>")
    after = content[end:]
    stripped = after.lstrip()
    if stripped.startswith("</tool_call>"):
        end += len(after) - len(stripped) + len("</tool_call>")
    return start, end


def _arguments_text(args: Any) -> str:
    if isinstance(args, str):
        try:
            json.loads(args)
        except ValueError:
            return json.dumps(args, ensure_ascii=False)
        return args
    return json.dumps(args, ensure_ascii=False)


def _rest(content: str, taken: list[tuple[int, int]]) -> str:
    pieces: list[str] = []
    pos = 0
    for start, end in sorted(taken):
        if start > pos:
            pieces.append(content[pos:start])
        pos = max(pos, end)
    pieces.append(content[pos:])
    text = "".join(pieces)
    for marker in _MARKERS:
        text = text.replace(marker, "")
    return _SPACES.sub("\n\n", text).strip()


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
