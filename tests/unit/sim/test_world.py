"""The world builder that the engine, the interview and the viewer share."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentsim.config.experiment import load_experiment, parse_experiment
from agentsim.config.profiles import resolve_agents
from agentsim.errors import ConfigError
from agentsim.run.world import build_world
from tests.unit.helpers import FIXTURES

EXPERIMENT = FIXTURES / "experiments" / "small.yaml"


def test_the_world_holds_the_agents_modules_skills_and_settings_of_the_experiment() -> None:
    config = load_experiment(EXPERIMENT)
    world = build_world(config, trace="off")
    assert world.agents == tuple(resolve_agents(config))
    assert list(world.modules) == ["city", "social"]
    assert world.skills.modules == ("city", "social")
    assert [name for _, name in world.skills.env] == ["city", "social"]  # their own skills
    assert world.skills.catalog_budget_tokens == config.skills.catalog_budget_tokens
    assert world.settings.trace == "off"
    assert world.settings.max_react_turns == config.agent.max_react_turns
    # Set up with the agents, as before a first tick: the city knows where each one starts.
    layout = world.modules["city"].view_layout()
    assert layout is not None and set(layout.start) == {a.agent_id for a in world.agents}


def test_a_bad_module_option_names_its_place_in_the_experiment(tmp_path: Path) -> None:
    text = EXPERIMENT.read_text().replace("{module: city}", "{module: city, walk_speed: 4}")
    config = parse_experiment(text, source=str(tmp_path / "x.yaml"))
    with pytest.raises(ConfigError, match="unknown option 'walk_speed'") as info:
        build_world(config)
    assert info.value.field == "environment.0.walk_speed"
