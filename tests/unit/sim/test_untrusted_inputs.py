"""Inputs a run does not take on trust, refused before anything is written (exit 2, the
field path in the message): a key given twice in the experiment, a count that is not a
whole number, a damaged model-cache file, and more agents than the machine's memory or the
run folder's disk can hold."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.run import capacity


def _run(
    tmp: Path, text: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, Path]:
    exp = tmp / "exp.yaml"
    exp.write_text(text, encoding="utf-8")
    out = tmp / "run"
    code = main(["run", str(exp), "--out", str(out), *extra])
    return code, capsys.readouterr().err, out


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "name: t\nticks: 1\nagents:\n  - group: a\n    count: 2\n    count: 3\n",
            "error: agents.0.count: the key 'count' is given twice (lines 5 and 6 of {exp}); "
            "keep one of them",
        ),
        (
            "name: t\nticks: 1\nmodel: {backend: scripted, max_retries: 1, max_retries: 2}\n"
            "agents: [{group: a, count: 2}]\n",
            "error: model.max_retries: the key 'max_retries' is given twice (lines 3 and 3 of "
            "{exp}); keep one of them",
        ),
        (
            "name: t\nticks: 1\nagents: [{group: a, count: true}]\n",
            "error: agents.0.count: input should be a valid integer (got True); correct the "
            "value (in {exp})",
        ),
        (
            "name: t\nticks: 2.0\nagents: [{group: a, count: 2}]\n",
            "error: ticks: input should be a valid integer (got 2.0); correct the value (in {exp})",
        ),
        (
            "name: t\nticks: 1\noutput: {checkpoint_every: '2'}\nagents: [{group: a, count: 2}]\n",
            "error: output.checkpoint_every: input should be a valid integer (got '2'); correct "
            "the value (in {exp})",
        ),
    ],
    ids=["duplicate-key", "duplicate-key-flow", "count-true", "ticks-float", "string-number"],
)
def test_duplicate_keys_and_counts_that_are_not_integers_are_exit_2(
    text: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err, out = _run(tmp_path, text, capsys)
    assert code == 2
    assert err.splitlines() == [error.format(exp=tmp_path / "exp.yaml")]
    assert not out.exists()


_CACHED = """
name: cached
seed: 3
ticks: 2
agents: [{{group: a, count: 3}}]
model: {{backend: scripted, cache: {mode}, cache_path: {path}}}
"""


def test_a_damaged_model_cache_is_exit_2_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache.sqlite"
    # A good recording first: the run reads it back in replay.
    code, err, _ = _run(tmp_path, _CACHED.format(mode="record", path=cache), capsys)
    assert code == 0, err
    with contextlib.closing(sqlite3.connect(cache)) as conn:
        assert conn.execute("SELECT count(*) FROM completions").fetchone()[0] > 0
    (tmp_path / "run").rename(tmp_path / "recorded")

    # Its pages overwritten in the middle, as a crash of the disk or a bad copy leaves it.
    data = bytearray(cache.read_bytes())
    data[4096:8192] = b"\xff" * 4096
    cache.write_bytes(bytes(data))
    code, err, out = _run(tmp_path, _CACHED.format(mode="replay", path=cache), capsys)
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(
        f"error: model.cache_path: the model cache {cache} is damaged or not a cache file ("
    )
    assert line.endswith("); delete it (or point the cache at a new file) and record again")
    assert not out.exists()

    # Not a database at all.
    cache.write_text("these are not the completions you are looking for\n" * 100)
    code, err, out = _run(tmp_path, _CACHED.format(mode="record", path=cache), capsys)
    assert code == 2
    assert err.splitlines() == [
        f"error: model.cache_path: the model cache {cache} is damaged or not a cache file "
        "(file is not a database); delete it (or point the cache at a new file) and record "
        "again"
    ]
    assert not out.exists()


_MANY = "name: many\nseed: 1\nticks: 1\nagents: [{group: a, count: 400}]\n"


def test_agents_that_will_not_fit_in_memory_are_refused_with_the_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A machine with 2 MiB left (the reading is the kernel's; played here).
    monkeypatch.setattr(capacity, "available_memory", lambda: 2 * 1024 * 1024)
    code, err, out = _run(tmp_path, _MANY, capsys)
    assert code == 2
    assert err.splitlines() == [
        "error: agents: 400 agents need about 7.8 MiB of memory (20 KiB each) but 2.0 MiB is "
        "available; run fewer agents or spread them over Ray hosts, or pass "
        "--skip-capacity-check to start anyway"
    ]
    assert not out.exists()
    exp = tmp_path / "exp.yaml"
    assert main(["run", str(exp), "--out", str(out), "--skip-capacity-check", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["status"] == "completed" and summary["agents"] == 400


def test_agents_that_will_not_fit_on_the_disk_are_refused_with_the_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Path] = []

    def one_mebibyte(path: Path) -> int:
        seen.append(path)
        return 1024 * 1024

    monkeypatch.setattr(capacity, "free_disk", one_mebibyte)
    code, err, out = _run(tmp_path, _MANY, capsys)
    assert code == 2
    assert err.splitlines() == [
        f"error: agents: 400 agents need about 4.7 MiB of disk for the run folder (12 KiB "
        f"each) but {tmp_path} has 1.0 MiB free; free space, choose another --out, run fewer "
        "agents, or pass --skip-capacity-check to start anyway"
    ]
    assert seen and seen[0] == out and not out.exists()


def test_the_machine_readings_are_real_numbers(tmp_path: Path) -> None:
    memory = capacity.available_memory()
    assert memory is None or memory > 0
    free = capacity.free_disk(tmp_path / "not" / "yet" / "made")
    assert free > 0 and abs(free - capacity.free_disk(tmp_path)) < 2**30
