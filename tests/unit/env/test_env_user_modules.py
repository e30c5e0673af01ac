"""Environment modules of the user's own: from a file beside the experiment, from an
installed package's entry point and from an importable class; their skills, interventions,
checkpoints, layouts, and the errors of a bad reference."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from agentsim.cli import main
from agentsim.config.experiment import load_experiment, parse_experiment
from agentsim.env.base import module_events
from agentsim.env.clock import SimClock
from agentsim.env.loader import ENTRY_POINT_GROUP, module_code, resolve_module
from agentsim.errors import ConfigError
from agentsim.inspect import open_run
from agentsim.inspect._query import env_layouts
from agentsim.run.engine import Engine, Progress
from agentsim.run.world import build_world
from tests.unit.helpers import ENVMODS, read_events, user_modules_experiment

MARKET = ENVMODS / "market"


@pytest.fixture
def market(tmp_path: Path) -> Path:
    """A copy of the market experiment (runs write nothing into the fixtures)."""
    shutil.copytree(MARKET, tmp_path / "market")
    return tmp_path / "market" / "experiment.yaml"


def _run(config_path: Path, run_dir: Path) -> None:
    asyncio.run(Engine(load_experiment(config_path, environ={}), run_dir=run_dir).run())


def test_a_module_from_a_file_answers_its_skill_and_its_intervention(
    market: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    _run(market, run_dir)
    events = read_events(run_dir)
    assert events[0]["modules"] == ["market"]
    activated = {e["skill"] for e in events if e["type"] == "skill_activated"}
    assert "env:market@market-shopping" in activated  # the module's own skill
    sales = [e for e in events if e["type"] == "market_sale"]
    assert len(sales) == 4 * 4  # every shopper buys bread every tick
    # Each sale raises the price by half (markup: 0.5); the workflow sets it to 5.0.
    assert [s["price"] for s in sales[:3]] == [2.0, 3.0, 4.5]
    (price_set,) = [e for e in events if e["type"] == "market_price_set"]
    assert price_set["price"] == 5.0 and price_set["tick"] == 2
    # Its events are plain dicts (the contract before clock.event): stamped by the engine.
    assert (price_set["time"], price_set["agent_id"]) == ("2026-03-02T10:00:00", None)
    assert next(s for s in sales if s["tick"] == 2)["price"] == 5.0


def test_events_a_module_built_without_the_clock_get_its_tick_and_time() -> None:
    """The contract before ``clock.event``: a module may return ``{"type": ..., ...}`` and
    the engine stamps the tick, its time and a null ``agent_id``; what it set stays."""
    clock = SimClock(datetime(2026, 3, 2, 8), timedelta(hours=1))
    clock.advance(3)
    complete = clock.event("market_sale", agent_id="a1", good="bread", price=2.0)
    old = {"type": "market_price_set", "good": "bread", "price": 5.0}
    own_time = {"type": "arrive", "agent_id": "a2", "place": "p", "time": "2026-03-02T11:40:00"}
    out = module_events([complete, old, own_time], clock)
    assert out[0] is complete
    assert out[1] == {
        "tick": 3,
        "time": "2026-03-02T11:00:00",
        "type": "market_price_set",
        "agent_id": None,
        "good": "bread",
        "price": 5.0,
    }
    assert out[2] == {**own_time, "tick": 3}
    assert module_events([], clock) == []


def test_a_module_from_an_installed_package_is_found_by_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ENVMODS / "site"))
    config = parse_experiment(user_modules_experiment(ticks=3), base_dir=MARKET)
    assert [m.name for m in config.environment] == ["market", "epidemic"]
    run_dir = tmp_path / "run"
    asyncio.run(Engine(config, run_dir=run_dir).run())
    events = read_events(run_dir)
    assert events[0]["modules"] == ["epidemic", "market"]
    activated = {e["skill"] for e in events if e["type"] == "skill_activated"}
    assert "env:epidemic@check-health" in activated
    status = [e for e in events if e["type"] == "epidemic_status"]
    assert [e["tick"] for e in status] == [0, 1, 2]
    assert all(e["washed"] == 3 for e in status)  # the group with check-health washes


def test_an_importable_class_and_its_entry_point_name_the_same_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ENVMODS / "site"))
    by_path = resolve_module("agentsim_test_epidemic:Epidemic", base_dir=MARKET)
    assert resolve_module("epidemic", base_dir=MARKET) is by_path
    assert by_path.name == "epidemic"
    from importlib.metadata import entry_points

    assert "epidemic" in {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}


_NOT_A_MODULE = "class NotAModule:\n    name = 'x'\n\nVALUE = 3\n"
_NO_NAME = "from agentsim.env import EnvModule\n\nclass Nameless(EnvModule):\n    pass\n"


@pytest.mark.parametrize(
    ("ref", "field", "message"),
    [
        pytest.param(
            "./envs/missing.py:Market",
            "environment.0.module",
            "environment module file './envs/missing.py' does not exist (looked for ",
            id="missing-file",
        ),
        pytest.param(
            "./envs/market.py:Bazaar",
            "environment.0.module",
            "'./envs/market.py:Bazaar': the module has no class 'Bazaar' "
            "(EnvModule classes in it: Market)",
            id="missing-class",
        ),
        pytest.param(
            "./other.py:NotAModule",
            "environment.0.module",
            "'./other.py:NotAModule' is a class NotAModule, not a subclass of "
            "agentsim.env.EnvModule",
            id="not-an-env-module",
        ),
        pytest.param(
            "./other.py:VALUE",
            "environment.0.module",
            "'./other.py:VALUE' is a int, not a subclass of agentsim.env.EnvModule",
            id="not-a-class",
        ),
        pytest.param(
            "./nameless.py:Nameless",
            "environment.0.module",
            "'./nameless.py:Nameless': class Nameless has the module name 'base'",
            id="no-name",
        ),
        pytest.param(
            "./broken.py:Market",
            "environment.0.module",
            "failed: ZeroDivisionError: division by zero",
            id="import-error",
        ),
        pytest.param(
            "no_such_package.sub:Market",
            "environment.0.module",
            "cannot import 'no_such_package.sub' for 'no_such_package.sub:Market': "
            "No module named 'no_such_package'",
            id="missing-package",
        ),
        pytest.param(
            "bazaar",
            "environment.0.module",
            "unknown environment module 'bazaar' (known: city, ",
            id="unknown-name",
        ),
        pytest.param(
            "Not A Ref",
            "environment.0.module",
            "'Not A Ref' is not a module reference",
            id="not-a-reference",
        ),
        pytest.param(
            "pkg.mod:9x",
            "environment.0.module",
            "'pkg.mod:9x': '9x' is not a class name",
            id="bad-class-name",
        ),
    ],
)
def test_a_bad_module_reference_fails_at_load_naming_what_was_found(
    market: Path, ref: str, field: str, message: str
) -> None:
    folder = market.parent
    (folder / "other.py").write_text(_NOT_A_MODULE)
    (folder / "nameless.py").write_text(_NO_NAME)
    (folder / "broken.py").write_text("1 / 0\n")
    text = market.read_text().replace("./envs/market.py:Market", ref)
    with pytest.raises(ConfigError) as info:
        parse_experiment(text, base_dir=folder)
    assert info.value.field == field
    assert message in str(info.value)


def test_a_bad_option_or_reference_is_exit_2_and_writes_nothing(
    market: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    market.write_text(market.read_text().replace("markup: 0.5", "markup: 3"))
    assert main(["run", str(market), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "environment.0.markup" in err
    assert "Input should be less than or equal to 1, got 3" in err
    market.write_text(market.read_text().replace("markup: 3", "mark_up: 0.1"))
    assert main(["run", str(market), "--out", str(out)]) == 2
    assert "unknown option 'mark_up' (allowed: goods, markup)" in capsys.readouterr().err
    market.write_text(market.read_text().replace("market.py:Market", "market.py:Stall"))
    assert main(["run", str(market), "--out", str(out)]) == 2
    assert "the module has no class 'Stall'" in capsys.readouterr().err
    assert not out.exists()


def test_a_user_modules_interventions_are_checked_at_load(market: Path) -> None:
    text = market.read_text().replace("action: set_price", "action: set_prize")
    with pytest.raises(ConfigError) as info:
        parse_experiment(text, base_dir=market.parent)
    assert info.value.field == "workflow.1.intervene.action"
    assert "module 'market' has no intervention 'set_prize' (known: set_price)" in str(info.value)


def test_two_references_to_one_module_are_a_duplicate(market: Path) -> None:
    text = market.read_text().replace(
        "  - {module: ./envs/market.py:Market, markup: 0.5}",
        "  - {module: ./envs/market.py:Market}\n  - {module: envs/market.py:Market}",
    )
    with pytest.raises(ConfigError, match="duplicate module 'market'") as info:
        parse_experiment(text, base_dir=market.parent)
    assert info.value.field == "environment.1.module"


def test_a_module_event_type_may_not_take_a_declared_name(market: Path) -> None:
    code = market.parent / "envs" / "market.py"
    code.write_text(code.read_text().replace('name="market_sale"', 'name="post"'))
    config = load_experiment(market, environ={})
    with pytest.raises(ConfigError) as info:
        build_world(config)
    assert info.value.field == "environment.0.module"
    assert "module 'market' declares event type 'post', which agentsim.events declares" in str(
        info.value
    )


def test_a_resumed_run_of_a_user_module_ends_like_an_uninterrupted_one(
    market: Path, tmp_path: Path
) -> None:
    reference = tmp_path / "ref"
    _run(market, reference)

    class Crash(Exception):
        pass

    def progress(p: Progress) -> None:
        if p.tick == 3:
            raise Crash("gone")

    run_dir = tmp_path / "run"
    cfg = load_experiment(market, environ={})
    with pytest.raises(Crash, match="gone"):
        asyncio.run(Engine(cfg, run_dir=run_dir, progress=progress).run())
    assert main(["run", "--resume", str(run_dir), "--json"]) == 0
    assert (run_dir / "events.jsonl").read_bytes() == (reference / "events.jsonl").read_bytes()


def test_inspect_interview_and_the_viewer_layout_work_on_its_runs(
    market: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    _run(market, run_dir)
    capsys.readouterr()
    assert main(["inspect", str(run_dir)]) == 0
    assert "env:market@market-shopping" in capsys.readouterr().out
    agent = "shoppers-00000"
    assert main(["interview", str(run_dir), "What did you buy?", "--agent", agent]) == 0
    assert "environment checkpoint tick-4" in capsys.readouterr().err
    layout = env_layouts(open_run(run_dir))["market"]
    assert layout.places == {"stall-bread": (0.0, 0.0), "stall-milk": (1.0, 0.0)}
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["environment"] == [{"module": "./envs/market.py:Market", "markup": 0.5}]


def test_module_code_lists_what_other_processes_need(
    market: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ENVMODS / "site"))
    file_cls = resolve_module("./envs/market.py:Market", base_dir=market.parent)
    pkg_cls = resolve_module("epidemic", base_dir=market.parent)
    city = resolve_module("city", base_dir=market.parent)
    code = module_code([file_cls, pkg_cls, city])
    path = str((market.parent / "envs" / "market.py").resolve())
    assert code.files == ((file_cls.__module__, path),)
    assert code.ship == (path, str(ENVMODS / "site" / "agentsim_test_epidemic"))
    assert code.job_runtime_env() == {"py_modules": list(code.ship)}
    pythonpath = code.actor_runtime_env()["env_vars"]["PYTHONPATH"]
    assert pythonpath.split(os.pathsep)[0] == str(ENVMODS / "site")
    assert module_code([city]).job_runtime_env() == module_code([city]).actor_runtime_env() == {}
    # Another process imports the file under the same name: pickled views find their class.
    del sys.modules[file_cls.__module__]
    code.load()
    assert sys.modules[file_cls.__module__].Market.name == "market"
