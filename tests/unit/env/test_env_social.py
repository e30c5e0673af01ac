"""The social module: follow graph, posts and messages delivered next tick, opinions."""

from __future__ import annotations

import statistics
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentsim.env import AgentInfo, Intent, SimClock, SocialModule, SocialView
from agentsim.errors import ConfigError, EnvError

START = datetime(2026, 3, 2, 8, 0)


def make_social(
    agents: int = 4, *, opinions: list[float] | None = None, seed: int = 1, **options: Any
) -> SocialModule:
    social = SocialModule(options, seed=seed, base_dir=Path("."))
    infos = []
    for i in range(agents):
        profile = {"opinion": opinions[i]} if opinions else {}
        infos.append(AgentInfo(agent_id=f"a{i}", group="g", profile=profile))
    social.setup(infos)
    return social


def everyone_follows_a0(social: SocialModule, n: int) -> None:
    """Make a0 followed by all others through the public API (state round trip)."""
    state = social.get_state()
    state["following"] = {f"a{i}": ["a0"] if i else [] for i in range(n)}
    social.set_state(state)


def ask(view: SocialView, action: str, agent: str = "a1", **args: Any) -> dict[str, Any]:
    return view.query(agent, action, args, seq=0).result


def write(social: SocialModule, clock: SimClock, agent: str, action: str, **args: Any) -> Intent:
    intent = social.view(clock).query(agent, action, args, seq=0).intent
    assert intent is not None
    return intent


@pytest.fixture
def clock() -> SimClock:
    return SimClock(START, timedelta(minutes=15))


# -- setup -------------------------------------------------------------------------------


def test_follow_graph_has_k_others_per_agent() -> None:
    social = make_social(30, follow_k=4)
    following = social.get_state()["following"]
    assert all(len(f) == 4 and agent not in f for agent, f in following.items())
    followers = sum(len(f) for f in following.values())
    assert followers == 120


def test_small_networks_follow_everyone_they_can() -> None:
    assert make_social(3, follow_k=5).get_state()["following"]["a0"] == ["a1", "a2"]
    assert make_social(1).get_state()["following"] == {"a0": []}
    empty = make_social(0)
    assert empty.tick_events(SimClock(START, timedelta(minutes=1)))[0]["n"] == 0


def test_setup_is_deterministic_for_a_seed() -> None:
    assert make_social(40, seed=9).get_state() == make_social(40, seed=9).get_state()
    assert make_social(40, seed=9).get_state() != make_social(40, seed=10).get_state()


def test_initial_opinions_come_from_the_profile_or_the_seed() -> None:
    given = make_social(3, opinions=[-1.0, 0.25, 1])
    assert given.get_state()["opinions"] == {"a0": -1.0, "a1": 0.25, "a2": 1.0}
    drawn = list(make_social(200).get_state()["opinions"].values())
    assert all(-1 <= v <= 1 for v in drawn)
    assert abs(statistics.mean(drawn)) < 0.15
    assert 0.2 < statistics.pstdev(drawn) < 0.6


@pytest.mark.parametrize("bad", [1.5, "high", True], ids=repr)
def test_bad_profile_opinion_is_a_config_error(bad: object) -> None:
    social = SocialModule({}, seed=1, base_dir=Path("."))
    agent = AgentInfo(agent_id="x", group="g", profile={"opinion": bad})
    with pytest.raises(ConfigError, match=r"agent 'x' has opinion .* not a number in \[-1, 1\]"):
        social.setup([agent])


def test_homophily_links_people_of_similar_opinion() -> None:
    opinions = [round(-1 + 2 * i / 199, 3) for i in range(200)]

    def mean_gap(homophily: float) -> float:
        social = make_social(200, opinions=opinions, homophily=homophily, follow_k=5)
        state = social.get_state()
        ops = state["opinions"]
        gaps = [abs(ops[a] - ops[b]) for a, fs in state["following"].items() for b in fs]
        return statistics.mean(gaps)

    assert mean_gap(1.0) < 0.8 * mean_gap(0.0)


def test_setup_rejects_duplicate_agents() -> None:
    social = SocialModule({}, seed=1, base_dir=Path("."))
    with pytest.raises(EnvError, match="agent id 'b' is given twice"):
        social.setup([AgentInfo(agent_id=i, group="g") for i in ("a", "b", "b")])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"follow": 3}, "unknown option 'follow' \\(allowed: feed_size, follow_k, homophily"),
        ({"homophily": 2}, "less than or equal to 1"),
        ({"feed_size": 0}, "greater than or equal to 1"),
        ({"topic": ""}, "at least 1 character"),
    ],
    ids=["unknown", "homophily", "feed", "topic"],
)
def test_bad_options_are_config_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        SocialModule(options, seed=1, base_dir=Path("."), config_path="environment.1")
    assert info.value.field == f"environment.1.{next(iter(options))}"


# -- posts, feed, messages ---------------------------------------------------------------


def test_posts_are_visible_from_the_next_tick(clock: SimClock) -> None:
    social = make_social(3)
    everyone_follows_a0(social, 3)
    answer = social.view(clock).query("a0", "post", {"text": "Park opens!", "stance": 0.5}, seq=2)
    assert answer.result == {"accepted": True, "visible_from": "2026-03-02T08:15:00"}
    assert answer.intent == Intent(
        agent_id="a0",
        module="social",
        action="post",
        args={"text": "Park opens!", "stance": 0.5},
        seq=2,
    )
    assert ask(social.view(clock), "feed")["posts"] == []
    events = social.apply([answer.intent], clock)
    assert events == [
        {
            "tick": 0,
            "time": "2026-03-02T08:00:00",
            "type": "post",
            "agent_id": "a0",
            "post_id": "post-1",
            "text": "Park opens!",
            "stance": 0.5,
        }
    ]
    clock.advance()
    view = social.view(clock)
    feed = ask(view, "feed")
    assert feed == {
        "topic": "the new city park",
        "posts": [
            {
                "id": "post-1",
                "author": "a0",
                "time": "2026-03-02T08:00:00",
                "text": "Park opens!",
                "stance": 0.5,
            }
        ],
        "new": 1,
    }
    assert view.observe("a1").startswith("You have 1 new post in your feed and 0 new messages.")
    assert ask(view, "feed", "a0")["posts"] == []  # you do not follow yourself


def test_posts_are_new_only_in_the_tick_after_they_were_written(clock: SimClock) -> None:
    social = make_social(3)
    everyone_follows_a0(social, 3)
    social.apply([write(social, clock, "a0", "post", text="first")], clock)
    clock.advance()
    social.apply([write(social, clock, "a0", "post", text="second")], clock)
    clock.advance()
    view = social.view(clock)
    read = view.query("a1", "feed", {"limit": 1}, seq=0)
    assert [p["text"] for p in read.result["posts"]] == ["second"]
    assert "stance" not in read.result["posts"][0]
    assert read.result["new"] == 1
    assert read.intent is None  # reads never write, so interviews may use them
    assert view.observe("a2").startswith("You have 1 new post in your feed")
    clock.advance()
    later = social.view(clock)
    assert [p["text"] for p in ask(later, "feed")["posts"]] == ["second", "first"]
    assert ask(later, "feed")["new"] == 0


def test_authors_keep_only_their_latest_posts(clock: SimClock) -> None:
    social = make_social(2, feed_size=2)
    everyone_follows_a0(social, 2)
    intents = [
        Intent(agent_id="a0", module="social", action="post", args={"text": f"t{i}"}, seq=i)
        for i in range(4)
    ]
    social.apply(list(reversed(intents)), clock)  # applied in seq order anyway
    clock.advance()
    assert [p["text"] for p in ask(social.view(clock), "feed")["posts"]] == ["t3", "t2"]
    with pytest.raises(EnvError, match="argument 'limit' must be a whole number from 1 to 2"):
        social.view(clock).query("a1", "feed", {"limit": 3}, seq=0)


def test_messages_arrive_next_tick(clock: SimClock) -> None:
    social = make_social(3, inbox_size=2)
    sent = social.view(clock).query("a0", "send_message", {"to": "a2", "text": "hi"}, seq=0)
    assert sent.result["accepted"] is True
    assert sent.intent is not None
    assert ask(social.view(clock), "inbox", "a2") == {"messages": [], "new": 0}
    events = social.apply([sent.intent], clock)
    assert events == [
        {
            "tick": 0,
            "time": "2026-03-02T08:00:00",
            "type": "message",
            "agent_id": "a0",
            "to": "a2",
            "message_id": "msg-1",
            "text": "hi",
        }
    ]
    clock.advance()
    social.apply(
        [write(social, clock, "a1", "send_message", to="a2", text=t) for t in "xyz"], clock
    )
    clock.advance()
    view = social.view(clock)
    assert view.observe("a2").startswith("You have 0 new posts in your feed and 2 new messages")
    inbox = view.query("a2", "inbox", {}, seq=0)
    # The inbox keeps the latest two (inbox_size); "hi" has dropped out.
    assert [(m["from"], m["text"]) for m in inbox.result["messages"]] == [("a1", "z"), ("a1", "y")]
    assert inbox.result["new"] == 2
    assert inbox.result["messages"][0]["time"] == "2026-03-02T08:15:00"
    assert inbox.intent is None
    assert len(ask(view, "inbox", "a2", limit=1)["messages"]) == 1
    clock.advance()
    assert "0 new messages" in social.view(clock).observe("a2")


def test_follow_and_unfollow(clock: SimClock) -> None:
    social = make_social(6, follow_k=1)
    view = social.view(clock)
    before = ask(view, "following", "a0")["agents"]
    other = next(a for a in ("a1", "a2", "a3") if a not in before)
    follow = view.query("a0", "follow", {"agent": other}, seq=0).intent
    unfollow = view.query("a0", "unfollow", {"agent": before[0]}, seq=1).intent
    assert follow is not None and unfollow is not None
    events = social.apply([unfollow, follow, follow], clock)  # the duplicate changes nothing
    assert events == [
        {
            "tick": 0,
            "time": "2026-03-02T08:00:00",
            "type": "follow",
            "agent_id": "a0",
            "target": other,
        },
        {
            "tick": 0,
            "time": "2026-03-02T08:00:00",
            "type": "unfollow",
            "agent_id": "a0",
            "target": before[0],
        },
    ]
    clock.advance()
    view = social.view(clock)
    assert ask(view, "following", "a0") == {"count": 1, "agents": [other]}
    assert "a0" in ask(view, "followers", other)["agents"]
    assert ask(view, "followers", other, limit=1)["count"] >= len(
        ask(view, "followers", other, limit=1)["agents"]
    )
    with pytest.raises(EnvError, match=f"you already follow '{other}'"):
        view.query("a0", "follow", {"agent": other}, seq=0)
    with pytest.raises(EnvError, match=f"you do not follow '{before[0]}'; call following"):
        view.query("a0", "unfollow", {"agent": before[0]}, seq=0)


def test_set_opinion_changes_the_opinion_at_the_tick_end(clock: SimClock) -> None:
    social = make_social(2, opinions=[0.0, 0.3], topic="the tram line")
    view = social.view(clock)
    assert ask(view, "opinion", "a0") == {"topic": "the tram line", "value": 0.0}
    intent = view.query("a0", "set_opinion", {"value": -0.4, "reason": "noise"}, seq=0).intent
    assert intent is not None
    same = view.query("a1", "set_opinion", {"value": 0.3}, seq=0).intent
    assert same is not None
    events = social.apply([intent, same], clock)
    assert events == [
        {
            "tick": 0,
            "time": "2026-03-02T08:00:00",
            "type": "opinion_change",
            "agent_id": "a0",
            "old": 0.0,
            "new": -0.4,
            "cause": "self",
            "reason": "noise",
        }
    ]
    clock.advance()
    assert (
        social.view(clock)
        .observe("a0")
        .endswith("Your opinion on the tram line is -0.40 (-1 against, +1 for).")
    )


def test_posts_with_a_stance_sway_their_readers(clock: SimClock) -> None:
    social = make_social(4, opinions=[1.0, -0.5, 0.0, 1.0], influence=0.5)
    everyone_follows_a0(social, 4)
    events = social.apply([write(social, clock, "a0", "post", text="yes!", stance=1.0)], clock)
    changes = [(e["agent_id"], e["old"], e["new"], e["cause"]) for e in events[1:]]
    # a3 already agrees: no change, no event.
    assert changes == [("a1", -0.5, 0.25, "post"), ("a2", 0.0, 0.5, "post")]
    assert all(e["post_id"] == "post-1" for e in events[1:])
    # Without influence, or without a stance, nobody moves.
    plain = make_social(3, opinions=[1.0, -0.5, 0.0])
    everyone_follows_a0(plain, 3)
    assert len(plain.apply([write(plain, clock, "a0", "post", text="x", stance=1)], clock)) == 1
    assert len(social.apply([write(social, clock, "a0", "post", text="no stance")], clock)) == 1


@pytest.mark.parametrize(
    ("action", "args", "message"),
    [
        ("post", {}, "social.post: argument 'text' is required"),
        ("post", {"text": "x" * 281}, "'text' must be a non-empty text of at most 280 .*281 char"),
        ("post", {"text": "   "}, "argument 'text' must be a non-empty text"),
        ("post", {"text": "x", "stance": 2}, "argument 'stance' must be a number from -1 to 1"),
        ("post", {"text": "x", "stance": True}, "argument 'stance' must be a number"),
        ("post", {"text": "x", "stance": float("nan")}, "argument 'stance' must be a number"),
        ("post", {"text": "x", "mood": 1}, "unknown argument 'mood' \\(allowed: stance, text\\)"),
        ("send_message", {"to": "a1", "text": "hi"}, "argument 'to' is yourself"),
        ("send_message", {"to": "zz", "text": "hi"}, "there is no agent 'zz'; use an id"),
        ("send_message", {"to": "a0"}, "argument 'text' is required"),
        ("follow", {"agent": "a1"}, "argument 'agent' is yourself"),
        ("set_opinion", {}, "argument 'value' is required \\(a number from -1 to 1\\)"),
        ("set_opinion", {"value": "up"}, "argument 'value' must be a number from -1 to 1"),
        ("inbox", {"limit": 101}, "argument 'limit' must be a whole number from 1 to 100"),
        ("followers", {"limit": "all"}, "argument 'limit' must be a whole number"),
        ("like", {}, "module 'social' has no action 'like' \\(known: feed, inbox, opinion"),
    ],
    ids=lambda v: str(v)[:24],
)
def test_bad_arguments_name_the_argument(
    clock: SimClock, action: str, args: dict[str, Any], message: str
) -> None:
    view = make_social(3).view(clock)
    with pytest.raises(EnvError, match=message):
        view.query("a1", action, args, seq=0)


def test_unknown_agent_is_refused(clock: SimClock) -> None:
    view = make_social(3).view(clock)
    with pytest.raises(EnvError, match="agent 'zz' is not in the social network \\(it has 3"):
        view.query("zz", "feed", {}, seq=0)
    with pytest.raises(EnvError, match="agent 'zz' is not in the social network"):
        view.observe("zz")


def test_actions_mark_the_writes(clock: SimClock) -> None:
    actions = make_social(2).view(clock).actions()
    writes = [a for a, doc in actions.items() if "[write" in doc]
    assert writes == ["post", "send_message", "follow", "unfollow", "set_opinion"]
    assert set(actions) - set(writes) == {"feed", "inbox", "opinion", "followers", "following"}


def test_apply_rejects_impossible_intents(clock: SimClock) -> None:
    social = make_social(2)

    def intent(who: str, action: str, **args: Any) -> Intent:
        return Intent(agent_id=who, module="social", action=action, args=args, seq=0)

    cases = [
        (intent("zz", "post", text="x"), "agent 'zz' is not in the social network"),
        (intent("a0", "dance"), "'dance' is not an action of the social module"),
        (intent("a0", "send_message", to="zz", text="x"), "recipient 'zz' is not in"),
        (intent("a0", "follow", agent="a0"), "'a0' cannot be followed by 'a0'"),
    ]
    for bad, message in cases:
        with pytest.raises(EnvError, match=message):
            social.apply([bad], clock)


# -- interventions and run-level events --------------------------------------------------


def test_broadcast_reaches_everyone_next_tick(clock: SimClock) -> None:
    social = make_social(4, opinions=[0.0, 0.0, 0.0, 1.0], influence=0.5, follow_k=0)
    events = social.intervene("broadcast", {"text": "Park closes", "stance": -1}, clock)
    assert events[0] == {
        "tick": 0,
        "time": "2026-03-02T08:00:00",
        "type": "post",
        "agent_id": None,
        "author": "system",
        "post_id": "post-1",
        "text": "Park closes",
        "stance": -1.0,
    }
    assert [(e["agent_id"], e["new"]) for e in events[1:]] == [
        ("a0", -0.5),
        ("a1", -0.5),
        ("a2", -0.5),
        ("a3", 0.0),
    ]
    clock.advance()
    view = social.view(clock)
    for agent in ("a0", "a3"):
        assert ask(view, "feed", agent)["posts"][0]["author"] == "system"


def test_set_opinion_intervention(clock: SimClock) -> None:
    social = make_social(2, opinions=[0.1, 0.2])
    assert social.intervene("set_opinion", {"agent": "a1", "value": -1}, clock) == [
        {
            "tick": 0,
            "time": "2026-03-02T08:00:00",
            "type": "opinion_change",
            "agent_id": "a1",
            "old": 0.2,
            "new": -1.0,
            "cause": "intervention",
        }
    ]


@pytest.mark.parametrize(
    ("action", "args", "message"),
    [
        ("ban", {}, r"module 'social' has no intervention 'ban' \(known: broadcast"),
        ("broadcast", {}, "social.broadcast: argument 'text' is required"),
        (
            "broadcast",
            {"text": "x", "stance": 3},
            "'stance': input should be less than or equal to 1, got 3",
        ),
        ("set_opinion", {"agent": "zz", "value": 0}, "there is no agent 'zz'"),
        (
            "set_opinion",
            {"agent": "a0", "value": 9},
            "'value': input should be less than or equal to 1",
        ),
    ],
    ids=["action", "text", "stance", "agent", "value"],
)
def test_bad_interventions(
    clock: SimClock, action: str, args: dict[str, Any], message: str
) -> None:
    with pytest.raises(EnvError, match=message):
        make_social(2).intervene(action, args, clock)


def test_tick_events_summarise_opinions_and_deliveries(clock: SimClock) -> None:
    social = make_social(5, opinions=[-1.0, -0.5, 0.0, 0.5, 1.0])
    intents = [
        write(social, clock, "a0", "post", text="x"),
        write(social, clock, "a1", "send_message", to="a2", text="y"),
        write(social, clock, "a3", "send_message", to="a2", text="z"),
    ]
    social.apply(intents, clock)
    (summary,) = social.tick_events(clock)
    assert summary == {
        "tick": 0,
        "time": "2026-03-02T08:00:00",
        "type": "social_opinions",
        "agent_id": None,
        "n": 5,
        "mean": 0.0,
        "std": round(statistics.pstdev([-1, -0.5, 0, 0.5, 1]), 6),
        "histogram": [1, 0, 1, 0, 0, 1, 0, 1, 0, 1],
        "groups": {
            "g": {"n": 5, "mean": 0.0, "std": round(statistics.pstdev([-1, -0.5, 0, 0.5, 1]), 6)}
        },
        "group_histograms": {"g": [1, 0, 1, 0, 0, 1, 0, 1, 0, 1]},
        "posts_delivered": 1,
        "messages_delivered": 2,
    }
    assert sum(summary["histogram"]) == summary["n"]
    (later,) = social.tick_events(clock)
    assert (later["posts_delivered"], later["messages_delivered"]) == (0, 0)


def test_set_state_rejects_bad_state() -> None:
    social = make_social(2)
    with pytest.raises(EnvError, match="social state is malformed \\(KeyError"):
        social.set_state({"opinions": {}})
    state = social.get_state()
    state["posts"] = {"a0": [[1, 2]]}
    with pytest.raises(EnvError, match="social state is malformed \\(TypeError"):
        social.set_state(state)


def test_tick_events_split_opinions_by_group_and_the_groups_survive_a_restore(
    clock: SimClock,
) -> None:
    social = SocialModule({}, seed=1, base_dir=Path("."))
    social.setup(
        [
            AgentInfo(agent_id="a0", group="left", profile={"opinion": -0.5}),
            AgentInfo(agent_id="a1", group="left", profile={"opinion": -1.0}),
            AgentInfo(agent_id="b0", group="right", profile={"opinion": 0.75}),
        ]
    )
    (summary,) = social.tick_events(clock)
    assert summary["groups"] == {
        "left": {"n": 2, "mean": -0.75, "std": 0.25},
        "right": {"n": 1, "mean": 0.75, "std": 0.0},
    }
    old_state = {k: v for k, v in social.get_state().items() if k != "groups"}
    social.set_state(old_state)  # a checkpoint from before groups were kept
    assert social.tick_events(clock)[0]["groups"] == summary["groups"]
