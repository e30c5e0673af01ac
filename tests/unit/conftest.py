"""Fixtures shared by the unit tests; plain helpers live in tests/unit/helpers.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from agentsim.testing.openai_server import OpenAITestServer
from tests.unit import helpers


@pytest.fixture
async def srv() -> AsyncIterator[OpenAITestServer]:
    """The OpenAI-compatible test server on 127.0.0.1, with its defaults, for one test."""
    async with OpenAITestServer() as server:
        yield server


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections for the whole test (helpers.refused_ports)."""
    with helpers.refused_ports(1) as (port,):
        yield port
