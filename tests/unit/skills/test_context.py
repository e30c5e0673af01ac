"""SkillScriptContext, safe_env and current_context, through the public API."""

from __future__ import annotations

import dataclasses
import fnmatch
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
from tests.unit import helpers

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
    ctx = helpers.script_context(
        tmp_path / "skills" / "daily-guidance",
        workspace=tmp_path / "agents" / "a-1",
        skill_id="built-in@daily-guidance",
        tick=3,
        when=datetime(2026, 3, 2, 6, 45, tzinfo=UTC),
        env=safe_env(ENVIRON),
        create=False,
    )
    return dataclasses.replace(ctx, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("github_token", True),
        ("MY_SECRET", True),
        ("DB_PASSWORD", True),
        ("SMTP_PASS", True),
        ("SESSION_COOKIE", True),
        ("PGPASSWD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("HTTP_AUTHORIZATION", True),
        ("PATH", False),
        ("PASSAGE_COUNT", False),
        ("LC_ALL", False),
    ],
    ids=lambda v: str(v),
)
def test_looks_secret(name: str, secret: bool) -> None:
    assert looks_secret(name) is secret


def test_safe_env_keeps_only_the_allow_list() -> None:
    environ = {**ENVIRON, "LC_TIME": "C", "SMTP_PASS": "p", "SESSION_COOKIE": "c"}
    assert dict(safe_env(environ)) == {
        "PATH": "/usr/bin",
        "HOME": "/home/a",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "LC_TIME": "C",
    }


def test_safe_env_adds_exactly_the_declared_names() -> None:
    env = safe_env(ENVIRON, declared=["AGENTSIM_MODE", "OPENAI_API_KEY", "ABSENT"])
    assert env["AGENTSIM_MODE"] == "fast"
    assert env["OPENAI_API_KEY"] == "sk-2"  # declared by the skill: its author asked for it
    assert "ABSENT" not in env and "GITHUB_TOKEN" not in env and "AGENTSIM_API_KEY" not in env


def test_safe_env_custom_allow_list_replaces_the_default() -> None:
    env = safe_env(ENVIRON, allow=["RANDOM_*"])
    assert dict(env) == {"RANDOM_VAR": "x"}


def test_safe_env_is_read_only() -> None:
    env = safe_env(ENVIRON)
    with pytest.raises(TypeError, match="does not support item assignment"):
        env["PATH"] = "/evil"  # type: ignore[index]


def test_safe_env_default_reads_os_environ_through_the_allow_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live")
    monkeypatch.setenv("MAIL_PASS", "p")
    monkeypatch.setenv("TZ", "Europe/Paris")
    env = safe_env()
    assert env["TZ"] == "Europe/Paris"
    assert "OPENAI_API_KEY" not in env and "MAIL_PASS" not in env
    assert all(any(fnmatch.fnmatchcase(n, p) for p in DEFAULT_ALLOW) for n in env)


def test_context_is_frozen_and_env_immutable(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'tick'"):
        ctx.tick = 4  # type: ignore[misc]
    with pytest.raises(TypeError, match="does not support item assignment"):
        ctx.env["PATH"] = "/evil"  # type: ignore[index]


def test_context_keeps_its_own_read_only_copy_of_a_plain_env(tmp_path: Path) -> None:
    raw = {"PATH": "/bin"}
    ctx = make_ctx(tmp_path, env=raw)
    raw["PATH"] = "/changed"
    assert dict(ctx.env) == {"PATH": "/bin"}
    with pytest.raises(TypeError, match="does not support item assignment"):
        ctx.env["PATH"] = "/evil"  # type: ignore[index]


def test_context_defaults_to_the_process_snapshot(tmp_path: Path) -> None:
    fields = {
        f.name: getattr(make_ctx(tmp_path), f.name) for f in dataclasses.fields(make_ctx(tmp_path))
    }
    del fields["env"]
    ctx = SkillScriptContext(**fields)
    assert dict(ctx.env) == dict(safe_env())


def test_state_dir_is_per_namespace_and_skill_and_creates_nothing(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    state = tmp_path / "agents" / "a-1" / "state"
    path = ctx.state_dir("cache", "today.json")
    assert path == state / "built-in" / "daily-guidance" / "cache" / "today.json"
    assert ctx.state_dir() == state / "built-in" / "daily-guidance"
    # A namesake in another namespace never shares the folder.
    assert make_ctx(tmp_path, skill_id="custom@daily-guidance").state_dir() == (
        state / "custom" / "daily-guidance"
    )
    assert make_ctx(tmp_path, skill_id="env:city@daily-guidance").state_dir() == (
        state / "env-city" / "daily-guidance"
    )
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
