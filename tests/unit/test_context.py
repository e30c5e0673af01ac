"""SkillScriptContext, safe_env and current_context, through the public API."""

from __future__ import annotations

import dataclasses
import json
import pickle
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentsim.skills.context import (
    CONTEXT_ENV_VAR,
    DEFAULT_ALLOW,
    SkillScriptContext,
    current_context,
    looks_secret,
    safe_env,
)

ENVIRON = {
    "PATH": "/usr/bin",
    "HOME": "/home/a",
    "LANG": "C.UTF-8",
    "TZ": "UTC",
    "AGENTSIM_MODE": "fast",
    "AGENTSIM_API_KEY": "sk-1",
    "AGENTSIM_TOKEN": "t-1",
    "OPENAI_API_KEY": "sk-2",
    "GITHUB_TOKEN": "gh",
    "DB_PASSWORD": "pw",
    "RANDOM_VAR": "x",
}


def make_ctx(tmp_path: Path, **changes: object) -> SkillScriptContext:
    fields: dict[str, object] = {
        "workspace_root": tmp_path / "agents" / "a-1",
        "skill_id": "built-in@daily-guidance",
        "skill_name": "daily-guidance",
        "skill_dir": tmp_path / "skills" / "daily-guidance",
        "agent_id": "a-1",
        "tick": 3,
        "time": datetime(2026, 3, 2, 6, 45, tzinfo=UTC),
        "env": safe_env(ENVIRON),
    }
    fields.update(changes)
    return SkillScriptContext(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("github_token", True),
        ("MY_SECRET", True),
        ("DB_PASSWORD", True),
        ("PGPASSWD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("HTTP_AUTHORIZATION", True),
        ("PATH", False),
        ("AGENTSIM_MODE", False),
        ("LC_ALL", False),
    ],
    ids=lambda v: str(v),
)
def test_looks_secret(name: str, secret: bool) -> None:
    assert looks_secret(name) is secret


def test_safe_env_keeps_allow_listed_names_minus_secrets() -> None:
    env = safe_env(ENVIRON)
    assert dict(env) == {
        "PATH": "/usr/bin",
        "HOME": "/home/a",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "AGENTSIM_MODE": "fast",
    }


def test_safe_env_custom_allow_list_still_drops_secrets() -> None:
    env = safe_env(ENVIRON, allow=["RANDOM_*", "OPENAI_API_KEY"])
    assert dict(env) == {"RANDOM_VAR": "x"}


def test_safe_env_is_read_only() -> None:
    env = safe_env(ENVIRON)
    with pytest.raises(TypeError, match="does not support item assignment"):
        env["PATH"] = "/evil"  # type: ignore[index]


def test_safe_env_default_is_cached_and_clean() -> None:
    first = safe_env()
    assert safe_env() is first
    assert not any(looks_secret(name) for name in first)
    assert set(first) <= {n for n in first if n in DEFAULT_ALLOW or n.startswith("AGENTSIM_")}


def test_context_is_frozen_and_env_immutable(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'tick'"):
        ctx.tick = 4  # type: ignore[misc]
    with pytest.raises(TypeError, match="does not support item assignment"):
        ctx.env["PATH"] = "/evil"  # type: ignore[index]


def test_context_drops_secret_names_from_a_plain_env(tmp_path: Path) -> None:
    raw = {"PATH": "/bin", "MY_TOKEN": "t"}
    ctx = make_ctx(tmp_path, env=raw)
    assert dict(ctx.env) == {"PATH": "/bin"}
    raw["PATH"] = "/changed"  # the context holds its own copy
    assert ctx.env["PATH"] == "/bin"


def test_context_defaults_to_the_process_snapshot(tmp_path: Path) -> None:
    fields = {
        f.name: getattr(make_ctx(tmp_path), f.name) for f in dataclasses.fields(make_ctx(tmp_path))
    }
    del fields["env"]
    ctx = SkillScriptContext(**fields)
    assert ctx.env is safe_env()


def test_state_dir_uses_the_skill_name_and_creates_nothing(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    path = ctx.state_dir("cache", "today.json")
    assert path == tmp_path / "agents" / "a-1" / "state" / "daily_guidance" / "cache" / "today.json"
    assert ctx.state_dir() == tmp_path / "agents" / "a-1" / "state" / "daily_guidance"
    assert not (tmp_path / "agents").exists()


def test_context_pickles(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    back = pickle.loads(pickle.dumps(ctx))
    assert back == ctx
    assert back.env is not ctx.env
    with pytest.raises(TypeError, match="does not support item assignment"):
        back.env["PATH"] = "/evil"


def test_to_dict_round_trip_is_json(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    data = json.loads(json.dumps(ctx.to_dict()))
    assert data["time"] == "2026-03-02T06:45:00+00:00"
    assert SkillScriptContext.from_dict(data, env=ctx.env) == ctx


def test_current_context_outside_a_call_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONTEXT_ENV_VAR, raising=False)
    with pytest.raises(LookupError, match=r"outside a script call; call it from code run by"):
        current_context()


def test_current_context_in_a_subprocess_reads_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = make_ctx(tmp_path)
    monkeypatch.setenv(CONTEXT_ENV_VAR, json.dumps(ctx.to_dict()))
    got = current_context()
    assert got.agent_id == "a-1"
    assert got.workspace_root == ctx.workspace_root
    assert got.time == ctx.time
