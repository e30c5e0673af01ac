"""How the offline scripted model answers interview questions, and the small readers of
agentsim's prompt conventions it shares with ``agentsim.llm.scripted`` (the prompt's blocks
through their declaration, ``agentsim.llm.prompt_blocks``)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agentsim.llm.prompt_blocks import BLOCKS

__all__ = ["WORD", "StepView", "answer", "opinion_asked", "opinion_of", "profile_of", "uniform"]

WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_OPINION_VALUE = re.compile(r"opinion\b[^\n\d+-]{0,60}([+-]?\d*\.?\d+)", re.IGNORECASE)
_PLACE = re.compile(r"\b[a-z]+(?:[_-][a-z]+)*-\d+\b")
# Words that send an interview question to one of the answers.
_OPINION_WORDS = _words(
    "opinion think view views stance support oppose agree disagree believe policy favour favor"
)
_DAY_WORDS = _words(
    "day morning afternoon evening night today yesterday week went go going where did visited"
)
_WORK_WORDS = _words("work job occupation career profession colleagues")
_LIKE_WORDS = _words("like enjoy hobby hobbies interests interested free fun")


class StepView(Protocol):
    """What an answer needs to know of the step."""

    system: str
    last_user: str
    observation: str
    position: str


def uniform(seed: int, text: str) -> float:
    """A float in [0, 1) from sha256(``seed``, ``text``): the same in every process.

    A hash rather than a seeded generator: the model needs one draw per call, and the
    same draw in every process.
    """
    digest = hashlib.sha256(f"{seed}:{text}".encode("utf-8", "replace")).digest()
    return int.from_bytes(digest[:7], "big") / 2.0**56


def profile_of(system: str) -> dict[str, Any]:
    """The JSON ``<profile>`` of a system prompt ({} when absent or unreadable)."""
    try:
        obj = json.loads(BLOCKS["profile"].find(system) or "{}")
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def answer(step: StepView, question: str, seed: int) -> str:
    low = question.lower()
    words = set(WORD.findall(low))
    profile = profile_of(step.system)
    if words & _OPINION_WORDS or "feel about" in low:
        return _opinion_answer(step, profile, question)
    if words & _DAY_WORDS:
        return _day_answer(step, low)
    occupation, interests = profile.get("occupation"), profile.get("interests")
    if words & _WORK_WORDS and isinstance(occupation, str):
        work = profile.get("work")
        return f"I work as a {occupation}{f' at {work}' if isinstance(work, str) else ''}."
    if words & _LIKE_WORDS and isinstance(interests, list) and interests:
        return f"I enjoy {_join([str(x) for x in interests])}."
    persona = (BLOCKS["persona"].find(step.system) or "").strip()
    if not persona:
        return "I'd rather not say much; nothing stands out for me."
    openers = ("Well,", "Honestly,", "Speaking for myself,")
    opener = openers[int(uniform(seed, step.last_user) * len(openers))]
    first = persona.split(". ")[0].rstrip(".")
    first = first[8:] if first.lower().startswith("you are ") else first
    return f"{opener} I'm {first}; that shapes how I see it."


def opinion_asked(question: str) -> bool:
    """Whether ``question`` asks for the agent's opinion (what the offline model answers
    from its opinion value)."""
    low = question.lower()
    return bool(set(WORD.findall(low)) & _OPINION_WORDS) or "feel about" in low


def opinion_of(step: StepView) -> float | None:
    """The agent's opinion value, -1..1: the observation's current one, else the profile's
    starting one; None when the prompt has neither."""
    m = _OPINION_VALUE.search(step.observation)
    if m:
        return float(m[1])
    start = profile_of(step.system).get("opinion")
    return float(start) if isinstance(start, int | float) else None


def _opinion_answer(step: StepView, profile: Mapping[str, Any], question: str) -> str:
    value = opinion_of(step)
    i = question.lower().find(" about ")
    on = f"On {question[i + 7 :].strip().rstrip('?.! ')}, " if i >= 0 else ""
    if value is None:
        return f"{on}I haven't made up my mind yet."
    stances = ((0.5, "strongly in favour"), (0.15, "mildly in favour"), (-0.15, "undecided"))
    stance = next((s for t, s in stances if value >= t), "")
    stance = stance or ("mildly against it" if value > -0.5 else "strongly against it")
    return f"{on}I'm {stance} (my opinion is {value:+.2f})."


def _day_answer(step: StepView, low_question: str) -> str:
    places: list[str] = []
    for place in _PLACE.findall((BLOCKS["memory"].find(step.last_user) or "").lower()):
        if place not in places:
            places.append(place)
    when = next((w for w in ("morning", "afternoon", "evening", "week") if w in low_question), "")
    lead, noun = (f"This {when}", when) if when else ("Today", "day")
    if places:
        return f"{lead} I went to {_join(places)}; it was an ordinary {noun}."
    if step.position and not step.position.startswith("in transit"):
        return f"{lead} I mostly stayed at {step.position}; nothing special happened."
    return f"{lead} was quiet; nothing special happened."


def _join(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
