"""The ``social`` module: a follow graph, posts, direct messages and one opinion per agent.

Posts and messages written at tick ``t`` are applied at the end of ``t`` and appear in the
view of tick ``t + 1``, where they count as "new" (broadcasts count as new in the tick they
are made). Reads never write, so that read-only interviews can use them. Each author keeps
only its latest ``feed_size`` posts and each inbox its latest ``inbox_size`` messages, so
that a view stays small with 10,000 agents.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from agentsim._seeding import agent_rng
from agentsim.env.base import (
    ActionSpec,
    AgentInfo,
    ArgReader,
    EnvAnswer,
    EnvModule,
    EnvView,
    Intent,
    InterventionArgs,
    ViewLayout,
    parse_options,
    sorted_intents,
)
from agentsim.env.clock import SimClock
from agentsim.errors import ConfigError, EnvError

__all__ = [
    "SYSTEM",
    "BroadcastArgs",
    "Message",
    "Post",
    "SetOpinionArgs",
    "SocialModule",
    "SocialOptions",
    "SocialView",
]

SYSTEM = "system"
"""Author of broadcasts; everyone sees its posts."""

_BINS = 10


class Post(NamedTuple):
    num: int
    tick: int
    text: str
    stance: float | None


class Message(NamedTuple):
    num: int
    sender: str
    tick: int
    text: str


class SocialOptions(BaseModel):
    """Options of the ``social`` module in the experiment's ``environment`` list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    follow_k: int = Field(default=5, ge=0, le=200)
    """How many others each agent follows at the start."""
    feed_size: int = Field(default=5, ge=1, le=50)
    inbox_size: int = Field(default=10, ge=1, le=100)
    homophily: float = Field(default=0.0, ge=0, le=1)
    """0: follow anyone; 1: strongly prefer people of a similar opinion."""
    influence: float = Field(default=0.0, ge=0, le=1)
    """Share of the gap to a delivered post's stance by which each reader's opinion moves
    (0: opinions change only when agents set them)."""
    topic: str = Field(default="the new city park", min_length=1, max_length=200)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _signed(value: float) -> str:
    return f"{value:+.2f}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SocialView(EnvView):
    """The social network at the start of one tick."""

    ACTIONS: ClassVar[tuple[ActionSpec, ...]] = (
        ActionSpec(
            name="feed",
            doc="latest posts of the people you follow and of the system, newest first",
            params=("limit",),
        ),
        ActionSpec(
            name="inbox", doc="your latest direct messages, newest first", params=("limit",)
        ),
        ActionSpec(name="opinion", doc="your current opinion on the topic, from -1 to +1"),
        ActionSpec(name="followers", doc="who follows you", params=("limit",)),
        ActionSpec(name="following", doc="who you follow"),
        ActionSpec(
            name="post",
            doc="post to your followers (<= 280 chars, optional stance -1..+1); seen next tick",
            params=("text", "stance"),
            writes=True,
        ),
        ActionSpec(
            name="send_message",
            doc="send a direct message to one agent; delivered next tick",
            params=("to", "text"),
            writes=True,
        ),
        ActionSpec(name="follow", doc="start following an agent", params=("agent",), writes=True),
        ActionSpec(name="unfollow", doc="stop following an agent", params=("agent",), writes=True),
        ActionSpec(
            name="set_opinion",
            doc="change your opinion on the topic (value -1..+1, optional reason)",
            params=("value", "reason"),
            writes=True,
        ),
    )

    topic: str
    feed_size: int
    opinions: Mapping[str, float]
    following: Mapping[str, tuple[str, ...]]
    followers: Mapping[str, tuple[str, ...]]
    posts: Mapping[str, tuple[Post, ...]]
    inbox: Mapping[str, tuple[Message, ...]]

    def _check_agent(self, agent_id: str) -> None:
        if agent_id not in self.opinions:
            raise EnvError(
                f"agent {agent_id!r} is not in the social network (it has {len(self.opinions)} "
                "agents); only agents given to SocialModule.setup can use it"
            )

    def _feed(self, agent_id: str) -> list[tuple[str, Post]]:
        authors = (*self.following.get(agent_id, ()), SYSTEM)
        items = [(a, p) for a in authors for p in self.posts.get(a, ())]
        items.sort(key=lambda item: item[1].num, reverse=True)
        return items

    def _other(self, args: ArgReader, name: str, agent_id: str) -> str:
        other = args.text(name, max_len=200) or ""
        if other not in self.opinions:
            raise EnvError(
                f"social: there is no agent {other!r}; use an id from your feed, "
                "followers or following"
            )
        if other == agent_id:
            raise EnvError(f"social: argument {name!r} is yourself; name another agent")
        return other

    def _is_new(self, tick: int) -> bool:
        """Delivered at the end of the previous tick (or broadcast during this one)."""
        return tick >= self.tick - 1

    def _do_feed(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        limit = args.integer("limit", lo=1, hi=self.feed_size, default=self.feed_size)
        items = self._feed(agent_id)
        posts = [
            {
                "id": f"post-{p.num}",
                "author": author,
                "time": self.time_at(p.tick).isoformat(),
                "text": p.text,
                **({"stance": p.stance} if p.stance is not None else {}),
            }
            for author, p in items[:limit]
        ]
        new = sum(1 for _, p in items if self._is_new(p.tick))
        return EnvAnswer(result={"topic": self.topic, "posts": posts, "new": new})

    def _do_inbox(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        limit = args.integer("limit", lo=1, hi=100, default=10)
        messages = sorted(self.inbox.get(agent_id, ()), key=lambda m: m.num, reverse=True)
        shown = [
            {
                "id": f"msg-{m.num}",
                "from": m.sender,
                "time": self.time_at(m.tick).isoformat(),
                "text": m.text,
            }
            for m in messages[:limit]
        ]
        new = sum(1 for m in messages if self._is_new(m.tick))
        return EnvAnswer(result={"messages": shown, "new": new})

    def _do_opinion(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        return EnvAnswer(result={"topic": self.topic, "value": self.opinions[agent_id]})

    def _do_followers(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        limit = args.integer("limit", lo=1, hi=100, default=20)
        them = self.followers.get(agent_id, ())
        return EnvAnswer(result={"count": len(them), "agents": list(them[:limit])})

    def _do_following(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        them = self.following.get(agent_id, ())
        return EnvAnswer(result={"count": len(them), "agents": list(them)})

    def _accepted(self, agent_id: str, action: str, args: dict[str, Any], seq: int) -> EnvAnswer:
        result = {"accepted": True, "visible_from": self.time_at(self.tick + 1).isoformat()}
        return EnvAnswer(result=result, intent=self._intent(agent_id, action, args, seq))

    def _do_post(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        text = args.text("text")
        stance = args.number("stance", lo=-1, hi=1, required=False)
        return self._accepted(agent_id, "post", {"text": text, "stance": stance}, seq)

    def _do_send_message(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        to = self._other(args, "to", agent_id)
        text = args.text("text")
        return self._accepted(agent_id, "send_message", {"to": to, "text": text}, seq)

    def _do_follow(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        other = self._other(args, "agent", agent_id)
        if other in self.following.get(agent_id, ()):
            raise EnvError(f"social.follow: you already follow {other!r}")
        return self._accepted(agent_id, "follow", {"agent": other}, seq)

    def _do_unfollow(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        other = self._other(args, "agent", agent_id)
        if other not in self.following.get(agent_id, ()):
            raise EnvError(
                f"social.unfollow: you do not follow {other!r}; call following to see who you do"
            )
        return self._accepted(agent_id, "unfollow", {"agent": other}, seq)

    def _do_set_opinion(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        value = args.number("value", lo=-1, hi=1)
        reason = args.text("reason", required=False)
        return self._accepted(agent_id, "set_opinion", {"value": value, "reason": reason}, seq)

    def observe(self, agent_id: str) -> str:
        self._check_agent(agent_id)
        posts = sum(1 for _, p in self._feed(agent_id) if self._is_new(p.tick))
        messages = sum(1 for m in self.inbox.get(agent_id, ()) if self._is_new(m.tick))
        return (
            f"You have {_count(posts, 'new post')} in your feed and "
            f"{_count(messages, 'new message')}. "
            f"Your opinion on {self.topic} is {_signed(self.opinions[agent_id])} "
            "(-1 against, +1 for)."
        )


def _histogram(values: list[float]) -> list[int]:
    """Agents per opinion bin, ``_BINS`` equal bins from -1 to +1 (+1 in the last)."""
    counts = [0] * _BINS
    for v in values:
        counts[min(_BINS - 1, int((v + 1) / 2 * _BINS))] += 1
    return counts


def _moments(values: Sequence[float]) -> tuple[int, float, float]:
    """Count, mean and population standard deviation (0, 0.0, 0.0 for no values)."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n) if n else 0.0
    return n, mean, std


def _initial_opinion(info: AgentInfo, rng_value: float) -> float:
    value = info.profile.get("opinion")
    if value is None:
        return round(max(-1.0, min(1.0, rng_value)), 3)
    if isinstance(value, bool) or not isinstance(value, int | float) or not -1 <= value <= 1:
        raise ConfigError(
            "profile.opinion",
            f"agent {info.agent_id!r} has opinion {value!r}, which is not a number in [-1, 1]",
            "set the profile's opinion from -1 (against) to +1 (for), or leave it out",
        )
    return float(value)


class BroadcastArgs(InterventionArgs):
    """The arguments of ``broadcast``: a post every agent's feed shows."""

    text: str = Field(min_length=1, max_length=280, pattern=r"\S")
    stance: float | None = Field(default=None, ge=-1, le=1)


class SetOpinionArgs(InterventionArgs):
    """The arguments of ``set_opinion``: one agent's opinion, from -1 to +1."""

    agent: str = Field(min_length=1, max_length=200)
    value: float = Field(ge=-1, le=1)


class SocialModule(EnvModule):
    """Follow graph, posts, messages and opinions. See the module docstring for timing."""

    name: ClassVar[str] = "social"
    INTERVENTIONS: ClassVar[tuple[str, ...]] = ("broadcast", "set_opinion")
    INTERVENTION_ARGS: ClassVar[Mapping[str, type[InterventionArgs]]] = {
        "broadcast": BroadcastArgs,
        "set_opinion": SetOpinionArgs,
    }

    def __init__(
        self,
        options: Mapping[str, Any],
        *,
        seed: int,
        base_dir: Path,
        config_path: str = "",
    ) -> None:
        super().__init__(options, seed=seed, base_dir=base_dir, config_path=config_path)
        self.config = parse_options(SocialOptions, self.options, path=self.config_path)
        self._opinions: dict[str, float] = {}
        self._groups: dict[str, str] = {}  # agent id -> group: opinions are summed by group
        self._following: dict[str, tuple[str, ...]] = {}
        # (following, followers) as handed to views; rebuilt only after the graph changed.
        self._graph: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]] | None = None
        self._posts: dict[str, tuple[Post, ...]] = {}
        self._inbox: dict[str, tuple[Message, ...]] = {}
        self._next_post = 1
        self._next_message = 1
        self._delivered = [0, 0]  # posts, messages since the last tick_events

    def skills_dir(self) -> Path | None:
        return Path(__file__).parent / "skills" / self.name

    def setup(self, agents: Sequence[AgentInfo]) -> None:
        ordered = self._by_id(agents)
        ids = [a.agent_id for a in ordered]
        rngs = [agent_rng(self.seed, i, stream="env:social") for i in ids]
        opinions = [
            _initial_opinion(a, r.gauss(0.0, 0.4)) for a, r in zip(ordered, rngs, strict=True)
        ]
        k, h, n = self.config.follow_k, self.config.homophily, len(ids)
        # Without homophily the pool is the pick; with it, a pool of 4k to choose from.
        pool = min(n - 1, 4 * k if h else k)
        following: dict[str, tuple[str, ...]] = {}
        for i, rng in enumerate(rngs):
            # A random pool (O(k) per agent, not O(n)), then a weighted pick without
            # replacement (Efraimidis-Spirakis keys) that favours similar opinions.
            candidates = [j for j in rng.sample(range(n), min(n, pool + 1)) if j != i][:pool]
            if not h:
                following[ids[i]] = tuple(sorted(ids[j] for j in candidates))
                continue
            keyed = sorted(
                (
                    -(rng.random() ** (1 / (1 - h * abs(opinions[i] - opinions[j]) / 2 + 1e-6))),
                    ids[j],
                )
                for j in candidates
            )
            following[ids[i]] = tuple(sorted(name for _, name in keyed[:k]))
        self._opinions = dict(zip(ids, opinions, strict=True))
        self._groups = {a.agent_id: a.group for a in ordered}
        self._following = following
        self._graph = None
        self._posts, self._inbox = {}, {}

    def _followers(self) -> dict[str, tuple[str, ...]]:
        followers: dict[str, list[str]] = {}
        for agent in sorted(self._following):
            for other in self._following[agent]:
                followers.setdefault(other, []).append(agent)
        return {a: tuple(f) for a, f in followers.items()}

    def view_layout(self) -> ViewLayout:
        return ViewLayout(
            edges=[(a, b) for a in sorted(self._following) for b in self._following[a]]
        )

    def view(self, clock: SimClock) -> SocialView:
        if self._graph is None:
            self._graph = (dict(self._following), self._followers())
        graph = self._graph
        return SocialView(
            module=self.name,
            tick=clock.tick,
            now=clock.now,
            tick_length=clock.tick_length,
            topic=self.config.topic,
            feed_size=self.config.feed_size,
            opinions=dict(self._opinions),
            following=graph[0],
            followers=graph[1],
            posts=dict(self._posts),
            inbox=dict(self._inbox),
        )

    def _add_post(self, author: str, text: str, stance: float | None, tick: int) -> Post:
        post = Post(num=self._next_post, tick=tick, text=text, stance=stance)
        self._next_post += 1
        self._posts[author] = (*self._posts.get(author, ()), post)[-self.config.feed_size :]
        self._delivered[0] += 1
        return post

    def _set_opinion(
        self, agent: str, value: float, clock: SimClock, **extra: Any
    ) -> dict[str, Any]:
        old = self._opinions[agent]
        self._opinions[agent] = value
        return clock.event("opinion_change", agent_id=agent, old=old, new=value, **extra)

    def _influence(
        self, author: str, post: Post, followers: Mapping[str, tuple[str, ...]], clock: SimClock
    ) -> list[dict[str, Any]]:
        """Readers of a post with a stance move part of the way towards it."""
        rate = self.config.influence
        if post.stance is None or rate == 0:
            return []
        readers = sorted(self._opinions) if author == SYSTEM else followers.get(author, ())
        events = []
        for reader in readers:
            old = self._opinions[reader]
            new = round(old + rate * (post.stance - old), 6)
            if new != old:
                events.append(
                    self._set_opinion(reader, new, clock, cause="post", post_id=f"post-{post.num}")
                )
        return events

    def apply(self, intents: Sequence[Intent], clock: SimClock) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        delivered: list[tuple[str, Post]] = []
        for intent in sorted_intents(intents, self.name):
            agent, args = intent.agent_id, intent.args
            if agent not in self._opinions:
                raise EnvError(f"social.apply: agent {agent!r} is not in the social network")
            match intent.action:
                case "post":
                    post = self._add_post(agent, args["text"], args.get("stance"), clock.tick)
                    delivered.append((agent, post))
                    events.append(
                        clock.event(
                            "post",
                            agent_id=agent,
                            post_id=f"post-{post.num}",
                            text=post.text,
                            stance=post.stance,
                        )
                    )
                case "send_message":
                    events.append(self._message(agent, str(args["to"]), args["text"], clock))
                case "follow" | "unfollow":
                    events.extend(self._follow(agent, str(args["agent"]), intent.action, clock))
                case "set_opinion":
                    value = float(args["value"])
                    if value != self._opinions[agent]:
                        reason = args.get("reason")
                        events.append(
                            self._set_opinion(agent, value, clock, cause="self", reason=reason)
                        )
                case other:
                    raise EnvError(
                        f"social.apply: {other!r} is not an action of the social module "
                        f"(known: {', '.join(a.name for a in SocialView.ACTIONS)})"
                    )
        if delivered and self.config.influence:
            followers = self._followers()  # once per tick, not once per post
            for author, post in delivered:
                events.extend(self._influence(author, post, followers, clock))
        return events

    def _message(self, sender: str, to: str, text: str, clock: SimClock) -> dict[str, Any]:
        if to not in self._opinions:
            raise EnvError(f"social.send_message: recipient {to!r} is not in the social network")
        message = Message(num=self._next_message, sender=sender, tick=clock.tick, text=text)
        self._next_message += 1
        self._inbox[to] = (*self._inbox.get(to, ()), message)[-self.config.inbox_size :]
        self._delivered[1] += 1
        return clock.event(
            "message", agent_id=sender, to=to, message_id=f"msg-{message.num}", text=text
        )

    def _follow(self, agent: str, other: str, action: str, clock: SimClock) -> list[dict[str, Any]]:
        if other not in self._opinions or other == agent:
            raise EnvError(f"social.{action}: {other!r} cannot be followed by {agent!r}")
        now = set(self._following.get(agent, ()))
        before = len(now)
        if action == "follow":
            now.add(other)
        else:
            now.discard(other)
        if len(now) == before:  # a second identical request in the same tick
            return []
        self._following[agent] = tuple(sorted(now))
        self._graph = None
        return [clock.event(action, agent_id=agent, target=other)]

    def check_intervention(self, action: str, args: Mapping[str, Any], *, field: str) -> None:
        super().check_intervention(action, args, field=field)
        if action == "set_opinion" and args["agent"] not in self._opinions:
            raise ConfigError(f"{field}.args.agent", *self._no_agent(str(args["agent"])))

    def _no_agent(self, agent: str) -> tuple[str, str]:
        """(problem, fix) for an agent id the network does not have."""
        close = difflib.get_close_matches(agent, sorted(self._opinions), n=3)
        hint = f" (close matches: {', '.join(close)})" if close else ""
        return f"there is no agent {agent!r}{hint}", "name an agent of the run"

    def intervene(
        self, action: str, args: Mapping[str, Any], clock: SimClock
    ) -> list[dict[str, Any]]:
        parsed = self._intervention_args(action, args)
        if isinstance(parsed, BroadcastArgs):
            text, stance = parsed.text, parsed.stance
            post = self._add_post(SYSTEM, text, stance, clock.tick)
            sent = clock.event(
                "post", author=SYSTEM, post_id=f"post-{post.num}", text=text, stance=stance
            )
            return [sent, *self._influence(SYSTEM, post, {}, clock)]
        # set_opinion, the other intervention
        agent, value = parsed.agent, parsed.value
        if agent not in self._opinions:
            problem, fix = self._no_agent(agent)
            raise EnvError(f"social.set_opinion: {problem}; {fix}")
        return [self._set_opinion(agent, value, clock, cause="intervention")]

    def tick_events(self, clock: SimClock) -> list[dict[str, Any]]:
        values = list(self._opinions.values())
        n, mean, std = _moments(values)
        by_group: dict[str, list[float]] = {}
        for agent, value in self._opinions.items():
            by_group.setdefault(self._groups.get(agent, ""), []).append(value)
        groups = {}
        for group in sorted(by_group):
            gn, gmean, gstd = _moments(by_group[group])
            groups[group] = {"n": gn, "mean": round(gmean, 6), "std": round(gstd, 6)}
        group_histograms = {group: _histogram(by_group[group]) for group in sorted(by_group)}
        posts, messages = self._delivered
        self._delivered = [0, 0]
        return [
            clock.event(
                "social_opinions",
                n=n,
                mean=round(mean, 6),
                std=round(std, 6),
                histogram=_histogram(values),
                groups=groups,
                group_histograms=group_histograms,
                posts_delivered=posts,
                messages_delivered=messages,
            )
        ]

    def get_state(self) -> dict[str, Any]:
        return {
            "opinions": {a: self._opinions[a] for a in sorted(self._opinions)},
            "groups": {a: self._groups[a] for a in sorted(self._groups)},
            "following": {a: list(self._following[a]) for a in sorted(self._following)},
            "posts": {a: [list(p) for p in self._posts[a]] for a in sorted(self._posts)},
            "inbox": {a: [list(m) for m in self._inbox[a]] for a in sorted(self._inbox)},
            "next_post": self._next_post,
            "next_message": self._next_message,
            "delivered": list(self._delivered),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        try:
            opinions = {str(a): float(v) for a, v in state["opinions"].items()}
            # A checkpoint written before groups were kept has none: keep those of setup.
            groups = {str(a): str(g) for a, g in state.get("groups", self._groups).items()}
            following = {str(a): tuple(map(str, f)) for a, f in state["following"].items()}
            posts = {str(a): tuple(Post(*p) for p in ps) for a, ps in state["posts"].items()}
            inbox = {str(a): tuple(Message(*m) for m in ms) for a, ms in state["inbox"].items()}
            counters = int(state["next_post"]), int(state["next_message"])
            delivered = [int(n) for n in state["delivered"]][:2]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._malformed_state(exc) from None
        self._graph = None
        self._groups = groups
        self._opinions, self._following, self._posts, self._inbox = (
            opinions,
            following,
            posts,
            inbox,
        )
        self._next_post, self._next_message = counters
        self._delivered = delivered
