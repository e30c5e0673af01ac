"""The router, module creation, the env base classes, state round trips and env skills."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

import agentsim.env as env
from agentsim.env import (
    BUILTIN_MODULES,
    AgentInfo,
    ArgReader,
    EnvModule,
    EnvRouter,
    Intent,
    SimClock,
    create_module,
    sorted_intents,
)
from agentsim.errors import ConfigError, EnvError

START = datetime(2026, 3, 2, 8, 0)
AGENTS = [
    AgentInfo(agent_id=f"p{i:03d}", group="people", profile={"occupation": job})
    for i, job in enumerate(["nurse", "student", "retired", "barista", "cook"] * 6)
]


def new_clock() -> SimClock:
    return SimClock(START, timedelta(minutes=15))


def built(name: str, seed: int = 7, **options: Any) -> EnvModule:
    module = create_module(name, options, seed=seed, base_dir=Path("."))
    module.setup(AGENTS)
    return module


def busy_city(module: EnvModule, clock: SimClock) -> None:
    view = module.view(clock)
    intents = []
    for n, agent in enumerate(AGENTS[:10]):
        target = ["park-1", "cafe-2", "office-1", "shop-1", "gym-1"][n % 5]
        try:
            answer = view.query(agent.agent_id, "move_to", {"place": target}, seq=0)
        except EnvError:
            continue  # closed at this hour: the test only needs some movement
        assert answer.intent is not None
        intents.append(answer.intent)
    assert intents
    module.apply(intents, clock)
    module.intervene("close_place", {"place": "park-2"}, clock)


def busy_social(module: EnvModule, clock: SimClock) -> None:
    view = module.view(clock)
    calls = [
        ("p000", "post", {"text": "Love the park", "stance": 0.8}),
        ("p001", "post", {"text": "Meh"}),
        ("p002", "send_message", {"to": "p003", "text": "lunch?"}),
        ("p004", "set_opinion", {"value": -0.2, "reason": "traffic"}),
    ]
    intents = [view.query(a, act, args, seq=n).intent for n, (a, act, args) in enumerate(calls)]
    module.apply([i for i in intents if i is not None], clock)
    module.intervene("broadcast", {"text": "Park opens Sunday", "stance": 0.5}, clock)


BUSY: dict[str, Callable[[EnvModule, SimClock], None]] = {
    "city": busy_city,
    "social": busy_social,
}


# -- module creation ---------------------------------------------------------------------


def test_builtin_modules_are_city_and_social() -> None:
    assert sorted(BUILTIN_MODULES) == ["city", "social"]
    assert all(cls.name == name for name, cls in BUILTIN_MODULES.items())


def test_unknown_module_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown environment module 'weather' \\(known: city"):
        create_module("weather", {}, seed=1, base_dir=Path("."))
    with pytest.raises(ConfigError) as info:
        create_module("weather", {}, seed=1, base_dir=Path("."), config_path="environment.2")
    assert info.value.field == "environment.2.module"


def test_option_errors_carry_the_config_path() -> None:
    with pytest.raises(ConfigError, match="unknown option 'follow_j'") as info:
        create_module("social", {"follow_j": 2}, seed=1, base_dir=Path("."))
    assert info.value.field == "follow_j"
    with pytest.raises(ConfigError) as info:
        create_module(
            "city", {"walk_speed_kmh": "fast"}, seed=1, base_dir=Path("."), config_path="env.0"
        )
    assert info.value.field == "env.0.walk_speed_kmh"
    assert "got 'fast'" in str(info.value)


# -- router ------------------------------------------------------------------------------


def make_router(clock: SimClock | None = None) -> EnvRouter:
    clock = clock or new_clock()
    return EnvRouter({name: built(name).view(clock) for name in ("city", "social")})


def test_router_routes_to_the_module() -> None:
    router = make_router()
    assert router.modules == ("city", "social")
    assert router.ask("p000", "social", "opinion", {}, seq=0).result["topic"] == (
        "the new city park"
    )
    assert "home" in router.ask("p000", "city", "my_places", {}, seq=0).result
    answer = router.ask("p000", "social", "post", {"text": "hi"}, seq=3)
    assert answer.intent is not None and answer.intent.module == "social"
    # Facts for AGENT.json: the city's places; the social module has none.
    assert router.facts("p000") == router.ask("p000", "city", "my_places", {}, seq=0).result
    assert EnvRouter({}).facts("p000") == {}


def test_router_names_the_known_modules() -> None:
    with pytest.raises(EnvError, match="no environment module 'weather' \\(known: city, social\\)"):
        make_router().ask("p000", "weather", "forecast", {}, seq=0)
    with pytest.raises(EnvError, match="no environment module 'city' \\(known: none configured\\)"):
        EnvRouter({}).ask("p000", "city", "where_am_i", {}, seq=0)


def test_router_passes_module_errors_through() -> None:
    with pytest.raises(EnvError, match="module 'city' has no action 'fly'"):
        make_router().ask("p000", "city", "fly", {}, seq=0)


def test_observe_joins_module_observations() -> None:
    lines = make_router().observe("p000").splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("It is Monday 08:00. You are at Home ")
    assert lines[1].startswith("position: home-")
    assert lines[2].startswith("You have 0 new posts in your feed and 0 new messages.")
    assert EnvRouter({}).observe("p000") == ""


def test_describe_lists_modules_and_actions() -> None:
    described = make_router().describe()
    assert list(described) == ["city", "social"]
    assert "move_to" in described["city"] and "set_opinion" in described["social"]
    assert described["city"]["move_to"].endswith("[write: applied at the end of the tick]")
    json.dumps(described)  # goes into a tool schema


def test_router_and_views_pickle() -> None:
    clock = new_clock()
    router = make_router(clock)
    copy = pickle.loads(pickle.dumps(router))
    for agent in ("p000", "p017"):
        assert copy.observe(agent) == router.observe(agent)
        for module, action in (("city", "list_places"), ("social", "following")):
            assert (
                copy.ask(agent, module, action, {}, seq=0).result
                == router.ask(agent, module, action, {}, seq=0).result
            )


@pytest.mark.parametrize(("name", "per_agent"), [("city", 48), ("social", 128)])
def test_views_pickle_to_a_few_bytes_per_agent(name: str, per_agent: int) -> None:
    # Sizes grow linearly; 2,000 agents keep the test fast (10,000: ~31 and ~92 bytes each).
    n = 2_000
    module = create_module(name, {}, seed=1, base_dir=Path("."))
    module.setup([AgentInfo(agent_id=f"commuters-{i:05d}", group="c") for i in range(n)])
    size = len(pickle.dumps(module.view(new_clock()), protocol=pickle.HIGHEST_PROTOCOL))
    assert size < per_agent * n, f"{name} view pickles to {size / n:.1f} bytes per agent"


# -- state and determinism ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["city", "social"])
def test_state_round_trips_exactly_through_json(name: str) -> None:
    clock = new_clock()
    module = built(name)
    BUSY[name](module, clock)
    module.tick_events(clock)
    clock.advance()
    state = module.get_state()
    text = json.dumps(state, sort_keys=True)
    restored = create_module(name, {}, seed=7, base_dir=Path("."))
    restored.set_state(json.loads(text))
    assert restored.get_state() == state
    assert json.dumps(restored.get_state(), sort_keys=True) == text
    before, after = module.view(clock), restored.view(clock)
    for agent in AGENTS:
        assert after.observe(agent.agent_id) == before.observe(agent.agent_id)
    # and the two go on identically
    assert restored.tick_events(clock) == module.tick_events(clock)


@pytest.mark.parametrize("name", ["city", "social"])
def test_same_seed_same_setup(name: str) -> None:
    assert built(name, seed=3).get_state() == built(name, seed=3).get_state()
    assert built(name, seed=3).get_state() != built(name, seed=4).get_state()


@pytest.mark.parametrize("name", ["city", "social"])
def test_apply_order_does_not_depend_on_completion_order(name: str) -> None:
    clock = new_clock()
    a, b = built(name), built(name)
    events_a, events_b = [], []
    for module, events, flip in ((a, events_a, False), (b, events_b, True)):
        view = module.view(clock)
        calls = (
            [(x.agent_id, "move_to", {"place": "home-1"}) for x in AGENTS[:8]]
            if name == "city"
            else [(x.agent_id, "post", {"text": x.agent_id, "stance": 0.1}) for x in AGENTS[:8]]
        )
        intents = []
        for agent, action, args in calls:
            try:
                answer = view.query(agent, action, args, seq=0)
            except EnvError:
                continue  # already at home-1
            assert answer.intent is not None
            intents.append(answer.intent)
        events.extend(module.apply(intents[::-1] if flip else intents, clock))
        events.extend(module.tick_events(clock))
    assert events_a == events_b
    assert a.get_state() == b.get_state()


# -- base classes ------------------------------------------------------------------------


class Quiet(EnvModule):
    name: ClassVar[str] = "quiet"


def test_base_module_hooks_are_no_ops() -> None:
    clock = new_clock()
    module = Quiet({"module": "quiet"}, seed=1, base_dir=Path("."))
    assert module.options == {}
    module.setup(AGENTS)
    assert module.skills_dir() is None
    assert module.apply([], clock) == [] and module.tick_events(clock) == []
    assert module.get_state() == {}
    module.set_state({})
    view = module.view(clock)
    assert view.actions() == {} and view.observe("p000") == ""
    assert view.time_at(4) == datetime(2026, 3, 2, 9, 0)
    with pytest.raises(EnvError, match="module 'quiet' has no action 'x' \\(known: none\\)"):
        view.query("p000", "x", {}, seq=0)
    with pytest.raises(EnvError, match="module 'quiet' has no intervention 'reset'"):
        module.intervene("reset", {}, clock)
    assert module.field("x") == "x"
    assert Quiet({}, seed=1, base_dir=Path("."), config_path="environment.3").field("x") == (
        "environment.3.x"
    )


def test_long_choice_lists_are_shortened_in_messages() -> None:
    choices = [f"c{i:02d}" for i in range(20)]
    reader = ArgReader("m.act", {"kind": "zz"}, ("kind",))
    with pytest.raises(EnvError, match=r"'kind' must be one of c00, c01, .*c11, \.\.\.; got 'zz'"):
        reader.choice("kind", choices)


def test_intents_sort_by_agent_then_seq() -> None:
    def intent(agent: str, seq: int) -> Intent:
        return Intent(agent_id=agent, module="m", action="a", args={}, seq=seq)

    mixed = [intent("b", 0), intent("a", 2), intent("a", 1)]
    assert [i.sort_key for i in sorted_intents(mixed, "m")] == [("a", 1), ("a", 2), ("b", 0)]
    with pytest.raises(EnvError, match="is for module 'm', not 'n'; pass each module only"):
        sorted_intents(mixed, "n")


def test_package_exports_are_sorted_and_importable() -> None:
    assert env.__all__ == sorted(env.__all__, key=lambda n: (not n.isupper(), n))
    for name in env.__all__:
        assert getattr(env, name) is not None


# -- env skills --------------------------------------------------------------------------


def _skills(name: str) -> dict[str, tuple[dict[str, Any], str]]:
    module = create_module(name, {}, seed=1, base_dir=Path("."))
    folder = module.skills_dir()
    assert folder is not None and folder.is_dir()
    found = {}
    for path in sorted(folder.glob("*/SKILL.md")):
        _, front, body = path.read_text(encoding="utf-8").split("---", 2)
        found[path.parent.name] = (yaml.safe_load(front), body)
    return found


@pytest.mark.parametrize("name", ["city", "social"])
def test_env_skills_are_valid_and_document_every_action(name: str) -> None:
    skills = _skills(name)
    assert skills
    for folder, (front, body) in skills.items():
        assert front["name"] == folder
        assert 1 <= len(front["description"]) <= 1024
        assert f'module="{name}"' in body or f'module: "{name}"' in body
    documented = " ".join(body for _, body in skills.values())
    view = built(name).view(new_clock())
    for action in view.actions():
        assert f"`{action}`" in documented, f"{action} is not documented in env:{name} skills"


# -- interventions ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILTIN_MODULES))
def test_declared_interventions_are_exactly_the_handled_ones(name: str) -> None:
    """``INTERVENTIONS`` is what config validation checks at load time, so it must list
    every action ``intervene`` handles and nothing else."""
    module = built(name)
    assert module.INTERVENTIONS
    for action in module.INTERVENTIONS:
        # No arguments: each declared action gets as far as checking its arguments.
        with pytest.raises(EnvError, match=rf"^{name}\.{action}: argument '\w+' is required"):
            module.intervene(action, {}, new_clock())
    with pytest.raises(
        EnvError,
        match=rf"module '{name}' has no intervention 'nope' \(known: "
        rf"{', '.join(module.INTERVENTIONS)}\)",
    ):
        module.intervene("nope", {}, new_clock())


async def test_a_read_of_everyone_waits_for_the_complete_views() -> None:
    clock = new_clock()
    asked: list[int] = []

    async def final() -> Any:
        asked.append(1)
        return {name: built(name).view(clock) for name in ("city", "social")}

    router = EnvRouter({"city": built("city").view(clock)}, final=final)
    # An ordinary read answers from the early views; a reads_all one waits, once.
    assert (await router.aask("p000", "city", "my_places", {}, seq=0)).result["home"]
    assert asked == []
    home = router.ask("p000", "city", "my_places", {}, seq=0).result["home"]["id"]
    info = await router.aask("p000", "city", "place_info", {"place": home}, seq=1)
    assert info.result["people_here"] >= 1 and asked == [1]
    await router.aask("p000", "city", "place_info", {"place": home}, seq=2)
    assert asked == [1] and router.modules == ("city", "social")
