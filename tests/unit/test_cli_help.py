"""The command line a new user meets: bare `agentsim`, `--version`, help for every option,
and a progress line that counts to the ticks that will run."""

from __future__ import annotations

import argparse
import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsim
from agentsim.cli import build_parser, main

EXPERIMENT = "name: t\nticks: 6\nagents: [{group: a, count: 2}]\n"


def test_bare_agentsim_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: agentsim")
    for command in ("run", "skills", "inspect", "interview", "report"):
        assert re.search(rf"^\s+{command}\s", out, re.MULTILINE), command
    assert "Exit codes: 0 success, 1 a failed run, 2 bad input" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"agentsim {agentsim.__version__}\n"


def _parsers(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, Any]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_and_argument_has_help_without_markup() -> None:
    missing, markup = [], []
    for path, parser in _parsers(build_parser(), "agentsim"):
        texts = [parser.description or "", parser.epilog or ""]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                texts.extend(a.help or "" for a in action._choices_actions)
                continue
            name = "/".join(action.option_strings) or action.dest
            if not (action.help or "").strip():
                missing.append(f"{path} {name}")
            texts.append(action.help or "")
        markup.extend(f"{path}: {t!r}" for t in texts if "``" in t or ":func:" in t)
    assert missing == []
    assert markup == []


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "pipe"])
def test_the_progress_line_counts_to_the_ticks_that_will_run(
    tty: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    err = _Terminal() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["run", str(exp), "--out", str(tmp_path / "r"), "--ticks", "4"]) == 0
    text = err.getvalue()
    lines = text.replace("\r", "\n").split("\n")
    shown = [line.rstrip() for line in lines if line.startswith("[")]
    assert shown[-1].startswith("[" + "#" * 24 + "] tick 4/4  ")  # not 4/6
    assert all("/6" not in line for line in shown)
    assert re.search(r"elapsed \d+:\d\d  left ~0:00$", shown[-1]), shown[-1]
    if tty:  # a terminal sees every tick; a pipe gets a line every two seconds and the last
        assert [line.split("  ")[0][-8:] for line in shown] == [f"tick {n}/4" for n in (1, 2, 3, 4)]
    assert text.endswith("\n")  # the line is ended before the summary is printed
    assert capsys.readouterr().out.startswith("stopped: ")


def test_the_progress_line_of_a_resumed_run_counts_from_where_it_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    run_dir = tmp_path / "r"
    assert main(["run", str(exp), "--out", str(run_dir), "--ticks", "2", "--json"]) == 0
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["run", "--resume", str(run_dir), "--ticks", "3"]) == 0
    shown = [x for x in err.getvalue().replace("\r", "\n").split("\n") if x.startswith("[")]
    assert [x.split("] ")[1].split("  ")[0] for x in shown] == ["tick 3/5", "tick 4/5", "tick 5/5"]
    assert err.getvalue().endswith("\n")
    capsys.readouterr()


def test_the_progress_line_shows_a_survey_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: t\nworkflow:\n  - run: {ticks: 1}\n"
        "  - survey: {name: midday, question: How are you?, agents: all}\n"
        "agents: [{group: a, count: 3}]\n"
    )
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["run", str(exp), "--out", str(tmp_path / "r")]) == 0
    shown = [x for x in err.getvalue().replace("\r", "\n").split("\n") if x.startswith("[")]
    assert [x.split("] ")[1].split("  ")[0] for x in shown] == ["tick 1/1", "tick 1/1"]
    assert shown[0].split("  ")[1].endswith(" agent-steps/s")
    assert shown[1].split("  ")[1] == "survey midday 3/3"  # the survey, once it is over
    assert err.getvalue().endswith("\n")
    capsys.readouterr()
