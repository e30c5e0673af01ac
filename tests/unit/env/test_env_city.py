"""The city module: places, hours, walking, occupancy, interventions."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentsim.env import AgentInfo, CityModule, CityView, Intent, Place, SimClock
from agentsim.errors import ConfigError, EnvError

MONDAY_7 = datetime(2026, 3, 2, 7, 0)

# One home so that assignments are known; at 5 km/h one km of street is 12 minutes.
PLACES_CSV = """id,name,category,x,y,open,close
home-1,Home 1,home,0,0,00:00,24:00
cafe-1,Cafe 1,cafe,0,0.5,07:00,19:00
office-1,Office 1,office,1,1,08:00,18:00
school-1,School 1,school,2,0,07:30,16:00
park-1,Park 1,park,0.25,0,06:00,22:00
bar-1,Bar 1,bar,0,0.25,20:00,02:00
"""


def write_csv(tmp_path: Path, text: str = PLACES_CSV) -> Path:
    (tmp_path / "places.csv").write_text(text, encoding="utf-8")
    return tmp_path


def make_city(tmp_path: Path, agents: int = 3, **options: Any) -> CityModule:
    base = write_csv(tmp_path)
    city = CityModule({"places": "places.csv", **options}, seed=1, base_dir=base)
    occupations = ["nurse", "student", "retired", "barista"]
    city.setup(
        [
            AgentInfo(agent_id=f"a{i}", group="people", profile={"occupation": occupations[i % 4]})
            for i in range(agents)
        ]
    )
    return city


def clock_at(hour: int = 7, minute: int = 0) -> SimClock:
    clock = SimClock(MONDAY_7, timedelta(minutes=15))
    ticks = ((hour - 7) * 60 + minute) // 15
    if ticks:
        clock.advance(ticks)
    return clock


def ask(view: CityView, action: str, agent: str = "a0", **args: Any) -> dict[str, Any]:
    return view.query(agent, action, args, seq=0).result


def move(city: CityModule, clock: SimClock, agent: str, place: str, seq: int = 0) -> Intent:
    intent = city.view(clock).query(agent, "move_to", {"place": place}, seq=seq).intent
    assert intent is not None
    return intent


# -- places ------------------------------------------------------------------------------


def test_default_town_has_about_forty_places_of_every_kind() -> None:
    city = CityModule({}, seed=3, base_dir=Path("."))
    categories = {p.category for p in city.places.values()}
    assert categories == {
        "home",
        "office",
        "school",
        "cafe",
        "park",
        "shop",
        "restaurant",
        "gym",
    }
    assert 35 <= len(city.places) <= 45
    assert "park-1" in city.places
    assert all(p.is_open(3 * 60) for p in city.places.values() if p.category == "home")
    offices = [p for p in city.places.values() if p.category == "office"]
    assert all(not p.is_open(3 * 60) and p.is_open(12 * 60) for p in offices)
    assert all(0 <= p.x <= 4 and 0 <= p.y <= 4 for p in city.places.values())


def test_default_town_depends_on_the_seed_only() -> None:
    a = CityModule({}, seed=3, base_dir=Path("."))
    b = CityModule({}, seed=3, base_dir=Path("/elsewhere"))
    c = CityModule({}, seed=4, base_dir=Path("."))
    assert a.places == b.places
    assert a.places != c.places


def test_places_are_loaded_from_csv(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    assert list(city.places) == ["home-1", "cafe-1", "office-1", "school-1", "park-1", "bar-1"]
    cafe = city.places["cafe-1"]
    assert (cafe.name, cafe.category, cafe.x, cafe.y, cafe.hours) == (
        "Cafe 1",
        "cafe",
        0.0,
        0.5,
        "07:00-19:00",
    )


@pytest.mark.parametrize(
    ("minute", "is_open"),
    [(19 * 60, False), (20 * 60, True), (23 * 60 + 59, True), (60, True), (2 * 60, False)],
    ids=["19:00", "20:00", "23:59", "01:00", "02:00"],
)
def test_places_open_past_midnight(minute: int, is_open: bool) -> None:
    bar = Place(id="bar", name="Bar", category="bar", x=0, y=0, opens=20 * 60, closes=2 * 60)
    assert bar.is_open(minute) is is_open


def test_equal_open_and_close_means_always_open() -> None:
    place = Place(id="p", name="P", category="x", x=0, y=0, opens=6 * 60, closes=6 * 60)
    assert place.is_open(0) and place.is_open(6 * 60) and place.is_open(23 * 60)


CSV_HEAD = "id,name,category,x,y,open,close\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id,name,x,y,open,close\n", "missing column\\(s\\) category"),
        (CSV_HEAD + "h,H,home,0,0,7am,24:00\n", ":2: column 'open' must be HH:MM, got '7am'"),
        (CSV_HEAD + "h,H,home,0,0,00:00,24:30\n", "column 'close' must be HH:MM"),
        (CSV_HEAD + "h,H,home,0,0,00:60,24:00\n", "column 'open' must be HH:MM"),
        (CSV_HEAD + "h,H,home,east,0,00:00,24:00\n", "x and y must be numbers \\(km\\)"),
        (CSV_HEAD + "h,H,home,0,0,00:00,24:00\nh,H,home,1,1,00:00,24:00\n", ":3: place id 'h'"),
        (CSV_HEAD + ",H,home,0,0,00:00,24:00\n", "column 'id' is empty"),
        (CSV_HEAD + "c,C,cafe,0,0,07:00,19:00\n", "no place has the category 'home'"),
    ],
    ids=["column", "hour", "hour-24", "minute", "x", "repeated", "empty-id", "no-home"],
)
def test_bad_places_csv_is_a_config_error(tmp_path: Path, text: str, message: str) -> None:
    base = write_csv(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as info:
        CityModule({"places": "places.csv"}, seed=1, base_dir=base, config_path="environment.0")
    assert info.value.field == "environment.0.places"
    assert "id,name,category,x,y,open,close" in str(info.value)


def test_missing_places_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read places file .*nope\.csv") as info:
        CityModule({"places": "nope.csv"}, seed=1, base_dir=tmp_path)
    assert info.value.field == "places"  # relative: the engine prefixes environment.<i>


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"walk_speed": 4}, "environment.0.walk_speed", "unknown option 'walk_speed'"),
        ({"walk_speed_kmh": 0}, "environment.0.walk_speed_kmh", "greater than 0, got 0"),
        ({"capacity": 0}, "environment.0.capacity", "greater than or equal to 1"),
    ],
    ids=["unknown", "speed", "capacity"],
)
def test_bad_options_name_the_field(options: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        CityModule(options, seed=1, base_dir=Path("."), config_path="environment.0")
    assert info.value.field == field
    assert "capacity, nearby, places, walk_speed_kmh" in str(info.value)


def test_the_module_key_of_the_experiment_item_is_not_an_option() -> None:
    city = CityModule({"module": "city", "walk_speed_kmh": 4}, seed=1, base_dir=Path("."))
    assert city.config.walk_speed_kmh == 4


# -- setup and reads ---------------------------------------------------------------------


def test_setup_assigns_home_and_workplace_from_the_occupation(tmp_path: Path) -> None:
    city = make_city(tmp_path, agents=4)
    view = city.view(clock_at())
    work = {a: ask(view, "my_places", a)["work"] for a in ("a0", "a1", "a2", "a3")}
    assert work["a0"]["id"] == "office-1"  # nurse: no keyword, an office
    assert work["a1"]["id"] == "school-1"
    assert work["a2"] is None  # retired
    assert work["a3"]["id"] == "cafe-1"
    assert ask(view, "my_places")["home"] == {
        "id": "home-1",
        "name": "Home 1",
        "category": "home",
        "hours": "00:00-24:00",
    }
    assert ask(view, "where_am_i")["place"]["id"] == "home-1"
    # The same facts go to the agent's AGENT.json; an agent the city does not know has none.
    assert view.agent_facts("a1") == ask(view, "my_places", "a1")
    assert view.agent_facts("nobody") == {}


def test_missing_workplace_category_falls_back_to_an_office(tmp_path: Path) -> None:
    city = make_city(tmp_path, agents=0)
    city.setup([AgentInfo(agent_id="g", group="gardeners", profile={"occupation": "cook"})])
    assert ask(city.view(clock_at()), "my_places", "g")["work"]["id"] == "office-1"


def test_without_offices_an_unmatched_agent_has_no_work(tmp_path: Path) -> None:
    base = write_csv(tmp_path, CSV_HEAD + "h,H,home,0,0,00:00,24:00\n")
    city = CityModule({"places": "places.csv"}, seed=1, base_dir=base)
    city.setup([AgentInfo(agent_id="x", group="commuters")])
    assert ask(city.view(clock_at()), "my_places", "x")["work"] is None


def test_setup_rejects_duplicate_agents(tmp_path: Path) -> None:
    city = make_city(tmp_path, agents=0)
    twice = [AgentInfo(agent_id="a", group="g"), AgentInfo(agent_id="a", group="g")]
    with pytest.raises(EnvError, match="agent id 'a' is given twice"):
        city.setup(twice)


def test_setup_is_deterministic_for_a_seed() -> None:
    agents = [AgentInfo(agent_id=f"p{i}", group="workers") for i in range(50)]
    a, b, c = (CityModule({}, seed=s, base_dir=Path(".")) for s in (5, 5, 6))
    a.setup(agents)
    b.setup(list(reversed(agents)))
    c.setup(agents)
    assert a.get_state() == b.get_state()
    assert a.get_state() != c.get_state()


def test_list_places_nearest_first_with_filters(tmp_path: Path) -> None:
    view = make_city(tmp_path).view(clock_at(7, 0))
    everything = ask(view, "list_places")
    assert [p["id"] for p in everything["places"]] == [
        "home-1",
        "bar-1",
        "park-1",
        "cafe-1",
        "office-1",
        "school-1",
    ]
    assert everything["total"] == 6
    park = everything["places"][2]
    assert park == {
        "id": "park-1",
        "name": "Park 1",
        "category": "park",
        "hours": "06:00-22:00",
        "open_now": True,
        "minutes": 3,
    }
    open_now = ask(view, "list_places", open_now=True)
    assert [p["id"] for p in open_now["places"]] == ["home-1", "park-1", "cafe-1"]
    assert ask(view, "list_places", category="cafe")["places"][0]["minutes"] == 6
    assert len(ask(view, "list_places", limit=2)["places"]) == 2


def test_other_peoples_homes_are_not_listed(tmp_path: Path) -> None:
    base = write_csv(tmp_path, PLACES_CSV + "home-2,Home 2,home,5,5,00:00,24:00\n")
    city = CityModule({"places": "places.csv"}, seed=1, base_dir=base)
    city.setup([AgentInfo(agent_id=f"a{i}", group="g") for i in range(20)])
    view = city.view(clock_at())
    for agent in ("a0", "a1", "a2"):
        homes = ask(view, "list_places", agent, category="home")["places"]
        assert [h["id"] for h in homes] == [ask(view, "my_places", agent)["home"]["id"]]


def test_place_info_and_travel_time(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    view = city.view(clock_at(7, 0))
    info = ask(view, "place_info", place="office-1")
    assert info["minutes"] == 24 and info["open_now"] is False
    assert (info["x"], info["y"], info["closed_by_order"], info["people_here"]) == (
        1.0,
        1.0,
        False,
        0,
    )
    assert ask(view, "place_info", place="home-1")["people_here"] == 3
    assert ask(view, "travel_time", place="office-1") == {
        "from": "home-1",
        "to": "office-1",
        "minutes": 24,
        "ticks": 2,
    }
    assert ask(view, "travel_time", place="cafe-1")["ticks"] == 1
    assert ask(view, "travel_time", place="home-1")["ticks"] == 0
    assert ask(view, "travel_time", place="school-1", **{"from": "office-1"})["minutes"] == 24


@pytest.mark.parametrize(
    ("action", "args", "message"),
    [
        ("list_places", {"category": "zoo"}, "argument 'category' must be one of bar, cafe"),
        ("list_places", {"open_now": "yes"}, "argument 'open_now' must be true or false"),
        ("list_places", {"limit": 0}, "argument 'limit' must be a whole number from 1 to 100"),
        ("list_places", {"near": "me"}, "unknown argument 'near' \\(allowed: category, limit"),
        ("place_info", {}, "argument 'place' is required"),
        ("place_info", {"place": "mars"}, "there is no place 'mars'; call list_places"),
        ("travel_time", {"place": 3}, "argument 'place' must be a non-empty text"),
        ("travel_time", {"place": "cafe-1", "from": "moon"}, "there is no place 'moon'"),
        ("where_am_i", {"x": 1}, "unknown argument 'x' \\(allowed: none: pass \\{\\}\\)"),
        ("move_to", {"place": ""}, "argument 'place' must be a non-empty text"),
        ("fly_to", {}, "module 'city' has no action 'fly_to' \\(known: where_am_i, list_places"),
    ],
    ids=lambda v: str(v)[:20],
)
def test_bad_arguments_name_the_argument(
    tmp_path: Path, action: str, args: dict[str, Any], message: str
) -> None:
    view = make_city(tmp_path).view(clock_at())
    with pytest.raises(EnvError, match=message):
        view.query("a0", action, args, seq=0)


def test_arguments_must_be_an_object(tmp_path: Path) -> None:
    view = make_city(tmp_path).view(clock_at())
    with pytest.raises(EnvError, match=r"city\.where_am_i: arguments must be an object"):
        view.query("a0", "where_am_i", ["x"], seq=0)  # type: ignore[arg-type]


def test_unknown_agent_is_refused(tmp_path: Path) -> None:
    view = make_city(tmp_path).view(clock_at())
    with pytest.raises(EnvError, match="agent 'zz' is not in the city \\(it has 3 agents\\)"):
        view.query("zz", "where_am_i", {}, seq=0)
    with pytest.raises(EnvError, match="agent 'zz' is not in the city"):
        view.observe("zz")


def test_actions_mark_the_writes(tmp_path: Path) -> None:
    actions = make_city(tmp_path).view(clock_at()).actions()
    assert set(actions) == {
        "where_am_i",
        "list_places",
        "place_info",
        "travel_time",
        "my_places",
        "move_to",
    }
    assert [a for a, doc in actions.items() if "[write" in doc] == ["move_to"]
    assert actions["list_places"].startswith("list_places(category, open_now, limit):")


# -- moving ------------------------------------------------------------------------------


def test_short_walk_arrives_at_the_end_of_the_tick(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    clock = clock_at(7, 0)
    answer = city.view(clock).query("a0", "move_to", {"place": "cafe-1"}, seq=4)
    assert answer.result == {
        "accepted": True,
        "to": "cafe-1",
        "minutes": 6,
        "arrives_at": "2026-03-02T07:15:00",
        "note": "you leave at the end of this tick",
    }
    assert answer.intent == Intent(
        agent_id="a0", module="city", action="move_to", args={"place": "cafe-1"}, seq=4
    )
    # The view is a snapshot: the agent is still home until the tick is applied.
    assert ask(city.view(clock), "where_am_i")["place"]["id"] == "home-1"
    events = city.apply([answer.intent], clock)
    assert events == [
        {
            "tick": 0,
            "time": "2026-03-02T07:00:00",
            "type": "move",
            "agent_id": "a0",
            "from": "home-1",
            "to": "cafe-1",
            "depart": "2026-03-02T07:00:00",
            "arrive": "2026-03-02T07:15:00",
            "minutes": 6,
            "reason": "agent",
        }
    ]
    end = city.tick_events(clock)
    assert end[0] == {
        "tick": 0,
        "type": "arrive",
        "agent_id": "a0",
        "place": "cafe-1",
        "time": "2026-03-02T07:15:00",
    }
    assert end[1] == {
        "tick": 0,
        "time": "2026-03-02T07:00:00",
        "type": "city_occupancy",
        "agent_id": None,
        "occupancy": {"cafe-1": 1, "home-1": 2},
        "in_transit": 0,
    }
    clock.advance()
    assert ask(city.view(clock), "where_am_i")["place"]["id"] == "cafe-1"


def test_long_walk_keeps_the_agent_in_transit(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    clock = clock_at(7, 45)
    answer = city.view(clock).query("a0", "move_to", {"place": "office-1"}, seq=0)
    assert answer.result["arrives_at"] == "2026-03-02T08:15:00"
    assert answer.intent is not None
    city.apply([answer.intent], clock)
    assert city.tick_events(clock)[0] == {
        "tick": 3,
        "time": "2026-03-02T07:45:00",
        "type": "city_occupancy",
        "agent_id": None,
        "occupancy": {"home-1": 2},
        "in_transit": 1,
    }
    clock.advance()
    view = city.view(clock)
    where = ask(view, "where_am_i")
    assert where["in_transit"] is True
    assert where["destination"]["id"] == "office-1"
    assert where["arrives_at"] == "2026-03-02T08:15:00"
    assert view.observe("a0") == (
        "It is Monday 08:00. You are walking to Office 1 (office) and arrive at 08:15.\n"
        "position: in transit to office-1"
    )
    # list_places measures from where the walk ends.
    assert ask(view, "list_places", category="office")["places"][0]["minutes"] == 0
    with pytest.raises(EnvError, match="already walking to 'office-1' and arrive at 08:15"):
        view.query("a0", "move_to", {"place": "cafe-1"}, seq=0)
    arrivals = city.tick_events(clock)
    assert arrivals[0]["type"] == "arrive" and arrivals[0]["time"] == "2026-03-02T08:15:00"
    assert arrivals[1]["occupancy"] == {"home-1": 2, "office-1": 1}


def test_observation_names_time_place_and_open_places_nearby(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    assert city.view(clock_at(7, 0)).observe("a0") == (
        "It is Monday 07:00. You are at Home 1 (home). "
        "Open nearby: Park 1 (park, 3 min), Cafe 1 (cafe, 6 min).\nposition: home-1"
    )
    late = SimClock(datetime(2026, 3, 2, 23, 0), timedelta(minutes=15))
    assert city.view(late).observe("a0") == (
        "It is Monday 23:00. You are at Home 1 (home). Open nearby: Bar 1 (bar, 3 min).\n"
        "position: home-1"
    )
    quiet = make_city(tmp_path, nearby=0)
    assert (
        quiet.view(clock_at(7, 0))
        .observe("a0")
        .endswith("You are at Home 1 (home).\nposition: home-1")
    )


@pytest.mark.parametrize(
    ("hour", "place", "message"),
    [
        (7, "home-1", "you are already at 'home-1'; pick another place"),
        (7, "office-1", "'office-1' \\(Office 1\\) is closed when you would arrive at 07:30 "),
        (19, "cafe-1", "is closed when you would arrive at 19:15 \\(open 07:00-19:00\\)"),
    ],
    ids=["here", "not-yet-open", "closing"],
)
def test_move_to_refuses_impossible_moves(
    tmp_path: Path, hour: int, place: str, message: str
) -> None:
    view = make_city(tmp_path).view(clock_at(hour))
    with pytest.raises(EnvError, match=message):
        view.query("a0", "move_to", {"place": place}, seq=0)


def test_place_closed_by_order_is_refused_and_evicts_people(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    clock = clock_at(9, 0)
    city.apply([move(city, clock, "a0", "cafe-1"), move(city, clock, "a1", "office-1")], clock)
    city.tick_events(clock)
    clock.advance()  # a0 is at the cafe, a1 still walking to the office
    events = city.intervene("close_place", {"place": "cafe-1"}, clock)
    assert events[0] == {
        "tick": 9,
        "time": "2026-03-02T09:15:00",
        "type": "place_closed",
        "agent_id": None,
        "place": "cafe-1",
    }
    assert [(e["agent_id"], e["from"], e["to"], e["reason"]) for e in events[1:]] == [
        ("a0", "cafe-1", "home-1", "place_closed")
    ]
    view = city.view(clock)
    assert ask(view, "place_info", place="cafe-1")["closed_by_order"] is True
    assert "cafe-1" not in [
        p["id"] for p in ask(view, "list_places", "a2", open_now=True)["places"]
    ]
    with pytest.raises(EnvError, match="'cafe-1' \\(Cafe 1\\) is closed by order"):
        view.query("a2", "move_to", {"place": "cafe-1"}, seq=0)
    # Those on their way to a closed place turn back home.
    redirected = city.intervene("close_place", {"place": "office-1"}, clock)
    assert [(e["agent_id"], e["to"]) for e in redirected[1:]] == [("a1", "home-1")]
    assert city.intervene("open_place", {"place": "cafe-1"}, clock) == [
        {
            "tick": 9,
            "time": "2026-03-02T09:15:00",
            "type": "place_opened",
            "agent_id": None,
            "place": "cafe-1",
        }
    ]
    assert ask(city.view(clock), "place_info", place="cafe-1")["closed_by_order"] is False


def test_closing_a_home_keeps_its_residents_there(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    events = city.intervene("close_place", {"place": "home-1"}, clock_at())
    assert events == [
        {
            "tick": 0,
            "time": "2026-03-02T07:00:00",
            "type": "place_closed",
            "agent_id": None,
            "place": "home-1",
        }
    ]
    assert city.get_state()["positions"] == {"a0": "home-1", "a1": "home-1", "a2": "home-1"}


@pytest.mark.parametrize(
    ("action", "args", "message"),
    [
        ("flood", {"place": "cafe-1"}, r"'city' has no intervention 'flood' \(known: close_place"),
        ("close_place", {"place": "moon"}, "city.close_place: there is no place 'moon'"),
        ("close_place", {}, "city.close_place: argument 'place' is required"),
        ("open_place", {"place": "cafe-1"}, "'cafe-1' is not closed; nothing to open"),
        ("close_place", {"place": "cafe-1", "why": 1}, "unknown argument 'why'"),
    ],
    ids=["action", "place", "missing", "not-closed", "extra"],
)
def test_bad_interventions(tmp_path: Path, action: str, args: dict[str, Any], message: str) -> None:
    with pytest.raises(EnvError, match=message):
        make_city(tmp_path).intervene(action, args, clock_at())


def test_closing_twice_is_an_error(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    city.intervene("close_place", {"place": "park-1"}, clock_at())
    with pytest.raises(EnvError, match="'park-1' is already closed"):
        city.intervene("close_place", {"place": "park-1"}, clock_at())


def test_capacity_refuses_full_places(tmp_path: Path) -> None:
    city = make_city(tmp_path, agents=3, capacity=1)
    clock = clock_at(9, 0)
    first, second = move(city, clock, "a0", "park-1"), move(city, clock, "a1", "park-1")
    # Both were valid against the snapshot; at the tick end the first in order wins.
    events = city.apply([second, first], clock)
    assert [(e["type"], e["agent_id"]) for e in events] == [
        ("move", "a0"),
        ("move_refused", "a1"),
    ]
    assert events[1]["reason"] == "full"
    city.tick_events(clock)
    clock.advance()
    with pytest.raises(EnvError, match="'park-1' \\(Park 1\\) is full \\(1 of 1 people\\)"):
        city.view(clock).query("a2", "move_to", {"place": "park-1"}, seq=0)


def test_apply_refuses_moves_that_became_impossible(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    clock = clock_at(9, 0)
    one, two = move(city, clock, "a0", "park-1", 0), move(city, clock, "a0", "cafe-1", 1)
    late = move(city, clock, "a1", "cafe-1")
    city.intervene("close_place", {"place": "cafe-1"}, clock)
    stale = [
        Intent(agent_id="ghost", module="city", action="move_to", args={"place": "cafe-1"}, seq=0),
        Intent(agent_id="a2", module="city", action="move_to", args={"place": "moon"}, seq=0),
        Intent(agent_id="a2", module="city", action="move_to", args={"place": "home-1"}, seq=1),
    ]
    events = city.apply([two, late, *stale, one], clock)
    assert [(e["type"], e["agent_id"], e.get("reason")) for e in events] == [
        ("move", "a0", "agent"),
        ("move_refused", "a0", "already walking"),
        ("move_refused", "a1", "closed by order"),
        ("move_refused", "a2", "unknown place"),
        ("move_refused", "a2", "already there"),
        ("move_refused", "ghost", "unknown agent"),
    ]


def test_apply_rejects_foreign_or_unknown_intents(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    foreign = Intent(agent_id="a0", module="social", action="post", args={}, seq=0)
    with pytest.raises(EnvError, match="is for module 'social', not 'city'"):
        city.apply([foreign], clock_at())
    teleport = Intent(agent_id="a0", module="city", action="teleport", args={}, seq=0)
    with pytest.raises(EnvError, match="'teleport' is not a write of the city"):
        city.apply([teleport], clock_at())


def test_a_day_of_commuting_is_plausible(tmp_path: Path) -> None:
    """A worker leaves home, arrives at the office when it is open, and comes back."""
    city = make_city(tmp_path, agents=1)
    clock = clock_at(7, 30)
    city.apply([move(city, clock, "a0", "office-1")], clock)
    seen: list[tuple[str, str]] = []
    while clock.now.hour < 19:
        for event in city.tick_events(clock):
            if event["type"] == "arrive":
                seen.append((event["time"][11:16], event["place"]))
        clock.advance()
        if clock.now.hour == 17 and clock.now.minute == 30:
            city.apply([move(city, clock, "a0", "home-1")], clock)
    assert seen == [("08:00", "office-1"), ("18:00", "home-1")]


def test_set_state_rejects_bad_state(tmp_path: Path) -> None:
    city = make_city(tmp_path)
    with pytest.raises(EnvError, match="city state is malformed \\(KeyError"):
        city.set_state({"positions": {}})
    state = city.get_state()
    state["positions"]["a0"] = "atlantis"
    with pytest.raises(EnvError, match="unknown place\\(s\\) atlantis"):
        city.set_state(state)
