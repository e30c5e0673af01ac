"""Hostile and mistaken input is refused at load time: YAML alias bombs, oversized or special
files, numbers that would exhaust memory or overflow, unknown interventions and AGENTSIM_*
typos. Every case checks the message, and through the CLI that nothing was written."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.config.experiment import MAX_AGENTS, MAX_TICKS, load_experiment, parse_experiment
from agentsim.errors import ConfigError

BASE = "name: x\nagents: [{group: a, count: 2}]\n"


def _bomb() -> str:
    """The "billion laughs": nine levels of nine aliases, 9**9 strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n" + BASE + "ticks: 1\n"


def _parse(text: str) -> None:
    parse_experiment(text, source="exp.yaml", environ={})


# --- the YAML itself ---------------------------------------------------------------------


def test_an_alias_bomb_is_refused_fast() -> None:
    text = _bomb()
    assert len(text.encode()) < 600
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"exp\.yaml: its aliases expand to more than 100,000"):
        _parse(text)
    # Stopped at 100,000 expansions, not after 9**9: a guard far from both (a loaded machine
    # may run the 100,000 several times slower than an idle one).
    assert time.perf_counter() - started < 30


YAML_CASES = [
    ("recursive-alias", BASE + "ticks: 1\ndescription: &d [1, *d]\n",
     r"exp\.yaml: an alias refers to a node that contains it \(line 4\); remove the recursive"),
    ("deep-nesting", BASE + "ticks: 1\ndescription: " + "[" * 200 + "]" * 200 + "\n",
     r"exp\.yaml: lists and mappings are nested more than 64 levels deep"),
    ("huge-integer", BASE + "ticks: 1\nseed: " + "9" * 5000 + "\n",
     r"exp\.yaml holds a value YAML cannot read: .*4300 digits"),
    ("not-a-mapping", "- 1\n", r"exp\.yaml must hold a mapping of fields, got list"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "match"), [c[1:] for c in YAML_CASES], ids=[c[0] for c in YAML_CASES]
)
def test_hostile_yaml_is_a_config_error(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _parse(text)


def test_small_aliases_still_work() -> None:
    shared = parse_experiment(
        "name: x\nticks: 1\nagents:\n  - {group: a, count: 1, skills: &s {default: [x]}}\n"
        "  - {group: b, count: 1, skills: *s}\n",
        environ={},
    )
    assert shared.agents[1].skills.default == ("x",)


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(BASE + "ticks: 1\n# " + "x" * 1_000_000 + "\n")
    with pytest.raises(
        ConfigError, match=r"exp\.yaml is 1,000,0\d\d bytes, more than the 1,000,000"
    ):
        load_experiment(path, environ={})
    with pytest.raises(ConfigError, match=r"is 1,000,0\d\d bytes, more than the 1,000,000"):
        parse_experiment(path.read_text(), source="exp.yaml")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    os.mkfifo(path)
    with pytest.raises(ConfigError, match=r"exp\.yaml: it is not a regular file \(FIFO"):
        load_experiment(path, environ={})


# --- numbers that exhaust memory or overflow ---------------------------------------------

NUMBER_CASES = [
    ("count-float-text", "ticks: 1\nagents: [{group: a, count: 1e12}]\n", "agents.0.count",
     r"valid integer"),
    ("count-int", "ticks: 1\nagents: [{group: a, count: 1000000000000}]\n", "agents.0.count",
     r"less than or equal to 1000000"),
    ("count-float", "ticks: 1\nagents: [{group: a, count: 1.0e+12}]\n", "agents.0.count",
     r"valid integer \(got 1000000000000.0\)"),
    ("count-sum", "ticks: 1\nagents: [{group: a, count: 600000}, {group: b, count: 600000}]\n",
     "agents", r"the groups hold 1,200,000 agents together, more than the 1,000,000"),
    ("ticks-float-text", BASE.replace("name: x\n", "") + "ticks: 1e30\n", "ticks",
     r"valid integer"),
    ("ticks-int", BASE.replace("name: x\n", "") + "ticks: 1000000000000000000000000000000\n",
     "ticks", r"less than or equal to 1000000"),
    ("ticks-zero", BASE.replace("name: x\n", "") + "ticks: 0\n", "ticks",
     r"greater than or equal to 1"),
    ("workflow-sum", BASE.replace("name: x\n", "")
     + "workflow: [{run: {ticks: 600000}}, {run: {ticks: 600000}}]\n", "workflow",
     r"the workflow runs 1,200,000 ticks, more than the 1,000,000"),
    ("tick-length", BASE.replace("name: x\n", "") + "ticks: 1\nclock: {tick: 1000000000d}\n",
     "clock.tick", r"duration '1000000000d' is longer than 100 years"),
    ("tick-a-year", BASE.replace("name: x\n", "") + "ticks: 1\nclock: {tick: 400d}\n",
     "clock.tick", r"a tick of '400d' is longer than the longest allowed, 366d"),
    ("tick-digits", BASE.replace("name: x\n", "") + "ticks: 1\nclock: {tick: " + "9" * 40 + "s}\n",
     "clock.tick", r"cannot read .* as a duration"),
    ("clock-end", BASE.replace("name: x\n", "")
     + "ticks: 900000\nclock: {start: 9999-06-01, tick: 1d}\n", "clock.tick",
     r"900,000 ticks of 1d from 9999-06-01 end after the year 9999"),
    ("seed", BASE.replace("name: x\n", "") + "ticks: 1\nseed: 99999999999999999999\n", "seed",
     r"less than or equal to 9223372036854775807"),
    ("timeout-inf", BASE.replace("name: x\n", "") + "ticks: 1\nmodel: {timeout: .inf}\n",
     "model.timeout", r"finite number"),
    ("retries", BASE.replace("name: x\n", "") + "ticks: 1\nmodel: {max_retries: 1000000}\n",
     "model.max_retries", r"less than or equal to 100"),
    ("concurrency", BASE.replace("name: x\n", "")
     + "ticks: 1\nmodel: {max_concurrency: 10000000}\n", "model.max_concurrency",
     r"less than or equal to 100000"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "field", "match"), [c[1:] for c in NUMBER_CASES], ids=[c[0] for c in NUMBER_CASES]
)
def test_numbers_are_bounded(text: str, field: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        _parse("name: x\n" + text)
    assert info.value.field == field


def test_the_bounds_are_reachable() -> None:
    config = parse_experiment(
        f"name: x\nagents: [{{group: a, count: {MAX_AGENTS}}}]\nticks: {MAX_TICKS}\n"
        "clock: {tick: 1m, start: 2026-01-01}\n",
        environ={},
    )
    assert config.total_ticks() == MAX_TICKS


# --- checks that used to wait for the run ------------------------------------------------


def test_an_unknown_intervention_is_caught_at_load_time() -> None:
    text = (
        BASE + "environment: [{module: city}]\n"
        "workflow: [{run: {ticks: 6}}, {intervene: {env: city, action: close_park}}]\n"
    )
    with pytest.raises(
        ConfigError,
        match=r"module 'city' has no intervention 'close_park' \(known: close_place, "
        r"open_place\); fix the workflow's intervene step",
    ) as info:
        _parse(text)
    assert info.value.field == "workflow.1.intervene.action"


def test_the_api_key_variable_may_carry_the_prefix() -> None:
    text = (
        BASE + "ticks: 1\nmodel: {backend: openai, model: m, base_url: 'http://127.0.0.1:1/v1',"
        " api_key_env: AGENTSIM_KEY}\n"
    )
    config = parse_experiment(text, environ={"AGENTSIM_KEY": "sk-secret", "AGENTSIM_SEED": "4"})
    assert (config.model.api_key_env, config.seed) == ("AGENTSIM_KEY", 4)
    with pytest.raises(ConfigError, match=r"AGENTSIM_KEY names no config field"):
        parse_experiment(BASE + "ticks: 1\n", environ={"AGENTSIM_KEY": "sk-secret"})


# --- through the command line: exit 2, the field named, nothing written -------------------

CLI_CASES = {
    "alias-bomb": (_bomb(), r"its aliases expand to more than 100,000"),
    "count": ("name: t\nticks: 2\nagents: [{group: a, count: 1000000000000}]\n",
              r"agents\.0\.count: .*less than or equal to 1000000"),
    "tick": ("name: t\nticks: 2\nclock: {tick: 1000000000d}\nagents: [{group: a, count: 1}]\n",
             r"clock\.tick: duration '1000000000d' is longer than 100 years"),
    "ticks": ("name: t\nticks: 1e30\nagents: [{group: a, count: 1}]\n",
              r"ticks: input should be a valid integer"),
    "intervention": ("name: t\nagents: [{group: a, count: 1}]\nenvironment: [{module: city}]\n"
                     "workflow: [{run: {ticks: 6}}, {intervene: {env: city, action: flood}}]\n",
                     r"workflow\.1\.intervene\.action: module 'city' has no intervention 'flood'"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_cli_refuses_bad_input_and_writes_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, message = CLI_CASES[case]
    exp = tmp_path / "exp.yaml"
    exp.write_text(text)
    out = tmp_path / "run"
    started = time.perf_counter()
    assert main(["run", str(exp), "--out", str(out)]) == 2
    assert time.perf_counter() - started < 30  # a guard: refused before any tick runs
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert not out.exists()


def test_cli_refuses_a_typo_in_an_agentsim_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: t\nticks: 1\nagents: [{group: a, count: 1}]\n")
    monkeypatch.setenv("AGENTSIM_MODLE__BACKEND", "openai")
    out = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "AGENTSIM_MODLE__BACKEND names no config field" in err
    assert "did you mean AGENTSIM_MODEL__BACKEND?" in err
    assert not out.exists()


@pytest.mark.parametrize("ticks", ["0", "-3"])
def test_cli_refuses_ticks_below_one(
    ticks: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: t\nticks: 1\nagents: [{group: a, count: 1}]\n")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["run", str(exp), "--out", str(out), "--ticks", ticks])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --ticks: {ticks} is not a whole number of ticks >= 1" in err
    assert not out.exists()
