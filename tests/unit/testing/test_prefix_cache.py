"""agentsim.testing.prefix_cache: the block prefix cache shared by the test server and benches."""

from __future__ import annotations

import pytest

from agentsim.testing.prefix_cache import PrefixCache, render_chat, tokenize


def words(n: int, tag: str = "w") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def test_only_whole_blocks_of_an_identical_prefix_are_served() -> None:
    cache = PrefixCache(None, block_tokens=4)
    prompt = words(10)
    assert cache.serve(prompt) == 0  # cold
    assert cache.serve(prompt) == 8  # two whole blocks; the last two tokens are no block
    assert cache.serve(prompt[:6] + ["other"] * 4) == 4  # diverges inside the second block
    assert cache.stats() | {"blocks": 0} == {
        "capacity_tokens": None,
        "block_tokens": 4,
        "requests": 3,
        "prompt_tokens": 30,
        "cached_tokens": 12,
        "cached_share": 0.4,
        "blocks": 0,
        "evicted_blocks": 0,
    }


def test_a_block_is_named_by_everything_before_it() -> None:
    cache = PrefixCache(None, block_tokens=4)
    cache.serve(words(4, "a") + words(4, "b") + ["end"])
    # The same second block after another first block is not a hit: chained hashes.
    assert cache.serve(words(4, "x") + words(4, "b") + ["end"]) == 0
    assert cache.serve(words(4, "a") + words(4, "b") + ["end"]) == 8


def test_a_prompt_cached_in_full_still_computes_its_last_token() -> None:
    cache = PrefixCache(None, block_tokens=4)
    cache.serve(words(8))
    assert cache.serve(words(8)) == 4  # the last block holds the token to compute
    assert cache.serve(words(9)) == 8


def test_least_recently_used_blocks_go_first_tail_before_head() -> None:
    cache = PrefixCache(16, block_tokens=4)  # four blocks
    a, b = [*words(12, "a"), "."], [*words(8, "b"), "."]
    cache.serve(a)  # three blocks
    cache.serve(b)  # two more: the oldest of a's goes, which is its tail
    assert cache.blocks == 4 and cache.stats()["evicted_blocks"] == 1
    assert cache.serve(a) == 8  # a's head is still there, its tail was evicted
    assert cache.serve(b) == 4  # b lost its tail when a came back


def test_bad_sizes_name_the_fix() -> None:
    with pytest.raises(ValueError, match=r"block_tokens=0 must be >= 1; vLLM uses 16"):
        PrefixCache(100, block_tokens=0)
    with pytest.raises(ValueError, match=r"capacity_tokens=8 holds no block of 16 tokens"):
        PrefixCache(8)


def test_requests_render_system_then_tools_then_the_other_messages() -> None:
    tools = [{"type": "function", "function": {"name": "finish"}}]
    call = {"id": "c1", "type": "function", "function": {"name": "finish", "arguments": "{}"}}
    text = render_chat(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "U"}]},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
        tools,
    )
    assert text == (
        "<|start|>system\nS\n\n# Tools\n<tools>\n"
        '{"type": "function", "function": {"name": "finish"}}\n</tools><|end|>\n'
        "<|start|>user\nU<|end|>\n"
        '<|start|>assistant\n\n<tool_call>{"name": "finish", "arguments": "{}"}<|end|>\n'
        "<|start|>tool\nok<|end|>\n"
        "<|start|>assistant\n"
    )
    assert render_chat([{"role": "user", "content": "U"}]) == (
        "<|start|>user\nU<|end|>\n<|start|>assistant\n"
    )


def test_the_tokenizer_is_deterministic_and_lossless() -> None:
    text = 'Hello photography, {"a": 12345}\n\n  end'
    tokens = tokenize(text)
    assert "".join(tokens) == text and tokens == tokenize(text)
    assert tokens[:4] == ["Hello", " photogra", "phy", ","]
    assert tokens[4:10] == [" ", '{"', "a", '":', " 123", "45"]
