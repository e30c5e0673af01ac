"""Interventions declare their arguments: ``EnvModule.INTERVENTION_ARGS`` and
``check_intervention``, the public seam a user module declares its own through."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import Field

from agentsim.env.base import EnvModule, InterventionArgs, parse_intervention_args
from agentsim.env.clock import SimClock
from agentsim.errors import ConfigError, EnvError


class FloodArgs(InterventionArgs):
    level: int = Field(ge=0, le=10)
    zone: str = "all"


class Weather(EnvModule):
    name: ClassVar[str] = "weather"
    INTERVENTIONS: ClassVar[tuple[str, ...]] = ("flood", "wind")
    INTERVENTION_ARGS: ClassVar[Mapping[str, type[InterventionArgs]]] = {"flood": FloodArgs}

    def intervene(
        self, action: str, args: Mapping[str, Any], clock: SimClock
    ) -> list[dict[str, Any]]:
        parsed = self._intervention_args(action, args)
        return [{"type": action, "agent_id": None, "args": dict(args), "parsed": parsed}]


def weather(tmp_path: Path) -> Weather:
    return Weather({}, seed=0, base_dir=tmp_path)


@pytest.mark.parametrize(
    ("action", "args", "field", "message"),
    [
        (
            "flood",
            {"levl": 3},
            "workflow.2.intervene.args.levl",
            r"unknown argument 'levl' \(known: level, zone\); remove it or fix its spelling",
        ),
        (
            "flood",
            {},
            "workflow.2.intervene.args.level",
            r"argument 'level' is required \(known: level, zone\); add it",
        ),
        (
            "flood",
            {"level": 11},
            "workflow.2.intervene.args.level",
            r"argument 'level': input should be less than or equal to 10, got 11",
        ),
        (
            "flood",
            {"level": "3"},
            "workflow.2.intervene.args.level",
            r"argument 'level': input should be a valid integer, got '3'",
        ),
        (
            "storm",
            {},
            "workflow.2.intervene.action",
            r"module 'weather' has no intervention 'storm' \(known: flood, wind\)",
        ),
    ],
    ids=["unknown", "missing", "bound", "type", "action"],
)
def test_declared_arguments_are_checked_with_their_field_path(
    tmp_path: Path, action: str, args: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        weather(tmp_path).check_intervention(action, args, field="workflow.2.intervene")
    assert info.value.field == field


def test_an_undeclared_action_accepts_any_arguments_until_it_runs(tmp_path: Path) -> None:
    mod = weather(tmp_path)
    mod.check_intervention("wind", {"anything": [1, 2]}, field="workflow.0.intervene")
    assert Weather.parse_intervention("wind", {"anything": 1}) is None
    clock = SimClock(datetime(2026, 1, 1), timedelta(hours=1))
    (event,) = mod.intervene("wind", {"anything": 1}, clock)
    assert event["parsed"] is None


def test_run_time_errors_name_the_action(tmp_path: Path) -> None:
    mod = weather(tmp_path)
    clock = SimClock(datetime(2026, 1, 1), timedelta(hours=1))
    (event,) = mod.intervene("flood", {"level": 4}, clock)
    assert event["parsed"] == FloodArgs(level=4, zone="all")
    with pytest.raises(EnvError, match=r"^weather\.flood: unknown argument 'x' \(known: level"):
        mod.intervene("flood", {"level": 4, "x": 1}, clock)


def test_arguments_that_are_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"arguments must be a mapping of name -> value, got list"
    ):
        parse_intervention_args(FloodArgs, [1], field="workflow.0.intervene.args")  # type: ignore[arg-type]


_USER_MODULE = """
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from agentsim.env.base import EnvModule, InterventionArgs
from agentsim.errors import ConfigError


class FloodArgs(InterventionArgs):
    level: int = Field(ge=0, le=10)
    zone: str = "all"


class Weather(EnvModule):
    name: ClassVar[str] = "weather"
    INTERVENTIONS: ClassVar[tuple[str, ...]] = ("flood", "wind")
    INTERVENTION_ARGS: ClassVar[Mapping[str, type[InterventionArgs]]] = {"flood": FloodArgs}

    def check_intervention(self, action: str, args: Mapping[str, Any], *, field: str) -> None:
        super().check_intervention(action, args, field=field)
        if action == "flood" and args.get("zone", "all") not in ("all", "north"):
            raise ConfigError(f"{field}.args.zone", f"no zone {args['zone']!r}", "use north")

    def intervene(self, action, args, clock):
        self._intervention_args(action, args)
        return []
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("{levl: 3}", r"workflow\.1\.intervene\.args\.levl: unknown argument 'levl' "
                      r"\(known: level, zone\)"),
        ("{level: 30}", r"workflow\.1\.intervene\.args\.level: argument 'level': input should "
                        r"be less than or equal to 10, got 30"),
        ("{level: 3, zone: south}", r"workflow\.1\.intervene\.args\.zone: no zone 'south'; "
                                    r"use north"),
    ],
    ids=["unknown", "bound", "id"],
)  # fmt: skip
def test_a_user_modules_declared_arguments_are_checked_at_load(
    tmp_path: Path, args: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    from agentsim.cli import main

    (tmp_path / "weather.py").write_text(_USER_MODULE, encoding="utf-8")
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: t\nagents: [{group: a, count: 2}]\n"
        "environment: [{module: ./weather.py:Weather}]\nmodel: {backend: scripted}\n"
        "workflow: [{run: {ticks: 1}}, {intervene: {env: weather, action: flood, "
        f"args: {args}}}}}]\n",
        encoding="utf-8",
    )
    out = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert not out.exists()
