"""The offline ``scripted`` model: deterministic, free, and good enough to drive examples.

It plays the part of a diligent but unimaginative LLM that follows the shared prompt
conventions (docs/conventions: ``SUGGESTED:`` lines and ``playbook`` blocks). It keeps no
state between calls: every decision is rebuilt from the messages, so the same messages and
seed always give the same completion, a run can be replayed, and one instance can be shared
by every agent of a process.

Policy, one tool call per completion: answer a ``<question>`` (read-only mode); else follow
the first pending suggestion (hooks, feedback, then tool results, in order); else run the
next playbook line of an active skill; else, with probability ``activation_rate``, activate
the catalog skill that best fits the agent; else ``finish`` with a summary of the step.
"""

from __future__ import annotations

import hashlib
import html
import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agentsim.llm.base import Completion, Message, ToolCall, ToolSchema, Usage

__all__ = ["ScriptedModel"]

_SUGGESTED = "SUGGESTED:"
_WORD = re.compile(r"[a-z0-9]+")
_PLACE = re.compile(r"\b[a-z]+(?:[_-][a-z]+)*-\d+\b")
_CATALOG_ENTRY = re.compile(r'<skill name="([^"]*)" id="([^"]*)"( active="true")?>([^<]*)</skill>')


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


_STOP = _wordset(
    "the and for with use this that when who what your you are from into about their they "
    "them its not but can has have been will would should could any all each per via use "
    "uses using used skill skills agent agents step steps call calls tool tools one two "
    "also only other more most some such than then there these those over under out"
)
# Words that send a question to one of the interview answers.
_OPINION_WORDS = _wordset(
    "opinion think view views stance support oppose agree disagree believe policy position "
    "favour favor against"
)
_DAY_WORDS = _wordset(
    "day morning afternoon evening night today yesterday week went go going where did "
    "visited commute trip"
)
_WORK_WORDS = _wordset("work job occupation career profession colleagues office")
_LIKE_WORDS = _wordset("like likes enjoy hobby hobbies interests interested free fun")


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
    """Content words of ``text`` (lower-cased, stemmed, no stop words); shared by all agents."""
    return frozenset(
        _stem(w)
        for w in _WORD.findall(text.lower())
        if len(w) >= 3 and w not in _STOP and not w.isdigit()
    )


def _section(text: str, tag: str, start: int = 0) -> str | None:
    """The content of the first ``<tag>...</tag>`` in ``text`` (``None`` when absent)."""
    open_tag = f"<{tag}>"
    i = text.find(open_tag, start)
    if i < 0:
        return None
    i += len(open_tag)
    j = text.find(f"</{tag}>", i)
    return text[i:] if j < 0 else text[i:j]


def _content(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI multi-part content
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _key(name: str, args: Any) -> str:
    return name + " " + json.dumps(args, sort_keys=True, separators=(",", ":"))


def _parse_call_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """``<tool_name> <json object>`` -> (name, args), or ``None`` if it is not one."""
    name, _, rest = line.strip().partition(" ")
    if not name or not rest.strip():
        return None
    try:
        args = json.loads(rest)
    except ValueError:
        return None
    return (name, args) if isinstance(args, dict) else None


def _suggestions(text: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ``SUGGESTED: <tool> <json>`` lines of ``text``, in order (lines start with it)."""
    pos = text.find(_SUGGESTED)
    while pos >= 0:
        line_start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        if not text[line_start:pos].strip():
            parsed = _parse_call_line(text[pos + len(_SUGGESTED) : end])
            if parsed is not None:
                yield parsed
        pos = text.find(_SUGGESTED, end)


def _result_suggestions(content: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Suggestions in a tool result, also inside a JSON-wrapped result's string fields."""
    if _SUGGESTED not in content:
        return
    head = content.lstrip()[:1]
    if head in ("{", "["):
        try:
            obj = json.loads(content)
        except ValueError:
            obj = None
        if obj is not None:
            for s in _strings(obj):
                yield from _suggestions(s)
            return
    yield from _suggestions(content)


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        if _SUGGESTED in obj:
            yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def _is_error(content: str) -> bool:
    return (
        content.lstrip().lower().startswith("error:")
        or '"ok": false' in content
        or '"ok":false' in content
    )


@lru_cache(maxsize=4096)
def _playbook(body: str) -> tuple[tuple[str, str], ...]:
    """The ```` ```playbook ```` lines of a skill body as (tool, raw JSON template)."""
    i = body.find("```playbook")
    if i < 0:
        return ()
    i = body.find("\n", i)
    j = body.find("```", i) if i >= 0 else -1
    if i < 0 or j < 0:
        return ()
    lines = []
    for raw in body[i + 1 : j].splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        if rest.strip():
            lines.append((name, rest.strip()))
    return tuple(lines)


def _instantiate(template: str, previous: str) -> dict[str, Any] | None:
    text = template
    if "{{result}}" in text:
        text = text.replace("{{result}}", json.dumps(previous, ensure_ascii=False)[1:-1])
    try:
        args = json.loads(text)
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Call:
    name: str
    args: dict[str, Any]
    key: str
    result: str
    error: bool
    in_turn: bool  # made after the last user message (the current ReAct turn sequence)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Skill:
    name: str
    description: str
    active: bool


@lru_cache(maxsize=1024)
def _catalog(block: str) -> tuple[tuple[_Skill, ...], bool]:
    """Entries of an ``<available_skills>`` block and whether some were left out."""
    skills = tuple(
        _Skill(name=html.unescape(m[1]), description=html.unescape(m[4]), active=bool(m[3]))
        for m in _CATALOG_ENTRY.finditer(block)
    )
    return skills, "not listed" in block


class _Step:
    """What the scripted model knows about the current step, rebuilt from the messages."""

    __slots__ = (
        "calls",
        "last_user",
        "offered",
        "sources",
        "system",
        "tool_call_count",
        "user_texts",
    )

    def __init__(self, messages: Sequence[Message], offered: frozenset[str]) -> None:
        self.offered = offered
        self.system = ""
        self.last_user = ""
        self.user_texts: list[str] = []
        # Texts that may hold SUGGESTED lines, in the order the model saw them.
        self.sources: list[tuple[str, bool]] = []  # (text, is_tool_result)
        self.calls: list[_Call] = []
        self.tool_call_count = 0
        pending: dict[str, tuple[str, dict[str, Any], str]] = {}
        results: dict[str, str] = {}
        order: list[str] = []
        in_turn_ids: set[str] = set()
        for m in messages:
            role = m.get("role")
            if role == "system":
                if not self.system:
                    self.system = _content(m)
            elif role == "user":
                text = _content(m)
                self.last_user = text
                self.user_texts.append(text)
                in_turn_ids.clear()
                for tag in ("skill_hooks", "feedback"):
                    block = _section(text, tag)
                    if block:
                        self.sources.append((html.unescape(block), False))
            elif role == "assistant":
                for tc in m.get("tool_calls") or ():
                    cid, name, raw = _tool_call_parts(tc)
                    self.tool_call_count += 1
                    try:
                        args = json.loads(raw) if raw else {}
                    except ValueError:
                        args = {"_raw": raw}
                    if not isinstance(args, dict):
                        args = {"_raw": raw}
                    pending[cid] = (name, args, raw)
                    order.append(cid)
                    in_turn_ids.add(cid)
            elif role == "tool":
                text = _content(m)
                results[str(m.get("tool_call_id", ""))] = text
                self.sources.append((text, True))
        for cid in order:
            name, args, _ = pending[cid]
            result = results.get(cid, "")
            self.calls.append(
                _Call(
                    name=name,
                    args=args,
                    key=_key(name, args),
                    result=result,
                    error=_is_error(result),
                    in_turn=cid in in_turn_ids,
                )
            )

    def observation(self) -> str:
        for text in reversed(self.user_texts):
            obs = _section(text, "observation")
            if obs is not None:
                return obs
        return ""

    def position(self) -> str:
        obs = self.observation()
        i = obs.find("position:")
        if i < 0:
            return ""
        end = obs.find("\n", i)
        return obs[i + len("position:") : end if end >= 0 else len(obs)].strip()


def _tool_call_parts(tc: Any) -> tuple[str, str, str]:
    if isinstance(tc, ToolCall):
        return tc.id, tc.name, tc.arguments
    fn = tc.get("function") or {}
    return str(tc.get("id", "")), str(fn.get("name", "")), str(fn.get("arguments") or "")


def _offered(tools: Sequence[ToolSchema]) -> frozenset[str]:
    names = []
    for t in tools:
        fn = t.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else t.get("name")
        if isinstance(name, str):
            names.append(name)
    return frozenset(names)


def _estimate(text: str) -> int:
    return (len(text) + 3) // 4


class ScriptedModel:
    """A deterministic offline ``ChatModel`` that follows the agentsim prompt conventions."""

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
                f"ScriptedModel max_suggestions={max_suggestions!r} must be >= 1; "
                "it bounds the tool calls of one step before finishing"
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
        return self.decide(messages, tools, seed=seed)

    def decide(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        """The synchronous core of :meth:`complete` (no I/O, so no reason to await)."""
        step = _Step(messages, _offered(tools))
        rng = _LazyRng(seed, step.last_user)
        name, args = self._choose(step, rng)
        prompt = sum(len(_content(m)) for m in messages) + sum(len(c.key) for c in step.calls)
        usage_prompt = (prompt + 3) // 4
        if name not in step.offered:
            # No tool to call (not even finish): answer in plain text, as a model would.
            text = str(args.get("answer") or args.get("action") or "")
            return Completion(
                content=text,
                usage=Usage(prompt_tokens=usage_prompt, completion_tokens=_estimate(text)),
                finish_reason="stop",
                model=self.name,
            )
        arguments = json.dumps(args, ensure_ascii=False)
        call = ToolCall(id=f"call_{step.tool_call_count}", name=name, arguments=arguments)
        return Completion(
            content=None,
            tool_calls=(call,),
            usage=Usage(prompt_tokens=usage_prompt, completion_tokens=_estimate(arguments)),
            finish_reason="tool_calls",
            model=self.name,
        )

    # -- policy ----------------------------------------------------------------------------

    def _choose(self, step: _Step, rng: _LazyRng) -> tuple[str, dict[str, Any]]:
        question = _section(step.last_user, "question")
        if question is not None:
            return "finish", {"action": "answered", "answer": _answer(step, question, rng)}
        if sum(1 for c in step.calls if c.in_turn) >= self.max_suggestions:
            return "finish", {"action": _summary(step)}
        for choice in (
            self._suggested(step),
            self._playbook_line(step),
            self._activation(step, rng),
        ):
            if choice is not None:
                return choice
        return "finish", {"action": _summary(step)}

    def _suggested(self, step: _Step) -> tuple[str, dict[str, Any]] | None:
        done = {c.key for c in step.calls}
        position = step.position()
        for text, is_result in step.sources:
            found = _result_suggestions(text) if is_result else _suggestions(text)
            for name, args in found:
                if name not in step.offered or _key(name, args) in done:
                    continue
                if _already_there(name, args, position):
                    continue
                return name, args
        return None

    def _playbook_line(self, step: _Step) -> tuple[str, dict[str, Any]] | None:
        for body in _active_bodies(step):
            lines = _playbook(body)
            if not lines:
                continue
            nxt = self._next_line(step, lines)
            if nxt is not None:
                return nxt
        return None

    def _next_line(
        self, step: _Step, lines: tuple[tuple[str, str], ...]
    ) -> tuple[str, dict[str, Any]] | None:
        """Replay the step's calls against the playbook to find the next line to run."""
        p = 0
        previous = ""
        for call in step.calls:
            expected = self._runnable(step, lines, p, previous)
            if expected is None:
                return None
            p, name, args = expected
            if call.key == _key(name, args):
                if call.error:
                    return None  # a failed line ends the playbook: later lines need its result
                p += 1
            previous = call.result
        expected = self._runnable(step, lines, p, previous)
        return None if expected is None else (expected[1], expected[2])

    @staticmethod
    def _runnable(
        step: _Step, lines: tuple[tuple[str, str], ...], p: int, previous: str
    ) -> tuple[int, str, dict[str, Any]] | None:
        while p < len(lines):
            name, template = lines[p]
            args = _instantiate(template, previous) if name in step.offered else None
            if args is not None and not _already_there(name, args, step.position()):
                return p, name, args
            p += 1
        return None

    def _activation(self, step: _Step, rng: _LazyRng) -> tuple[str, dict[str, Any]] | None:
        if "activate_skill" not in step.offered or not self.activation_rate:
            return None
        if any(c.name == "activate_skill" for c in step.calls):
            return None
        if rng.get().random() >= self.activation_rate:
            return None
        block = _section(step.system, "available_skills") or ""
        skills, partial = _catalog(block)
        active = {s.name for s in skills if s.active} | set(_content_names(step.system))
        candidates = [s for s in skills if s.name not in active]
        searched = [c for c in step.calls if c.name == "search_skills"]
        for c in searched:
            candidates.extend(s for s in _search_hits(c.result) if s.name not in active)
        want, situation = _agent_words(step)
        best: tuple[int, str] | None = None
        for s in candidates:
            words = _tokens(s.description) | _tokens(s.name.replace("-", " "))
            score = 2 * len(words & want) + len(words & situation)
            if score and (best is None or (-score, s.name) < (-best[0], best[1])):
                best = (score, s.name)
        if best is not None:
            return "activate_skill", {"name": best[1]}
        if partial and not searched and "search_skills" in step.offered and want:
            return "search_skills", {"query": " ".join(sorted(want)[:6])}
        return None


class _LazyRng:
    """``random.Random(seed ^ sha256(last user message))``, built only when needed."""

    __slots__ = ("_rng", "_seed", "_text")

    def __init__(self, seed: int, text: str) -> None:
        self._seed = seed
        self._text = text
        self._rng: random.Random | None = None

    def get(self) -> random.Random:
        if self._rng is None:
            digest = hashlib.sha256(self._text.encode("utf-8", "replace")).digest()
            self._rng = random.Random(self._seed ^ int.from_bytes(digest[:8], "big"))
        return self._rng


def _is_move(name: str, args: Mapping[str, Any]) -> bool:
    inner = args.get("args")
    return (
        name == "ask_env"
        and args.get("module") == "city"
        and args.get("action") == "move_to"
        and isinstance(inner, Mapping)
    )


def _already_there(name: str, args: Mapping[str, Any], position: str) -> bool:
    return bool(position) and _is_move(name, args) and args["args"].get("place") == position


def _content_names(system: str) -> Iterator[str]:
    marker = '<skill_content name="'
    i = system.find(marker)
    while i >= 0:
        j = system.find('"', i + len(marker))
        if j < 0:
            return
        yield html.unescape(system[i + len(marker) : j])
        i = system.find(marker, j)


def _active_bodies(step: _Step) -> Iterator[str]:
    """Bodies of the active skills: the system prompt's, then any returned by activation."""
    marker = '<skill_content name="'
    i = step.system.find(marker)
    while i >= 0:
        start = step.system.find(">", i) + 1
        end = step.system.find("</skill_content>", start)
        end = len(step.system) if end < 0 else end
        yield step.system[start:end]
        i = step.system.find(marker, end)
    for c in step.calls:
        if c.name == "activate_skill" and not c.error and "```playbook" in c.result:
            yield c.result


def _search_hits(result: str) -> list[_Skill]:
    try:
        hits = json.loads(result)
    except ValueError:
        return []
    if isinstance(hits, dict):
        hits = hits.get("results") or hits.get("skills") or []
    out = []
    for h in hits if isinstance(hits, list) else ():
        if isinstance(h, dict) and isinstance(h.get("name"), str):
            out.append(
                _Skill(
                    name=h["name"],
                    description=str(h.get("description", "")),
                    active=bool(h.get("active")),
                )
            )
    return [s for s in out if not s.active]


def _profile(step: _Step) -> dict[str, Any]:
    raw = _section(step.system, "profile")
    if not raw:
        return {}
    try:
        obj = json.loads(raw)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _agent_words(step: _Step) -> tuple[frozenset[str], frozenset[str]]:
    """(words of who the agent is, words of the agent's current situation)."""
    profile = _profile(step)
    parts = [_section(step.system, "persona") or ""]
    interests = profile.get("interests")
    if isinstance(interests, list):
        parts.extend(str(x) for x in interests)
    elif isinstance(interests, str):
        parts.append(interests)
    for k in ("occupation", "role", "group"):
        if isinstance(profile.get(k), str):
            parts.append(profile[k])
    return _tokens(" ".join(parts)), _tokens(step.observation())


# -- finish summaries ------------------------------------------------------------------------


def _summary(step: _Step) -> str:
    """A one-line account of the step, built from the calls it made."""
    parts: list[str] = []
    moved = False
    for c in step.calls:
        phrase = _phrase(c)
        if phrase and phrase not in parts:
            parts.append(phrase)
        moved = moved or (_is_move(c.name, c.args) and not c.error)
    if not moved:
        position = step.position()
        if position.startswith("in transit to "):
            parts.append(f"kept travelling to {position[len('in transit to ') :]}")
        elif position:
            parts.append(f"stayed at {position}")
    text = ", ".join(parts) or "did nothing in particular"
    return text if len(text) <= 200 else text[:197] + "..."


def _phrase(c: _Call) -> str:
    a = c.args
    if _is_move(c.name, a):
        place = a["args"].get("place", "?")
        return f"could not reach {place}" if c.error else f"moved to {place}"
    if c.name == "ask_env":
        module, action = str(a.get("module", "?")), str(a.get("action", "?"))
        inner = a.get("args") if isinstance(a.get("args"), Mapping) else {}
        if action == "post":
            topic = inner.get("topic") if isinstance(inner, Mapping) else None
            what = f"posted about {topic}" if topic else f"posted on {module}"
        elif action.startswith(("get", "list", "read", "feed", "look", "query", "check")):
            what = f"checked {module} {action.replace('_', ' ')}"
        else:
            what = f"did {action.replace('_', ' ')} in {module}"
        return f"tried to {what} (failed)" if c.error else what
    name = str(a.get("name", "?"))
    if c.name == "execute_skill_script":
        argv = a.get("args")
        first = argv[0] if isinstance(argv, list) and argv else ""
        verb = f"{name} {first}" if isinstance(first, str) and first.isidentifier() else name
        return f"tried {verb} (failed)" if c.error else f"used {verb}"
    if c.name == "activate_skill":
        return f"could not activate {name}" if c.error else f"activated {name}"
    if c.name == "deactivate_skill":
        return f"dropped {name}"
    return ""  # reads and searches are not worth a mention


# -- interview answers -----------------------------------------------------------------------


def _answer(step: _Step, question: str, rng: _LazyRng) -> str:
    words = set(_WORD.findall(question.lower()))
    profile = _profile(step)
    if words & _OPINION_WORDS or "feel about" in question.lower():
        return _opinion_answer(step, profile, question)
    if words & _DAY_WORDS:
        return _day_answer(step, question)
    if words & _WORK_WORDS and isinstance(profile.get("occupation"), str):
        where = profile.get("work")
        at = f" at {where}" if isinstance(where, str) else ""
        return f"I work as a {profile['occupation']}{at}."
    if words & _LIKE_WORDS and isinstance(profile.get("interests"), list) and profile["interests"]:
        return f"I enjoy {_join([str(x) for x in profile['interests']])}."
    persona = (_section(step.system, "persona") or "").strip()
    if not persona:
        return "I'd rather not say much; nothing stands out for me."
    opener = rng.get().choice(("Well,", "Honestly,", "Speaking for myself,"))
    first = persona.split(". ")[0].rstrip(".")
    if first.lower().startswith("you are "):
        first = first[len("you are ") :]
    return f"{opener} I'm {first}; that shapes how I see it."


def _opinion_answer(step: _Step, profile: Mapping[str, Any], question: str) -> str:
    value: float | None = None
    for line in step.observation().splitlines():
        key, _, rest = line.partition(":")
        if "opinion" in key.lower():
            try:
                value = float(rest.strip().split()[0])
            except (ValueError, IndexError):
                continue
    if value is None and isinstance(profile.get("opinion"), int | float):
        value = float(profile["opinion"])
    topic = ""
    low = question.lower()
    if " about " in low:
        topic = question[low.index(" about ") + 7 :].strip().rstrip("?.! ")
    on = f"On {topic}, " if topic else ""
    if value is None:
        return f"{on}I haven't made up my mind yet."
    if value >= 0.5:
        stance = "I'm strongly in favour"
    elif value >= 0.15:
        stance = "I'm mildly in favour"
    elif value > -0.15:
        stance = "I'm undecided"
    elif value > -0.5:
        stance = "I'm mildly against it"
    else:
        stance = "I'm strongly against it"
    return f"{on}{stance} (my opinion is {value:+.2f})."


def _day_answer(step: _Step, question: str) -> str:
    memory = _section(step.last_user, "memory") or ""
    places: list[str] = []
    for line in memory.splitlines():
        for place in _PLACE.findall(line.lower()):
            if place not in places:
                places.append(place)
    when = next(
        (w for w in ("morning", "afternoon", "evening", "today", "week") if w in question.lower()),
        "day",
    )
    lead = f"This {when}" if when not in ("today", "day") else "Today"
    if places:
        return f"{lead} I went to {_join(places)}; it was an ordinary {when}."
    position = step.position()
    if position and not position.startswith("in transit"):
        return f"{lead} I mostly stayed at {position}; nothing special happened."
    return f"{lead} was quiet; nothing special happened."


def _join(items: Sequence[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]
