"""OpenAIChatModel.preflight(): reachable, key accepted, model known, before a run starts."""

from __future__ import annotations

import socket

import pytest

from agentsim.errors import ConfigError, ModelError, ModelHTTPError
from agentsim.llm.openai import OpenAIChatModel
from agentsim.testing.openai_server import Fault, OpenAITestServer

KEY = "sk-test-preflight-0123456789"


def model(base_url: str, name: str = "served", **kw: object) -> OpenAIChatModel:
    return OpenAIChatModel(model=name, base_url=base_url, backoff_base=0.001, **kw)  # type: ignore[arg-type]


async def test_passes_when_the_model_is_listed_and_answers_one_token() -> None:
    async with OpenAITestServer(models=["other", "served"]) as srv:
        m = model(srv.base_url)
        await m.preflight()
        await m.aclose()
        # A list proves little: one tiny completion, and nothing more, was paid for.
        (req,) = srv.recorded
    assert req.body["max_tokens"] == 1 and req.body["model"] == "served"


async def test_falls_back_to_a_one_token_completion_without_a_model_list() -> None:
    async with OpenAITestServer() as srv:
        m = model(srv.base_url)
        await m.preflight()
        await m.aclose()
        (req,) = srv.recorded
    assert req.body["max_tokens"] == 1 and req.body["model"] == "served"


async def test_unreachable_server_is_reported_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = model(f"http://127.0.0.1:{port}/v1", max_retries=5)
    with pytest.raises(
        ModelError,
        match=rf"pre-flight: cannot reach the model server at http://127.0.0.1:{port}/v1 "
        r"\(.+\); start the server or fix model.base_url",
    ):
        await m.preflight()
    await m.aclose()


@pytest.mark.parametrize("list_models", [True, False], ids=["models", "chat"])
async def test_refused_key_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, list_models: bool
) -> None:
    monkeypatch.setenv("AGENTSIM_PREFLIGHT_KEY", "sk-wrong-key-000000000000")
    async with OpenAITestServer(models=["served"], list_models=list_models, api_key=KEY) as srv:
        m = model(srv.base_url, api_key_env="AGENTSIM_PREFLIGHT_KEY")
        with pytest.raises(
            ModelHTTPError,
            match=rf"pre-flight: {srv.base_url} refused the API key \(HTTP 401: Incorrect API key "
            r"provided\); check the key in \$AGENTSIM_PREFLIGHT_KEY",
        ):
            await m.preflight()
        await m.aclose()
        monkeypatch.setenv("AGENTSIM_PREFLIGHT_KEY", KEY)
        good = model(srv.base_url, api_key_env="AGENTSIM_PREFLIGHT_KEY")
        await good.preflight()
        await good.aclose()


async def test_server_that_wants_a_key_when_none_is_configured() -> None:
    async with OpenAITestServer(api_key=KEY) as srv:
        m = model(srv.base_url)
        with pytest.raises(
            ModelHTTPError, match=r"HTTP 401.*set model.api_key_env to the variable holding it"
        ):
            await m.preflight()
        await m.aclose()


async def test_unknown_model_lists_what_is_served() -> None:
    async with OpenAITestServer(models=["b-model", "a-model"]) as srv:
        m = model(srv.base_url, name="c-model")
        with pytest.raises(
            ModelError,
            match=rf"the server at {srv.base_url} does not serve model 'c-model' \(it serves: "
            r"a-model, b-model\); set model.model to one of those",
        ):
            await m.preflight()
        await m.aclose()


async def test_unknown_model_without_a_model_list() -> None:
    async with OpenAITestServer(models=["a-model"], list_models=False) as srv:
        m = model(srv.base_url, name="c-model")
        with pytest.raises(
            ModelHTTPError,
            match=r"refused a one-token request for model 'c-model' \(HTTP 404: The model "
            r"'c-model' does not exist\); check model.model",
        ):
            await m.preflight()
        await m.aclose()


async def test_busy_server_is_given_its_retries() -> None:
    async with OpenAITestServer() as srv:
        srv.enqueue(Fault.status(503), Fault.status(429, retry_after=0.01))
        m = model(srv.base_url)
        await m.preflight()
        await m.aclose()
        assert srv.requests == 3


def test_missing_key_variable_is_found_before_any_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTSIM_PREFLIGHT_EMPTY", "")
    with pytest.raises(
        ConfigError,
        match=r"the API key variable AGENTSIM_PREFLIGHT_EMPTY is not set \(or is empty\)",
    ):
        model("http://127.0.0.1:9/v1", api_key_env="AGENTSIM_PREFLIGHT_EMPTY")
