"""The sections of an experiment: clock, agent groups, skills, model, agent loop,
environment modules, executor and output. ``ExperimentConfig`` (in ``config``) holds them."""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    StrictInt,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from agentsim.config._errors import StrictModel, _short, fail
from agentsim.config._templates import TEMPLATE_NAMES
from agentsim.config._workflow import MAX_TICKS, NAME_PATTERN
from agentsim.env.clock import parse_duration as _clock_duration
from agentsim.errors import ConfigError

__all__ = [
    "BACKENDS",
    "MAX_AGENTS",
    "MAX_TICK_LENGTH",
    "PATTERN_HINTS",
    "AgentGroup",
    "AgentLoopConfig",
    "BudgetConfig",
    "ClockConfig",
    "EnvModuleConfig",
    "ExecutorConfig",
    "GroupSkills",
    "McpSkillServerConfig",
    "ModelConfig",
    "OutputConfig",
    "PricesConfig",
    "ProfileSpec",
    "SkillsConfig",
    "format_duration",
    "non_empty",
    "parse_duration",
]

# Bounds on every number that sizes memory, time or a loop: a typo of a few zeros fails at
# load time with the field's name instead of exhausting the machine hours into a run.
MAX_AGENTS = 1_000_000
"""Most agents one experiment may hold, all groups together."""
MAX_TICK_LENGTH = timedelta(days=366)
"""Longest tick (``clock.tick``)."""
_MAX_TOKENS = 1_000_000
_MAX_SECONDS = 86_400.0  # timeouts: a day

# Request keys a served model sets itself (``model.extra_params`` may not).
_SET_BY_THE_MODEL = frozenset(
    {"model", "messages", "tools", "tool_choice", "seed", "stream", "temperature", "max_tokens"}
)
_GROUP_RE = r"^[a-z0-9][a-z0-9_-]*$"
_URL_RE = r"^https?://\S+$"
_ENV_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_duration(value: object) -> timedelta:
    """``"15m"``, ``"1h30m"``, ``"90s"``, ``"2d"`` or int seconds -> a positive timedelta.

    The rules are the clock's (``agentsim.env.clock.parse_duration``); its ``ConfigError``
    becomes a pydantic custom error here, so that it reads well inside a model.
    """
    try:
        return _clock_duration(value)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise fail(exc.problem, exc.fix) from None


def format_duration(delta: timedelta) -> str:
    """The canonical text of a duration (``timedelta(minutes=90)`` -> ``"1h30m"``)."""
    total = int(delta.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


def non_empty(value: tuple[Any, ...], name: str, example: str) -> tuple[Any, ...]:
    # Checked here rather than with min_length, which pydantic also reports when an item fails.
    if not value:
        raise fail(f"'{name}' must not be empty", f"give at least one item, e.g. {name}: {example}")
    return value


# --- clock -------------------------------------------------------------------------------


class ClockConfig(StrictModel):
    start: datetime = datetime(2026, 1, 1, 6, 0)
    tick: timedelta = timedelta(minutes=15)

    @field_validator("start", mode="before")
    @classmethod
    def _date_to_datetime(cls, value: object) -> object:
        # YAML turns an unquoted 2026-03-02 into a date; a clock needs a time of day.
        if isinstance(value, date) and not isinstance(value, datetime):
            return datetime.combine(value, time())
        return value

    @field_validator("tick", mode="before")
    @classmethod
    def _tick(cls, value: object) -> timedelta:
        tick = parse_duration(value)
        if tick > MAX_TICK_LENGTH:
            raise fail(
                f"a tick of {value!r} is longer than the longest allowed, "
                f"{format_duration(MAX_TICK_LENGTH)}",
                'use a shorter tick, e.g. tick: "1d"',
            )
        return tick

    @field_serializer("tick")
    def _tick_text(self, value: timedelta) -> str:
        return format_duration(value)


# --- agents ------------------------------------------------------------------------------


class ProfileSpec(StrictModel):
    """Profiles sampled from a built-in ``template`` with the seed; ``fields`` are fixed
    overrides applied to every agent of the group."""

    template: str | None = None
    fields: dict[str, Any] = Field(default_factory=dict)

    @field_validator("template")
    @classmethod
    def _known(cls, value: str | None) -> str | None:
        if value is not None and value not in TEMPLATE_NAMES:
            raise fail(
                f"unknown profile template {value!r} (known: {', '.join(TEMPLATE_NAMES)})",
                "use one of the known templates or give a profiles file",
            )
        return value


class GroupSkills(StrictModel):
    default: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _disjoint(self) -> GroupSkills:
        both = sorted(set(self.default) & set(self.disabled))
        if both:
            raise fail(
                f"skill(s) {', '.join(both)} both default-activated and disabled",
                "remove them from one of the two lists",
            )
        return self


class AgentGroup(StrictModel):
    group: str = Field(pattern=_GROUP_RE, max_length=64)
    count: StrictInt | None = Field(default=None, ge=1, le=MAX_AGENTS)
    profiles: str | None = None
    profile: ProfileSpec | None = None
    persona: str | None = None
    skills: GroupSkills = GroupSkills()
    # One of the experiment's ``models:``; None: the default ``model:``.
    model: str | None = Field(default=None, pattern=_GROUP_RE, max_length=64)
    # ``group``: ``<group>-<index:05d>`` (or ``<group>-<row id>``); ``numeric``: the agent's
    # index in the whole experiment as a decimal string, for skills that call int() on it.
    ids: Literal["group", "numeric"] = "group"

    @model_validator(mode="after")
    def _source(self) -> AgentGroup:
        if (self.count is None) == (self.profiles is None):
            raise fail(
                "needs exactly one of 'count' or 'profiles'",
                "give count: N (with an optional profile template) or profiles: FILE.jsonl|csv",
                field="count",
            )
        if self.profiles is not None:
            if not self.profiles.lower().endswith((".jsonl", ".csv")):
                raise fail(
                    f"profiles file {self.profiles!r} must end in .jsonl or .csv",
                    "convert the file to JSON Lines or CSV",
                    field="profiles",
                )
            if self.profile is not None and self.profile.template is not None:
                raise fail(
                    "a template cannot be combined with a profiles file",
                    "drop profile.template (profile.fields may still override file columns)",
                    field="profile.template",
                )
        return self


# --- skills, model, agent loop, environment, executor, output -----------------------------


_RESERVED_NAMESPACES = ("agent", "custom", "built-in")


class McpSkillServerConfig(StrictModel):
    """One server offering the MCP skills extension (``skills.mcp``): ``url`` (streamable
    HTTP) or ``command`` (a stdio server started by the run), and the ``namespace`` its
    skills take. Its skills are untrusted: ``scripts: true`` lets their scripts and hooks
    run, always under ``process`` isolation."""

    url: str | None = Field(default=None, pattern=_URL_RE)
    command: tuple[str, ...] | None = Field(default=None, min_length=1)
    namespace: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    scripts: bool = False
    timeout: float = Field(default=30, gt=0, le=_MAX_SECONDS)

    @model_validator(mode="after")
    def _one_target(self) -> McpSkillServerConfig:
        if (self.url is None) == (self.command is None):
            raise fail(
                "needs exactly one of 'url' or 'command'",
                "give url: http://HOST:PORT/mcp (streamable HTTP) or command: [PROGRAM, ARG, ...]"
                " (a stdio server)",
            )
        if self.namespace in _RESERVED_NAMESPACES:
            raise fail(
                f"namespace {self.namespace!r} is reserved for skills folders",
                "pick a name of its own for this server's skills (e.g. its host or publisher)",
                field="namespace",
            )
        return self


class SkillsConfig(StrictModel):
    paths: tuple[str, ...] = ()
    builtin: bool = True
    catalog_budget_tokens: StrictInt = Field(default=2000, ge=64, le=_MAX_TOKENS)
    trusted_namespaces: tuple[str, ...] = ("built-in",)
    hot_reload: bool = True
    mcp: tuple[McpSkillServerConfig, ...] = ()
    # Where skill files fetched from MCP servers are kept, by digest (default: the user's
    # cache folder, ``$XDG_CACHE_HOME/agentsim/mcp-skills``).
    mcp_cache: str | None = None

    @model_validator(mode="after")
    def _mcp_namespaces(self) -> SkillsConfig:
        seen: set[str] = set()
        for i, server in enumerate(self.mcp):
            if server.namespace in seen:
                raise fail(
                    f"namespace {server.namespace!r} is used by two MCP servers",
                    "give each server a namespace of its own",
                    field=f"mcp.{i}.namespace",
                )
            seen.add(server.namespace)
            if server.namespace in self.trusted_namespaces:
                raise fail(
                    f"MCP skills are untrusted, but namespace {server.namespace!r} is listed in"
                    " trusted_namespaces",
                    "remove it from trusted_namespaces (scripts: true on the server lets its"
                    " scripts run, under process isolation)",
                    field=f"mcp.{i}.namespace",
                )
        return self


class PricesConfig(StrictModel):
    prompt_per_1k: float = Field(ge=0)
    completion_per_1k: float = Field(ge=0)
    # A prompt token the server served from its prefix cache; unset: billed as any other.
    cached_prompt_per_1k: float | None = Field(default=None, ge=0)


BACKENDS: dict[str, bool] = {"scripted": False, "openai": True}
"""The backends a ``model:`` section may name, and whether each calls a model server (then
``model`` and ``base_url`` or ``base_urls`` are required). How each is built is the table of
``agentsim.llm.backends``, which config may not import: its ``register_backend`` adds the
name here, and a test checks that the two agree."""


class ModelConfig(StrictModel):
    backend: str = "scripted"
    model: str | None = None
    base_url: str | None = Field(default=None, pattern=_URL_RE)
    # Several servers of the model: each request goes to the one with the fewest in flight;
    # one that fails is taken out for server_backoff seconds (doubling while it fails).
    base_urls: tuple[Annotated[str, Field(pattern=_URL_RE)], ...] | None = None
    server_backoff: float = Field(default=2.0, gt=0, le=3600)
    api_key_env: str | None = None
    max_concurrency: StrictInt = Field(default=64, ge=1, le=100_000)
    rpm: StrictInt | None = Field(default=None, ge=1, le=100_000_000)
    tpm: StrictInt | None = Field(default=None, ge=1, le=10_000_000_000)
    timeout: float = Field(default=60, gt=0, le=_MAX_SECONDS)
    max_retries: StrictInt = Field(default=5, ge=0, le=100)
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_tokens: StrictInt = Field(default=512, ge=1, le=_MAX_TOKENS)
    # Tool calls the model writes as text in its answer: ``native`` reads only the server's
    # ``tool_calls``; ``auto`` also reads calls written as text when there are none;
    # ``text`` is for servers without tool support: the tools are described in the system
    # message instead of sent, and every call is read from the text.
    tool_calls: Literal["native", "text", "auto"] = "auto"
    # A typed survey answer's JSON schema goes with the request where the backend can send
    # it (openai: ``response_format``); false for a server that refuses it (the answer is
    # still checked, and retried once when it does not fit).
    response_format: bool = True
    # Added to every request body (e.g. ``top_p``, ``chat_template_kwargs``, thinking
    # controls); keys the model sets itself are refused when the model is built.
    extra_params: dict[str, Any] = Field(default_factory=dict)
    cache: Literal["off", "record", "replay"] = "off"
    cache_path: str | None = None
    cache_fallthrough: bool = False
    prices: PricesConfig | None = None
    # A run where more than this share of agent steps degraded (their model call failed
    # after its retries) ends with exit code 3.
    max_degraded_share: float = Field(default=0.1, ge=0, le=1)
    # This many failed model calls in a row (no answer in between) stop the run at the end
    # of the tick, with a checkpoint to resume from.
    max_consecutive_failures: StrictInt = Field(default=50, ge=1, le=10_000_000)

    @field_validator("backend", mode="before")
    @classmethod
    def _known_backend(cls, value: object) -> object:
        if not (isinstance(value, str) and value in BACKENDS):
            # Worded as for the other fixed choices (a Literal's error).
            raise fail(
                f"{_short(value)} is not allowed; must be one of {', '.join(BACKENDS)}",
                "use one of the allowed values",
            )
        return value

    @field_validator("extra_params")
    @classmethod
    def _own_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(k for k in value if k in _SET_BY_THE_MODEL)
        if clash:
            raise fail(
                f"sets {', '.join(clash)}, which the model sets itself",
                "use model.temperature and model.max_tokens for those, and drop the others",
            )
        return value

    @field_validator("cache", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        # YAML 1.1 reads a bare `off` as False.
        return "off" if value is False else value

    @field_validator("api_key_env")
    @classmethod
    def _key_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        looks_like_key = value.startswith(("sk-", "sk_")) or (
            len(value) >= 24 and "_" not in value and not value.isupper()
        )
        if looks_like_key or not _ENV_VAR_RE.match(value):
            # Never echo the value: it may be a real secret.
            raise fail(
                "must be the NAME of an environment variable holding the key, and the value "
                "given looks like a key itself or is not a variable name",
                "write api_key_env: OPENAI_API_KEY and export OPENAI_API_KEY=... in the shell",
            )
        return value

    @model_validator(mode="after")
    def _openai_needs(self) -> ModelConfig:
        if self.base_urls is not None:
            if self.base_url is not None:
                raise fail(
                    "give base_url or base_urls, not both",
                    "list every server under base_urls",
                    field="base_urls",
                )
            if not self.base_urls:
                raise fail(
                    "'base_urls' must not be empty",
                    "give at least one server, e.g. base_urls: [http://127.0.0.1:8000/v1]",
                    field="base_urls",
                )
        if BACKENDS[self.backend]:
            for name, example in (
                ("model", "gpt-4o-mini"),
                ("base_url", "http://127.0.0.1:8000/v1"),
            ):
                if getattr(self, name) is None and not (name == "base_url" and self.base_urls):
                    raise fail(
                        f"'{name}' is required when backend is {self.backend}",
                        f"add {name}: {example}",
                        field=name,
                    )
        return self


class AgentLoopConfig(StrictModel):
    max_react_turns: StrictInt = Field(default=6, ge=1, le=100)
    max_hook_retries: StrictInt = Field(default=2, ge=0, le=10)
    memory_prompt_tokens: StrictInt = Field(default=600, ge=0, le=_MAX_TOKENS)
    prompt_cap_tokens: StrictInt = Field(default=6000, ge=1, le=_MAX_TOKENS)
    # A run that completes with more than these shares failed ends "completed with
    # problems" and exit code 3 (like model.max_degraded_share): agent steps that raised
    # (agent_error), hook calls and execute_skill_script calls that failed.
    max_error_share: float = Field(default=0.01, ge=0, le=1)
    max_hook_failure_share: float = Field(default=0.05, ge=0, le=1)
    max_script_failure_share: float = Field(default=0.25, ge=0, le=1)
    # Agent steps that did not end with the model's `finish` call: it answered with text
    # and no tool call, or ran out of ReAct turns (degraded and failed steps have their own
    # limits; skipped steps never count).
    max_unfinished_share: float = Field(default=0.5, ge=0, le=1)
    # Tool calls refused (bad arguments, an unknown tool, action or skill, a skill not
    # active) or failed (a script's error), of every tool call the agents made.
    max_tool_failure_share: float = Field(default=0.25, ge=0, le=1)


class EnvModuleConfig(StrictModel):
    """An environment module; every key but ``module`` is an option the module validates.

    ``module`` is a reference (``agentsim.env.loader``): a built-in or installed name,
    ``package.module:Class`` or ``./file.py:Class``; it is resolved when the config loads
    (against the validation context's ``base_dir``), so that ``name`` and ``interventions``
    are the class's own."""

    module: str = Field(min_length=1, max_length=1000)
    options: dict[str, Any] = Field(default_factory=dict)
    _name: str = PrivateAttr(default="")
    _interventions: tuple[str, ...] = PrivateAttr(default=())
    _class: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> EnvModuleConfig:
        from agentsim.env.loader import resolve_module

        base = Path((info.context or {}).get("base_dir", "."))
        try:
            cls = resolve_module(self.module, base_dir=base)
        except ConfigError as exc:
            raise fail(exc.problem, exc.fix, field="module") from None
        self._name = cls.name
        self._interventions = tuple(cls.INTERVENTIONS)
        self._class = cls
        return self

    @property
    def name(self) -> str:
        """The module's name (its class's ``name``): the key of ``ask_env`` and ``env:``."""
        return self._name or self.module

    @property
    def interventions(self) -> tuple[str, ...]:
        return self._interventions

    @property
    def module_class(self) -> Any:
        """The ``EnvModule`` subclass the module names (its interventions' arguments are
        checked with it when the experiment loads)."""
        return self._class

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: object) -> object:
        if isinstance(data, dict) and set(data) != {"module", "options"}:
            rest = {k: v for k, v in data.items() if k != "module"}
            return (
                {"module": data.get("module"), "options": rest}
                if "module" in data
                else {"options": rest}
            )
        return data

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        return {"module": self.module, **self.options}


class ExecutorConfig(StrictModel):
    kind: Literal["local", "ray"] = "local"
    hosts: StrictInt | None = Field(default=None, ge=1, le=4096)
    address: str | None = None
    step_timeout: float = Field(default=120, gt=0, le=_MAX_SECONDS)
    # Ray: a host that does not answer a ping for this long stops the run (with resume).
    heartbeat_timeout: float = Field(default=120, gt=0, le=_MAX_SECONDS)
    # Ray: how long reaching the cluster at ``address`` (or RAY_ADDRESS) may take before the
    # run gives up, having written nothing.
    connect_timeout: float = Field(default=30, gt=0, le=_MAX_SECONDS)
    # dependencies: an agent starts its next tick as soon as what it observes is final
    # (EnvModule.depends_on); barrier: every agent waits for the whole tick. Same results.
    schedule: Literal["dependencies", "barrier"] = "dependencies"
    # Most ticks the agent furthest ahead may have done beyond the slowest (dependencies).
    max_lead: StrictInt = Field(default=4, ge=1, le=64)


class BudgetConfig(StrictModel):
    """What a run may spend (``budget:``): prompt plus completion tokens, money (from
    ``model.prices``, so every model the run uses needs prices) and wall time. Each key is
    optional; the run stops at a tick boundary before it would pass one (see
    ``agentsim.run.budget``)."""

    tokens: StrictInt | None = Field(default=None, ge=1, le=10**15)
    money: float | None = Field(default=None, gt=0, le=1e12)
    wall_time: timedelta | None = None

    @field_validator("money", mode="before")
    @classmethod
    def _number(cls, value: object) -> object:
        # A bool is an int to pydantic; "5$" or "five" must not become a float silently.
        if isinstance(value, bool) or not isinstance(value, int | float | None):
            raise fail(
                f"{_short(value)} is not an amount of money",
                "give a number in the currency of model.prices, e.g. money: 5.0",
            )
        return value

    @field_validator("wall_time", mode="before")
    @classmethod
    def _duration(cls, value: object) -> timedelta | None:
        return None if value is None else parse_duration(value)

    @field_serializer("wall_time")
    def _wall_text(self, value: timedelta | None) -> str | None:
        return None if value is None else format_duration(value)

    @model_validator(mode="after")
    def _some(self) -> BudgetConfig:
        if self.tokens is None and self.money is None and self.wall_time is None:
            raise fail(
                "names no limit",
                "give at least one of tokens, money and wall_time, e.g. budget: {tokens: 2000000}",
            )
        return self


class OutputConfig(StrictModel):
    dir: str = "workspace"
    run_id: str | None = Field(default=None, pattern=NAME_PATTERN)
    formats: tuple[Literal["jsonl", "parquet"], ...] = ("jsonl", "parquet")
    checkpoint_every: StrictInt = Field(default=0, ge=0, le=MAX_TICKS)
    # Ticks between writes of agents' memory.jsonl and store rows (also written at checkpoints,
    # on stop and at the end). 1 = every tick; larger values trade freshness for speed.
    flush_every: StrictInt = Field(default=4, ge=1, le=MAX_TICKS)

    @field_validator("formats")
    @classmethod
    def _some_format(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return non_empty(value, "formats", "[jsonl]")


PATTERN_HINTS = {
    NAME_PATTERN: (
        "use letters, digits, '.', '_' and '-' (up to 64, starting with a letter or digit)"
    ),
    _GROUP_RE: "use lower-case letters, digits, '_' and '-', starting with a letter or digit",
    _URL_RE: "use an http:// or https:// URL such as http://127.0.0.1:8000/v1",
}
