"""ExperimentConfig: schema, loading, errors, AGENTSIM_* overrides, resolved dict and hash."""

from __future__ import annotations

import json
import pickle
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from agentsim.config.experiment import (
    IGNORED_ENV,
    AgentSelector,
    EnvModuleConfig,
    InterveneStep,
    InterviewStep,
    RunStep,
    SurveyStep,
    format_duration,
    load_experiment,
    parse_duration,
    parse_experiment,
)
from agentsim.errors import ConfigError
from tests.unit import helpers

FIXTURES = helpers.FIXTURES / "configs"
BASE = "name: x\nagents: [{group: a, count: 2}]\n"


def parse(text: str, **environ: str) -> object:
    return parse_experiment(text, source="exp.yaml", environ=environ)


# --- a complete file ---------------------------------------------------------------------


def test_full_fixture_loads_every_section() -> None:
    config = load_experiment(FIXTURES / "full.yaml", environ={})
    assert config.name == "daily-mobility"
    assert config.seed == 7
    assert config.clock.start == datetime(2026, 3, 2, 6, 0)
    assert config.clock.tick == timedelta(minutes=15)
    assert [g.group for g in config.agents] == ["commuters", "students", "workers"]
    assert config.agents[0].skills.default == ("daily-guidance",)
    assert config.agents[0].skills.disabled == ("social-feed",)
    assert config.agents[2].profile is not None
    assert config.agents[2].profile.fields == {"city": "springfield"}
    assert config.skills.catalog_budget_tokens == 1500
    assert config.skills.trusted_namespaces == ("built-in", "custom")
    assert config.model.backend == "openai"
    assert config.model.cache == "off"
    assert config.model.prices is not None
    assert config.model.prices.completion_per_1k == 0.0006
    assert config.agent.max_react_turns == 3
    assert [(m.module, m.options) for m in config.environment] == [
        ("city", {"places": "data/places.csv"}),
        ("social", {"follow_k": 5}),
    ]
    assert config.executor.hosts == 2
    assert config.output.formats == ("jsonl",)
    assert config.output.checkpoint_every == 10
    assert config.source == str(FIXTURES / "full.yaml")
    assert config.source_dir == FIXTURES


def test_workflow_steps_and_total_ticks() -> None:
    config = load_experiment(FIXTURES / "full.yaml", environ={})
    steps = config.steps()
    assert [s.kind for s in steps] == [
        "run",
        "intervene",
        "intervene",
        "survey",
        "interview",
        "survey",
        "run",
    ]
    assert isinstance(steps[1], InterveneStep)
    assert (steps[1].env, steps[1].action, steps[1].args) == (
        "city",
        "close_place",
        {"place": "park-1"},
    )
    assert isinstance(steps[2], InterveneStep)
    assert steps[2].message == "The park is closed today."
    assert isinstance(steps[3], SurveyStep)
    assert steps[3].agents == AgentSelector(kind="group", group="students")
    assert isinstance(steps[4], InterviewStep)
    assert steps[4].agents.ids == ("commuters-c1",)
    assert isinstance(steps[5], SurveyStep)
    assert steps[5].agents.sample == 2
    assert config.total_ticks() == 96


def test_minimal_file_gets_defaults_and_one_run_step() -> None:
    config = load_experiment(FIXTURES / "minimal.yaml", environ={})
    assert config.seed == 0
    assert config.steps() == (RunStep(ticks=4),)
    assert config.total_ticks() == 4
    assert config.model.backend == "scripted"
    assert config.executor.kind == "local"
    assert config.output.formats == ("jsonl", "parquet")
    assert config.clock.tick == timedelta(minutes=15)


def test_resolve_path_prefers_the_yaml_folder_then_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_experiment(FIXTURES / "full.yaml", environ={})
    assert config.resolve_path("data/commuters.jsonl") == FIXTURES / "data" / "commuters.jsonl"
    assert config.resolve_path(tmp_path) == tmp_path
    monkeypatch.chdir(tmp_path)
    (tmp_path / "custom" / "skills").mkdir(parents=True)
    assert config.resolve_path("custom/skills") == tmp_path / "custom" / "skills"
    # Found nowhere: the YAML folder, so that the error names where it was expected.
    assert config.resolve_path("nope.csv") == FIXTURES / "nope.csv"


def test_unquoted_yaml_date_becomes_midnight() -> None:
    config = parse(BASE + "ticks: 1\nclock: {start: 2026-03-02, tick: 1h}\n")
    assert config.clock.start == datetime(2026, 3, 2, 0, 0)  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [False, "off", "record", "replay"], ids=str)
def test_cache_off_is_normalised(value: object) -> None:
    text = BASE + "ticks: 1\n" + yaml.safe_dump({"model": {"cache": value}})
    expected = "off" if value is False else value
    assert parse(text).model.cache == expected  # type: ignore[attr-defined]


def test_bare_yaml_off_is_accepted() -> None:
    assert parse(BASE + "ticks: 1\nmodel: {cache: off}\n").model.cache == "off"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "seconds", "canonical"),
    [("15m", 900, "15m"), ("1h", 3600, "1h"), ("90s", 90, "1m30s"), ("1h30m", 5400, "1h30m"),
     (900, 900, "15m"), ("2d", 172800, "2d"), (timedelta(seconds=5), 5, "5s")],
    ids=str,
)  # fmt: skip
def test_durations(text: object, seconds: int, canonical: str) -> None:
    delta = parse_duration(text)
    assert delta.total_seconds() == seconds
    assert format_duration(delta) == canonical
    assert parse_duration(format_duration(delta)) == delta


@pytest.mark.parametrize(
    ("value", "match"),
    [("15x", "cannot read '15x' as a duration"), ("", "cannot read '' as a duration"),
     (True, "duration True is a bool, not text"), (0, r"duration 0 seconds is not positive"),
     ("0m", r"duration '0m' is not positive")],
    ids=str,
)  # fmt: skip
def test_bad_durations(value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_duration(value)


# --- errors ------------------------------------------------------------------------------

ERRORS = [
    ("unknown-field", BASE + "tiks: 3\n", "tiks",
     r"unknown field 'tiks' \(allowed: name, seed, .*workflow.*\); did you mean 'ticks'\?"),
    ("unknown-nested", BASE + "ticks: 3\nmodel: {bakend: x}\n", "model.bakend",
     r"unknown field 'bakend' \(allowed: backend, model, .*did you mean 'backend'"),
    ("unknown-no-close", BASE + "ticks: 3\nzzz: 1\n", "zzz", r"unknown field 'zzz'.*remove it"),
    ("bad-enum", BASE + "ticks: 3\nexecutor: {kind: rey}\n", "executor.kind",
     r"'rey' is not allowed; must be one of local, ray"),
    ("bad-backend", BASE + "ticks: 3\nmodel: {backend: gpt}\n", "model.backend",
     r"must be one of scripted, openai"),
    ("bad-format", BASE + "ticks: 3\noutput: {formats: [csv]}\n", "output.formats.0",
     r"'csv' is not allowed; must be one of jsonl, parquet"),
    ("no-formats", BASE + "ticks: 3\noutput: {formats: []}\n", "output.formats",
     r"'formats' must not be empty"),
    ("missing-name", "agents: [{group: a, count: 2}]\nticks: 3\n", "name",
     r"required field is missing; add name: \.\.\. \(in exp\.yaml\)"),
    ("missing-agents", "name: x\nticks: 3\n", "agents", r"required field is missing"),
    ("empty-agents", "name: x\nticks: 3\nagents: []\n", "agents", r"'agents' must not be empty"),
    ("neither-ticks-nor-workflow", BASE, "ticks",
     r"needs exactly one of 'ticks' or 'workflow'"),
    ("both-ticks-and-workflow", BASE + "ticks: 3\nworkflow: [{run: {ticks: 2}}]\n", "ticks",
     r"needs exactly one of 'ticks' or 'workflow'"),
    ("empty-workflow", BASE + "workflow: []\n", "workflow", r"'workflow' must not be empty"),
    ("survey-name-twice",
     BASE + "workflow: [{survey: {name: op, question: q}}, {run: {ticks: 1}}, "
     "{interview: {name: op, question: r}}]\n", "workflow.2.interview.name",
     r"the name 'op' is already used by workflow.0; give each asking its own name, e.g. "
     r"op-before and op-after"),
    ("step-two-keys", BASE + "workflow: [{run: {ticks: 2}, survey: {question: q}}]\n",
     "workflow.0", r"exactly one key, got 2 \(run, survey\); split it"),
    ("step-no-key", BASE + "workflow: [{}]\n", "workflow.0", r"exactly one key, got 0"),
    ("step-unknown-kind", BASE + "workflow: [{dance: {ticks: 2}}]\n", "workflow.0.dance",
     r"unknown field 'dance' \(allowed: run, intervene, survey, interview\)"),
    ("run-zero", BASE + "workflow: [{run: {ticks: 0}}]\n", "workflow.0.run.ticks",
     r"greater than or equal to 1 \(got 0\)"),
    ("intervene-both-forms", BASE + "workflow: [{intervene: {message: hi, env: e}}]\n",
     "workflow.0.intervene", r"either env \+ action .* or message"),
    ("intervene-no-action",
     BASE + "environment: [{module: e}]\nworkflow: [{intervene: {env: e}}]\n",
     "workflow.0.intervene.action", r"'action' is missing"),
    ("intervene-unknown-env", BASE + "workflow: [{intervene: {env: citi, action: x}}]\n",
     "workflow.0.intervene.env", r"module 'citi' is not configured \(configured: none\)"),
    ("intervene-extra-key",
     BASE + "environment: [{module: city}]\n"
     "workflow: [{intervene: {env: city, action: close, place: p}}]\n",
     "workflow.0.intervene.place", r"unknown field 'place' \(allowed: env, action, args"),
    ("survey-no-question", BASE + "workflow: [{survey: {agents: all}}]\n",
     "workflow.0.survey.question", r"required field is missing"),
    ("selector-unknown-group", BASE + "workflow: [{survey: {question: q, agents: {group: zz}}}]\n",
     "workflow.0.survey.agents", r"agent group 'zz' does not exist \(groups: a\)"),
    ("selector-bad", BASE + "workflow: [{interview: {question: q, agents: 5}}]\n",
     "workflow.0.interview.agents", r"5 is not an agent selection; use all, a list"),
    ("selector-zero-sample", BASE + "workflow: [{survey: {question: q, agents: {sample: 0}}}]\n",
     "workflow.0.survey.agents", r"is not an agent selection"),
    ("bad-duration", BASE + "ticks: 3\nclock: {tick: 15x}\n", "clock.tick",
     r"cannot read '15x' as a duration; write a duration such as \"15m\""),
    ("zero-duration", BASE + "ticks: 3\nclock: {tick: 0}\n", "clock.tick",
     r"duration 0 seconds is not positive"),
    ("bad-group-name", "name: x\nticks: 2\nagents: [{group: Big Group, count: 2}]\n",
     "agents.0.group", r"'Big Group' is not a valid value here; use lower-case letters"),
    ("bad-name", "name: -x\nticks: 2\nagents: [{group: a, count: 2}]\n", "name",
     r"'-x' is not a valid value here; use letters, digits"),
    ("duplicate-group", "name: x\nticks: 2\nagents: [{group: a, count: 2}, {group: a, count: 1}]\n",
     "agents.1.group", r"duplicate agent group 'a'; give each agent group a unique name"),
    ("duplicate-module", BASE + "ticks: 2\nenvironment: [{module: city}, {module: city}]\n",
     "environment.1.module", r"duplicate module 'city'"),
    ("env-no-module", BASE + "ticks: 2\nenvironment: [{places: x.csv}]\n",
     "environment.0.module", r"required field is missing"),
    ("group-count-and-profiles",
     "name: x\nticks: 2\nagents: [{group: a, count: 2, profiles: p.csv}]\n",
     "agents.0.count", r"exactly one of 'count' or 'profiles'"),
    ("group-neither", "name: x\nticks: 2\nagents: [{group: a}]\n", "agents.0.count",
     r"exactly one of 'count' or 'profiles'"),
    ("group-zero", "name: x\nticks: 2\nagents: [{group: a, count: 0}]\n", "agents.0.count",
     r"greater than or equal to 1 \(got 0\)"),
    ("profiles-bad-suffix", "name: x\nticks: 2\nagents: [{group: a, profiles: p.txt}]\n",
     "agents.0.profiles", r"'p.txt' must end in .jsonl or .csv"),
    ("profiles-with-template",
     "name: x\nticks: 2\nagents: [{group: a, profiles: p.csv, profile: {template: worker}}]\n",
     "agents.0.profile.template", r"template cannot be combined with a profiles file"),
    ("unknown-template",
     "name: x\nticks: 2\nagents: [{group: a, count: 1, profile: {template: wizard}}]\n",
     "agents.0.profile.template",
     r"unknown profile template 'wizard' \(known: generic, parent, retiree, student, worker\)"),
    ("skill-default-and-disabled",
     "name: x\nticks: 2\nagents: [{group: a, count: 1, skills: {default: [s], disabled: [s]}}]\n",
     "agents.0.skills", r"skill\(s\) s both default-activated and disabled"),
    ("openai-no-base-url", BASE + "ticks: 3\nmodel: {backend: openai, model: m}\n",
     "model.base_url", r"'base_url' is required when backend is openai; add base_url: http"),
    ("openai-no-model",
     BASE + "ticks: 3\nmodel: {backend: openai, base_url: 'http://127.0.0.1:1/v1'}\n",
     "model.model", r"'model' is required when backend is openai"),
    ("base-url-not-http", BASE + "ticks: 3\nmodel: {base_url: 'ftp://host/v1'}\n",
     "model.base_url", r"'ftp://host/v1' is not a valid value here; use an http:// or https://"),
    ("negative-seed", BASE + "ticks: 3\nseed: -1\n", "seed",
     r"greater than or equal to 0 \(got -1\); correct the value \(in exp.yaml\)"),
    ("wrong-type", BASE + "ticks: many\n", "ticks", r"valid integer.*\(got 'many'\)"),
    ("temperature", BASE + "ticks: 3\nmodel: {temperature: 3}\n", "model.temperature",
     r"less than or equal to 2"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "field", "match"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_config_errors_name_the_field_and_the_fix(text: str, field: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        parse(text)
    assert info.value.field == field
    assert info.value.exit_code == 2
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    "key",
    ["sk-proj-abcdefghijklmnop", "sk_live_123", "abcdefghijklmnopqrstuvwxyz012345", "has space"],
)
def test_api_key_literal_is_refused_without_echoing_it(key: str) -> None:
    text = BASE + "ticks: 3\n" + yaml.safe_dump({"model": {"api_key_env": key}})
    with pytest.raises(ConfigError, match=r"must be the NAME of an environment variable") as info:
        parse(text)
    assert info.value.field == "model.api_key_env"
    assert key not in str(info.value)


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "VLLM_KEY", "my_key"])
def test_api_key_variable_names_are_accepted(name: str) -> None:
    text = BASE + f"ticks: 3\nmodel: {{api_key_env: {name}}}\n"
    assert parse(text).model.api_key_env == name  # type: ignore[attr-defined]


def test_several_errors_are_all_reported_first_one_is_the_field() -> None:
    text = BASE + "ticks: 0\nseed: -1\nexecutor: {kind: rey}\n"
    with pytest.raises(ConfigError, match=r"2 more problem\(s\)") as info:
        parse(text)
    message = str(info.value)
    assert info.value.field == "seed"
    assert "  - ticks: input should be greater than or equal to 1" in message
    assert "  - executor.kind: 'rey' is not allowed" in message


def test_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(ConfigError, match=r"broken\.yaml is not valid YAML at line \d+") as info:
        load_experiment(FIXTURES / "broken.yaml", environ={})
    assert info.value.field == ""
    assert "(while parsing a flow mapping started at line 4)" in str(info.value)


@pytest.mark.parametrize(
    ("text", "match"),
    [("- a\n- b\n", r"must hold a mapping of fields, got list"),
     ("", r"must hold a mapping of fields, got NoneType"),
     ("a: !!python/object:os.system x\n", r"is not valid YAML at line 1")],
    ids=["list", "empty", "unsafe-tag"],
)  # fmt: skip
def test_file_that_is_not_a_mapping(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse(text)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"experiment file .*nope\.yaml does not exist; check"):
        load_experiment(tmp_path / "nope.yaml", environ={})


@pytest.mark.parametrize("kind", ["directory", "latin-1"])
def test_unreadable_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "exp.yaml"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"cannot read experiment file .*exp\.yaml"):
        load_experiment(path, environ={})


# --- AGENTSIM_* overrides ----------------------------------------------------------------


def test_overrides_apply_before_validation() -> None:
    config = load_experiment(
        FIXTURES / "minimal.yaml",
        environ={
            "AGENTSIM_SEED": "3",
            "AGENTSIM_MODEL__BACKEND": "openai",
            "AGENTSIM_MODEL__MODEL": "m",
            "AGENTSIM_MODEL__BASE_URL": "http://127.0.0.1:8000/v1",
            "AGENTSIM_EXECUTOR__KIND": "ray",
            "AGENTSIM_OUTPUT__DIR": "/tmp/x",
            "AGENTSIM_OUTPUT__FORMATS": "[jsonl]",
            "AGENTSIM_MODEL__CACHE": "off",
            "AGENTSIM_AGENTS__0__COUNT": "7",
            "AGENTSIM_CONTEXT_JSON": "{}",  # runtime variable, not a field
            "HOME": "/root",
        },
    )
    assert config.seed == 3
    assert (config.model.backend, config.model.model) == ("openai", "m")
    assert config.executor.kind == "ray"
    assert config.output.dir == "/tmp/x"
    assert config.output.formats == ("jsonl",)
    assert config.model.cache == "off"
    assert config.agents[0].count == 7
    assert "AGENTSIM_CONTEXT_JSON" in IGNORED_ENV


def test_overrides_reach_list_items_and_module_options() -> None:
    text = BASE + "environment: [{module: city}]\nworkflow: [{run: {ticks: 2}}]\n"
    config = parse_experiment(
        text,
        environ={
            "AGENTSIM_ENVIRONMENT__0__PLACES": "p.csv",
            "AGENTSIM_WORKFLOW__0__RUN__TICKS": "9",
            "AGENTSIM_AGENTS__0": "{group: b, count: 1}",
        },
    )
    assert config.environment[0].options == {"places": "p.csv"}
    assert config.total_ticks() == 9
    assert config.agents[0].group == "b"


def test_load_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSIM_SEED", "11")
    assert load_experiment(FIXTURES / "minimal.yaml").seed == 11
    # parse_experiment is pure: no environ, no overrides.
    assert parse_experiment(BASE + "ticks: 1\n").seed == 0


OVERRIDE_ERRORS = [
    ("unknown-nested", {"AGENTSIM_MODEL__BAKEND": "x"}, "AGENTSIM_MODEL__BAKEND",
     r"unknown field 'bakend' \(allowed at model: backend.*did you mean 'backend'\?"),
    ("unknown-top-level", {"AGENTSIM_MODLE__BACKEND": "openai"}, "AGENTSIM_MODLE__BACKEND",
     r"AGENTSIM_MODLE__BACKEND names no config field .*did you mean AGENTSIM_MODEL__BACKEND\?"),
    ("unknown-no-close-match", {"AGENTSIM_API_KEY": "sk-1"}, "AGENTSIM_API_KEY",
     r"AGENTSIM_API_KEY names no config field .*\(top-level fields: name, seed, .*another prefix"),
    ("scalar-has-no-subfields", {"AGENTSIM_SEED__X": "1"}, "AGENTSIM_SEED__X",
     r"field 'seed' has no sub-fields; override it as a whole with AGENTSIM_SEED"),
    ("index-out-of-range", {"AGENTSIM_AGENTS__4__COUNT": "1"}, "AGENTSIM_AGENTS__4__COUNT",
     r"'agents' has 1 item\(s\), so '4' is not an index of it; use the index .* \(0 to 0\)"),
    ("index-not-a-number", {"AGENTSIM_AGENTS__FIRST__COUNT": "1"}, "AGENTSIM_AGENTS__FIRST__COUNT",
     r"so 'first' is not an index"),
    ("section-not-a-mapping", {"AGENTSIM_MODEL__BACKEND": "openai", "AGENTSIM_MODEL": "3"},
     "AGENTSIM_MODEL__BACKEND", r"'model' is not a mapping; fix the file or unset"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("environ", "field", "match"),
    [e[1:] for e in OVERRIDE_ERRORS],
    ids=[e[0] for e in OVERRIDE_ERRORS],
)
def test_bad_override_variables(environ: dict[str, str], field: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        parse_experiment(BASE + "ticks: 1\n", environ=environ)
    assert info.value.field == field


def test_invalid_override_value_names_the_variable() -> None:
    with pytest.raises(
        ConfigError, match=r"must be one of local, ray \(value from AGENTSIM_EXECUTOR__KIND\)"
    ) as info:
        parse_experiment(BASE + "ticks: 1\n", environ={"AGENTSIM_EXECUTOR__KIND": "k8s"})
    assert info.value.field == "executor.kind"
    assert "or change AGENTSIM_EXECUTOR__KIND" in str(info.value)


def test_override_value_that_is_not_yaml_is_kept_as_text() -> None:
    config = parse_experiment(BASE + "ticks: 1\n", environ={"AGENTSIM_DESCRIPTION": "a: b: c"})
    assert config.description == "a: b: c"


# --- selectors, modules, resolved dict and hash ------------------------------------------


@pytest.mark.parametrize(
    "short", ["all", ["a-00000", "a-00001"], {"group": "a"}, {"sample": 3}], ids=str
)
def test_agent_selector_short_forms_round_trip(short: object) -> None:
    selector = AgentSelector.model_validate(short)
    assert selector.model_dump() == short
    assert AgentSelector.model_validate(selector) is selector


def test_resolved_dict_is_plain_and_round_trips_to_the_same_hash(tmp_path: Path) -> None:
    config = load_experiment(FIXTURES / "full.yaml", environ={})
    resolved = config.resolved_dict()
    json.dumps(resolved)  # plain JSON types only
    assert resolved["clock"] == {"start": "2026-03-02T06:00:00", "tick": "15m"}
    assert "ticks" not in resolved
    assert resolved["environment"][1] == {"module": "social", "follow_k": 5}
    assert resolved["workflow"][1] == {
        "intervene": {"env": "city", "action": "close_place", "args": {"place": "park-1"},
                      "message": None, "agents": "all"}
    }  # fmt: skip
    assert resolved["model"]["cache"] == "off"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(resolved, sort_keys=False))
    again = load_experiment(path, environ={})
    assert again.resolved_dict() == resolved
    assert again.config_hash() == config.config_hash()
    assert len(config.config_hash()) == 64


def test_plain_ticks_round_trip_and_hash_depends_on_values() -> None:
    config = parse(BASE + "ticks: 5\nclock: {tick: 90}\n")
    resolved = config.resolved_dict()  # type: ignore[attr-defined]
    assert "workflow" not in resolved
    assert resolved["clock"]["tick"] == "1m30s"
    again = parse_experiment(yaml.safe_dump(resolved))
    assert again.config_hash() == config.config_hash()  # type: ignore[attr-defined]
    other = parse_experiment(BASE + "ticks: 5\nclock: {tick: 90}\nseed: 1\n")
    assert other.config_hash() != config.config_hash()  # type: ignore[attr-defined]


def test_environment_module_built_in_python_keeps_its_options() -> None:
    module = EnvModuleConfig(module="city", options={"places": "p.csv"})
    assert module.options == {"places": "p.csv"}
    assert module.model_dump() == {"module": "city", "places": "p.csv"}


def test_config_pickles_with_its_source() -> None:
    config = load_experiment(FIXTURES / "full.yaml", environ={})
    again = pickle.loads(pickle.dumps(config))
    assert again.resolved_dict() == config.resolved_dict()
    assert again.source_dir == FIXTURES
    error = ConfigError("seed", "must be >= 0", "fix it")
    assert str(pickle.loads(pickle.dumps(error))) == "seed: must be >= 0; fix it"


def test_config_is_frozen() -> None:
    config = parse_experiment(BASE + "ticks: 5\n")
    with pytest.raises(ValueError, match="frozen"):
        config.seed = 3  # type: ignore[misc]
