"""The simulation environment: clock, module seam, router and the built-in modules."""

from agentsim.env.base import (
    ActionSpec,
    AgentInfo,
    ArgReader,
    EnvAnswer,
    EnvModule,
    EnvView,
    Intent,
    parse_options,
    sorted_intents,
)
from agentsim.env.city import CityModule, CityOptions, CityView, Place, travel_minutes
from agentsim.env.clock import SimClock, parse_duration
from agentsim.env.router import BUILTIN_MODULES, EnvRouter, create_module
from agentsim.env.social import SocialModule, SocialOptions, SocialView

__all__ = [
    "BUILTIN_MODULES",
    "ActionSpec",
    "AgentInfo",
    "ArgReader",
    "CityModule",
    "CityOptions",
    "CityView",
    "EnvAnswer",
    "EnvModule",
    "EnvRouter",
    "EnvView",
    "Intent",
    "Place",
    "SimClock",
    "SocialModule",
    "SocialOptions",
    "SocialView",
    "create_module",
    "parse_duration",
    "parse_options",
    "sorted_intents",
    "travel_minutes",
]
