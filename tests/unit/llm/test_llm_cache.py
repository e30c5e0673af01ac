"""CachedModel: request keys, record / replay / off, concurrency, and no key in the file."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sqlite3
import threading
import warnings
from collections import UserList
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from agentsim.errors import CacheMissError, ConfigError, ModelError, ModelResponseError
from agentsim.llm.base import ChatModel, Completion, Message, ToolCall, ToolSchema, Usage
from agentsim.llm.cache import (
    CachedModel,
    canonical_json,
    completion_from_dict,
    completion_to_dict,
    request_key,
)
from agentsim.llm.openai import OpenAIChatModel
from agentsim.testing.openai_server import OpenAITestServer

MSGS: list[Message] = [{"role": "system", "content": "you"}, {"role": "user", "content": "hi"}]
TOOLS: list[ToolSchema] = [{"type": "function", "function": {"name": "finish"}}]


class CountingModel:
    """A deterministic ChatModel whose answers differ per call, so hits are visible."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        self.calls += 1
        await asyncio.sleep(0)
        return Completion(
            content=f"answer {self.calls} to {messages[-1]['content']} seed {seed}",
            tool_calls=(ToolCall(id="c1", name="finish", arguments='{"ok": true}'),),
            usage=Usage(prompt_tokens=5, completion_tokens=self.calls),
            finish_reason="tool_calls",
            model="counting",
        )


def test_request_key_is_canonical_and_covers_every_part() -> None:
    base = request_key("m", MSGS, TOOLS, {"temperature": 0.5}, 1)
    reordered = [{"content": "you", "role": "system"}, {"content": "hi", "role": "user"}]
    assert request_key("m", reordered, tuple(TOOLS), {"temperature": 0.5}, 1) == base
    variants = [
        request_key("m2", MSGS, TOOLS, {"temperature": 0.5}, 1),
        request_key("m", MSGS[:1], TOOLS, {"temperature": 0.5}, 1),
        request_key("m", MSGS, (), {"temperature": 0.5}, 1),
        request_key("m", MSGS, TOOLS, {"temperature": 0.7}, 1),
        request_key("m", MSGS, TOOLS, {"temperature": 0.5}, 2),
    ]
    assert len({base, *variants}) == 6
    assert len(base) == 64 and int(base, 16) >= 0
    assert canonical_json({"b": "é", "a": (1, 2)}) == '{"a":[1,2],"b":"é"}'
    # Read-only views and other Mapping / Sequence types hash like plain dicts and lists.
    views = [MappingProxyType(dict(MSGS[0])), MSGS[1]]
    params = {"temperature": 0.5, "stop": UserList(["x"])}
    assert request_key("m", views, TOOLS, params, 1) == request_key(
        "m", MSGS, TOOLS, {"temperature": 0.5, "stop": ["x"]}, 1
    )


def test_unserialisable_request_is_named() -> None:
    with pytest.raises(TypeError, match=r"a object in a model request is not JSON-serialisable"):
        request_key("m", [{"role": "user", "content": object()}], (), {}, 0)


def test_completion_round_trip_and_corrupt_entries() -> None:
    c = Completion(
        content=None,
        tool_calls=(ToolCall(id="a", name="finish", arguments="{}"),),
        usage=Usage(prompt_tokens=3, completion_tokens=4),
        finish_reason="tool_calls",
        model="x",
    )
    assert completion_from_dict(completion_to_dict(c)) == c
    with pytest.raises(ModelResponseError, match=r"recorded completion is malformed.*delete it"):
        completion_from_dict({"content": "x"})
    broken = completion_to_dict(c) | {"content": 5}
    with pytest.raises(ModelResponseError, match=r"content is not a string"):
        completion_from_dict(broken)


async def test_record_then_replay_without_a_model(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "cache.sqlite"
    inner = CountingModel()
    rec = CachedModel(inner, path=path, mode="record", model_name="m", params={"t": 1})
    assert isinstance(rec, ChatModel)
    first = await rec.complete(MSGS, TOOLS, seed=1)
    again = await rec.complete(MSGS, TOOLS, seed=1)  # answered from the file
    other = await rec.complete(MSGS, TOOLS, seed=2)
    assert again == first and other != first and inner.calls == 2
    assert (rec.stats.hits, rec.stats.misses, rec.stats.writes) == (1, 2, 2)
    assert len(rec) == 2
    await rec.aclose()

    play = CachedModel(None, path=path, mode="replay", model_name="m", params={"t": 1})
    assert await play.complete(MSGS, TOOLS, seed=1) == first
    assert await play.complete(MSGS, TOOLS, seed=2) == other
    key = play.key_for(MSGS, TOOLS, seed=3)
    with pytest.raises(CacheMissError, match=rf"request {key[:12]} was never recorded in .*cache"):
        await play.complete(MSGS, TOOLS, seed=3)
    with pytest.raises(CacheMissError, match=r"record it again with cache mode record"):
        await play.complete(MSGS, seed=1)
    assert (play.stats.hits, play.stats.misses, play.stats.writes) == (2, 2, 0)
    await play.aclose()


async def test_replay_fallthrough_calls_the_model_and_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    rec = CachedModel(CountingModel(), path=path, mode="record")
    await rec.complete(MSGS)
    rec.close()
    inner = CountingModel()
    play = CachedModel(inner, path=path, mode="replay", fallthrough=True)
    await play.complete(MSGS)  # recorded: no call
    fresh = await play.complete(MSGS, seed=9)
    assert fresh.content == "answer 1 to hi seed 9" and inner.calls == 1
    assert len(play) == 1 and play.stats.writes == 0
    play.close()


async def test_off_mode_touches_no_file(tmp_path: Path) -> None:
    inner = CountingModel()
    off = CachedModel(inner, path=tmp_path / "never.sqlite", mode="off")
    await off.complete(MSGS)
    await off.complete(MSGS)
    assert inner.calls == 2 and not (tmp_path / "never.sqlite").exists()
    assert "mode='off'" in repr(off)


async def test_many_concurrent_agents_lose_nothing(tmp_path: Path) -> None:
    model = CachedModel(CountingModel(), path=tmp_path / "c.sqlite", mode="record")
    convs = [[{"role": "user", "content": f"agent {i}"}] for i in range(300)]
    got = await asyncio.gather(*(model.complete(c, seed=i) for i, c in enumerate(convs)))
    assert len(model) == 300 and model.stats.writes == 300
    model.close()
    play = CachedModel(None, path=tmp_path / "c.sqlite", mode="replay")
    again = await asyncio.gather(*(play.complete(c, seed=i) for i, c in enumerate(convs)))
    assert again == got
    play.close()


async def test_identical_concurrent_requests_all_get_what_replay_will_give(
    tmp_path: Path,
) -> None:
    model = CachedModel(CountingModel(), path=tmp_path / "c.sqlite", mode="record")
    got = await asyncio.gather(*(model.complete(MSGS) for _ in range(5)))
    assert len({g.content for g in got}) == 1 and model.stats.writes == 1
    model.close()
    play = CachedModel(None, path=tmp_path / "c.sqlite", mode="replay")
    assert await play.complete(MSGS) == got[0]
    play.close()


def test_writers_in_several_threads_and_connections(tmp_path: Path) -> None:
    # Two CachedModel objects on one file stand in for two processes (two connections).
    path = tmp_path / "shared.sqlite"
    errors: list[BaseException] = []

    def writer(tag: str) -> None:
        async def go() -> None:
            model = CachedModel(CountingModel(), path=path, mode="record")
            await asyncio.gather(
                *(model.complete([{"role": "user", "content": f"{tag}{i}"}]) for i in range(100))
            )
            model.close()

        try:
            asyncio.run(go())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)  # a guard: generous for a loaded machine
    assert not errors
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM completions").fetchone()[0] == 200
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_api_key_never_reaches_the_cache_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-cache-SECRET-9876543210"
    monkeypatch.setenv("AGENTSIM_CACHE_KEY", key)
    path = tmp_path / "c.sqlite"
    async with OpenAITestServer() as srv:
        inner = OpenAIChatModel(
            model="served", base_url=srv.base_url, api_key_env="AGENTSIM_CACHE_KEY", temperature=0
        )
        rec = CachedModel(inner, path=path, mode="record")
        assert rec.model_name == "served" and rec.params == {"temperature": 0}
        first = await rec.complete(MSGS, TOOLS, seed=4)
        await rec.aclose()
    assert srv.recorded[0].headers["authorization"] == f"Bearer {key}"
    # The database and its -wal / -shm companions.
    assert not files_containing(tmp_path, key.encode())
    assert key not in repr(rec)
    play = CachedModel(
        None, path=path, mode="replay", model_name="served", params={"temperature": 0}
    )
    assert await play.complete(MSGS, TOOLS, seed=4) == first
    play.close()


def files_containing(folder: Path, needle: bytes) -> list[Path]:
    return [f for f in folder.iterdir() if needle in f.read_bytes()]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"mode": "sometimes"}, r"model.cache.mode: unknown cache mode 'sometimes'; use off"),
        ({"inner": None, "mode": "record"}, r"mode 'record' needs a model to call"),
        ({"inner": None, "mode": "replay", "fallthrough": True}, r"fallthrough needs a model"),
        ({"inner": None, "mode": "replay"}, r"no recording at .*run once with cache mode record"),
    ],
    ids=["mode", "record-no-model", "fallthrough-no-model", "replay-no-file"],
)
def test_bad_configuration(tmp_path: Path, kw: dict[str, Any], match: str) -> None:
    opts: dict[str, Any] = {"inner": CountingModel(), "path": tmp_path / "x.sqlite"}
    opts.update(kw)
    inner = opts.pop("inner")
    with pytest.raises(ConfigError, match=match):
        CachedModel(inner, **opts)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"this is not a database" * 100, r"is not a usable cache file"),
        (b"", r"cannot read the recording .*record it again"),
    ],
    ids=["garbage", "empty"],
)
async def test_unusable_recording(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "bad.sqlite"
    path.write_bytes(content)
    play = CachedModel(None, path=path, mode="replay")
    with pytest.raises(ConfigError, match=match):
        await play.complete(MSGS)
    play.close()


async def test_preflight_checks_the_model_only_when_the_cache_may_call_it(tmp_path: Path) -> None:
    async with OpenAITestServer(models=["served"]) as srv:
        wrong = OpenAIChatModel(model="other", base_url=srv.base_url)
        recording = CachedModel(wrong, path=tmp_path / "c.sqlite", mode="record")
        with pytest.raises(ModelError, match=r"does not serve model 'other' \(it serves: served\)"):
            await recording.preflight()
        await recording.aclose()
    (tmp_path / "c.sqlite").touch()
    replay = CachedModel(None, path=tmp_path / "c.sqlite", mode="replay", model_name="other")
    await replay.preflight()  # no model, no server: nothing to check


async def test_a_cache_dropped_without_close_leaves_no_open_connection(tmp_path: Path) -> None:
    # Python 3.13 warns (an error here) of a sqlite3 connection collected while open.
    model = CachedModel(CountingModel(), path=tmp_path / "c.sqlite", mode="record")
    await model.complete(MSGS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del model
        gc.collect()
    play = CachedModel(None, path=tmp_path / "c.sqlite", mode="replay")
    assert len(play) == 1
    play.close()
