"""Agent groups -> agent specs: counts, JSONL / CSV profile files and seeded templates.

``resolve_agents(config)`` turns the ``agents:`` groups of an experiment into one compact
``AgentSpec`` per agent, deterministically for the experiment seed. Ids are
``<group>-<index:05d>``, or ``<group>-<row id>`` when a profile file row has an ``id``.
Template profiles are drawn from ``sha512(f"{seed}:{agent_id}:profile")`` (the ``agent_rng``
derivation without the cost of seeding a generator), so an agent's profile depends only on the
seed and its id, never on how many other agents there are or their order.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsim._seeding import derive_seed
from agentsim.errors import ConfigError

if TYPE_CHECKING:
    from agentsim.sim.config import AgentGroup, AgentSelector, ExperimentConfig

__all__ = [
    "TEMPLATE_NAMES",
    "AgentSpec",
    "persona_sentence",
    "resolve_agents",
    "sample_profile",
    "select_agents",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSpec:
    """Who one agent is. Groups share their skill tuples; the profile holds only its fields."""

    agent_id: str
    group: str
    index: int
    profile: Mapping[str, Any]
    persona: str
    default_skills: tuple[str, ...]
    disabled_skills: tuple[str, ...]


# --- templates ---------------------------------------------------------------------------

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
class _Template:
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
) -> _Template:
    """Inclusive ranges (ages, hours) -> the (start, count) form the sampler uses."""

    def span(lo: float, hi: float) -> tuple[int, int]:
        return _q(lo), _q(hi) - _q(lo) + 1

    return _Template(
        ages=(ages[0], ages[1] - ages[0] + 1),
        occupations=occupations,
        wake=span(*wake),
        day_keys=day[:2] if day else None,
        day_start=span(*day[2]) if day else (0, 1),
        day_length=span(*day[3]) if day else (0, 1),
        children=children,
    )


_TEMPLATES: dict[str, _Template] = {
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


def _sample(spec: _Template, seed: int, agent_id: str) -> tuple[dict[str, Any], str]:
    """A template profile and its persona sentence.

    Draws are 16-bit words of sha512(seed:agent_id:profile): the ``agent_rng`` derivation
    without seeding a Mersenne Twister, which alone costs ~8 us per agent. ``w * n >> 16`` is
    an int in [0, n) whose bias (< n / 65536) is immaterial here.
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


def _known_template(template: str) -> _Template:
    spec = _TEMPLATES.get(template)
    if spec is None:
        raise ConfigError(
            "profile.template",
            f"unknown profile template {template!r} (known: {', '.join(TEMPLATE_NAMES)})",
            "use one of the known templates",
        )
    return spec


def sample_profile(template: str, *, seed: int, agent_id: str) -> dict[str, Any]:
    """The profile of ``agent_id`` drawn from a built-in template (same seed, same profile)."""
    return _sample(_known_template(template), seed, agent_id)[0]


def _clock_text(hour: object) -> str:
    if isinstance(hour, int | float) and not isinstance(hour, bool):
        minutes = round(float(hour) * 60)
        return f"{minutes // 60}:{minutes % 60:02d}"
    return str(hour)


def persona_sentence(profile: Mapping[str, Any], *, fallback_name: str) -> str:
    """A one-line persona from whatever the profile has, e.g.
    ``"Ana, 34, a nurse who likes running and cafes; wakes at 6:30."``"""
    parts = [str(profile.get("name") or fallback_name)]
    if profile.get("age") not in (None, ""):
        parts.append(str(profile["age"]))
    occupation = profile.get("occupation")
    if occupation:
        article = "an" if str(occupation)[:1].lower() in "aeiou" else "a"
        parts.append(f"{article} {occupation}")
    text = ", ".join(parts)
    interests = profile.get("interests")
    if isinstance(interests, list | tuple) and interests:
        items = [str(x) for x in interests]
        liked = items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
        text += f" who likes {liked}"
    elif isinstance(interests, str) and interests:
        text += f" who likes {interests}"
    if profile.get("wake_hour") not in (None, ""):
        text += f"; wakes at {_clock_text(profile['wake_hour'])}"
    return text + "."


# --- profile files -----------------------------------------------------------------------

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _cell(text: str) -> Any:
    """CSV cells are text; numbers become numbers so that templates and files agree."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _read_jsonl(path: Path, field: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    field,
                    f"{path}:{lineno}: not valid JSON ({exc.msg})",
                    "write one JSON object per line",
                ) from None
            if not isinstance(row, dict):
                raise ConfigError(
                    field,
                    f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}",
                    'write one object per line, e.g. {"id": "a1", "age": 30}',
                )
            yield lineno, row


def _read_csv(path: Path, field: str) -> Iterator[tuple[int, dict[str, Any]]]:
    # utf-8-sig: spreadsheets often save a byte-order mark before the header.
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        width = len(reader.fieldnames or ())
        for row in reader:
            if None in row or None in row.values():
                cells = width + len(row.get(None) or ()) - sum(v is None for v in row.values())
                raise ConfigError(
                    field,
                    f"{path}:{reader.line_num}: has {cells} cells but the header has "
                    f"{width} columns",
                    "give every row one cell per header column",
                )
            yield reader.line_num, {k: _cell(v) for k, v in row.items() if v != ""}


def _file_rows(path: Path, field: str) -> list[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise ConfigError(
            field,
            f"profiles file {path} does not exist",
            "check the path; relative paths resolve against the experiment file's folder",
        )
    reader = _read_csv if path.suffix.lower() == ".csv" else _read_jsonl
    try:
        rows = list(reader(path, field))
    except UnicodeDecodeError:
        raise ConfigError(field, f"{path} is not UTF-8 text", "save it as UTF-8") from None
    if not rows:
        raise ConfigError(field, f"{path} holds no profiles", "add at least one row")
    return rows


# --- resolution --------------------------------------------------------------------------


def _group_specs(config: ExperimentConfig, gi: int, group: AgentGroup) -> Iterator[AgentSpec]:
    fields = dict(group.profile.fields) if group.profile else {}
    prefix = f"{group.persona} " if group.persona else ""
    default, disabled = group.skills.default, group.skills.disabled
    if group.count is not None:
        template = _known_template((group.profile.template if group.profile else None) or "generic")
        for index in range(group.count):
            agent_id = f"{group.group}-{index:05d}"
            profile, sentence = _sample(template, config.seed, agent_id)
            if fields:
                profile.update(fields)
                sentence = persona_sentence(profile, fallback_name=agent_id)
            persona = prefix + sentence
            yield AgentSpec(
                agent_id=agent_id,
                group=group.group,
                index=index,
                profile=profile,
                persona=persona,
                default_skills=default,
                disabled_skills=disabled,
            )
        return
    assert group.profiles is not None  # the config guarantees count xor profiles
    field = f"agents.{gi}.profiles"
    path = config.resolve_path(group.profiles)
    seen: dict[str, int] = {}
    for index, (lineno, row) in enumerate(_file_rows(path, field)):
        raw_id = row.pop("id", None)
        if raw_id is None:
            suffix = f"{index:05d}"
        else:
            suffix = str(raw_id)
            if not _ID_RE.match(suffix):
                raise ConfigError(
                    field,
                    f"{path}:{lineno}: id {suffix!r} cannot be part of an agent id",
                    "use letters, digits, '.', '_' and '-', starting with a letter or digit",
                )
        if suffix in seen:
            raise ConfigError(
                field,
                f"{path}:{lineno}: duplicate id {suffix!r} (first on line {seen[suffix]})",
                "give every row a unique id",
            )
        seen[suffix] = lineno
        agent_id = f"{group.group}-{suffix}"
        given = row.pop("persona", None)
        row.update(fields)
        sentence = str(given) if given else persona_sentence(row, fallback_name=agent_id)
        yield AgentSpec(
            agent_id=agent_id,
            group=group.group,
            index=index,
            profile=row,
            persona=prefix + sentence,
            default_skills=default,
            disabled_skills=disabled,
        )


def resolve_agents(config: ExperimentConfig) -> list[AgentSpec]:
    """Every agent of the experiment, group by group, in a deterministic order."""
    specs: list[AgentSpec] = []
    owner: dict[str, str] = {}
    for gi, group in enumerate(config.agents):
        for spec in _group_specs(config, gi, group):
            if spec.agent_id in owner:
                # Possible when a file id looks like another group's generated id.
                raise ConfigError(
                    f"agents.{gi}",
                    f"agent id {spec.agent_id!r} of group {group.group!r} is also produced by "
                    f"group {owner[spec.agent_id]!r}",
                    "rename a group or change the ids in its profiles file",
                )
            owner[spec.agent_id] = group.group
            specs.append(spec)
    return specs


def select_agents(
    selector: AgentSelector,
    specs: Sequence[AgentSpec],
    *,
    seed: int,
    stream: str = "",
    field: str = "agents",
) -> list[str]:
    """The agent ids a workflow step addresses, in ``specs`` order. ``{sample: n}`` draws
    ``min(n, len(specs))`` agents with a generator derived from the seed and ``stream``."""
    if selector.kind == "all":
        return [s.agent_id for s in specs]
    if selector.kind == "group":
        return [s.agent_id for s in specs if s.group == selector.group]
    if selector.kind == "ids":
        known = {s.agent_id for s in specs}
        missing = [i for i in selector.ids if i not in known]
        if missing:
            examples = ", ".join(s.agent_id for s in specs[:3])
            raise ConfigError(
                field,
                f"unknown agent id(s) {', '.join(missing)} (ids look like: {examples})",
                "use ids of agents defined under agents:",
            )
        wanted = set(selector.ids)
        return [s.agent_id for s in specs if s.agent_id in wanted]
    rng = random.Random(derive_seed(seed, "select", stream))
    chosen = set(rng.sample(range(len(specs)), min(selector.sample or 0, len(specs))))
    return [s.agent_id for i, s in enumerate(specs) if i in chosen]
