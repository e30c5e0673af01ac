"""The blocks of an agent's prompt, declared once: the agent renders from this declaration
and models that read the prompt (the offline ``scripted`` model, test fakes) find a block's
content through it, so a block's tag, place and layout are written in one place.

The prompt has three parts, laid out for an inference server's prefix cache: what many
agents share comes first and is byte-stable, what is one agent's next, the turn last.

- ``system``: the system message, the same bytes for every agent that sees the same skills.
- ``agent``: the agent's own part, which opens its first user message; stable from step to
  step until its active skills change.
- ``turn``: the rest of the first user message, new every step. A per-step input (a text
  the step is given, e.g. news of the world) is a ``turn`` block: anywhere earlier it would
  change bytes that the cache shares across steps.

Within a part the blocks come in the declared order, joined by newlines; a block without a
text is left out. A block's ``form`` says how its text is rendered: ``inline``
(``<tag>text</tag>``), ``lines`` (``<tag>``, the text, ``</tag>`` on lines of their own) or
``given`` (the text is already the whole block, made by the code ``by`` names).

To add a per-step block: declare it here with ``step_input=True`` at its place in the turn,
and pass its text in the step input (``StepInputs(..., blocks={"name": text})`` in
``agentsim.agent.step``); models read it with ``BLOCKS["name"].find(text)``.

This module is in ``llm`` because both sides of the prompt import it: the agent (which may
import ``llm``) and the models (which may not import ``agent``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["BLOCKS", "PARTS", "Block", "Form", "Part", "PromptBlocks"]

Part = Literal["system", "agent", "turn"]
Form = Literal["inline", "lines", "given"]
PARTS: tuple[Part, ...] = ("system", "agent", "turn")

_ATTR = re.compile(r'([A-Za-z_][\w-]*)="([^"]*)"')
_ABSENT = object()  # a block ``texts`` does not name


@dataclass(frozen=True, slots=True)
class Block:
    """One block of the prompt: its tag, the part it belongs to and how it is rendered."""

    name: str  # the tag
    part: Part
    form: Form
    by: str = ""  # ``given`` blocks: the code that renders them
    step_input: bool = False  # its text comes with the step input (``StepInput.blocks``)
    # What goes before and after the text (rendered every step: built once here).
    _before: str = field(init=False, repr=False, compare=False)
    _after: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.part not in PARTS:
            raise ValueError(f"block {self.name!r}: part {self.part!r} is not one of {PARTS}")
        if self.form not in ("inline", "lines", "given"):
            raise ValueError(
                f"block {self.name!r}: form {self.form!r} is not inline, lines or given"
            )
        if self.step_input and (self.part != "turn" or self.form == "given"):
            raise ValueError(
                f"block {self.name!r}: a per-step input is an inline or lines block of the "
                f"turn (it changes every step), not a {self.form} block of the {self.part}"
            )
        before, after = {
            "inline": (f"<{self.name}>", f"</{self.name}>"),
            "lines": (f"<{self.name}>\n", f"\n</{self.name}>"),
            "given": ("", ""),
        }[self.form]
        object.__setattr__(self, "_before", before)
        object.__setattr__(self, "_after", after)

    def render(self, text: str) -> str:
        """The block holding ``text`` (a ``given`` text is the block already)."""
        return self._before + text + self._after if self._before else text

    def find(self, text: str) -> str | None:
        """The content of the first ``<name>`` block (without attributes) in ``text``, as
        it was given to ``render``; ``None`` when there is none. An unclosed block runs to
        the end of ``text``. A ``given`` block's content is what lies between its tags."""
        tag = f"<{self.name}>"
        i = text.find(tag)
        if i < 0:
            return None
        i += len(tag)
        j = text.find(f"</{self.name}>", i)
        content = text[i:] if j < 0 else text[i:j]
        if self.form == "lines":
            content = content.removeprefix("\n")
            if j >= 0:
                content = content.removesuffix("\n")
        return content

    def each(self, text: str) -> Iterator[tuple[dict[str, str], str]]:
        """(attributes, content) of every ``<name ...>`` block in ``text``, in order; the
        attributes HTML-unescaped. An unclosed block runs to the end of ``text``."""
        opening, closing = f"<{self.name}", f"</{self.name}>"
        i = text.find(opening)
        while i >= 0:
            after = i + len(opening)
            j = text.find(">", after)
            if j < 0:
                return
            if text[after] not in " >":  # a longer tag that starts with this one
                i = text.find(opening, after)
                continue
            attrs = {k: html.unescape(v) for k, v in _ATTR.findall(text, after, j)}
            end = text.find(closing, j)
            end = len(text) if end < 0 else end
            yield attrs, text[j + 1 : end]
            i = text.find(opening, end)


class PromptBlocks:
    """The prompt's blocks in order, by part; renders a part from the texts of its blocks."""

    __slots__ = ("_by_name", "_by_part", "blocks")

    def __init__(self, blocks: Iterable[Block]) -> None:
        self.blocks = tuple(blocks)
        self._by_name = {b.name: b for b in self.blocks}
        if len(self._by_name) != len(self.blocks):
            names = [b.name for b in self.blocks]
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"prompt blocks declared twice: {', '.join(twice)}")
        # The parts in prompt order: a block of an earlier part after a later one would
        # move bytes of a shared prefix behind bytes that change.
        ranks = [PARTS.index(b.part) for b in self.blocks]
        if ranks != sorted(ranks):
            raise ValueError(
                "prompt blocks must be declared in prompt order (system, agent, turn): "
                + ", ".join(f"{b.name} ({b.part})" for b in self.blocks)
            )
        self._by_part = {p: tuple(b for b in self.blocks if b.part == p) for p in PARTS}

    def __getitem__(self, name: str) -> Block:
        block = self._by_name.get(name)
        if block is None:
            raise KeyError(f"no prompt block {name!r} (declared: {', '.join(self._by_name)})")
        return block

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def of(self, part: Part) -> tuple[Block, ...]:
        """The blocks of ``part``, in order."""
        return self._by_part[part]

    def parts(self, part: Part, texts: Mapping[str, str | None]) -> list[str]:
        """The rendered blocks of ``part`` whose text in ``texts`` is not ``None``, in the
        declared order. A name in ``texts`` that is not a block of ``part`` is an error."""
        out: list[str] = []
        used = 0
        for block in self._by_part[part]:
            text = texts.get(block.name, _ABSENT)
            if text is _ABSENT:
                continue
            used += 1
            if text is not None:
                out.append(block.render(text))  # type: ignore[arg-type]
        if used != len(texts):
            mine = {b.name for b in self._by_part[part]}
            other = ", ".join(sorted(n for n in texts if n not in mine))
            raise ValueError(f"not blocks of the {part} part of the prompt: {other}")
        return out

    def render(self, part: Part, texts: Mapping[str, str | None]) -> str:
        """``parts`` joined by newlines: the text of that part of the prompt."""
        return "\n".join(self.parts(part, texts))

    def step_block(self, name: str) -> Block:
        """The per-step input block ``name``; an error names the declared ones."""
        block = self._by_name.get(name)
        if block is None or not block.step_input:
            known = ", ".join(b.name for b in self.blocks if b.step_input) or "none"
            raise ValueError(
                f"{name!r} is not a per-step input block of the prompt (declared: {known}); "
                "declare it in agentsim/llm/prompt_blocks.py with step_input=True"
            )
        return block

    def split_user(self, content: str) -> tuple[str, str]:
        """(the agent's part, the turn) of a first user message: the turn starts at its
        first block, which is always there. A message that does not start with an agent's
        part is all turn."""
        opener = f"<{self._by_part['turn'][0].name}>"
        start = content.find(opener)
        if start > 0:
            return content[:start], content[start:]
        return "", content


_SKILLS = "agentsim.skills"

BLOCKS = PromptBlocks(
    (
        # system: shared by every agent that sees the same skills
        Block("instructions", "system", "given", by="agentsim.agent.tools"),
        # Only for ``model.tool_calls: text`` (a server without tool support).
        Block("tool_calls", "system", "given", by="agentsim.agent.tools"),
        Block("available_skills", "system", "given", by=f"{_SKILLS}.catalog"),
        # agent: its own part, stable until its active skills change
        Block("skill_content", "agent", "given", by=f"{_SKILLS}.runtime (bodies)"),
        Block("active_skills", "agent", "inline"),
        Block("persona", "agent", "inline"),
        Block("profile", "agent", "inline"),
        Block("more_skills", "agent", "given", by=f"{_SKILLS}.catalog"),
        # turn: new every step; the first block is always there
        Block("observation", "turn", "lines"),
        Block("messages", "turn", "lines"),
        Block("feedback", "turn", "lines"),
        Block("memory", "turn", "lines"),
        Block("question", "turn", "inline"),
        Block("skill_hooks", "turn", "given", by=f"{_SKILLS}.hooks"),
    )
)
