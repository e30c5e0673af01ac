"""The ``<available_skills>`` catalog: budget, relevance ranking, omissions, search."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentsim._tokens import estimate_tokens
from agentsim.skills.catalog import CatalogIndex, render_catalog, tokenize


@dataclass(frozen=True)
class Skill:
    """Input data with the four fields the index reads (a descriptor's id and three fields
    of its manifest); it stands for its own manifest."""

    skill_id: str
    name: str
    description: str
    status: str = "active"

    @property
    def manifest(self) -> Skill:
        return self


def skill(name: str, description: str, namespace: str = "built-in") -> Skill:
    return Skill(skill_id=f"{namespace}@{name}", name=name, description=description)


SKILLS = [
    skill("weather-lookup", "Use to check the weather forecast before going outside."),
    skill("coffee-spots", "Use to find cafes and coffee shops nearby."),
    skill("running-plan", "Use to plan a running route in the park."),
    skill("budget-helper", "Use for household budget and spending decisions."),
    skill("news-digest", "Use to read a short digest of local news."),
]


def test_tokenize_drops_stop_words_and_case() -> None:
    assert tokenize("Use the Coffee-Shop for 2 cafes") == ["coffee", "shop", "2", "cafes"]
    assert estimate_tokens("") == 0 and estimate_tokens("abcde") == 2


def test_everything_fits_in_index_order() -> None:
    index = CatalogIndex.build(SKILLS)
    cat = render_catalog(index, budget_tokens=10_000, query="coffee")
    assert cat.shown == tuple(s.skill_id for s in SKILLS)
    assert cat.omitted == 0
    assert cat.text.startswith('<available_skills>\n<skill name="weather-lookup" id=')
    assert cat.text.endswith("</available_skills>")
    assert estimate_tokens(cat.text) <= cat.tokens


def test_over_budget_ranks_by_relevance_and_reports_the_rest() -> None:
    index = CatalogIndex.build(SKILLS)
    budget = index.entries[0].tokens * 2 + 40
    cat = render_catalog(index, budget_tokens=budget, query="I want coffee at a cafe")
    assert cat.shown[0] == "built-in@coffee-spots"
    assert cat.omitted == len(SKILLS) - len(cat.shown) >= 2
    assert (
        f"<!-- {cat.omitted} more skills not listed to fit the catalog budget; call "
        "search_skills(query) to find them -->" in cat.text
    )
    assert estimate_tokens(cat.text) <= budget


def test_active_skills_come_first_and_are_marked() -> None:
    index = CatalogIndex.build(SKILLS)
    cat = render_catalog(
        index, budget_tokens=10_000, active=("built-in@news-digest",), hidden=frozenset()
    )
    assert cat.shown[0] == "built-in@news-digest"
    assert '<skill name="news-digest" id="built-in@news-digest" active="true">' in cat.text
    assert cat.omitted == 0 and len(cat.shown) == len(SKILLS)


def test_hidden_skills_are_neither_shown_nor_counted() -> None:
    index = CatalogIndex.build(SKILLS)
    cat = render_catalog(index, budget_tokens=10_000, hidden=frozenset({"built-in@coffee-spots"}))
    assert "coffee" not in cat.text and cat.omitted == 0 and len(cat.shown) == 4


def test_one_omitted_skill_is_singular() -> None:
    index = CatalogIndex.build(SKILLS[:2])
    budget = index.entries[0].tokens + 38
    cat = render_catalog(index, budget_tokens=budget, query="weather")
    assert cat.omitted == 1 and "<!-- 1 more skill not listed" in cat.text


def test_descriptions_are_escaped_and_duplicate_names_use_ids() -> None:
    index = CatalogIndex.build(
        [skill("dup", 'Use for <b> & "x".'), skill("dup", "Other.", namespace="custom")]
    )
    assert [e.handle for e in index.entries] == ["built-in@dup", "custom@dup"]
    assert "Use for &lt;b&gt; &amp; &quot;x&quot;." in index.entries[0].line


def test_search_is_deterministic_and_ranked() -> None:
    index = CatalogIndex.build(SKILLS)
    hits = index.search("park running route", limit=3)
    assert hits[0].skill_id == "built-in@running-plan"
    assert index.search("", limit=3) == []
    assert index.search("use the and", limit=3) == []  # only stop words


def test_empty_index_renders_an_empty_catalog() -> None:
    cat = render_catalog(CatalogIndex.build([]), budget_tokens=100)
    assert cat.text == "<available_skills>\n</available_skills>" and cat.omitted == 0


# -- the budget property ----------------------------------------------------------------------

_WORDS = ["coffee", "park", "news", "run", "budget", "weather", "bus", "music", "shop", "x" * 30]

skill_sets = st.lists(
    st.tuples(
        st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=16),
        st.lists(st.sampled_from(_WORDS), min_size=1, max_size=20).map(" ".join),
    ),
    min_size=0,
    max_size=30,
    unique_by=lambda t: t[0],
)


def _floor(visible: int) -> int:
    """The fixed part no budget can remove: the frame and the 'omitted' note."""
    note = (
        f"<!-- {visible} more skills not listed to fit the catalog budget; call "
        "search_skills(query) to find them -->"
    )
    return (
        estimate_tokens("<available_skills>")
        + estimate_tokens("</available_skills>")
        + estimate_tokens(note)
        + 3
    )


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    data=skill_sets,
    budget=st.integers(min_value=1, max_value=3000),
    query=st.lists(st.sampled_from(_WORDS), max_size=5).map(" ".join),
    picks=st.data(),
)
def test_catalog_never_exceeds_its_budget_and_reports_omissions(
    data: list[tuple[str, str]], budget: int, query: str, picks: st.DataObject
) -> None:
    skills = [skill(n, d) for n, d in data]
    ids = [s.skill_id for s in skills]
    active = picks.draw(st.lists(st.sampled_from(ids), unique=True, max_size=3)) if ids else []
    rest = [i for i in ids if i not in active]
    hidden = picks.draw(st.frozensets(st.sampled_from(rest), max_size=5)) if rest else frozenset()
    index = CatalogIndex.build(skills)
    cat = render_catalog(
        index, budget_tokens=budget, query=query, active=tuple(active), hidden=hidden
    )
    visible = len(ids) - len(hidden)
    # Active skills are always listed (the model must know what it has loaded); every other
    # token is within the budget, unless the budget is below the unavoidable frame.
    active_cost = sum(index.entries[index.by_id[a]].tokens + 4 for a in active)
    assert estimate_tokens(cat.text) <= max(budget, _floor(visible)) + active_cost
    if not active:
        assert estimate_tokens(cat.text) <= max(budget, _floor(visible))
    assert cat.shown[: len(active)] == tuple(active)
    assert not set(cat.shown) & hidden
    assert len(set(cat.shown)) == len(cat.shown)
    assert cat.omitted == visible - len(cat.shown)
    listed = re.findall(r'<skill name="[^"]*" id="([^"]*)"', cat.text)
    assert tuple(listed) == cat.shown
    if cat.omitted:
        assert f"<!-- {cat.omitted} more skill" in cat.text
        assert "search_skills(query)" in cat.text
    else:
        assert "more skill" not in cat.text
