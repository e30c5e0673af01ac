"""`agentsim skills validate --strict` against the Agent Skills specification (issue 21,
item 6), through the command line: what is an error, a warning, and what reads as it looks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentsim.skills import load_skill_md, parse_skill_md
from agentsim.skills.cli import main

QUOTE = (
    '; quote it, like {key}: "{written}" (YAML reads unquoted yes, no, on, off, numbers and null'
)


def validate(
    capsys: pytest.CaptureFixture[str], folder: Path, *, strict: bool = True
) -> tuple[int, list[tuple[int, str, str]]]:
    code = main(["skills", "validate", "--json", *(["--strict"] if strict else []), str(folder)])
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    diags = data["results"][0]["diagnostics"]
    return code, [(d["line"], d["severity"], d["message"]) for d in diags]


def skill(tmp_path: Path, folder: str, front: str, *, raw: bytes = b"") -> Path:
    path = tmp_path / folder
    path.mkdir(parents=True)
    text = f"---\n{front}---\nBody.\n".encode()
    (path / "SKILL.md").write_bytes(raw + text)
    return path


def test_a_byte_order_mark_is_an_error_under_strict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = skill(tmp_path, "bom", "name: bom\ndescription: Use it.\n", raw=b"\xef\xbb\xbf")
    code, found = validate(capsys, folder)
    assert code == 1
    assert found == [
        (
            1,
            "error",
            "SKILL.md starts with a UTF-8 byte-order mark; the Agent Skills spec wants the file "
            "to start with '---' (save it as UTF-8 without BOM)",
        )
    ]
    code, found = validate(capsys, folder, strict=False)  # agentsim itself reads it
    assert code == 0 and [s for _, s, _ in found] == ["warning"]


@pytest.mark.parametrize("name", ["café", "日本語", "straße-2", "ß", "a1-b2"])
def test_unicode_lowercase_names_are_valid(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    folder = skill(tmp_path, name, f"name: {name}\ndescription: Use it.\n")
    assert validate(capsys, folder) == (0, [])


@pytest.mark.parametrize("name", ["Café", "ÉTÉ", "a--b", "-a", "a-", "a_b", "ﬁle"])
def test_names_the_spec_refuses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    folder = skill(tmp_path, "folder", f"name: {name}\ndescription: Use it.\n")
    code, found = validate(capsys, folder)
    assert code == 1
    assert found[0] == (
        2,
        "error",
        f"name {name!r} is not a valid skill name; use lowercase letters, digits and single "
        "hyphens (like 'daily-guidance')",
    )


@pytest.mark.parametrize(
    ("written", "read"),
    [("off", "boolean False"), ("yes", "boolean True"), ("123", "number 123")],
)
def test_unquoted_names_that_yaml_reads_otherwise_are_refused_with_quote_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, written: str, read: str
) -> None:
    folder = skill(tmp_path, written, f"name: {written}\ndescription: Use it.\n")
    code, found = validate(capsys, folder)
    assert code == 1
    assert found == [
        (
            2,
            "error",
            f"name must be a string, got {read}"
            + QUOTE.format(key="name", written=written)
            + " as other types)",
        )
    ]
    quoted = skill(tmp_path / "q", written, f'name: "{written}"\ndescription: Use it.\n')
    assert validate(capsys, quoted) == (0, [])  # quoted, it is the string it looks like


def test_an_empty_compatibility_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = skill(tmp_path, "compat", 'name: compat\ndescription: Use it.\ncompatibility: ""\n')
    code, found = validate(capsys, folder, strict=False)
    assert (code, found) == (
        1,
        [(4, "error", "compatibility is empty; give 1 to 500 characters, or remove the key")],
    )
    long = skill(
        tmp_path, "long", f"name: long\ndescription: Use it.\ncompatibility: {'x' * 501}\n"
    )
    _, found = validate(capsys, long)
    assert found == [(4, "error", "compatibility is 501 characters long, over the limit of 500")]


def test_flow_style_is_a_warning_under_strict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = skill(
        tmp_path,
        "flow",
        'name: flow\ndescription: Use it.\nmetadata: {owner: lab, level: "3"}\ntags: [a, b]\n',
    )
    code, found = validate(capsys, folder)
    assert code == 0
    assert found == [
        (
            4,
            "warning",
            "metadata is written in flow style ([...] or {...}), which the Agent Skills "
            "reference validator refuses; write it in block style, one '- item' or "
            "'key: value' per line",
        ),
        (
            5,
            "note",
            "'tags' is an agentsim extension, not an Agent Skills field; other clients may "
            "ignore or refuse it (and in flow style, which the reference validator refuses)",
        ),
    ]
    assert validate(capsys, folder, strict=False) == (0, [])
    whole = skill(tmp_path, "whole", "{name: whole, description: Use it.}\n")
    _, found = validate(capsys, whole)
    assert [(line, sev, msg.split(" is ")[0]) for line, sev, msg in found] == [
        (2, "warning", "the frontmatter")
    ]


@pytest.mark.parametrize(
    "description",
    [
        '"one\n---\ntwo"',
        "'one\n---\ntwo'",
        '"one\n--- two"',
        '"one\n...\ntwo"',
        '"one\n--- x\n---\ntwo"',
    ],
    ids=["double", "single", "marker-with-text", "dots", "both"],
)
def test_a_fence_inside_a_quoted_value_never_cuts_the_frontmatter(
    tmp_path: Path, description: str
) -> None:
    text = f"---\nname: quoted\ndescription: {description}\nlicense: MIT\n---\nThe body.\n"
    parsed = parse_skill_md(text, source="s")
    assert parsed.manifest is not None, parsed.diagnostics
    assert parsed.manifest.description.startswith("one ") and parsed.manifest.license == "MIT"
    assert parsed.body == "The body.\n" and parsed.diagnostics == ()
    folder = tmp_path / "quoted"
    folder.mkdir()
    (folder / "SKILL.md").write_text(text)
    assert load_skill_md(folder, strict=True).diagnostics == ()


def test_quote_it_shows_the_value_as_written(tmp_path: Path) -> None:
    text = "---\nname: a\ndescription: Use it.\ntags: [yes]\nmetadata:\n  level: 1.50\n---\nB.\n"
    messages = [d.message for d in parse_skill_md(text, source="s").diagnostics]
    tail = " (YAML reads unquoted yes, no, on, off, numbers and null as other types)"
    assert messages == [
        'tags[0] must be a string, got boolean True; quote it, like - "yes"' + tail,
        'metadata.level must be a string, got number 1.5; quote it, like level: "1.50"' + tail,
    ]
