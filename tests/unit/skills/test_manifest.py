"""SKILL.md parsing: parse_skill_md, load_skill_md, render_skill_md."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentsim.skills import (
    Diagnostic,
    SkillManifest,
    load_skill_md,
    parse_skill_md,
    render_skill_md,
)

GOOD = """---
name: daily-guidance
description: Use for planning the day.
script: scripts/daily_guidance.py
hooks:
  pre_step: scripts/daily_guidance.py
tags: [mobility, planning]
timeout: 5
isolation: thread
status: deprecated
idempotent: true
retries: 2
version: "1.2"
allowed-tools: Read Bash
metadata:
  author: lab
---
# Daily guidance

Do the thing.
"""


def _parse(text: str, folder: str | None = None) -> tuple[SkillManifest | None, list[str]]:
    parsed = parse_skill_md(text, source="s/SKILL.md", folder_name=folder)
    return parsed.manifest, [str(d) for d in parsed.diagnostics]


def _front(extra: str, *, name: str = "x", description: str = "Use it.") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\nbody\n"


def test_parses_every_field_and_keeps_the_body_line() -> None:
    parsed = parse_skill_md(GOOD, source="s/SKILL.md", folder_name="daily-guidance")
    m = parsed.manifest
    assert m is not None and parsed.diagnostics == ()
    assert (m.name, m.script, m.hooks.pre_step, m.hooks.post_step) == (
        "daily-guidance",
        "scripts/daily_guidance.py",
        "scripts/daily_guidance.py",
        None,
    )
    assert m.tags == ("mobility", "planning") and m.timeout == 5.0
    assert (m.isolation, m.status, m.idempotent, m.retries, m.version) == (
        "thread",
        "deprecated",
        True,
        2,
        "1.2",
    )
    assert m.allowed_tools == ("Read", "Bash") and m.metadata == {"author": "lab"}
    assert parsed.body == "# Daily guidance\n\nDo the thing.\n"
    assert parsed.body_line == 18
    assert GOOD.splitlines()[parsed.body_line - 1] == "# Daily guidance"


def test_unknown_keys_are_kept_as_extra_with_a_warning() -> None:
    parsed = parse_skill_md(_front("scirpt: a.py\n"), source="s/SKILL.md")
    assert parsed.manifest is not None and parsed.manifest.extra == {"scirpt": "a.py"}
    (diag,) = parsed.diagnostics
    assert diag == Diagnostic(
        file="s/SKILL.md",
        line=4,
        severity="warning",
        message="unknown frontmatter key 'scirpt' (kept as extra); did you mean 'script'?",
    )
    assert str(diag).startswith("s/SKILL.md:4: warning: unknown frontmatter key")


@pytest.mark.parametrize(
    ("text", "line", "pattern"),
    [
        pytest.param("", 1, "SKILL.md is empty", id="empty"),
        pytest.param("  \n\n", 1, "SKILL.md is empty", id="blank"),
        pytest.param("# no frontmatter\n", 1, "first line must be '---'", id="no-fence"),
        pytest.param("---\nname: x\n", 1, "never closed", id="unclosed"),
        pytest.param("---\n---\nbody", 2, "frontmatter is empty", id="empty-frontmatter"),
        pytest.param("---\n- a\n- b\n---\n", 2, "is a list, not a mapping", id="list"),
        pytest.param(
            "---\nname: x\ndescription: [a\n---\n", 3, "invalid YAML.*flow sequence", id="yaml"
        ),
        pytest.param(
            "---\nname: x\n\n\ndescription: a\n  bad: : x\n---\n",
            6,
            "invalid YAML",
            id="yaml-offset",
        ),
        pytest.param("---\ndescription: a\n---\n", 2, "has no name:", id="no-name"),
        pytest.param("---\nname: x\n---\n", 2, "has no description:", id="no-description"),
        pytest.param(_front("", name="Bad_Name"), 2, "not a valid skill name", id="name-pattern"),
        pytest.param(_front("", name="a" * 65), 2, "over the limit of 64", id="name-length"),
        pytest.param(
            _front("", name="1"), 2, "name must be a string, got number 1; quote it", id="name-type"
        ),
        pytest.param(_front("", description='""'), 3, "description is empty", id="desc-empty"),
        pytest.param(
            _front("", description="a" * 1025), 3, "over the limit of 1024", id="desc-long"
        ),
        pytest.param(_front("script: /abs/x.py\n"), 4, "is absolute", id="script-absolute"),
        pytest.param(_front("script: C:/x.py\n"), 4, "is absolute", id="script-drive"),
        pytest.param(
            _front("script: ../x.py\n"), 4, r"leaves the skill folder \('..'\)", id="dotdot"
        ),
        pytest.param(
            _front("script: 3\n"),
            4,
            "script must be a string, got number 3; quote it",
            id="script-int",
        ),
        pytest.param(
            _front("hooks:\n  on_end: a.py\n"), 5, "unknown hook type 'on_end'", id="hook"
        ),
        pytest.param(_front("hooks: [a]\n"), 4, "hooks must be a mapping", id="hooks-list"),
        pytest.param(
            _front("hooks:\n  pre_step: ../a.py\n"),
            5,
            "hooks.pre_step '../a.py' leaves",
            id="hook-up",
        ),
        pytest.param(
            _front("isolation: docker\n"),
            4,
            "isolation must be 'inline', 'thread' or 'process', got 'docker'",
            id="iso",
        ),
        pytest.param(
            _front("status: gone\n"), 4, "'active' or 'deprecated', got 'gone'", id="status"
        ),
        pytest.param(_front("idempotent: 1\n"), 4, "must be true or false", id="idempotent"),
        pytest.param(_front("retries: -1\n"), 4, "retries must be >= 0, got -1", id="retries"),
        pytest.param(_front("timeout: 0\n"), 4, "positive number of seconds", id="timeout"),
        pytest.param(_front("version: 1.10\n"), 4, 'quote it, like version: "1.1"', id="version"),
        pytest.param(_front("version: [1]\n"), 4, "version must be a string", id="version-list"),
        pytest.param(_front("tags: mobility\n"), 4, "must be a list like", id="tags-str"),
        pytest.param(
            _front("tags: [1]\n"),
            4,
            r"tags\[0\] must be a string, got number 1; quote it",
            id="tags-int",
        ),
        pytest.param(
            _front("requires: [Not Ok]\n"),
            4,
            r"requires\[0\] 'Not Ok' is not a valid skill name",
            id="requires",
        ),
        pytest.param(
            _front("metadata: {a: 1}\n"),
            4,
            "metadata.a must be a string, got number 1; quote it",
            id="metadata",
        ),
        pytest.param(_front("metadata: x\n"), 4, "must be a mapping of string keys", id="meta-str"),
        pytest.param(_front("license: [a]\n"), 4, "license must be a string", id="license"),
        pytest.param(_front("compatibility: " + "a" * 501 + "\n"), 4, "limit of 500", id="compat"),
        pytest.param(
            _front("allowed-tools: [1]\n"), 4, r"allowed-tools\[0\] must be a string", id="tools"
        ),
        pytest.param(
            _front("input_schema: x\n"), 4, "mapping of JSON Schema keywords", id="schema-type"
        ),
        pytest.param(
            _front("output_schema: {type: 12}\n"), 4, "not a valid JSON Schema", id="schema-bad"
        ),
        pytest.param(_front("1: x\n"), 4, "key 1 is not a string", id="int-key"),
    ],
)
def test_bad_input_gives_a_diagnostic_with_the_line(text: str, line: int, pattern: str) -> None:
    parsed = parse_skill_md(text, source="s/SKILL.md")
    assert parsed.manifest is None
    errors = parsed.errors
    assert errors, parsed.diagnostics
    assert any(d.line == line and d.file == "s/SKILL.md" for d in errors), errors
    with pytest.raises(AssertionError, match=pattern):
        raise AssertionError(" | ".join(d.message for d in errors))


def test_every_problem_is_reported_at_once_in_file_order() -> None:
    text = _front(
        "tags: [a, 1]\nmetadata:\n  ok: x\n  bad: 2\ntimeout: -1\nsurprise: 1\n", name="A"
    )
    parsed = parse_skill_md(text, source="s/SKILL.md")
    assert parsed.manifest is None
    assert [(d.line, d.severity, d.message.split(";")[0]) for d in parsed.diagnostics] == [
        (2, "error", "name 'A' is not a valid skill name"),
        (4, "error", "tags[1] must be a string, got number 1"),
        (7, "error", "metadata.bad must be a string, got number 2"),
        (8, "error", "timeout must be a positive number of seconds, got -1"),
        (9, "warning", "unknown frontmatter key 'surprise' (kept as extra)"),
    ]


def test_yaml_aliases_are_refused() -> None:
    text = _front("a: &x [1, 2]\nb: [*x, *x]\n")
    parsed = parse_skill_md(text, source="s")
    assert parsed.manifest is None
    (diag,) = parsed.errors
    assert diag.line == 4 and "YAML anchor and alias" in diag.message


def test_the_model_itself_is_strict_and_frozen() -> None:
    with pytest.raises(ValueError, match="nmae"):
        SkillManifest.model_validate({"name": "x", "description": "d", "nmae": "y"})
    with pytest.raises(ValueError, match="timeout"):
        SkillManifest.model_validate({"name": "x", "description": "d", "timeout": "5"})
    manifest = SkillManifest(name="x", description="d")
    with pytest.raises(ValueError, match="frozen"):
        manifest.name = "y"  # type: ignore[misc]


def test_strict_parse_notes_agentsim_keys_and_flags_what_is_not_portable() -> None:
    text = _front("script: a.py\nallowed-tools: [Read, Bash]\ncolour: red\n")
    parsed = parse_skill_md(text, source="s", strict=True)
    assert [(d.line, d.severity) for d in parsed.diagnostics] == [
        (6, "warning"),  # unknown key, as without strict
        (4, "note"),
        (5, "error"),
        (6, "error"),
    ]
    messages = [d.message for d in parsed.diagnostics]
    assert messages[1].startswith("'script' is an agentsim extension, not an Agent Skills field")
    assert "wants one space-separated string, like 'allowed-tools: Read Bash'" in messages[2]
    assert messages[3].startswith("'colour' is neither an Agent Skills field nor an agentsim")
    assert parse_skill_md(text, source="s").diagnostics == parsed.diagnostics[:1]


def test_name_must_equal_the_folder() -> None:
    manifest, diags = _parse(_front("", name="a"), folder="b")
    assert manifest is None
    assert diags == [
        "s/SKILL.md:2: error: name 'a' does not match its folder 'b'; rename the folder or the "
        "name so that they are equal"
    ]


def test_crlf_and_bom_are_read_with_warnings() -> None:
    text = "\ufeff" + GOOD.replace("\n", "\r\n")
    parsed = parse_skill_md(text, source="s/SKILL.md")
    assert parsed.manifest is not None and parsed.manifest.name == "daily-guidance"
    assert parsed.body == "# Daily guidance\n\nDo the thing.\n"
    messages = [d.message for d in parsed.diagnostics]
    assert [d.severity for d in parsed.diagnostics] == ["warning", "warning"]
    assert "byte-order mark" in messages[0] and "CRLF" in messages[1]


def test_dashes_inside_a_quoted_value_are_content_not_a_fence() -> None:
    text = '---\nname: x\ndescription: "before\n---\nafter"\n---\nbody line\n'
    parsed = parse_skill_md(text, source="s")
    assert parsed.manifest is not None
    assert parsed.manifest.description == "before --- after"
    assert (parsed.body, parsed.body_line) == ("body line\n", 7)
    inline = parse_skill_md(_front("", description='"a --- b"'), source="s")
    assert inline.manifest is not None and inline.manifest.description == "a --- b"


def test_a_quote_that_is_never_closed_is_a_yaml_error() -> None:
    parsed = parse_skill_md('---\nname: x\ndescription: "open\n---\nbody\n', source="s")
    assert parsed.manifest is None
    assert "invalid YAML" in parsed.errors[0].message


def test_folded_and_block_values_are_read() -> None:
    text = "---\nname: x\ndescription: >\n  folded\n  text\ntags:\n  - a\n---\n"
    parsed = parse_skill_md(text, source="s")
    assert parsed.manifest is not None
    assert parsed.manifest.description == "folded text\n" and parsed.manifest.tags == ("a",)


def _write(folder: Path, text: str | bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    md = folder / "SKILL.md"
    md.write_bytes(text.encode() if isinstance(text, str) else text)
    return md


def test_load_checks_declared_files_exist(tmp_path: Path) -> None:
    folder = tmp_path / "daily-guidance"
    _write(folder, GOOD)
    parsed = load_skill_md(folder)
    assert parsed.manifest is None
    assert [str(d) for d in parsed.errors] == [
        f"{folder / 'SKILL.md'}:4: error: script 'scripts/daily_guidance.py' does not exist; "
        "create it or fix the path",
        f"{folder / 'SKILL.md'}:6: error: hooks.pre_step 'scripts/daily_guidance.py' does not "
        "exist; create it or fix the path",
    ]
    (folder / "scripts").mkdir()
    (folder / "scripts" / "daily_guidance.py").write_text("x = 1\n")
    loaded = load_skill_md(folder / "SKILL.md")
    assert loaded.ok and loaded.manifest is not None
    assert loaded.manifest.name == "daily-guidance"


def test_load_refuses_a_script_symlink_leaving_the_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("x = 1\n")
    folder = tmp_path / "x"
    _write(folder, _front("script: run.py\n"))
    (folder / "run.py").symlink_to(outside)
    parsed = load_skill_md(folder)
    assert "symlink that leaves the skill folder" in parsed.errors[0].message
    (folder / "run.py").unlink()
    (folder / "run.py").mkdir()
    assert "is not a regular file" in load_skill_md(folder).errors[0].message


@pytest.mark.parametrize(
    ("content", "pattern", "line"),
    [
        pytest.param(b"", "SKILL.md is empty", 1, id="empty"),
        pytest.param(
            b"---\nname: x\n\xff\xfe\n---\n", r"not valid UTF-8 \(byte 0xff", 3, id="utf8"
        ),
        pytest.param(b"x" * ((1 << 20) + 1), "over the 1 MiB limit", 1, id="huge"),
    ],
)
def test_load_reports_bad_files(tmp_path: Path, content: bytes, pattern: str, line: int) -> None:
    md = _write(tmp_path / "x", content)
    parsed = load_skill_md(md)
    assert parsed.manifest is None
    (diag,) = parsed.diagnostics
    assert diag.line == line and diag.file == str(md)
    with pytest.raises(AssertionError, match=pattern):
        raise AssertionError(diag.message)


def test_load_reports_a_fifo_and_a_symlink_loop_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "SKILL.md")
    (diag,) = load_skill_md(fifo).diagnostics
    assert diag.message == (
        "cannot read SKILL.md: it is a FIFO (named pipe), not a regular file; replace it with "
        "a text file"
    )
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "SKILL.md").symlink_to(loop / "B.md")
    (loop / "B.md").symlink_to(loop / "SKILL.md")
    (diag,) = load_skill_md(loop).diagnostics
    assert diag.message.startswith("cannot read SKILL.md (Too many levels of symbolic links); ")
    assert diag.file == str(loop / "SKILL.md") and diag.line == 1


def test_load_reports_an_unreadable_path(tmp_path: Path) -> None:
    parsed = load_skill_md(tmp_path / "missing" / "SKILL.md")
    assert parsed.manifest is None
    assert "cannot read SKILL.md (No such file or directory)" in parsed.diagnostics[0].message


def test_render_keeps_extra_keys_and_hooks() -> None:
    parsed = parse_skill_md(_front("hooks:\n  post_step: a.py\nfoo: [1, 2]\n"), source="s")
    assert parsed.manifest is not None
    text = render_skill_md(parsed.manifest, "Body\n")
    again = parse_skill_md(text, source="s")
    assert again.manifest == parsed.manifest and again.body == "Body\n"
    assert "post_step: a.py" in text and "foo:" in text


# -- properties ----------------------------------------------------------------------------

_word = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
_names = st.lists(_word, min_size=1, max_size=3).map("-".join)
_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")),
    min_size=1,
    max_size=60,
).filter(lambda s: s.strip() != "")
_rel = st.builds(
    lambda d, f: f"{d}{f}.py",
    st.sampled_from(["", "scripts/"]),
    st.text("abc_", min_size=1, max_size=8),
)


@st.composite
def manifests(draw: st.DrawFn) -> SkillManifest:
    data: dict[str, object] = {"name": draw(_names), "description": draw(_text)}
    if draw(st.booleans()):
        data["script"] = draw(_rel)
    if draw(st.booleans()):
        data["hooks"] = {"pre_step": draw(_rel)}
    data["tags"] = tuple(draw(st.lists(_text, max_size=3)))
    data["requires"] = tuple(draw(st.lists(_names, max_size=3)))
    data["timeout"] = draw(st.none() | st.floats(0.1, 1000))
    data["isolation"] = draw(st.sampled_from(["inline", "thread", "process"]))
    data["status"] = draw(st.sampled_from(["active", "deprecated"]))
    data["idempotent"] = draw(st.booleans())
    data["retries"] = draw(st.integers(0, 9))
    data["version"] = draw(st.none() | _text)
    data["metadata"] = draw(st.none() | st.dictionaries(_names, _text, max_size=2))
    return SkillManifest.model_validate(data)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(manifest=manifests(), body=st.text(max_size=200).map(lambda s: s.replace("\r", "")))
def test_parse_render_parse_round_trips(manifest: SkillManifest, body: str) -> None:
    parsed = parse_skill_md(render_skill_md(manifest, body), source="s")
    assert parsed.manifest == manifest, parsed.diagnostics
    assert parsed.body == body
