"""The system's headless Chromium and a finished run served by the viewer, for the browser
tests. Without chromium, chromedriver or selenium every test here is skipped, saying why."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _serve import missing_browser, serve, start_chrome

from agentsim.config.experiment import load_experiment
from agentsim.run.engine import Engine

EXPERIMENT = Path(__file__).parents[1] / "fixtures" / "experiments" / "small.yaml"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    why = missing_browser()
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.browser)
            if why:
                item.add_marker(pytest.mark.skip(reason=f"browser tests skipped: {why}"))


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    driver = start_chrome()
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with one finished run, ``small-1`` (20 agents, city and social, 6 ticks)."""
    ws = tmp_path_factory.mktemp("browser") / "workspace"
    asyncio.run(Engine(load_experiment(EXPERIMENT), run_dir=ws / "small-1").run())
    return ws


@pytest.fixture(scope="module")
def viewer(finished: Path) -> Iterator[str]:
    with serve(finished) as url:
        yield url
