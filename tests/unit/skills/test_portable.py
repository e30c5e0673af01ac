"""The portable form of a SKILL.md: agentsim's keys under ``metadata`` as ``agentsim.<key>``
strings, read to the same skill as the top-level form; ``skills validate --portable``, checked
against the Agent Skills reference validator (``skills-ref``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from skills_ref.parser import read_properties
from skills_ref.validator import validate as reference_validate

from agentsim.skills import load_skill_md
from agentsim.skills.cli import main
from agentsim.skills.manifest import AGENTSIM_KEYS, HOOK_TYPES, parse_skill_md
from agentsim.skills.registry import SkillDescriptor, SkillRegistry
from tests.unit import helpers

REPO_SKILLS = helpers.REPO / "skills"
TOPLEVEL = helpers.FIXTURES / "toplevel_skills"  # the shipped skills as they were written

TOP_FORM = """\
---
name: every-key
description: Use it.
license: MIT
metadata:
  author: lab
script: scripts/run.py
hooks:
  pre_step: scripts/pre.py
  post_step: scripts/post.py
version: "2.0"
tags: [a, b]
requires: [other-skill, env:social, tool:ask_env]
timeout: 2.5
isolation: process
network: true
input_schema:
  type: object
  required: [q]
output_schema:
  type: array
status: deprecated
idempotent: true
retries: 2
env: [MY_URL]
---
Body.
"""

METADATA_FORM = """\
---
name: every-key
description: Use it.
license: MIT
metadata:
  author: lab
  agentsim.script: scripts/run.py
  agentsim.hooks.pre_step: scripts/pre.py
  agentsim.hooks.post_step: scripts/post.py
  agentsim.version: "2.0"
  agentsim.tags: '["a", "b"]'
  agentsim.requires: '["other-skill", "env:social", "tool:ask_env"]'
  agentsim.timeout: "2.5"
  agentsim.isolation: process
  agentsim.network: "true"
  agentsim.input_schema: |
    {"type": "object", "required": ["q"]}
  agentsim.output_schema: '{"type": "array"}'
  agentsim.status: deprecated
  agentsim.idempotent: "true"
  agentsim.retries: "2"
  agentsim.env: '["MY_URL"]'
---
Body.
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def messages(text: str) -> list[tuple[int, str, str]]:
    parsed = parse_skill_md(text, source="S")
    return [(d.line, d.severity, d.message) for d in parsed.diagnostics]


def test_every_agentsim_key_reads_the_same_from_metadata() -> None:
    top = parse_skill_md(TOP_FORM, source="top", folder_name="every-key")
    meta = parse_skill_md(METADATA_FORM, source="meta", folder_name="every-key")
    assert top.diagnostics == () and meta.diagnostics == ()
    assert meta.manifest == top.manifest and meta.body == top.body
    m = meta.manifest
    assert m is not None
    # Every key agentsim reads is in the example, so a new key must be added to it.
    assert set(AGENTSIM_KEYS) <= set(m.model_fields_set)
    assert (m.script, m.hooks.pre_step, m.hooks.post_step) == (
        "scripts/run.py",
        "scripts/pre.py",
        "scripts/post.py",
    )
    assert (m.version, m.tags, m.timeout, m.isolation, m.network) == (
        "2.0",
        ("a", "b"),
        2.5,
        "process",
        True,
    )
    assert m.requires == ("other-skill", "env:social", "tool:ask_env")
    assert m.input_schema == {"type": "object", "required": ["q"]}
    assert m.output_schema == {"type": "array"}
    assert (m.status, m.idempotent, m.retries, m.env) == ("deprecated", True, 2, ("MY_URL",))
    # Only the other entries stay metadata: the agentsim ones became the skill's fields.
    assert m.metadata == {"author": "lab"} and m.extra == {}
    assert HOOK_TYPES == ("pre_step", "post_step")


def test_the_two_forms_mix_and_an_equal_value_given_twice_is_read_once() -> None:
    mixed = METADATA_FORM.replace(
        "license: MIT\n", 'license: MIT\ntimeout: 2.5\ntags: ["a", "b"]\n'
    )
    mixed = mixed.replace("  agentsim.hooks.post_step: scripts/post.py\n", "")
    mixed = mixed.replace("metadata:\n", "hooks:\n  post_step: scripts/post.py\nmetadata:\n")
    both = parse_skill_md(mixed, source="mixed", folder_name="every-key")
    assert both.diagnostics == ()
    assert both.manifest == parse_skill_md(TOP_FORM, source="top").manifest


def test_a_key_given_both_ways_with_different_values_is_an_error_naming_both() -> None:
    text = METADATA_FORM.replace(
        "license: MIT\n", "license: MIT\ntimeout: 9\nhooks:\n  pre_step: x.py\n"
    )
    parsed = parse_skill_md(text, source="S")
    assert parsed.manifest is None
    assert [(d.line, d.message) for d in parsed.diagnostics] == [
        (
            11,
            "'hooks.pre_step' is given twice with different values: hooks.pre_step: 'x.py' "
            "(line 7) and metadata agentsim.hooks.pre_step: 'scripts/pre.py' (line 11); keep "
            "one of them",
        ),
        (
            16,
            "'timeout' is given twice with different values: timeout: 9 (line 5) and "
            "metadata agentsim.timeout: '2.5' (line 16); keep one of them",
        ),
    ]


def test_metadata_values_that_agentsim_cannot_read_say_where_and_how() -> None:
    head = "---\nname: s\ndescription: Use it.\nmetadata:\n"
    found = messages(
        head + '  agentsim.tags: "a, b"\n'
        "  agentsim.hooks.on_start: x.py\n"
        "  agentsim.hooks: x.py\n"
        '  agentsim.timeout.max: "3"\n'
        '  agentsim.timout: "3"\n'
        "---\n"
    )
    assert found == [
        (
            5,
            "error",
            "metadata.agentsim.tags is not JSON text (Expecting value), got 'a, b'; agentsim "
            'reads non-text values as JSON: numbers like "5", booleans as "true" or "false", '
            """lists like '["a", "b"]', mappings like '{"type": "object"}'""",
        ),
        (
            6,
            "error",
            "metadata key 'agentsim.hooks.on_start' names no hook; write one key per hook: "
            "agentsim.hooks.pre_step or agentsim.hooks.post_step",
        ),
        (
            7,
            "error",
            "metadata key 'agentsim.hooks' names no hook; write one key per hook: "
            "agentsim.hooks.pre_step or agentsim.hooks.post_step",
        ),
        (
            8,
            "error",
            "metadata key 'agentsim.timeout.max' has parts after 'agentsim.timeout'; write "
            "agentsim.timeout: with the whole value",
        ),
        (
            9,
            "warning",
            "unknown agentsim metadata key 'agentsim.timout' (kept as metadata); did you mean "
            "'agentsim.timeout'?",
        ),
    ]
    found = messages(
        head + '  agentsim.timeout: "-1"\n'
        "  agentsim.retries: 2\n"
        "  agentsim.tags: '[\"a\", 1]'\n"
        "  agentsim.isolation: proc\n"
        "  agentsim.input_schema: '{\"type\": 5}'\n"
        "---\n"
    )
    assert found == [
        (5, "error", "metadata.agentsim.timeout must be a positive number of seconds, got -1"),
        (
            6,
            "error",
            "metadata.agentsim.retries must be a string, got number 2; quote it, like "
            'agentsim.retries: "2" (YAML reads unquoted yes, no, on, off, numbers and null as '
            "other types)",
        ),
        (7, "error", "metadata.agentsim.tags[1] must be a string, got number 1"),
        (
            8,
            "error",
            "metadata.agentsim.isolation must be 'inline', 'thread' or 'process', got 'proc'",
        ),
        (9, "error", found[4][2]),
    ]
    assert found[4][2].startswith("metadata.agentsim.input_schema is not a valid JSON Schema: 5")
    # A top-level hooks: that is not a mapping is what is wrong, not the metadata hook.
    found = messages(head + "  agentsim.hooks.pre_step: a.py\nhooks: a.py\n---\n")
    assert found == [
        (6, "error", "hooks must be a mapping of hook type to script path, got string")
    ]


def test_portable_says_what_to_write_under_metadata_for_each_value() -> None:
    text = (TOPLEVEL / "opinion-update.SKILL.md").read_text(encoding="utf-8")
    text = text.replace("timeout: 10\n", "timeout: 10\ntags2: x\nenv: [2026-01-02]\n")
    parsed = parse_skill_md(text, source="S", portable=True)
    assert parsed.diagnostics[0].message == "env[0] must be a string, got date"
    hints = {d.line: d.message.partition("; ")[2] for d in parsed.diagnostics[1:]}
    assert hints[13] == ("write it under metadata instead, as agentsim.env: '[\"2026-01-02\"]'")
    assert (
        hints[17]
        == "write it under metadata instead, as agentsim.input_schema: <the value as JSON>"
    )
    assert hints[12] == "remove it, or keep it under metadata as a string value"


def test_the_shipped_skills_read_the_same_as_in_the_top_level_form() -> None:
    """The shipped skills were rewritten into the portable form: the top-level originals
    (kept as fixtures) and the files shipped now give the same descriptors and bodies."""
    shipped = sorted(p.name for p in REPO_SKILLS.iterdir() if (p / "SKILL.md").is_file())
    assert shipped == sorted(p.name.removesuffix(".SKILL.md") for p in TOPLEVEL.iterdir())
    for name in shipped:
        old = (TOPLEVEL / f"{name}.SKILL.md").read_text(encoding="utf-8")
        before = parse_skill_md(old, source=name, folder_name=name)
        after = load_skill_md(REPO_SKILLS / name)
        assert before.diagnostics == () and after.diagnostics == (), name
        assert before.manifest is not None and after.manifest is not None
        assert after.manifest == before.manifest and after.body == before.body, name
        folder = str(REPO_SKILLS / name)
        old_desc = SkillDescriptor.create("built-in", folder, before.manifest)
        new_desc = SkillDescriptor.create("built-in", folder, after.manifest)
        assert new_desc == old_desc and new_desc.to_dict() == old_desc.to_dict()
        # The form that agentsim reads is what the reference validator accepts.
        assert reference_validate(REPO_SKILLS / name) == []
    registry = SkillRegistry()
    registry.scan_builtin(REPO_SKILLS)
    assert registry.diagnostics == ()
    hooks = registry.resolve("daily-guidance").hooks
    assert [h for h, _ in hooks] == ["pre_step", "post_step"]


def test_portable_passes_the_shipped_skills(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "skills", "validate", "--portable", str(REPO_SKILLS))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[:-1] == [
        f"ok   {REPO_SKILLS / n / 'SKILL.md'}"
        for n in sorted(p.name for p in REPO_SKILLS.iterdir() if (p / "SKILL.md").is_file())
    ]
    assert lines[-1] == "6 skills checked: 0 errors, 0 warnings; 6 portable, 0 not"


def test_portable_without_a_path_checks_the_built_in_and_custom_skills(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    helpers.write_skill(tmp_path / "custom" / "skills", "mine", front='version: "1"\n')
    code, out, _ = run(capsys, "skills", "validate", "--portable")
    assert code == 1
    md = tmp_path / "custom" / "skills" / "mine" / "SKILL.md"
    assert f"FAIL {md}\n  {md}:4: error: 'version' is agentsim's own key" in out
    assert out.splitlines()[-1] == "7 skills checked: 1 errors, 0 warnings; 6 portable, 1 not"
    (tmp_path / "custom" / "skills" / "mine").rename(tmp_path / "elsewhere")
    monkeypatch.setattr("agentsim.skills.cli.builtin_skills_dir", lambda: None)
    code, _, err = run(capsys, "skills", "validate", "--portable")
    assert code == 2
    assert err == (
        "agentsim skills: no skills to check here (no built-in skills, no ./custom/skills); "
        "pass a skill folder, a SKILL.md, or a folder of skills\n"
    )


def test_portable_fails_a_skill_in_the_top_level_form_with_one_line_per_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "diary"
    shutil.copytree(REPO_SKILLS / "diary", folder)
    shutil.copy(TOPLEVEL / "diary.SKILL.md", folder / "SKILL.md")
    code, out, _ = run(capsys, "skills", "validate", "--portable", str(folder))
    md = folder / "SKILL.md"
    assert code == 1
    assert out.splitlines() == [
        f"FAIL {md}",
        f"  {md}:7: error: 'script' is agentsim's own key at the top level, where other Agent "
        "Skills clients refuse it as an unexpected field; write it under metadata instead, "
        'as agentsim.script: "scripts/diary.py"',
        f"  {md}:8: error: 'version' is agentsim's own key at the top level, where other Agent "
        "Skills clients refuse it as an unexpected field; write it under metadata instead, "
        'as agentsim.version: "1.0.0"',
        f"  {md}:9: error: 'tags' is agentsim's own key at the top level, where other Agent "
        "Skills clients refuse it as an unexpected field; write it under metadata instead, "
        """as agentsim.tags: '["memory", "journaling"]'""",
        f"  {md}:10: error: 'isolation' is agentsim's own key at the top level, where other "
        "Agent Skills clients refuse it as an unexpected field; write it under metadata "
        'instead, as agentsim.isolation: "thread"',
        f"  {md}:11: error: 'timeout' is agentsim's own key at the top level, where other "
        "Agent Skills clients refuse it as an unexpected field; write it under metadata "
        'instead, as agentsim.timeout: "2"',
        "1 skills checked: 5 errors, 0 warnings; 0 portable, 1 not",
    ]
    # The reference validator refuses the same file, and agentsim still loads it.
    # The reference validator refuses the same file (its YAML reader first refuses the
    # flow-style list), and agentsim still loads it.
    found = reference_validate(folder)
    assert len(found) == 1 and found[0].startswith("Invalid YAML in frontmatter")
    assert load_skill_md(folder).diagnostics == ()
    (folder / "SKILL.md").write_text(
        (folder / "SKILL.md").read_text().replace("[memory, journaling]", "memory")
    )
    assert reference_validate(folder) == [
        "Unexpected fields in frontmatter: isolation, script, tags, timeout, version. Only "
        "['allowed-tools', 'compatibility', 'description', 'license', 'metadata', 'name'] are "
        "allowed."
    ]
    # The same skill's hooks and schema, and what the reference validator's YAML refuses.
    folder = shutil.copytree(REPO_SKILLS / "daily-guidance", tmp_path / "daily-guidance")
    text = (TOPLEVEL / "daily-guidance.SKILL.md").read_text()
    text = text.replace("as a meal when you are hungry.", "as a meal --- or a nap.")
    text = text.replace("isolation: inline\n", "allowed-tools: [Read]\nmetadata: {a: b}\n")
    (folder / "SKILL.md").write_text(text)
    code, out, _ = run(capsys, "skills", "validate", "--portable", "--json", str(folder))
    data = json.loads(out)
    assert code == 1 and data["ok"] is False
    found2 = [(d["line"], d["message"]) for d in data["results"][0]["diagnostics"]]
    assert [line for line, _ in found2] == [8, 9, 10, 13, 14, 15, 16, 17, 18]
    assert found2[0][1].startswith("this frontmatter line holds '---', where other clients")
    assert found2[2][1].endswith(
        "write each hook under metadata instead: agentsim.hooks.pre_step, agentsim.hooks.post_step"
    )
    assert found2[6][1].startswith("allowed-tools is not portable as a list")
    assert found2[7][1] == (
        "metadata is written in flow style ([...] or {...}), which the Agent Skills reference "
        "validator refuses; write it in block style, one '- item' or 'key: value' per line"
    )
    assert found2[8][1].startswith("'requires' is agentsim's own key")
    # The reference validator reads a frontmatter cut at the '---': the rest is lost.
    assert reference_validate(folder) == []
    assert read_properties(folder).description.endswith("proposes revisions such as a meal")


def test_skills_new_writes_the_portable_form_and_it_loads_and_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "skills", "new", "city-walk", "--dir", str(tmp_path))
    folder = tmp_path / "city-walk"
    assert code == 0 and out == (
        f"created {folder}; edit its description, then run: agentsim skills validate {folder}\n"
    )
    assert "  agentsim.script: scripts/city_walk.py\n" in (folder / "SKILL.md").read_text()
    code, out, _ = run(capsys, "skills", "validate", "--portable", str(folder))
    assert code == 0 and out.splitlines() == [
        f"ok   {folder / 'SKILL.md'}",
        "1 skills checked: 0 errors, 0 warnings; 1 portable, 0 not",
    ]
    assert reference_validate(folder) == []
    registry = SkillRegistry()
    registry.scan_custom(tmp_path)
    desc = registry.resolve("city-walk")
    assert registry.diagnostics == () and desc.manifest.script == "scripts/city_walk.py"
    assert desc.manifest.metadata is None


@pytest.mark.parametrize(
    ("front", "portable"),
    [
        ('metadata:\n  agentsim.timeout: "5"\n', True),
        ("timeout: 5\n", False),
        ("metadata:\n  a: b\n", True),
        ("metadata: {a: b}\n", False),
        ("compatibility: Needs Python 3.12\n", True),
        ("compatibility: '" + "x" * 501 + "'\n", False),
        ("colour: red\n", False),
        ("tags:\n  - a\n", False),
    ],
)
def test_portable_agrees_with_the_reference_validator(
    tmp_path: Path, front: str, portable: bool
) -> None:
    folder = helpers.write_skill(tmp_path, "s", front=front)
    ours = load_skill_md(folder, portable=True)
    assert any(d.severity == "error" for d in ours.diagnostics) is not portable
    assert (reference_validate(folder) == []) is portable
