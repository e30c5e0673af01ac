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
    assert cat.head == 0 and cat.shown[0] == "built-in@coffee-spots"
    assert cat.omitted == len(SKILLS) - len(cat.shown) >= 2
    assert cat.agent_text.startswith('<more_skills>\n<skill name="coffee-spots"')
    assert cat.agent_text.endswith(
        f"<!-- {cat.omitted} more skills not listed to fit the catalog budget; call "
        "search_skills(query) to find them -->"
    )
    assert cat.text == "<available_skills>\n</available_skills>"
    assert estimate_tokens(cat.text) + estimate_tokens(cat.agent_text) <= budget


def test_over_budget_the_shared_head_is_the_same_for_every_agent() -> None:
    index = CatalogIndex.build(SKILLS)
    budget = sum(e.tokens for e in index.entries[:3]) + 60
    seen = {
        (query, active): render_catalog(
            index, budget_tokens=budget, query=query, active=active, hidden=frozenset()
        )
        for query in ("", "coffee cafe", "news and budget")
        for active in ((), ("built-in@news-digest",))
    }
    heads = {cat.text for cat in seen.values()}
    assert len(heads) == 1 and 'id="built-in@weather-lookup"' in heads.pop()
    for (_query, active), cat in seen.items():
        assert 0 < cat.head < len(cat.shown) and cat.omitted > 0
        assert tuple(cat.shown[: cat.head]) == tuple(s.skill_id for s in SKILLS[: cat.head])
        # The agent's own picks: its active skill first (the head left it out), no marks.
        if active:
            assert cat.shown[cat.head] == "built-in@news-digest"
        assert "active=" not in cat.text + cat.agent_text
    # Relevance changes only the agent's part.
    assert seen[("coffee cafe", ())].agent_text != seen[("news and budget", ())].agent_text


def test_active_skills_change_nothing_in_a_catalog_that_fits() -> None:
    index = CatalogIndex.build(SKILLS)
    plain = render_catalog(index, budget_tokens=10_000)
    cat = render_catalog(
        index, budget_tokens=10_000, active=("built-in@news-digest",), hidden=frozenset()
    )
    assert cat == plain and cat.agent_text == "" and "active=" not in cat.text
    assert cat.omitted == 0 and cat.shown == tuple(s.skill_id for s in SKILLS)


def test_hidden_skills_are_neither_shown_nor_counted() -> None:
    index = CatalogIndex.build(SKILLS)
    cat = render_catalog(index, budget_tokens=10_000, hidden=frozenset({"built-in@coffee-spots"}))
    assert "coffee" not in cat.text and cat.omitted == 0 and len(cat.shown) == 4


def test_one_omitted_skill_is_singular() -> None:
    long = [skill(n, f"Use for {n}: " + "many words of description " * 8) for n in ("a", "b")]
    index = CatalogIndex.build(long)
    budget = index.total_tokens  # one entry and the reserved frame fit, two do not
    cat = render_catalog(index, budget_tokens=budget, query="b")
    assert cat.omitted == 1 and "<!-- 1 more skill not listed" in cat.agent_text


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
        + estimate_tokens("<more_skills></more_skills>")
        + 5
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
    active_cost = sum(index.entries[index.by_id[a]].tokens for a in active)
    both = cat.text + "\n" + cat.agent_text
    assert estimate_tokens(cat.text) + estimate_tokens(cat.agent_text) <= (
        max(budget, _floor(visible)) + active_cost
    )
    if not active:
        assert estimate_tokens(cat.text) + estimate_tokens(cat.agent_text) <= max(
            budget, _floor(visible)
        )
    assert set(active) <= set(cat.shown)
    assert not set(cat.shown) & hidden
    assert len(set(cat.shown)) == len(cat.shown)
    assert cat.omitted == visible - len(cat.shown)
    listed = re.findall(r'<skill name="[^"]*" id="([^"]*)"', both)
    assert tuple(listed) == cat.shown
    # The shared head is a prefix of the catalog order, whatever the agent's situation.
    order = [s for s in ids if s not in hidden]
    assert list(cat.shown[: cat.head]) == order[: cat.head]
    assert "active=" not in both
    if cat.omitted:
        assert f"<!-- {cat.omitted} more skill" in cat.agent_text
        assert "search_skills(query)" in cat.agent_text
    else:
        assert "more skill" not in both
