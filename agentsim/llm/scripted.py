"""The offline ``scripted`` model: deterministic, free, and good enough to drive examples.

It plays a diligent, unimaginative LLM that follows the shared prompt conventions
(``SUGGESTED:`` lines and ``playbook`` blocks). It keeps no state between calls: every
decision is rebuilt from the messages, so the same messages and seed always give the same
completion, a run replays exactly, and one instance serves every agent of a process.

It reads the prompt's blocks through their declaration (``agentsim.llm.prompt_blocks``),
as the agent renders them.

Policy, one tool call per completion: answer a ``<question>`` (read-only mode); else follow
the first pending suggestion (hooks and feedback, then tool results, in the order seen); else
run the next playbook line of an active skill; else, with probability ``activation_rate``,
activate the catalog skill that best fits the agent (never a deprecated one); else ``finish``
with a summary.
"""

from __future__ import annotations

import html
import json
import math
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agentsim._tokens import estimate_tokens
from agentsim.instruments import instance_of
from agentsim.llm._interview import WORD, answer, opinion_asked, opinion_of, profile_of, uniform
from agentsim.llm.base import (
    ANSWER_FORMAT,
    ChatModel,
    Completion,
    Message,
    ToolCall,
    ToolSchema,
    Usage,
)
from agentsim.llm.prompt_blocks import BLOCKS

# The blocks the model reads.
_OBSERVATION = BLOCKS["observation"]
_QUESTION = BLOCKS["question"]
_SUGGESTING = (BLOCKS["skill_hooks"], BLOCKS["feedback"])  # in this order
_AVAILABLE = BLOCKS["available_skills"]
_MORE = BLOCKS["more_skills"]
_ACTIVE = BLOCKS["active_skills"]
_SKILL_CONTENT = BLOCKS["skill_content"]
_PERSONA = BLOCKS["persona"]

__all__ = ["ScriptedModel", "suggested_calls"]

_Choice = tuple[str, dict[str, Any]]

_SUGGESTED = "SUGGESTED:"
# The catalog's note on skills it left out (in the agent's part of the prompt, or after
# the shared catalog).
_LEFT_OUT = re.compile(r"<!-- [0-9]+ more skills? not listed")
_CATALOG_ENTRY = re.compile(
    r'<skill name="([^"]*)" id="([^"]*)"( status="deprecated")?( active="true")?>([^<]*)</skill>'
)


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


_STOP = _wordset(
    "the and for with use this that when who what your you are from into about their they "
    "them its not but can has have been will would should could any all each per via use "
    "uses using used skill skills agent agents step steps call calls tool tools one two "
    "also only other more most some such than then there these those over under out"
)


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    # Light suffix stripping so that "cafes" meets "cafe" and "running" meets "runner".
    if word.endswith("s") and not word.endswith("ss") and len(word) >= 4:
        word = word[:-1]
    for suffix in ("ing", "er", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if word[-1] == word[-2]:
                word = word[:-1]  # runn -> run
            break
    return word


@lru_cache(maxsize=8192)
def _tokens(text: str) -> frozenset[str]:
    """Content words of ``text``, cached: catalog descriptions are shared by all agents."""
    return frozenset(
        _stem(w)
        for w in WORD.findall(text.lower())
        if len(w) >= 3 and w not in _STOP and not w.isdigit()
    )


@lru_cache(maxsize=8192)
def _skill_words(name: str, description: str) -> frozenset[str]:
    return _tokens(description) | _tokens(name.replace("-", " "))


def _content(message: Message) -> str:
    """The text of a message whose content is not a plain string."""
    content = message.get("content")
    if isinstance(content, list):  # OpenAI multi-part content
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _json_object(text: str) -> dict[str, Any] | None:
    """``text`` parsed as a JSON object, or ``None``."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _suggestions(text: str) -> Iterator[_Choice]:
    """The ``SUGGESTED: <tool> <json object>`` lines of ``text``, in order."""
    pos = text.find(_SUGGESTED)
    while pos >= 0:
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        if not text[text.rfind("\n", 0, pos) + 1 : pos].strip():  # only at a line's start
            name, _, rest = text[pos + len(_SUGGESTED) : end].strip().partition(" ")
            args = _json_object(rest.strip())
            if args is not None:
                yield name, args
        pos = text.find(_SUGGESTED, end)


def suggested_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls a skill's output proposes: its ``SUGGESTED: <tool> <json object>`` lines,
    as (tool name, arguments), in order."""
    return list(_suggestions(text))


def _result_suggestions(content: str) -> Iterator[_Choice]:
    """Suggestions in a tool result, also inside the strings of a JSON-wrapped result."""
    try:
        wrapped = json.loads(content) if content.lstrip()[:1] in ("{", "[") else None
    except ValueError:
        wrapped = None  # not JSON after all: scan it as text
    if wrapped is None:
        yield from _suggestions(content)
        return
    stack = [wrapped]
    while stack:
        obj = stack.pop(0)
        if isinstance(obj, str):
            yield from _suggestions(obj)
        elif isinstance(obj, dict | list):
            stack[:0] = obj.values() if isinstance(obj, dict) else obj


def _is_error(content: str) -> bool:
    head = content.lstrip()[:6].lower()
    return head == "error:" or '"ok": false' in content or '"ok":false' in content


_Line = tuple[str, str, dict[str, Any] | None]  # tool, JSON template, args when static


@lru_cache(maxsize=4096)
def _playbook(body: str) -> tuple[_Line, ...]:
    """The runnable ```` ```playbook ```` lines of a skill body (cached: bodies are shared)."""
    i = body.find("```playbook")
    i = body.find("\n", i) if i >= 0 else -1
    j = body.find("```", i) if i >= 0 else -1
    if j < 0:
        return ()
    out: list[_Line] = []
    for raw in body[i + 1 : j].splitlines():
        name, _, template = raw.strip().partition(" ")
        # A template is checked with a stand-in result; lines that are not JSON never run.
        args = _instantiate(template, "x") if template and not name.startswith("#") else None
        if args is not None:
            out.append((name, template, None if "{{result}}" in template else args))
    return tuple(out)


def _instantiate(template: str, previous: str) -> dict[str, Any] | None:
    # {{result}} sits inside a JSON string, so the text goes in JSON-string-escaped.
    if "{{result}}" not in template:
        return _json_object(template)
    return _json_object(template.replace("{{result}}", json.dumps(previous)[1:-1]))


@dataclass(frozen=True, slots=True)
class _Call:
    """One tool call of the step."""

    name: str
    args: dict[str, Any]
    result: str
    error: bool
    in_turn: bool  # made after the last user message (not in an earlier turn of the step)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Skill:
    name: str
    description: str
    active: bool = False
    deprecated: bool = False


@lru_cache(maxsize=1024)
def _catalog(block: str) -> tuple[_Skill, ...]:
    """Entries of an ``<available_skills>`` block (cached: agents share catalogs)."""
    return tuple(
        _Skill(
            name=html.unescape(m[1]),
            description=html.unescape(m[5]),
            active=bool(m[4]),
            deprecated=bool(m[3]),
        )
        for m in _CATALOG_ENTRY.finditer(block)
    )


class _Step:
    """What the scripted model knows about the current step, rebuilt from the messages."""

    __slots__ = (
        "calls",
        "chars",
        "last_user",
        "observation",
        "offered",
        "position",
        "sources",
        "system",
    )

    def __init__(self, messages: Sequence[Message], offered: frozenset[str]) -> None:
        self.offered = offered
        self.chars = 0  # of the whole prompt, tool-call arguments included
        self.system = self.last_user = self.observation = ""
        self.sources: list[tuple[str, bool]] = []  # (text, is a tool result), in order seen
        calls: list[list[Any]] = []  # [name, args, raw arguments, result, in_turn]
        by_id: dict[str, int] = {}
        seen_user = False
        for m in messages:
            role = m.get("role")
            content = m.get("content")
            if not isinstance(content, str):
                content = _content(m)
            self.chars += len(content)
            if role == "assistant":
                for tc in m.get("tool_calls") or ():
                    cid, name, raw = _tool_call_parts(tc)
                    args = _json_object(raw) if raw else {}
                    by_id[cid] = len(calls)
                    calls.append([name, {"_raw": raw} if args is None else args, raw, "", 1])
                    self.chars += len(raw)
            elif role == "tool":
                text = content
                i = by_id.get(str(m.get("tool_call_id", "")))
                if i is not None:
                    calls[i][3] = text
                if _SUGGESTED in text:
                    self.sources.append((text, True))
            elif role == "user":
                # The agent's own part opens the first user message: it is context, like
                # the system prompt, and the turn follows it.
                mine, text = BLOCKS.split_user(content)
                if mine and not seen_user:
                    self.system += "\n" + mine
                self.last_user = text
                seen_user = True
                for c in calls:
                    c[4] = 0
                obs, blocks = _user_parts(text)
                self.observation = self.observation if obs is None else obs
                self.sources.extend(blocks)
            elif role == "system" and not self.system:
                self.system = content
        self.calls = [_Call(n, a, r, _is_error(r), bool(t)) for n, a, _, r, t in calls]
        obs = "\n" + self.observation
        i = obs.find("\nposition:")
        j = obs.find("\n", i + 1)
        self.position = "" if i < 0 else obs[i + 10 : j if j > 0 else None].strip()


def _user_parts(text: str) -> tuple[str | None, list[tuple[str, bool]]]:
    """(observation, suggestion sources) of a user message."""
    blocks = []
    for block in _SUGGESTING:
        found = block.find(text)
        if found:
            blocks.append((html.unescape(found), False))
    return _OBSERVATION.find(text), blocks


def _tool_call_parts(tc: Any) -> tuple[str, str, str]:
    if isinstance(tc, ToolCall):
        return tc.id, tc.name, tc.arguments
    fn = tc.get("function") or {}
    return str(tc.get("id", "")), str(fn.get("name", "")), str(fn.get("arguments") or "")


def _offered(tools: Sequence[ToolSchema]) -> frozenset[str]:
    names = []
    for t in tools:
        name = t["function"].get("name") if "function" in t else t.get("name")
        if isinstance(name, str):
            names.append(name)
    return frozenset(names)


class ScriptedModel(ChatModel):
    """A deterministic offline ``ChatModel`` that follows the agentsim prompt conventions.

    ``max_suggestions`` bounds the tool calls of one turn sequence (a post_step retry with
    ``<feedback>`` starts a new one); the model then finishes.
    """

    def __init__(
        self, *, activation_rate: float = 0.35, max_suggestions: int = 6, name: str = "scripted"
    ) -> None:
        if not 0.0 <= activation_rate <= 1.0:
            raise ValueError(
                f"ScriptedModel activation_rate={activation_rate!r} is outside [0, 1]; "
                "pass a probability such as 0.35"
            )
        if max_suggestions < 1:
            raise ValueError(
                f"ScriptedModel max_suggestions={max_suggestions!r} must be >= 1; it is the "
                "number of tool calls a step may make before finishing"
            )
        self.activation_rate = activation_rate
        self.max_suggestions = max_suggestions
        self.name = name

    def __repr__(self) -> str:
        return (
            f"ScriptedModel(activation_rate={self.activation_rate}, "
            f"max_suggestions={self.max_suggestions}, name={self.name!r})"
        )

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        seed: int = 0,
    ) -> Completion:
        form = ANSWER_FORMAT.get()
        if form is not None:
            return self._typed(messages, form, seed)
        step = _Step(messages, _offered(tools))
        name, args = self._choose(step, seed)
        # estimate_tokens' rule, from the prompt's length: no need to join the whole prompt.
        prompt_tokens = (step.chars + 3) // 4
        if name not in step.offered:
            # Not even finish is offered: answer in plain text, as a chat model would.
            text = str(args.get("answer") or args.get("action") or "")
            usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=estimate_tokens(text))
            return Completion(content=text, usage=usage, finish_reason="stop", model=self.name)
        arguments = json.dumps(args)
        call = ToolCall(id=f"call_{len(step.calls)}", name=name, arguments=arguments)
        return Completion(
            tool_calls=(call,),
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=estimate_tokens(arguments)),
            finish_reason="tool_calls",
            model=self.name,
        )

    def _typed(self, messages: Sequence[Message], form: Mapping[str, Any], seed: int) -> Completion:
        """A typed survey answer: a valid value of its schema, drawn from the step's seed
        and the question (the same agent, tick and question always answer the same)."""
        asked = (
            _QUESTION.find(str(m.get("content") or ""))
            for m in reversed(messages)
            if m.get("role") == "user"
        )
        question = next((q for q in asked if q is not None), "")
        value = _opinion_on_scale(messages, form["schema"], question)
        if value is None:
            value = instance_of(form["schema"], random.Random(f"{seed}:{question}"))
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        chars = sum(len(str(m.get("content") or "")) for m in messages)
        usage = Usage(prompt_tokens=(chars + 3) // 4, completion_tokens=estimate_tokens(text))
        return Completion(content=text, usage=usage, finish_reason="stop", model=self.name)

    def _choose(self, step: _Step, seed: int) -> _Choice:
        question = _QUESTION.find(step.last_user)
        if question is not None:
            return "finish", {"action": "answered", "answer": answer(step, question, seed)}
        if sum(c.in_turn for c in step.calls) < self.max_suggestions:
            choice = _suggested(step) or _playbook_line(step) or self._activation(step, seed)
            if choice is not None:
                return choice
        return "finish", {"action": _summary(step)}

    def _activation(self, step: _Step, seed: int) -> _Choice | None:
        if "activate_skill" not in step.offered or not self.activation_rate:
            return None
        if any(c.name == "activate_skill" for c in step.calls):
            return None  # one activation per step, and a failed one is not retried
        if uniform(seed, step.last_user) >= self.activation_rate:
            return None
        skills = _catalog(_AVAILABLE.find(step.system) or "")
        skills += _catalog(_MORE.find(step.system) or "")
        active = {s.name for s in skills if s.active} | {n for n, _ in _skill_contents(step.system)}
        listed = _ACTIVE.find(step.system)
        if listed:
            active.update(html.unescape(n.strip()) for n in listed.split(","))
        candidates = [s for s in skills if s.name not in active]
        searched = [c for c in step.calls if c.name == "search_skills"]
        for c in searched:
            candidates.extend(s for s in _search_hits(c.result) if s.name not in active)
        # A deprecated skill is kept for old experiments: a sensible model never picks it.
        candidates = [s for s in candidates if not s.deprecated]
        who, query = _agent_words(step)
        situation = _tokens(step.observation)
        best: tuple[int, str] | None = None
        for s in candidates:
            words = _skill_words(s.name, s.description)
            # Who the agent is counts double: a passing observation is a weaker hint.
            score = 2 * len(words & who) + len(words & situation)
            if score and (best is None or (-score, s.name) < (-best[0], best[1])):
                best = (score, s.name)
        if best is not None:
            return "activate_skill", {"name": best[1]}
        left_out = _LEFT_OUT.search(step.system) is not None
        if left_out and not searched and "search_skills" in step.offered and query:
            return "search_skills", {"query": query}
        return None


def _is_move(name: str, args: Mapping[str, Any]) -> bool:
    return (
        name == "ask_env"
        and args.get("module") == "city"
        and args.get("action") == "move_to"
        and isinstance(args.get("args"), Mapping)
    )


def _already_there(name: str, args: Mapping[str, Any], position: str) -> bool:
    """A move to where the agent is, or to where it is already heading (a no-op call)."""
    if not position or not _is_move(name, args):
        return False
    place = args["args"].get("place")
    return place == position or position == f"in transit to {place}"


def _suggested(step: _Step) -> _Choice | None:
    done = [(c.name, c.args) for c in step.calls]  # dict equality ignores key order
    for text, is_result in step.sources:
        for name, args in _result_suggestions(text) if is_result else _suggestions(text):
            fresh = name in step.offered and (name, args) not in done
            if fresh and not _already_there(name, args, step.position):
                return name, args
    return None


def _playbook_line(step: _Step) -> _Choice | None:
    for body in _active_bodies(step):
        lines = _playbook(body)
        nxt = _next_line(step, lines) if lines else None
        if nxt is not None:
            return nxt
    return None


def _next_line(step: _Step, lines: tuple[_Line, ...]) -> _Choice | None:
    """Replay the step's calls against the playbook to find its next line (stateless)."""
    p, previous = 0, ""
    for call in step.calls:
        while p < len(lines) and not _may_run(step, lines[p]):
            p += 1
        if p == len(lines):
            return None
        name, template, static = lines[p]
        if call.name == name and call.args == (static or _instantiate(template, previous)):
            if call.error:
                return None  # a failed line ends the playbook: later lines need its result
            p += 1
        previous = call.result
    for name, template, static in lines[p:]:
        args = static or _instantiate(template, previous)
        if args is not None and _may_run(step, (name, template, args)):
            return name, args
    return None


def _may_run(step: _Step, line: _Line) -> bool:
    name, _, args = line
    return name in step.offered and not (args and _already_there(name, args, step.position))


def _skill_contents(system: str) -> Iterator[tuple[str, str]]:
    """(name, body) of each ``<skill_content name="...">`` block of the system prompt."""
    for attrs, body in _SKILL_CONTENT.each(system):
        yield attrs.get("name", ""), body


def _active_bodies(step: _Step) -> Iterator[str]:
    """Bodies of the active skills: the system prompt's, then any an activation returned."""
    for _, body in _skill_contents(step.system):
        yield body
    for c in step.calls:
        if c.name == "activate_skill" and not c.error and "```playbook" in c.result:
            yield c.result


def _search_hits(result: str) -> list[_Skill]:
    """Inactive skills in a ``search_skills`` result (a JSON list of name/description)."""
    try:
        hits = json.loads(result)
    except ValueError:
        return []
    if isinstance(hits, dict):
        hits = hits.get("results") or hits.get("skills")
    return [
        _Skill(
            name=h["name"],
            description=str(h.get("description", "")),
            deprecated=h.get("deprecated") is True,
        )
        for h in (hits if isinstance(hits, list) else ())
        if isinstance(h, dict) and isinstance(h.get("name"), str) and not h.get("active")
    ]


def _agent_words(step: _Step) -> tuple[frozenset[str], str]:
    """(content words of who the agent is, a search query from interests and occupation)."""
    profile = profile_of(step.system)
    interests = profile.get("interests")
    parts = [str(x) for x in interests] if isinstance(interests, list) else []
    parts += [str(profile[k]) for k in ("occupation", "role") if isinstance(profile.get(k), str)]
    persona = _PERSONA.find(step.system) or ""
    return _tokens(" ".join([persona, *parts])), " ".join(parts)


# -- finish summaries ------------------------------------------------------------------------


def _summary(step: _Step) -> str:
    """A one-line account of the step, built from the calls it made."""
    parts: list[str] = []
    moved = False
    for c in step.calls:
        phrase = _phrase(c)
        if phrase and phrase not in parts:
            parts.append(phrase)
        moved = moved or (_is_move(c.name, c.args) and (not c.error or "already at" in c.result))
    if not moved and step.position.startswith("in transit to "):
        parts.append(f"kept travelling to {step.position[14:]}")
    elif not moved and step.position:
        parts.append(f"stayed at {step.position}")
    text = ", ".join(parts) or "did nothing in particular"
    return text if len(text) <= 200 else text[:197] + "..."


def _phrase(c: _Call) -> str:
    a = c.args
    if "_raw" in a:
        return ""  # unreadable arguments: nothing happened worth telling
    if _is_move(c.name, a):
        place = a["args"].get("place", "?")
        if c.error:
            # An environment that refuses a move because the agent is there already.
            return f"stayed at {place}" if "already at" in c.result else f"could not reach {place}"
        return f"moved to {place}"
    if c.name == "ask_env":
        module, action = str(a.get("module", "?")), str(a.get("action", "?"))
        inner = a.get("args")
        topic = inner.get("topic") if isinstance(inner, Mapping) else None
        if action == "post":
            what = f"posted about {topic}" if topic else f"posted on {module}"
        elif action.startswith(("get", "list", "read", "feed", "look", "query", "check")):
            what = f"checked {module} {action.replace('_', ' ')}"
        else:
            what = f"did {action.replace('_', ' ')} in {module}"
        return f"failed: {what}" if c.error else what
    name = str(a.get("name", "?"))
    if c.name == "execute_skill_script":
        argv = a.get("args")
        first = argv[0] if isinstance(argv, list) and argv else ""
        what = f"{name} {first}" if isinstance(first, str) and first.isidentifier() else name
        return f"failed: {what}" if c.error else f"used {what}"
    if c.name == "activate_skill":
        return f"could not activate {name}" if c.error else f"activated {name}"
    if c.name == "deactivate_skill":
        return f"dropped {name}"
    return ""  # reads and searches are not worth a mention


def _opinion_on_scale(
    messages: Sequence[Message], schema: Mapping[str, Any], question: str
) -> int | float | None:
    """An opinion question asked on a bounded scale (likert, or a number with both bounds)
    of an agent whose prompt shows its opinion (-1..1): that opinion on the scale, as the
    free-text answer states it; None otherwise (the value is drawn from the seed)."""
    inner = schema.get("properties", {}).get("answer") if isinstance(schema, Mapping) else None
    if not isinstance(inner, Mapping) or not opinion_asked(question):
        return None
    low, high = inner.get("minimum"), inner.get("maximum")
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return None
    value = opinion_of(_Step(messages, frozenset()))
    if value is None:
        return None
    share = (min(max(value, -1.0), 1.0) + 1.0) / 2.0
    if inner.get("type") == "integer":
        return min(max(round(low + share * (high - low)), math.ceil(low)), math.floor(high))
    return round(low + share * (high - low), 2)
