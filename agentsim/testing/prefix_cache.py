"""A block prefix cache as an inference server keeps one, for the test server and the benches.

It works the way vLLM's automatic prefix caching does: a prompt is cut into blocks of
``block_tokens`` tokens (16); each full block is named by a hash chained over every token
before it, so a block is reused only when the whole prefix up to it is the same; blocks are
dropped least recently used first when ``capacity_tokens`` is full. Within one request the
blocks are touched tail first, so that under pressure a prompt loses its tail before its head
(a head without its tail is still useful, the reverse is not). As in vLLM a prompt that is
cached in full still computes its last token.

``render_chat`` lays a request out the way chat templates (Qwen's, Hermes') do: the system
message, then the tool schemas, then the other messages; ``tokenize`` is a deterministic
stand-in for a model's tokenizer: runs of up to 8 letters or up to 3 digits, each with the
space before it; other runs of white space; runs of up to 3 other characters (BPE
vocabularies hold ``","``, ``":"``, ``</`` as single tokens). On agentsim's prompts it counts
about one token per 3.2 characters (JSON is dense), near what BPE tokenizers count.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["PrefixCache", "render_chat", "tokenize"]

_TOKEN = re.compile(r" ?[A-Za-z]{1,8}| ?[0-9]{1,3}|\s+|[^A-Za-z0-9\s]{1,3}")


def tokenize(text: str) -> list[str]:
    """The tokens of ``text`` (see the module docstring)."""
    return _TOKEN.findall(text)


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: their text, in order
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def render_chat(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] = ()) -> str:
    """The prompt text of a chat request: system message, tools, then the other messages."""
    out: list[str] = []
    rest = list(messages)
    system = ""
    if rest and rest[0].get("role") == "system":
        system = _content(rest.pop(0))
    head = system
    if tools:
        schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        head += f"\n\n# Tools\n<tools>\n{schemas}\n</tools>"
    if head:
        out.append(f"<|start|>system\n{head}<|end|>\n")
    for m in rest:
        role = str(m.get("role", "user"))
        text = _content(m)
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {} if isinstance(call, Mapping) else {}
            text += "\n<tool_call>" + json.dumps(
                {"name": fn.get("name"), "arguments": fn.get("arguments")}, ensure_ascii=False
            )
        out.append(f"<|start|>{role}\n{text}<|end|>\n")
    out.append("<|start|>assistant\n")
    return "".join(out)


class PrefixCache:
    """Blocks of ``block_tokens`` tokens under chained hashes, least recently used out.

    ``capacity_tokens=None`` never evicts. ``serve(tokens)`` returns how many of the prompt's
    leading tokens were cached, then caches the prompt's full blocks. Thread-safe."""

    def __init__(self, capacity_tokens: int | None, *, block_tokens: int = 16) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens={block_tokens!r} must be >= 1; vLLM uses 16")
        if capacity_tokens is not None and capacity_tokens < block_tokens:
            raise ValueError(
                f"capacity_tokens={capacity_tokens!r} holds no block of {block_tokens} tokens; "
                "pass at least one block, or None for an unbounded cache"
            )
        self.block_tokens = block_tokens
        self.capacity_tokens = capacity_tokens
        self._max_blocks = None if capacity_tokens is None else capacity_tokens // block_tokens
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.requests = 0
        self.evicted_blocks = 0

    @property
    def blocks(self) -> int:
        """Blocks held now."""
        return len(self._blocks)

    def _hashes(self, tokens: Sequence[str]) -> list[bytes]:
        size = self.block_tokens
        out: list[bytes] = []
        parent = b""
        for start in range(0, len(tokens) - size + 1, size):
            h = hashlib.blake2b(parent, digest_size=16)
            h.update("\x00".join(tokens[start : start + size]).encode())
            parent = h.digest()
            out.append(parent)
        return out

    def serve(self, tokens: Sequence[str]) -> int:
        """Cached leading tokens of this prompt; its blocks are then cached (most recent)."""
        hashes = self._hashes(tokens)
        # The last token is always computed: the model needs its logits.
        usable = max(0, (len(tokens) - 1) // self.block_tokens)
        with self._lock:
            hit = 0
            for h in hashes[:usable]:
                if h not in self._blocks:
                    break
                hit += 1
            blocks = self._blocks
            for h in reversed(hashes):  # tail first: the head ends up most recent
                if h in blocks:
                    blocks.move_to_end(h)
                else:
                    blocks[h] = None
            if self._max_blocks is not None:
                while len(blocks) > self._max_blocks:
                    blocks.popitem(last=False)
                    self.evicted_blocks += 1
            cached = hit * self.block_tokens
            self.requests += 1
            self.prompt_tokens += len(tokens)
            self.cached_tokens += cached
        return cached

    def serve_chat(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] = ()
    ) -> tuple[int, int]:
        """(prompt tokens, cached tokens) of a chat request rendered by ``render_chat``."""
        tokens = tokenize(render_chat(messages, tools))
        return len(tokens), self.serve(tokens)

    def stats(self) -> dict[str, Any]:
        """Counters since the start: requests, prompt and cached tokens, their ratio."""
        with self._lock:
            share = self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
            return {
                "capacity_tokens": self.capacity_tokens,
                "block_tokens": self.block_tokens,
                "requests": self.requests,
                "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens,
                "cached_share": round(share, 4),
                "blocks": len(self._blocks),
                "evicted_blocks": self.evicted_blocks,
            }
