"""Built-in profile templates: field distributions sampled per agent from the seed.

An agent's profile is drawn from ``sha512(f"{seed}:{agent_id}:profile")``, so it depends only
on the seed and its id, never on how many other agents there are or their order.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

from agentsim.errors import ConfigError

__all__ = ["TEMPLATE_NAMES", "Template", "known_template", "sample"]


_SYLLABLES = (
    "a", "ba", "da", "el", "fe", "gi", "ha", "io", "ka", "la", "li", "ma", "mi", "na", "no",
    "ra", "ri", "sa", "so", "ta", "te", "to", "va", "vi", "ya", "yo", "za", "ren", "mar", "lin",
)  # fmt: skip
_INTERESTS = (
    "running", "cafes", "reading", "gardening", "football", "cooking", "hiking", "music",
    "films", "cycling", "chess", "painting", "board games", "photography", "yoga", "swimming",
    "volunteering", "travel", "knitting", "video games", "local politics", "bird watching",
)  # fmt: skip
_JOBS = (
    "nurse", "electrician", "clerk", "engineer", "bus driver", "cook", "accountant",
    "mechanic", "designer", "cashier", "programmer", "pharmacist", "plumber", "teacher",
    "sales assistant", "architect", "warehouse worker", "hairdresser",
)  # fmt: skip


def _q(hours: float) -> int:
    return round(hours * 4)


@dataclass(frozen=True, slots=True)
class Template:
    """Field distributions; times of day are quarter-hour indexes (``_q(6.5)`` = 6:30)."""

    ages: tuple[int, int]  # lowest age, number of possible ages
    occupations: tuple[str, ...]
    wake: tuple[int, int]  # earliest quarter, number of possible quarters
    day_keys: tuple[str, str] | None = None  # e.g. ("work_start", "work_end")
    day_start: tuple[int, int] = (0, 1)
    day_length: tuple[int, int] = (0, 1)
    children: bool = False


def _template(
    ages: tuple[int, int],
    occupations: tuple[str, ...],
    wake: tuple[float, float],
    day: tuple[str, str, tuple[float, float], tuple[float, float]] | None = None,
    *,
    children: bool = False,
) -> Template:
    """Inclusive ranges (ages, hours) -> the (start, count) form the sampler uses."""

    def span(lo: float, hi: float) -> tuple[int, int]:
        return _q(lo), _q(hi) - _q(lo) + 1

    return Template(
        ages=(ages[0], ages[1] - ages[0] + 1),
        occupations=occupations,
        wake=span(*wake),
        day_keys=day[:2] if day else None,
        day_start=span(*day[2]) if day else (0, 1),
        day_length=span(*day[3]) if day else (0, 1),
        children=children,
    )


_TEMPLATES: dict[str, Template] = {
    "generic": _template((18, 80), (*_JOBS, "student", "retiree"), (6.0, 9.0)),
    "parent": _template(
        (26, 52), _JOBS, (5.5, 7.0), ("work_start", "work_end", (8.0, 10.0), (4.0, 8.0)),
        children=True,
    ),
    "retiree": _template((65, 92), ("retiree",), (6.0, 9.0)),
    "student": _template(
        (15, 26), ("student",), (6.5, 9.0), ("school_start", "school_end", (8.0, 10.0), (5.0, 8.0))
    ),
    "worker": _template(
        (20, 66), _JOBS, (5.0, 8.0), ("work_start", "work_end", (6.0, 10.0), (7.0, 9.5))
    ),
}  # fmt: skip
TEMPLATE_NAMES: tuple[str, ...] = tuple(sorted(_TEMPLATES))
"""The built-in profile templates."""

# Shared objects: 100,000 profiles hold references to these, not 100,000 copies.
_QUARTER_HOURS = tuple(i / 4 for i in range(24 * 4 + 1))
_CLOCK = tuple(f"{i // 4}:{i % 4 * 15:02d}" for i in range(24 * 4 + 1))
_HUNDREDTHS = tuple(round(i / 100, 2) for i in range(101))
_SIGNED_HUNDREDTHS = tuple(round(i / 100 - 1, 2) for i in range(201))
_N_SYL = len(_SYLLABLES)
_N_INT = len(_INTERESTS)


def sample(spec: Template, seed: int, agent_id: str) -> tuple[dict[str, Any], str]:
    """A template profile and its persona sentence.

    Draws are the 16-bit words of sha512(seed:agent_id:profile), one word per field, so
    adding a field to a template never shifts the others. ``w * n >> 16`` is an int in
    [0, n) whose bias (< n / 65536) is immaterial here.
    """
    w = struct.unpack(">32H", hashlib.sha512(f"{seed}:{agent_id}:profile".encode()).digest())
    name = _SYLLABLES[w[0] * _N_SYL >> 16] + _SYLLABLES[w[1] * _N_SYL >> 16]
    if w[2] < 19661:  # 30% of names get a third syllable
        name += _SYLLABLES[w[3] * _N_SYL >> 16]
    name = name.capitalize()
    age = spec.ages[0] + (w[4] * spec.ages[1] >> 16)
    occupation = spec.occupations[w[5] * len(spec.occupations) >> 16]
    wake = spec.wake[0] + (w[6] * spec.wake[1] >> 16)
    profile: dict[str, Any] = {
        "name": name,
        "age": age,
        "occupation": occupation,
        "wake_hour": _QUARTER_HOURS[wake],
    }
    if spec.day_keys is not None:
        # Nobody starts work or school within an hour of waking up.
        start = max(spec.day_start[0] + (w[7] * spec.day_start[1] >> 16), wake + 4)
        end = start + spec.day_length[0] + (w[8] * spec.day_length[1] >> 16)
        profile[spec.day_keys[0]] = _QUARTER_HOURS[start]
        profile[spec.day_keys[1]] = _QUARTER_HOURS[end]
    if spec.children:
        profile["children"] = 1 + (w[9] * 3 >> 16)
    picked: list[int] = []
    for k in range(3 if w[10] < 32768 else 2):
        i = w[11 + k] * _N_INT >> 16
        while i in picked:  # distinct interests: step to the next free one
            i = (i + 1) % _N_INT
        picked.append(i)
    interests = [_INTERESTS[i] for i in picked]
    profile["interests"] = interests
    profile["sociability"] = _HUNDREDTHS[w[14] * 101 >> 16]
    profile["openness"] = _HUNDREDTHS[w[15] * 101 >> 16]
    profile["opinion"] = _SIGNED_HUNDREDTHS[w[16] * 201 >> 16]
    article = "an" if occupation[0] in "aeiou" else "a"
    liked = ", ".join(interests[:-1]) + " and " + interests[-1]
    persona = f"{name}, {age}, {article} {occupation} who likes {liked}; wakes at {_CLOCK[wake]}."
    return profile, persona


def known_template(template: str) -> Template:
    spec = _TEMPLATES.get(template)
    if spec is None:
        raise ConfigError(
            "profile.template",
            f"unknown profile template {template!r} (known: {', '.join(TEMPLATE_NAMES)})",
            "use one of the known templates",
        )
    return spec
