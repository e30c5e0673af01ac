"""The skill catalog an agent sees: ``<available_skills>`` under a token budget.

Under budget every visible skill is listed, in catalog order, the same text for every agent
(a prefix cache can then share it). Over budget, a shared head in catalog order takes half the
budget; each agent's own part then lists its active skills the head left out, then the rest
ranked by BM25 relevance of their name + description to the agent's situation, and ends with
how many skills were left out and how to reach them (``search_skills``). Nothing is cut
silently. Which skills are active is the agent's part of the prompt, not a mark here.

The BM25 index is built once per set of skills and shared by every agent of the process.
Token counts are estimated as ``ceil(len(text) / 4)``: no tokenizer, no model, no network.

A skill is hidden from the catalog when the run lacks an environment module
(``env:social``) or an agent tool (``tool:ask_env``) it requires, directly or through a
skill it requires (``unmet_requirements``). A required skill that is not installed hides
nothing here: the registry reports it, and activation fails with a message naming it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Protocol

from agentsim._tokens import estimate_tokens
from agentsim.skills.manifest import TOOL_NAMES

if TYPE_CHECKING:
    from agentsim.skills.registry import SkillDescriptor

__all__ = [
    "CatalogEntry",
    "CatalogIndex",
    "RenderedCatalog",
    "render_catalog",
    "render_selection",
    "tokenize",
]

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "use",
        "used",
        "when",
        "with",
        "you",
        "your",
    ]
)
_BM25_K1 = 1.2
_BM25_B = 0.75


def tokenize(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


class _ManifestLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def status(self) -> str: ...


class _SkillLike(Protocol):
    @property
    def skill_id(self) -> str: ...
    @property
    def manifest(self) -> _ManifestLike: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogEntry:
    """One line of the catalog, pre-rendered once per index."""

    skill_id: str
    handle: str  # what the model passes to activate_skill: the name, or the id when ambiguous
    description: str
    line: str
    tokens: int


def _entry_line(handle: str, skill_id: str, description: str, status: str) -> str:
    # A deprecated skill says so in its entry: a model can then prefer another one.
    mark = ' status="deprecated"' if status == "deprecated" else ""
    return (
        f'<skill name="{escape(handle)}" id="{escape(skill_id)}"{mark}>'
        f"{escape(description)}</skill>"
    )


@dataclass(slots=True)
class CatalogIndex:
    """BM25 index plus pre-rendered entries over a fixed sequence of skills."""

    entries: list[CatalogEntry]
    by_id: dict[str, int]
    total_tokens: int
    min_tokens: int
    _postings: dict[str, list[tuple[int, float]]] = field(repr=False)

    @classmethod
    def build(cls, skills: Iterable[_SkillLike]) -> CatalogIndex:
        skills = list(skills)
        name_count: dict[str, int] = {}
        for s in skills:
            name_count[s.manifest.name] = name_count.get(s.manifest.name, 0) + 1
        entries: list[CatalogEntry] = []
        docs: list[list[str]] = []
        for s in skills:
            handle = s.manifest.name if name_count[s.manifest.name] == 1 else s.skill_id
            line = _entry_line(handle, s.skill_id, s.manifest.description, s.manifest.status)
            entries.append(
                CatalogEntry(
                    skill_id=s.skill_id,
                    handle=handle,
                    description=s.manifest.description,
                    line=line,
                    tokens=estimate_tokens(line) + 1,
                )
            )
            docs.append(tokenize(s.manifest.name.replace("-", " ") + " " + s.manifest.description))
        n = len(docs)
        avg = (sum(len(d) for d in docs) / n) if n else 1.0
        df: dict[str, int] = {}
        for d in docs:
            for term in set(d):
                df[term] = df.get(term, 0) + 1
        postings: dict[str, list[tuple[int, float]]] = {}
        for i, d in enumerate(docs):
            tf: dict[str, int] = {}
            for term in d:
                tf[term] = tf.get(term, 0) + 1
            norm = _BM25_K1 * (1 - _BM25_B + _BM25_B * len(d) / (avg or 1.0))
            for term, f in tf.items():
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                postings.setdefault(term, []).append((i, idf * f * (_BM25_K1 + 1) / (f + norm)))
        return cls(
            entries=entries,
            by_id={e.skill_id: i for i, e in enumerate(entries)},
            total_tokens=sum(e.tokens for e in entries),
            min_tokens=min((e.tokens for e in entries), default=0),
            _postings=postings,
        )

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every entry matching ``query`` (entry index -> score)."""
        acc: dict[int, float] = {}
        # Sorted terms: float sums must not depend on set order (hash randomisation).
        for term in sorted(set(tokenize(query))):
            for i, w in self._postings.get(term, ()):
                acc[i] = acc.get(i, 0.0) + w
        return acc

    def ranking(self, query: str) -> list[int]:
        """Every entry index, best match first; ties (and non-matches) in catalog order.

        A dense accumulator and one C-level sort: this runs on every render of an
        over-budget catalog, and dict-based scoring plus a tuple key cost 3x as much.
        """
        acc = [0.0] * len(self.entries)
        for term in sorted(set(tokenize(query))):
            for i, w in self._postings.get(term, ()):
                acc[i] += w
        # sorted() is stable, also with reverse=True: equal scores keep catalog order.
        return sorted(range(len(acc)), key=acc.__getitem__, reverse=True)

    def search(self, query: str, *, limit: int = 10) -> list[CatalogEntry]:
        """Best matches first; ties broken by skill id so results are deterministic."""
        scored = self.scores(query)
        best = sorted(scored.items(), key=lambda kv: (-kv[1], self.entries[kv[0]].skill_id))
        return [self.entries[i] for i, _ in best[:limit]]


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderedCatalog:
    """A catalog in two parts. ``text``, the ``<available_skills>`` block, is the same for
    every agent that sees the same skills (no per-agent marks, catalog order): it belongs to
    the part of the prompt many agents share. ``agent_text`` is one agent's: over budget,
    the ``<more_skills>`` picked for it (its active skills the shared head left out, then
    the most relevant others) and how many were left out; empty when everything fits."""

    text: str
    shown: tuple[str, ...]  # skill ids, in the order listed: the shared head, then the picks
    omitted: int
    tokens: int
    head: int = 0  # how many of ``shown`` are in the shared head
    agent_text: str = ""


_OPEN = "<available_skills>"
_CLOSE = "</available_skills>"
_MORE_OPEN = "<more_skills>"
_MORE_CLOSE = "</more_skills>"
# Over budget, the share of the budget that goes to the shared head (in catalog order); the
# rest goes to each agent's picks.
HEAD_SHARE = 0.5


def _omitted_note(omitted: int) -> str:
    return (
        f"<!-- {omitted} more skill{'s' if omitted != 1 else ''} not listed to fit the catalog "
        "budget; call search_skills(query) to find them -->"
    )


def render_selection(
    index: CatalogIndex,
    shown: Sequence[str],
    *,
    head: int,
    omitted: int,
    note: str = "",
) -> tuple[str, str]:
    """(shared text, agent text) of a catalog whose selection is known (``shown`` ids, the
    first ``head`` of them in the shared head, ``omitted`` left out): agents keep only their
    selection and re-render it, which costs a join, not a ranking. ``note`` is the shared
    block's last line (the skills this run hides)."""
    entries, by_id = index.entries, index.by_id
    lines = [_OPEN, *(entries[by_id[sid]].line for sid in shown[:head]), _CLOSE]
    if note:
        lines.append(note)
    more: list[str] = []
    if len(shown) > head:
        more = [_MORE_OPEN, *(entries[by_id[sid]].line for sid in shown[head:]), _MORE_CLOSE]
    if omitted:
        more.append(_omitted_note(omitted))
    return "\n".join(lines), "\n".join(more)


def render_catalog(
    index: CatalogIndex,
    *,
    budget_tokens: int,
    query: str = "",
    active: Sequence[str] = (),
    hidden: frozenset[str] = frozenset(),
    note: str = "",
) -> RenderedCatalog:
    """Render the catalog of ``index`` minus ``hidden`` ids within ``budget_tokens``.

    ``note`` is a last line of the shared block (the skills this run hides, and why); its
    tokens count.

    When every visible skill fits, all are listed in catalog order, whatever is active. Over
    budget, the shared head gets ``HEAD_SHARE`` of the budget in catalog order; the agent's
    part lists its ``active`` skills the head left out (always: the model must know what it
    has loaded, even over budget), then the most relevant to ``query`` of the rest, and how
    many were left out.
    """
    entries = index.entries
    visible = len(entries) - sum(1 for h in hidden if h in index.by_id)
    frame = estimate_tokens(_OPEN) + estimate_tokens(_CLOSE) + 2
    if note:
        frame += estimate_tokens(note) + 1
    hidden_tokens = sum(entries[index.by_id[h]].tokens for h in hidden if h in index.by_id)
    if index.total_tokens - hidden_tokens + frame <= budget_tokens:
        every = tuple(e.skill_id for e in entries if e.skill_id not in hidden)
        text, _ = render_selection(index, every, head=len(every), omitted=0, note=note)
        return RenderedCatalog(
            text=text,
            shown=every,
            omitted=0,
            tokens=index.total_tokens - hidden_tokens + frame,
            head=len(every),
        )
    # Room for the agent's frame and the "omitted" note, reserved before anything is listed.
    used = frame + estimate_tokens(_MORE_OPEN + _MORE_CLOSE) + 2
    used += estimate_tokens(_omitted_note(visible)) + 1
    head_budget = used + int((budget_tokens - used) * HEAD_SHARE)
    shown: list[str] = []
    for e in entries:
        if e.skill_id in hidden:
            continue
        if used + e.tokens > head_budget:
            break  # the head is a prefix of the catalog order: stable for every agent
        shown.append(e.skill_id)
        used += e.tokens
    head = len(shown)
    listed = set(shown)
    for sid in active:
        i = index.by_id.get(sid)
        if i is None or sid in hidden or sid in listed:
            continue
        shown.append(sid)
        listed.add(sid)
        used += entries[i].tokens
    order: Iterable[int] = index.ranking(query) if query else range(len(entries))
    for i in order:
        e = entries[i]
        if e.skill_id in listed or e.skill_id in hidden:
            continue
        if used + e.tokens > budget_tokens:
            if budget_tokens - used < index.min_tokens:
                break  # nothing else can fit
            continue
        shown.append(e.skill_id)
        used += e.tokens
    omitted = visible - len(shown)
    text, agent_text = render_selection(index, shown, head=head, omitted=omitted, note=note)
    return RenderedCatalog(
        text=text,
        shown=tuple(shown),
        omitted=omitted,
        tokens=used,
        head=head,
        agent_text=agent_text,
    )


# -- what a run cannot serve -----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RunProvides:
    """The environment modules and agent tools of one run."""

    env_modules: frozenset[str]
    tools: frozenset[str]

    @classmethod
    def for_modules(cls, env_modules: Collection[str]) -> RunProvides:
        """What a run with ``env_modules`` offers: every agent tool, but ``ask_env`` only
        when there is a module to ask."""
        tools = TOOL_NAMES if env_modules else tuple(t for t in TOOL_NAMES if t != "ask_env")
        return cls(env_modules=frozenset(env_modules), tools=frozenset(tools))


def unmet_requirements(
    descriptors: Iterable[SkillDescriptor], provides: RunProvides
) -> dict[str, str]:
    """Skill id -> why the run cannot serve it ("needs env module social"), for every
    skill whose requirements are not met; in the order of ``descriptors``."""
    descs = list(descriptors)
    # A required name means the skill of that name in the requirer's own namespace, else
    # the first of that name (the precedence order of a view), as activation resolves it.
    by_name: dict[str, SkillDescriptor] = {}
    by_id = {d.skill_id: d for d in descs}
    for d in descs:
        by_name.setdefault(d.manifest.name, d)

    def required(d: SkillDescriptor, name: str) -> SkillDescriptor | None:
        return by_id.get(f"{d.namespace}@{name}") or by_name.get(name)

    needs: dict[str, list[str]] = {}
    for d in descs:
        own = [f"env module {m}" for m in d.manifest.required_env if m not in provides.env_modules]
        own += [f"tool {t}" for t in d.manifest.required_tools if t not in provides.tools]
        if own:
            needs[d.skill_id] = own
    # Then whoever requires a hidden skill, until nothing changes (cycles included).
    changed = bool(needs)
    while changed:
        changed = False
        for d in descs:
            hidden_deps = [
                f"skill {name}"
                for name in d.manifest.required_skills
                if (dep := required(d, name)) is not None and dep.skill_id in needs
            ]
            have = needs.get(d.skill_id, [])
            new = [h for h in hidden_deps if h not in have]
            if new:
                needs[d.skill_id] = have + new
                changed = True
    return {
        d.skill_id: "needs " + ", ".join(needs[d.skill_id]) for d in descs if d.skill_id in needs
    }


def hidden_note(unmet: Mapping[str, str], names: Mapping[str, str]) -> str:
    """The catalog's line about hidden skills (empty when none is hidden). ``names`` maps
    an id to what the catalog calls the skill."""
    if not unmet:
        return ""
    n = len(unmet)
    what = ", ".join(f"{names.get(sid, sid)} ({why})" for sid, why in unmet.items())
    return f"<!-- {n} skill{'s' if n != 1 else ''} hidden, not available in this run: {what} -->"
