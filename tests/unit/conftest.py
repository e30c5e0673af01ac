"""Fixtures shared by the unit tests; plain helpers live in tests/unit/helpers.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentsim.testing.openai_server import OpenAITestServer


@pytest.fixture
async def srv() -> AsyncIterator[OpenAITestServer]:
    """The OpenAI-compatible test server on 127.0.0.1, with its defaults, for one test."""
    async with OpenAITestServer() as server:
        yield server
