"""The experiment's own environment modules on Ray: their code reaches every actor (the
module file imported again under its name, the entry-point package shipped through Ray's
runtime environment), and the events equal the local executor's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentsim.config.experiment import parse_experiment
from agentsim.hosts.local import LocalExecutor
from agentsim.hosts.ray_executor import RayExecutor
from agentsim.run.engine import Engine
from tests.unit.helpers import ENVMODS, read_events, user_modules_experiment

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]


def test_user_modules_on_ray_give_the_local_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On the driver's path only: the actors get the package from the runtime environment.
    monkeypatch.syspath_prepend(str(ENVMODS / "site"))
    text = user_modules_experiment(ticks=3, hosts=2)
    cfg = parse_experiment(text, base_dir=ENVMODS / "market")
    for name, executor in (("local", LocalExecutor()), ("ray", RayExecutor())):
        summary = asyncio.run(Engine(cfg, run_dir=tmp_path / name, executor=executor).run())
        assert summary.status == "completed", name
    local = (tmp_path / "local" / "events.jsonl").read_bytes()
    assert (tmp_path / "ray" / "events.jsonl").read_bytes() == local
    kinds = {e["type"] for e in read_events(tmp_path / "ray")}
    assert {"market_sale", "epidemic_status"} <= kinds
