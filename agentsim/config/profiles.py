"""Agent groups -> agent specs: counts, JSONL / CSV profile files and seeded templates.

``resolve_agents(config)`` turns the ``agents:`` groups of an experiment into one compact
``AgentSpec`` per agent, deterministically for the experiment seed. Ids are
``<group>-<index:05d>``, or ``<group>-<row id>`` when a profile file row has an ``id``; a
group with ``ids: numeric`` numbers its agents by their index in the whole experiment
(``"0"``, ``"1"``, ...), the integer ids AgentSociety2's skills expect.
Template profiles (``agentsim.config._templates``) depend only on the seed and the agent's id,
never on how many other agents there are or their order.
"""

from __future__ import annotations

import csv
import itertools
import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsim._seeding import derive_seed
from agentsim.config._templates import TEMPLATE_NAMES, known_template, sample
from agentsim.config.experiment import MAX_AGENTS, AgentGroup, AgentSelector, ExperimentConfig
from agentsim.errors import ConfigError

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


def _clock_text(hour: object) -> str:
    if isinstance(hour, int | float) and not isinstance(hour, bool):
        minutes = round(float(hour) * 60)
        return f"{minutes // 60}:{minutes % 60:02d}"
    return str(hour)


def sample_profile(template: str, *, seed: int, agent_id: str) -> dict[str, Any]:
    """The profile of ``agent_id`` drawn from a built-in template (same seed, same profile)."""
    return sample(known_template(template), seed, agent_id)[0]


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
        # One row past the limit is enough to refuse the file without reading all of it.
        rows = list(itertools.islice(reader(path, field), MAX_AGENTS + 1))
    except UnicodeDecodeError:
        raise ConfigError(field, f"{path} is not UTF-8 text", "save it as UTF-8") from None
    except csv.Error as exc:
        raise ConfigError(field, f"{path} is not valid CSV: {exc}", "fix the file") from None
    if len(rows) > MAX_AGENTS:
        raise ConfigError(
            field,
            f"{path} holds more than {MAX_AGENTS:,} profiles, the most one experiment may hold",
            "split the population into several experiments",
        )
    if not rows:
        raise ConfigError(field, f"{path} holds no profiles", "add at least one row")
    return rows


# --- resolution --------------------------------------------------------------------------


def _group_specs(
    config: ExperimentConfig, gi: int, group: AgentGroup, first: int
) -> Iterator[AgentSpec]:
    """The group's agents; ``first`` is the global index of its first agent (numeric ids)."""
    numeric = group.ids == "numeric"
    fields = dict(group.profile.fields) if group.profile else {}
    prefix = f"{group.persona} " if group.persona else ""
    default, disabled = group.skills.default, group.skills.disabled
    if group.count is not None:
        template = known_template((group.profile.template if group.profile else None) or "generic")
        for index in range(group.count):
            agent_id = str(first + index) if numeric else f"{group.group}-{index:05d}"
            profile, sentence = sample(template, config.seed, agent_id)
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
        if numeric:
            # The row's own id stays in the profile: the agent's id is its global index.
            agent_id = str(first + index)
        else:
            agent_id = f"{group.group}-{_row_suffix(row, index, lineno, seen, path, field)}"
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


def _row_suffix(
    row: dict[str, Any], index: int, lineno: int, seen: dict[str, int], path: Path, field: str
) -> str:
    """The part of a file row's agent id after ``<group>-``: its ``id`` column, or its index."""
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
    return suffix


def resolve_agents(config: ExperimentConfig) -> list[AgentSpec]:
    """Every agent of the experiment, group by group, in a deterministic order."""
    specs: list[AgentSpec] = []
    owner: dict[str, str] = {}
    for gi, group in enumerate(config.agents):
        for spec in _group_specs(config, gi, group, len(specs)):
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
        if len(specs) > MAX_AGENTS:
            raise ConfigError(
                f"agents.{gi}",
                f"the groups hold more than {MAX_AGENTS:,} agents together (counting the rows "
                "of their profiles files), the most one experiment may hold",
                "lower the counts or use smaller profiles files",
            )
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
