"""The viewer under many requests at once: a real server on 127.0.0.1, worker threads
sharing its cache, several runs so that the cache is full and evicts while they read."""

from __future__ import annotations

import asyncio
import random
import shutil
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from agentsim.config.experiment import load_experiment
from agentsim.run.engine import Engine
from agentsim.view._workspace import Workspace
from tests.browser._serve import serve  # the viewer in a thread, as the browser tests run it
from tests.unit.helpers import FIXTURES

EXPERIMENT = FIXTURES / "experiments" / "small.yaml"
RUNS = 34  # the runs list caches two entries per run: more than the cache holds


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("view-load") / "workspace"
    asyncio.run(Engine(load_experiment(EXPERIMENT), run_dir=ws / "small-0").run())
    for i in range(1, RUNS):  # copies: each folder is a run with a name of its own
        shutil.copytree(ws / "small-0", ws / f"small-{i}", symlinks=True)
    return ws


@pytest.mark.slow
def test_many_requests_at_once_all_succeed_and_agree(workspace: Path) -> None:
    # Each runs list misses for every run (the cache cycles through more keys than it
    # holds), so many threads insert and evict at once.
    order = ["/api/runs"] * 120 + [f"/api/runs/small-{i}" for i in range(RUNS)]
    random.Random(7).shuffle(order)
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: a race shows in one run, not one in 50
    try:
        with serve(workspace) as base:

            def fetch(url: str) -> tuple[str, int, str]:
                r = httpx.get(base + url, timeout=60)  # a connection of its own each
                return url, r.status_code, r.text

            with ThreadPoolExecutor(max_workers=32) as pool:
                answers = list(pool.map(fetch, order))
    finally:
        sys.setswitchinterval(old_interval)
    failed = [(url, code, text[:200]) for url, code, text in answers if code != 200]
    assert not failed, f"{len(failed)} of {len(answers)} requests failed, e.g. {failed[:3]}"
    seen: dict[str, str] = {}
    for url, _, text in answers:
        assert seen.setdefault(url, text) == text, f"{url} answered differently"


def test_the_cache_shared_by_many_threads_never_loses_a_value(tmp_path: Path) -> None:
    """The same race without the server around it: cheap values, many more evictions."""
    ws = Workspace(tmp_path)
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        try:
            for _ in range(20_000):
                key = rng.randrange(200)  # many more keys than the cache holds
                assert ws.cached(("n", key), lambda key=key: key * 2) == key * 2
        except BaseException as exc:  # reported below, in the test's own thread
            errors.append(exc)

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old_interval)
    assert not errors, f"{len(errors)} of 8 threads failed, first: {errors[0]!r}"
