"""One Ray cluster for every Ray-marked test: join the CI head (RAY_ADDRESS) or start one."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Before Ray is imported: a cluster started here uses 127.0.0.1 as its node address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
        else:
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                log_to_driver=False,
                object_store_memory=128 * 1024 * 1024,
                _node_ip_address="127.0.0.1",  # loopback only
            )
    yield
    ray.shutdown()
