"""resolve_agents: counts, templates, JSONL / CSV profile files, determinism, selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentsim.config.experiment import (
    AgentSelector,
    ExperimentConfig,
    load_experiment,
    parse_experiment,
)
from agentsim.config.profiles import (
    TEMPLATE_NAMES,
    AgentSpec,
    persona_sentence,
    resolve_agents,
    sample_profile,
    select_agents,
)
from agentsim.errors import ConfigError
from tests.unit import helpers

FIXTURES = helpers.FIXTURES / "configs"


def config_of(groups: str, *, seed: int = 0, base_dir: Path = Path(".")) -> ExperimentConfig:
    text = f"name: x\nseed: {seed}\nticks: 1\nagents:\n{groups}"
    return parse_experiment(text, base_dir=base_dir)


def group_file(tmp_path: Path, name: str, content: str | bytes) -> ExperimentConfig:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return config_of(f"  - {{group: g, profiles: {name}}}\n", base_dir=tmp_path)


# --- counts and templates ----------------------------------------------------------------


def test_count_gives_numbered_ids_with_group_skills() -> None:
    config = config_of(
        "  - {group: a, count: 3, skills: {default: [s1], disabled: [s2]}}\n"
        "  - {group: b, count: 2}\n"
    )
    specs = resolve_agents(config)
    assert [s.agent_id for s in specs] == ["a-00000", "a-00001", "a-00002", "b-00000", "b-00001"]
    assert [s.index for s in specs] == [0, 1, 2, 0, 1]
    assert specs[0].group == "a"
    assert specs[0].default_skills == ("s1",)
    assert specs[0].disabled_skills == ("s2",)
    assert specs[3].default_skills == ()
    # Without a template the generic one gives every agent a profile and a persona.
    assert {"name", "age", "occupation", "wake_hour", "interests"} <= set(specs[3].profile)
    assert specs[3].persona == persona_sentence(specs[3].profile, fallback_name="b-00000")


def test_same_seed_same_agents_other_seed_other_agents() -> None:
    groups = "  - {group: w, count: 50, profile: {template: worker}}\n"
    first = resolve_agents(config_of(groups, seed=7))
    assert first == resolve_agents(config_of(groups, seed=7))
    other = resolve_agents(config_of(groups, seed=8))
    assert [s.profile for s in first] != [s.profile for s in other]


def test_an_agents_profile_does_not_depend_on_the_group_size() -> None:
    small = resolve_agents(config_of("  - {group: w, count: 3}\n", seed=4))
    large = resolve_agents(config_of("  - {group: w, count: 30}\n", seed=4))
    assert large[:3] == small


@pytest.mark.parametrize("template", TEMPLATE_NAMES)
def test_templates_sample_plausible_profiles(template: str) -> None:
    for i in range(200):
        profile = sample_profile(template, seed=1, agent_id=f"g-{i:05d}")
        assert profile["name"][0].isupper()
        assert 15 <= profile["age"] <= 92
        assert (profile["wake_hour"] * 4).is_integer()
        assert 4.0 <= profile["wake_hour"] <= 10.0
        assert len(set(profile["interests"])) == len(profile["interests"]) in (2, 3)
        assert 0.0 <= profile["sociability"] <= 1.0
        assert 0.0 <= profile["openness"] <= 1.0
        assert -1.0 <= profile["opinion"] <= 1.0
        for start, end in (("work_start", "work_end"), ("school_start", "school_end")):
            if start in profile:
                assert profile["wake_hour"] + 1 <= profile[start] < profile[end] <= 24


@pytest.mark.parametrize(
    ("template", "ages", "keys"),
    [
        ("worker", (20, 66), {"work_start", "work_end"}),
        ("student", (15, 26), {"school_start", "school_end"}),
        ("parent", (26, 52), {"work_start", "work_end", "children"}),
        ("retiree", (65, 92), set()),
        ("generic", (18, 80), set()),
    ],
)
def test_template_specific_fields(template: str, ages: tuple[int, int], keys: set[str]) -> None:
    profiles = [sample_profile(template, seed=2, agent_id=f"p-{i}") for i in range(300)]
    common = {"name", "age", "occupation", "wake_hour", "interests", "sociability", "openness",
              "opinion"}  # fmt: skip
    assert all(set(p) == common | keys for p in profiles)
    seen_ages = {p["age"] for p in profiles}
    assert min(seen_ages) >= ages[0]
    assert max(seen_ages) <= ages[1]
    assert len(seen_ages) > 10  # spread over the range, not a constant
    if template == "student":
        assert {p["occupation"] for p in profiles} == {"student"}


def test_template_persona_matches_the_general_sentence() -> None:
    specs = resolve_agents(config_of("  - {group: p, count: 40, profile: {template: parent}}\n"))
    for spec in specs:
        assert spec.persona == persona_sentence(spec.profile, fallback_name=spec.agent_id)
        assert spec.persona.startswith(f"{spec.profile['name']}, {spec.profile['age']}, a")


def test_fields_override_template_values_and_the_persona_follows() -> None:
    config = config_of(
        "  - group: w\n"
        "    count: 2\n"
        "    persona: You live in Springfield.\n"
        "    profile: {template: worker, fields: {name: Ana, city: springfield, interests: []}}\n"
    )
    spec = resolve_agents(config)[0]
    assert spec.profile["name"] == "Ana"
    assert spec.profile["city"] == "springfield"
    assert spec.persona.startswith("You live in Springfield. Ana, ")
    assert "likes" not in spec.persona


def test_unknown_template_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown profile template 'wizard' \(known: generic"):
        sample_profile("wizard", seed=0, agent_id="a-1")


@pytest.mark.parametrize(
    ("profile", "sentence"),
    [
        ({"name": "Ana", "age": 34, "occupation": "nurse", "interests": ["running", "cafes"],
          "wake_hour": 6.5}, "Ana, 34, a nurse who likes running and cafes; wakes at 6:30."),
        ({"occupation": "engineer", "interests": ["chess"]}, "g-x, an engineer who likes chess."),
        ({"name": "Bo", "interests": "board games", "wake_hour": "7am"},
         "Bo who likes board games; wakes at 7am."),
        ({}, "g-x."),
    ],
    ids=["full", "no-name", "text-fields", "empty"],
)  # fmt: skip
def test_persona_sentence(profile: dict[str, object], sentence: str) -> None:
    assert persona_sentence(profile, fallback_name="g-x") == sentence


# --- profile files -----------------------------------------------------------------------


def test_fixture_groups_from_jsonl_csv_and_template() -> None:
    config = load_experiment(FIXTURES / "full.yaml", environ={})
    specs = resolve_agents(config)
    by_id = {s.agent_id: s for s in specs}
    assert list(by_id)[:3] == ["commuters-c1", "commuters-c2", "commuters-c3"]
    ana = by_id["commuters-c1"]
    assert ana.profile == {"name": "Ana", "age": 34, "occupation": "nurse",
                           "interests": ["running", "cafes"], "wake_hour": 6.5}  # fmt: skip
    assert ana.persona == (
        "You are a commuter in a mid-size city. "
        "Ana, 34, a nurse who likes running and cafes; wakes at 6:30."
    )
    assert ana.default_skills == ("daily-guidance",)
    ben = by_id["commuters-c2"]
    assert ben.persona.endswith("Ben drives the night bus.")  # a given persona is kept
    assert "persona" not in ben.profile
    assert by_id["commuters-c3"].persona.endswith("commuters-c3.")
    # CSV: the byte-order mark is dropped, numbers are numbers, empty cells are left out.
    ido = by_id["students-00000"]
    assert ido.profile == {"name": "Ido", "age": 19, "occupation": "student", "wake_hour": 7.75,
                           "city": "springfield"}  # fmt: skip
    assert ido.persona == "Ido, 19, a student; wakes at 7:45."
    assert "wake_hour" not in by_id["students-00001"].profile
    assert [s.agent_id for s in specs][-3:] == ["workers-00000", "workers-00001", "workers-00002"]


FILE_ERRORS = [
    ("bad-json", "p.jsonl", '{"id": "a"}\n{"id": \n', r"p\.jsonl:2: not valid JSON"),
    ("not-object", "p.jsonl", '{"id": "a"}\n\n[1, 2]\n',
     r"p\.jsonl:3: expected a JSON object, got list"),
    ("duplicate-id", "p.jsonl", '{"id": "a"}\n{"id": "b"}\n{"id": "a"}\n',
     r"p\.jsonl:3: duplicate id 'a' \(first on line 1\); give every row a unique id"),
    ("bad-id", "p.jsonl", '{"id": "../etc"}\n',
     r"p\.jsonl:1: id '\.\./etc' cannot be part of an agent id"),
    ("empty-jsonl", "p.jsonl", "\n\n", r"p\.jsonl holds no profiles; add at least one row"),
    ("csv-too-many-cells", "p.csv", "id,age\na,3\nb,4,5\n",
     r"p\.csv:3: has 3 cells but the header has 2 columns"),
    ("csv-too-few-cells", "p.csv", "id,age,city\na,3,x\nb,4\n",
     r"p\.csv:3: has 2 cells but the header has 3 columns"),
    ("csv-duplicate-id", "p.csv", "id,age\n7,3\n7,4\n", r"p\.csv:3: duplicate id '7'"),
    ("empty-csv", "p.csv", "", r"p\.csv holds no profiles"),
    ("not-utf8", "p.csv", b"id,name\n1,caf\xe9\n", r"p\.csv is not UTF-8 text; save it as UTF-8"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "content", "match"), [e[1:] for e in FILE_ERRORS], ids=[e[0] for e in FILE_ERRORS]
)
def test_profile_file_errors_name_the_file_and_line(
    tmp_path: Path, name: str, content: str | bytes, match: str
) -> None:
    config = group_file(tmp_path, name, content)
    with pytest.raises(ConfigError, match=match) as info:
        resolve_agents(config)
    assert info.value.field == "agents.0.profiles"
    assert str(tmp_path) in str(info.value)


def test_missing_profile_file(tmp_path: Path) -> None:
    config = config_of("  - {group: g, profiles: data/none.jsonl}\n", base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"profiles file .*data/none\.jsonl does not exist"):
        resolve_agents(config)


def test_a_csv_cell_over_the_csv_limit_is_a_config_error(tmp_path: Path) -> None:
    config = group_file(tmp_path, "p.csv", "id,bio\na1," + "x" * 200_000 + "\n")
    with pytest.raises(ConfigError, match=r"p\.csv is not valid CSV: field larger than") as info:
        resolve_agents(config)
    assert info.value.field == "agents.0.profiles"


def test_profiles_files_count_against_the_agent_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real limit (1,000,000) is checked the same way; a small one keeps the test fast.
    monkeypatch.setattr("agentsim.config.profiles.MAX_AGENTS", 3)
    config = group_file(tmp_path, "p.jsonl", "".join(f'{{"id": {i}}}\n' for i in range(10)))
    with pytest.raises(ConfigError, match=r"p\.jsonl holds more than 3 profiles, the most"):
        resolve_agents(config)
    (tmp_path / "q.jsonl").write_text('{"id": 1}\n{"id": 2}\n')
    two = config_of(
        "  - {group: a, count: 2}\n  - {group: b, profiles: q.jsonl}\n", base_dir=tmp_path
    )
    with pytest.raises(ConfigError, match=r"the groups hold more than 3 agents together") as info:
        resolve_agents(two)
    assert info.value.field == "agents.1"


def test_numeric_ids_and_rows_without_ids(tmp_path: Path) -> None:
    config = group_file(tmp_path, "p.jsonl", '{"id": 17, "x": 1}\n{"x": 2}\n')
    specs = resolve_agents(config)
    assert [s.agent_id for s in specs] == ["g-17", "g-00001"]
    assert specs[0].profile == {"x": 1}


def test_ids_produced_by_two_groups_are_refused(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text('{"id": "b-00000"}\n')
    config = config_of(
        "  - {group: a-b, count: 1}\n  - {group: a, profiles: p.jsonl}\n", base_dir=tmp_path
    )
    with pytest.raises(
        ConfigError, match=r"agent id 'a-b-00000' of group 'a' is also produced by group 'a-b'"
    ):
        resolve_agents(config)


# --- selection ---------------------------------------------------------------------------


@pytest.fixture
def specs() -> list[AgentSpec]:
    return resolve_agents(config_of("  - {group: a, count: 6}\n  - {group: b, count: 4}\n"))


def test_select_all_group_and_ids(specs: list[AgentSpec]) -> None:
    def select(short: object) -> list[str]:
        return select_agents(AgentSelector.model_validate(short), specs, seed=0)

    assert len(select("all")) == 10
    assert select({"group": "b"}) == ["b-00000", "b-00001", "b-00002", "b-00003"]
    assert select(["b-00001", "a-00002"]) == ["a-00002", "b-00001"]


def test_select_unknown_ids_is_an_error(specs: list[AgentSpec]) -> None:
    selector = AgentSelector.model_validate(["a-00001", "zz-1"])
    with pytest.raises(ConfigError, match=r"unknown agent id\(s\) zz-1 \(ids look like: a-00000"):
        select_agents(selector, specs, seed=0, field="workflow.3.survey.agents")


def test_sample_is_seeded_and_clamped(specs: list[AgentSpec]) -> None:
    three = AgentSelector.model_validate({"sample": 3})
    first = select_agents(three, specs, seed=5, stream="survey-1")
    assert len(first) == 3
    assert first == select_agents(three, specs, seed=5, stream="survey-1")
    streams = {tuple(select_agents(three, specs, seed=5, stream=f"s{i}")) for i in range(20)}
    assert len(streams) > 1
    many = AgentSelector.model_validate({"sample": 50})
    assert select_agents(many, specs, seed=5) == [s.agent_id for s in specs]


# --- ids: numeric --------------------------------------------------------------------------


def test_numeric_ids_are_global_indexes_across_groups(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text(
        '{"id": 41, "name": "Ann"}\n{"id": 42, "name": "Bo"}\n', encoding="utf-8"
    )
    config = config_of(
        "  - {group: a, count: 2}\n"
        "  - {group: b, count: 3, ids: numeric}\n"
        "  - {group: c, profiles: p.jsonl, ids: numeric}\n",
        base_dir=tmp_path,
    )
    specs = resolve_agents(config)
    assert [s.agent_id for s in specs] == ["a-00000", "a-00001", "2", "3", "4", "5", "6"]
    assert [int(s.agent_id) for s in specs[2:]] == [2, 3, 4, 5, 6]
    # A file row's own id stays in its profile; the agent's id is its index.
    assert specs[5].profile["id"] == 41
    assert specs[5].profile["name"] == "Ann"
    # The profile of a numeric id is drawn like any other: same seed, same agent.
    assert resolve_agents(config)[3].profile == specs[3].profile


def test_ids_option_rejects_unknown_values() -> None:
    with pytest.raises(ConfigError) as err:
        config_of("  - {group: a, count: 2, ids: integer}\n")
    assert str(err.value).startswith(
        "agents.0.ids: 'integer' is not allowed; must be one of group, numeric"
    )


def test_numeric_ids_are_selected_by_yaml_numbers() -> None:
    text = (
        "name: x\nseed: 0\nworkflow:\n  - run: {ticks: 1}\n"
        '  - survey: {name: s, question: "ok?", agents: [2, 0]}\n'
        "agents:\n  - {group: a, count: 3, ids: numeric}\n"
    )
    config = parse_experiment(text, base_dir=Path("."))
    survey = config.workflow[1].survey
    assert survey is not None
    assert select_agents(survey.agents, resolve_agents(config), seed=0) == ["0", "2"]
    bad = text.replace("[2, 0]", "[2, true]")
    with pytest.raises(ConfigError) as err:
        parse_experiment(bad, base_dir=Path("."))
    assert "[2, True] is not an agent selection" in str(err.value)
