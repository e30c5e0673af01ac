"""The OpenAI chat-completions wire format: reading answers and error bodies."""

from __future__ import annotations

import email.utils
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agentsim.errors import ModelResponseError
from agentsim.llm.base import Completion, ToolCall, Usage

__all__ = ["error_text", "http_fix", "parse_completion", "parse_retry_after"]

_MAX_ERROR_TEXT = 500
_REASONING_KEYS = ("reasoning_content", "reasoning")


def parse_completion(
    payload: Any, *, default_model: str = "", where: str = "model server"
) -> Completion:
    """Read an OpenAI chat-completion JSON object; ``ModelResponseError`` if it is not one."""
    if not isinstance(payload, Mapping):
        raise _not_completion(where, f"a JSON {type(payload).__name__}, not an object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise _not_completion(where, "no 'choices'")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise _not_completion(where, "choices[0] has no 'message'")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _not_completion(where, f"message.content is a {type(content).__name__}, not a string")
    calls = _parse_tool_calls(message.get("tool_calls"), where)
    # Reasoning models' thinking, apart from the answer: vLLM and DeepSeek send
    # ``reasoning_content``, other servers ``reasoning``. Not a string: not reasoning.
    reasoning = next(
        (r for k in _REASONING_KEYS if isinstance(r := message.get(k), str) and r.strip()), None
    )
    usage = Usage()
    usage_raw = payload.get("usage")
    if isinstance(usage_raw, Mapping):
        details = usage_raw.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        try:
            usage = Usage(
                prompt_tokens=int(usage_raw.get("prompt_tokens") or 0),
                completion_tokens=int(usage_raw.get("completion_tokens") or 0),
                cached_prompt_tokens=int(cached or 0),
            )
        except (TypeError, ValueError):
            raise _not_completion(where, "usage holds non-integer token counts") from None
    finish = choice.get("finish_reason")
    if not isinstance(finish, str):
        finish = "tool_calls" if calls else "stop"
    model = payload.get("model")
    return Completion(
        content=content,
        tool_calls=calls,
        usage=usage,
        finish_reason=finish,
        model=model if isinstance(model, str) and model else default_model,
        reasoning=reasoning,
    )


def _parse_tool_calls(raw_calls: Any, where: str) -> tuple[ToolCall, ...]:
    if raw_calls is None:
        return ()
    if not isinstance(raw_calls, list):
        raise _not_completion(where, "message.tool_calls is not a list")
    calls: list[ToolCall] = []
    for i, raw in enumerate(raw_calls):
        fn = raw.get("function") if isinstance(raw, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise _not_completion(where, f"tool_calls[{i}] has no function name")
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            # Some servers (Ollama's native mode) send the arguments already parsed.
            args = json.dumps(args, ensure_ascii=False)
        call_id = raw.get("id") if isinstance(raw.get("id"), str) else f"call_{i}"
        calls.append(ToolCall(id=call_id, name=fn["name"], arguments=args))
    return tuple(calls)


def _not_completion(where: str, problem: str) -> ModelResponseError:
    return ModelResponseError(
        f"{where}: the answer is not a chat completion ({problem}); check that the server "
        "implements POST /chat/completions"
    )


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def error_text(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    try:
        payload = json.loads(text)
    except ValueError:
        return text[:_MAX_ERROR_TEXT] or "(empty body)"
    if isinstance(payload, Mapping):
        err = payload.get("error")
        if isinstance(err, Mapping) and isinstance(err.get("message"), str):
            return str(err["message"])[:_MAX_ERROR_TEXT]
        if isinstance(err, str):
            return err[:_MAX_ERROR_TEXT]
    return text[:_MAX_ERROR_TEXT]


def http_fix(status: int) -> str:
    if status in (401, 403):
        return "check the API key variable (api_key_env) and its permissions"
    if status == 404:
        return "check base_url (usually ending in /v1) and the model name"
    if status == 429:
        return "lower max_concurrency / rpm / tpm or raise max_retries"
    if status >= 500:
        return "the server failed; check its logs, or raise max_retries"
    return "check the request parameters (model, tools, extra_params)"
