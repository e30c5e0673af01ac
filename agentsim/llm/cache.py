"""Record / replay of model completions in SQLite, keyed by a hash of the canonical request.

Modes:

- ``off``: every call goes to the inner model; no file is touched.
- ``record``: a recorded request is answered from the file (so a re-run is cheap and
  identical); a new one goes to the inner model and is written. When two agents send the
  same request at once, the first completion written wins and both get it, so the recording
  run sees exactly what a replay will.
- ``replay``: answers come only from the file, no model is needed. A request that was never
  recorded raises ``CacheMissError``, or with ``fallthrough=True`` goes to the inner model
  (and is not written: a replay never changes its recording).

The key is ``request_key(model, messages, tools, params, seed)``: SHA-256 of the canonical
JSON of those five things. ``model`` and ``params`` (sampling parameters) default to the
inner model's ``model`` and ``request_params`` attributes when it has them; a replay without
an inner model must be given the same values as the recording run.

The file holds one row per request (key, canonical request, completion JSON, insertion
order). Requests are plain messages and tool schemas, never HTTP headers, so no API key can
end up in it. The file may be open in several processes at once (Ray hosts): WAL mode, a
busy timeout on connect, and ``INSERT OR IGNORE`` make concurrent writers safe; within a
process a lock serialises the one shared connection. Reads are primary-key lookups done
in the loop (WAL readers never wait for writers); writes go to a worker thread because they
may wait for another process's write lock.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentsim.errors import CacheMissError, ConfigError, ModelResponseError
from agentsim.llm.base import (
    ANSWER_FORMAT,
    ChatModel,
    Completion,
    Message,
    ToolCall,
    ToolSchema,
    Usage,
    as_chat_model,
)

_SETUP_ATTEMPTS = 40  # with the linear back-off in _connection: about 40 s in all

__all__ = [
    "CacheMode",
    "CacheStats",
    "CachedModel",
    "canonical_json",
    "check_cache_file",
    "completion_from_dict",
    "completion_to_dict",
    "request_key",
]

CacheMode = Literal["off", "record", "replay"]
_MODES = ("off", "record", "replay")
_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    completion TEXT NOT NULL
)
"""


def _plain(value: Any) -> Any:
    # json.dumps only knows dict/list; messages may be any Mapping / Sequence.
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(
        f"a {type(value).__name__} in a model request is not JSON-serialisable; messages, "
        "tools and params must hold only JSON values"
    )


def canonical_json(value: Any) -> str:
    """The one JSON text of ``value``: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_plain
    )


def _request(
    model: str,
    messages: Sequence[Message],
    tools: Sequence[ToolSchema],
    params: Mapping[str, Any],
    seed: int,
) -> str:
    return canonical_json(
        {
            "model": model,
            "messages": list(messages),
            "tools": list(tools),
            "params": dict(params),
            "seed": seed,
        }
    )


def request_key(
    model: str,
    messages: Sequence[Message],
    tools: Sequence[ToolSchema],
    params: Mapping[str, Any],
    seed: int,
) -> str:
    """SHA-256 (hex) of the canonical JSON of the request."""
    return hashlib.sha256(_request(model, messages, tools, params, seed).encode()).hexdigest()


def completion_to_dict(completion: Completion) -> dict[str, Any]:
    usage: dict[str, int] = {
        "prompt_tokens": completion.usage.prompt_tokens,
        "completion_tokens": completion.usage.completion_tokens,
    }
    if completion.usage.cached_prompt_tokens:  # absent when none: older caches read the same
        usage["cached_prompt_tokens"] = completion.usage.cached_prompt_tokens
    return {
        "content": completion.content,
        "tool_calls": [
            {"id": tc.id, "name": tc.name, "arguments": tc.arguments}
            for tc in completion.tool_calls
        ],
        "usage": usage,
        "finish_reason": completion.finish_reason,
        "model": completion.model,
        # Absent when none: older caches read the same.
        **({"reasoning": completion.reasoning} if completion.reasoning else {}),
    }


def completion_from_dict(data: Mapping[str, Any]) -> Completion:
    """Inverse of ``completion_to_dict``; ``ModelResponseError`` on a malformed dict."""
    try:
        content = data["content"]
        if content is not None and not isinstance(content, str):
            raise TypeError("content is not a string")
        calls = tuple(
            ToolCall(id=str(tc["id"]), name=str(tc["name"]), arguments=str(tc["arguments"]))
            for tc in data["tool_calls"]
        )
        usage = Usage(
            prompt_tokens=int(data["usage"]["prompt_tokens"]),
            completion_tokens=int(data["usage"]["completion_tokens"]),
            cached_prompt_tokens=int(data["usage"].get("cached_prompt_tokens", 0)),
        )
        return Completion(
            content=content,
            tool_calls=calls,
            usage=usage,
            finish_reason=str(data["finish_reason"]),
            model=str(data["model"]),
            reasoning=_text_or_none(data.get("reasoning")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelResponseError(
            f"a recorded completion is malformed ({type(exc).__name__}: {exc}); the cache "
            "file is corrupt or from another version: delete it and record again"
        ) from None


def _text_or_none(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError("reasoning is not a string")
    return value


def check_cache_file(path: Path, *, field: str = "model.cache_path") -> None:
    """Check an existing cache file before a run uses it: a SQLite database that passes
    SQLite's own ``quick_check`` and holds the ``completions`` table. A file that fails is
    a ``ConfigError`` naming it (before anything is written), not one failed step per call.
    A missing file passes (recording creates it)."""
    if not path.exists():
        return
    problem = None
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0)
    except sqlite3.Error as exc:
        problem = str(exc)
    else:
        try:
            found = conn.execute("PRAGMA quick_check").fetchall()
            if [tuple(r) for r in found] != [("ok",)]:
                problem = "; ".join(str(r[0]) for r in found[:3])
            else:
                cols = {r[1] for r in conn.execute("PRAGMA table_info(completions)")}
                if not {"key", "request", "completion"} <= cols:
                    problem = "it has no completions table"
        except sqlite3.Error as exc:
            problem = str(exc)
        finally:
            conn.close()
    if problem is not None:
        raise ConfigError(
            field,
            f"the model cache {path} is damaged or not a cache file ({problem})",
            "delete it (or point the cache at a new file) and record again",
        )


@dataclass(slots=True, kw_only=True)
class CacheStats:
    """Counters of one ``CachedModel`` (mutable)."""

    hits: int = 0
    misses: int = 0
    writes: int = 0


class CachedModel(ChatModel):
    """A ``ChatModel`` that records completions to, or replays them from, a SQLite file."""

    def __init__(
        self,
        inner: ChatModel | None,
        *,
        path: Path,
        mode: CacheMode,
        fallthrough: bool = False,
        model_name: str = "",
        params: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in _MODES:
            raise ConfigError(
                "model.cache.mode", f"unknown cache mode {mode!r}", "use off, record or replay"
            )
        if inner is None and (mode != "replay" or fallthrough):
            need = "fallthrough" if mode == "replay" else f"mode {mode!r}"
            raise ConfigError(
                "model.cache",
                f"{need} needs a model to call, but none is configured",
                "configure a model backend, or use mode replay without fallthrough",
            )
        path = Path(path)
        if mode == "replay" and not path.is_file():
            raise ConfigError(
                "model.cache.path",
                f"no recording at {path}",
                "run once with cache mode record to create it, or fix the path",
            )
        self.inner = inner
        self.path = path
        self.mode: CacheMode = mode
        self.fallthrough = fallthrough
        self.model_name = model_name or str(getattr(inner, "model", "") or "")
        inner_params = getattr(inner, "request_params", None)
        if params is None and isinstance(inner_params, Mapping):
            params = inner_params
        self.params: Mapping[str, Any] = dict(params or {})
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"CachedModel(mode={self.mode!r}, path={str(self.path)!r}, inner={self.inner!r})"

    # -- storage -------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        # Called with self._lock held.
        if self._conn is None:
            if self.mode == "record":
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=30.0, check_same_thread=False, isolation_level=None
            )
            try:
                # Switching to WAL needs a moment alone with the file; when several hosts
                # open it at once SQLite answers "locked" at once instead of waiting.
                for attempt in range(_SETUP_ATTEMPTS):
                    try:
                        conn.execute("PRAGMA journal_mode=WAL")
                        conn.execute("PRAGMA synchronous=NORMAL")
                        if self.mode == "record":
                            conn.execute(_SCHEMA)
                            conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
                        break
                    except sqlite3.OperationalError as exc:
                        locked = "locked" in str(exc) or "busy" in str(exc)
                        if not locked or attempt == _SETUP_ATTEMPTS - 1:
                            raise
                        time.sleep(0.05 * (attempt + 1))
            except sqlite3.DatabaseError as exc:
                conn.close()
                raise ConfigError(
                    "model.cache.path",
                    f"{self.path} is not a usable cache file ({exc})",
                    "point the cache at a new file, or delete this one and record again",
                ) from None
            self._conn = conn
        return self._conn

    def _lookup(self, key: str) -> Completion | None:
        with self._lock:
            try:
                row = (
                    self._connection()
                    .execute("SELECT completion FROM completions WHERE key = ?", (key,))
                    .fetchone()
                )
            except sqlite3.OperationalError as exc:
                raise ConfigError(
                    "model.cache.path",
                    f"cannot read the recording {self.path} ({exc})",
                    "record it again with cache mode record",
                ) from None
        if row is None:
            return None
        return completion_from_dict(json.loads(row[0]))

    def _store(self, key: str, request: str, completion: Completion) -> Completion:
        """Write unless already there; return what the file holds for ``key``."""
        text = canonical_json(completion_to_dict(completion))
        with self._lock:
            conn = self._connection()
            cur = conn.execute(
                "INSERT OR IGNORE INTO completions (key, request, completion) VALUES (?, ?, ?)",
                (key, request, text),
            )
            if cur.rowcount == 1:
                self.stats.writes += 1
                return completion
            row = conn.execute("SELECT completion FROM completions WHERE key = ?", (key,))
            stored = row.fetchone()
        return completion_from_dict(json.loads(stored[0]))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __del__(self) -> None:
        # A model dropped without close() or aclose() still closes its file (Python 3.13
        # warns of a connection collected open).
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    async def aclose(self) -> None:
        """Close the file and the inner model (when there is one)."""
        self.close()
        if self.inner is not None:
            await as_chat_model(self.inner).aclose()

    async def preflight(self) -> None:
        """Check the inner model before a run, when this cache may call it; a pure replay
        needs no model at all."""
        if self.inner is not None:
            await as_chat_model(self.inner).preflight()

    def __len__(self) -> int:
        """Recorded completions in the file."""
        with self._lock:
            row = self._connection().execute("SELECT count(*) FROM completions").fetchone()
        return int(row[0])

    # -- the call ------------------------------------------------------------------------

    def key_for(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> str:
        return request_key(self.model_name, messages, tools, self._params(), seed)

    def _params(self) -> Mapping[str, Any]:
        """The request's parameters: the model's, and a typed answer's form when one is
        asked for (it changes the answer; absent otherwise, so older keys stay valid)."""
        form = ANSWER_FORMAT.get()
        if form is None:
            return self.params
        return {**self.params, "response_format": dict(form)}

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        seed: int = 0,
    ) -> Completion:
        if self.mode == "off":
            assert self.inner is not None
            return await self.inner.complete(messages, tools, seed=seed)
        request = _request(self.model_name, messages, tools, self._params(), seed)
        key = hashlib.sha256(request.encode()).hexdigest()
        found = self._lookup(key)
        if found is not None:
            self.stats.hits += 1
            return found
        self.stats.misses += 1
        if self.mode == "replay" and not self.fallthrough:
            raise CacheMissError(
                f"replay: request {key[:12]} was never recorded in {self.path} "
                f"(model_name={self.model_name!r}, params={dict(self.params)!r}); the run "
                "differs from the recording: record it again with cache mode record, or "
                "set fallthrough to call the model for new requests"
            )
        assert self.inner is not None
        completion = await self.inner.complete(messages, tools, seed=seed)
        if self.mode == "replay":
            return completion
        return await asyncio.to_thread(self._store, key, request, completion)
