"""SkillRegistry: scanning, ids, refresh, agent views, file access, pickling."""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
from pathlib import Path

import pytest

from agentsim.errors import SkillError, SkillFileError, SkillNotFoundError
from agentsim.skills import RefreshResult, SkillDescriptor, SkillRegistry, load_skill_md
from agentsim.skills.registry import RegistrySnapshot
from tests.unit.helpers import make_skill, touch


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    builtin, custom = tmp_path / "skills", tmp_path / "custom"
    make_skill(builtin, "daily-guidance", extra="hooks:\n  pre_step: scripts/daily_guidance.py\n")
    make_skill(builtin, "weather", extra="tags: [env]\nstatus: deprecated\n")
    make_skill(custom, "daily-guidance", body="Custom body.\n")
    return builtin, custom


@pytest.fixture
def registry(roots: tuple[Path, Path]) -> SkillRegistry:
    reg = SkillRegistry()
    reg.scan_builtin(roots[0])
    reg.scan_custom(roots[1])
    return reg


def test_scan_registers_ids_with_namespaces(
    registry: SkillRegistry, roots: tuple[Path, Path]
) -> None:
    ids = [d.skill_id for d in registry.list_all()]
    assert ids == ["custom@daily-guidance", "built-in@daily-guidance", "built-in@weather"]
    desc = registry.get("built-in@daily-guidance")
    assert isinstance(desc, SkillDescriptor)
    assert (desc.manifest.name, desc.namespace, desc.path) == (
        "daily-guidance",
        "built-in",
        str(roots[0] / "daily-guidance"),
    )
    assert desc.manifest.script == "scripts/daily_guidance.py"
    assert desc.hooks == (("pre_step", "scripts/daily_guidance.py"),)
    assert desc.hook_script("pre_step") == "scripts/daily_guidance.py"
    assert desc.hook_script("post_step") is None
    assert desc.script_path() == roots[0] / "daily-guidance" / "scripts" / "daily_guidance.py"
    assert desc.script_path("a.py") == roots[0] / "daily-guidance" / "a.py"
    assert registry.get("built-in@weather").manifest.status == "deprecated"
    assert registry.generation == 2
    # The two daily-guidance skills collide on their bare name: reported, the winner named.
    (collision,) = registry.diagnostics
    assert collision.severity == "warning"
    assert collision.file == str(roots[0] / "daily-guidance" / "SKILL.md")
    assert collision.message.startswith(
        "name collision: built-in@daily-guidance and custom@daily-guidance "
        f"({roots[1] / 'daily-guidance'}) are both named 'daily-guidance'; "
        "custom@daily-guidance wins the bare name"
    )
    assert registry.snapshot().shadowed() == {"built-in@daily-guidance": "custom@daily-guidance"}
    assert "custom@daily-guidance" in registry and len(registry) == 3


def test_script_path_without_a_script_names_the_fix(tmp_path: Path) -> None:
    make_skill(tmp_path, "plain", script=False)
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path)
    with pytest.raises(ValueError, match="'built-in@plain' declares no script; pass the relative"):
        reg.get("built-in@plain").script_path()


def test_find_by_name_returns_precedence_order(registry: SkillRegistry) -> None:
    found = registry.find_by_name("daily-guidance")
    assert [d.skill_id for d in found] == ["custom@daily-guidance", "built-in@daily-guidance"]
    assert registry.resolve("daily-guidance").skill_id == "custom@daily-guidance"
    assert registry.resolve("built-in@weather").manifest.name == "weather"


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        pytest.param(
            lambda r: r.get("built-in@wether"), r"'built-in@wether'.*built-in@weather", id="id"
        ),
        pytest.param(
            lambda r: r.find_by_name("wether"), r"'wether'.*close matches: .*weather", id="name"
        ),
        pytest.param(
            lambda r: r.get("weather"),
            r"'weather' is not registered \(close matches: built-in@weather\)",
            id="bare-name-to-get",
        ),
    ],
)
def test_unknown_skills_raise_with_close_matches(
    registry: SkillRegistry, call: object, pattern: str
) -> None:
    with pytest.raises(SkillNotFoundError, match=pattern):
        call(registry)  # type: ignore[operator]


def test_env_skills_use_the_module_namespace(tmp_path: Path) -> None:
    make_skill(tmp_path / "env", "ask-city")
    reg = SkillRegistry()
    result = reg.scan_env_skills(tmp_path / "env", "city")
    assert result == RefreshResult(generation=1, added=("env:city@ask-city",))
    assert reg.get("env:city@ask-city").namespace == "env:city"
    with pytest.raises(SkillError, match="environment name 'a@b' cannot be used in a skill id"):
        reg.scan_env_skills(tmp_path / "env", "a@b")


def test_one_broken_skill_among_a_thousand_is_one_diagnostic(tmp_path: Path) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for i in range(1000):
        folder = root / f"s{i:04d}"
        folder.mkdir()
        desc = "Use it." if i != 500 else "[broken"
        (folder / "SKILL.md").write_text(f"---\nname: s{i:04d}\ndescription: {desc}\n---\n")
    reg = SkillRegistry()
    reg.scan_builtin(root)
    assert len(reg.list_all()) == 999
    (diag,) = reg.diagnostics
    assert diag.file == str(root / "s0500" / "SKILL.md") and diag.line == 3
    assert "invalid YAML" in diag.message and diag.severity == "error"


def test_same_name_in_two_namespaces_is_two_ids_and_a_rescan_loses(
    registry: SkillRegistry, roots: tuple[Path, Path]
) -> None:
    assert {d.skill_id for d in registry.find_by_name("daily-guidance")} == {
        "custom@daily-guidance",
        "built-in@daily-guidance",
    }
    result = registry.scan_builtin(roots[0])
    assert result.added == ("built-in@daily-guidance", "built-in@weather")
    assert len(registry.list_all()) == 3
    dups = [d for d in registry.diagnostics if "duplicate skill id" in d.message]
    assert [d.file for d in dups] == [
        str(roots[0] / "daily-guidance" / "SKILL.md"),
        str(roots[0] / "weather" / "SKILL.md"),
    ]
    assert f"already registered from {roots[0] / 'weather'}" in dups[1].message


def test_hidden_underscore_and_plain_folders_are_skipped(tmp_path: Path) -> None:
    make_skill(tmp_path, ".hidden")
    make_skill(tmp_path, "_draft")
    (tmp_path / "not-a-skill").mkdir()
    (tmp_path / "file.md").write_text("x")
    make_skill(tmp_path, "real")
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path)
    assert [d.skill_id for d in reg.list_all()] == ["built-in@real"]
    assert reg.diagnostics == ()


def test_symlinks_leaving_the_root_are_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    make_skill(outside, "escape")
    root = tmp_path / "root"
    make_skill(root, "inside")
    (root / "escape").symlink_to(outside / "escape")
    (root / "alias").symlink_to(root / "inside")
    linked_md = make_skill(root, "md-link", script=False)
    (linked_md / "SKILL.md").unlink()
    (linked_md / "SKILL.md").symlink_to(outside / "escape" / "SKILL.md")
    (root / "dangling").symlink_to(root / "inside" / "SKILL.md")
    reg = SkillRegistry()
    reg.scan_builtin(root)
    assert [d.skill_id for d in reg.list_all()] == ["built-in@inside"]
    skipped = sorted(
        Path(d.file).relative_to(root).as_posix()
        for d in reg.diagnostics
        if d.message.startswith("skipped: this symlink leaves the skills root")
    )
    assert skipped == ["escape", "md-link/SKILL.md"]
    # alias -> inside is inside the root but its name differs from the skill's name
    assert any("does not match its folder 'alias'" in d.message for d in reg.diagnostics)


def test_a_root_that_is_a_file_or_a_loop_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    reg = SkillRegistry()
    reg.scan_custom(tmp_path / "file")
    (diag,) = reg.diagnostics
    assert diag.severity == "warning" and diag.message == (
        f"cannot list skills folder {str(tmp_path / 'file')!r} (Not a directory); pass a "
        "folder of skills"
    )
    (tmp_path / "ring-a").symlink_to(tmp_path / "ring-b")
    (tmp_path / "ring-b").symlink_to(tmp_path / "ring-a")
    reg.scan_custom(tmp_path / "ring-a")
    assert reg.diagnostics[-1].message == (
        f"cannot list skills folder {str(tmp_path / 'ring-a')!r} (Too many levels of symbolic "
        "links); a symlink on the way loops back on itself; fix the path"
    )


def test_missing_root_is_a_warning_and_appears_on_refresh(tmp_path: Path) -> None:
    reg = SkillRegistry()
    reg.scan_custom(tmp_path / "later")
    (diag,) = reg.diagnostics
    assert diag.severity == "warning" and "does not exist; create it" in diag.message
    make_skill(tmp_path / "later", "new-one")
    result = reg.refresh()
    assert result.added == ("custom@new-one",) and reg.diagnostics == ()


def test_refresh_picks_up_add_edit_delete(
    registry: SkillRegistry, roots: tuple[Path, Path]
) -> None:
    gen = registry.generation
    assert registry.refresh() == RefreshResult(generation=gen)
    before = registry.snapshot()
    md = roots[0] / "weather" / "SKILL.md"
    touch(md, md.read_text().replace("Use for weather.", "Use when it rains."))
    make_skill(roots[1], "fresh")
    import shutil

    shutil.rmtree(roots[0] / "daily-guidance")
    result = registry.refresh()
    assert result == RefreshResult(
        generation=gen + 1,
        added=("custom@fresh",),
        changed=("built-in@weather",),
        removed=("built-in@daily-guidance",),
    )
    assert result.any
    assert registry.get("built-in@weather").manifest.description == "Use when it rains."
    assert [d.skill_id for d in registry.find_by_name("daily-guidance")] == [
        "custom@daily-guidance"
    ]
    # a snapshot taken before is untouched
    assert before.get("built-in@weather").manifest.description == "Use for weather."
    assert "built-in@daily-guidance" in before


def test_refresh_rechecks_a_failed_skill_until_its_script_appears(tmp_path: Path) -> None:
    folder = make_skill(tmp_path, "late")
    (folder / "scripts" / "late.py").unlink()
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path)
    assert "script 'scripts/late.py' does not exist" in reg.diagnostics[0].message
    assert reg.refresh().any is False
    (folder / "scripts" / "late.py").write_text("x = 1\n")
    assert reg.refresh().changed == ("built-in@late",)
    assert reg.diagnostics == () and "built-in@late" in reg


def test_an_edit_that_breaks_a_skill_keeps_its_last_good_version(
    registry: SkillRegistry, roots: tuple[Path, Path]
) -> None:
    md = roots[0] / "weather" / "SKILL.md"
    good = md.read_text()
    before = registry.get("built-in@weather")
    body = registry.read_skill_doc("built-in@weather")  # read once, as an activation does
    touch(md, good.replace("name: weather", "name: weather\ntimeout: [1"))
    res = registry.refresh()
    assert (res.broken, res.changed, res.removed) == (("built-in@weather",), (), ())
    assert registry.get("built-in@weather") is before  # the last good version stays
    assert registry.read_skill_doc("built-in@weather") == body
    (line, problem) = (
        registry.snapshot().broken()["built-in@weather"].line,
        str(registry.snapshot().broken()["built-in@weather"]),
    )
    assert line == 4 and f"{md}:4: error: invalid YAML in the frontmatter" in problem
    assert registry.refresh().any is False and registry.refresh().broken == ()
    touch(md, good.replace("Weather.", "Weather, fixed."))  # the fix replaces it
    res = registry.refresh()
    assert (res.broken, res.changed) == ((), ("built-in@weather",))
    assert registry.get("built-in@weather") is not before
    assert registry.snapshot().broken() == {}


def test_a_skill_broken_from_the_start_is_refused_with_its_problem(
    registry: SkillRegistry, roots: tuple[Path, Path]
) -> None:
    make_skill(roots[1], "long", description="x" * 1025)
    registry.refresh()
    assert "custom@long" not in registry
    (problem,) = registry.snapshot().refused().values()
    assert list(registry.snapshot().refused()) == ["custom@long"]
    assert problem.line == 3
    assert problem.message == "description is 1025 characters long, over the limit of 1024"
    assert registry.snapshot().problem_of("custom", "long") == problem
    assert registry.snapshot().problem_of("custom", "daily-guidance") is None


def test_requires_cycles_and_missing_requirements_are_diagnostics(tmp_path: Path) -> None:
    make_skill(tmp_path, "a", extra="requires: [b]\n")
    make_skill(tmp_path, "b", extra="requires: [c]\n")
    make_skill(tmp_path, "c", extra="requires: [a, ghost]\n")
    make_skill(tmp_path, "d", extra="requires: [d]\n")
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path)
    messages = sorted(d.message for d in reg.diagnostics)
    assert messages == [
        "requires 'ghost', which is not registered; add that skill or remove it from requires",
        "requires cycle: a -> b -> c -> a; remove one of these requires entries",
        "requires cycle: d -> d; remove one of these requires entries",
    ]
    assert len(reg.list_all()) == 4


def test_views_overlay_one_agent_without_leaking(registry: SkillRegistry, tmp_path: Path) -> None:
    alice_dir, bob_dir = tmp_path / "alice" / "custom" / "skills", tmp_path / "bob"
    make_skill(alice_dir, "diary", body="Alice's diary.\n")
    make_skill(alice_dir, "daily-guidance", body="Alice's guidance.\n")
    alice, bob = registry.view(alice_dir), registry.view(bob_dir)
    assert [d.skill_id for d in alice.list_all()][:2] == ["agent@daily-guidance", "agent@diary"]
    assert alice.resolve("daily-guidance").skill_id == "agent@daily-guidance"
    assert alice.read_skill_doc("agent@diary") == "Alice's diary.\n"
    assert alice.agent_skills_dir == alice_dir
    with pytest.raises(SkillNotFoundError, match="'agent@diary' is not registered"):
        bob.get("agent@diary")
    with pytest.raises(SkillNotFoundError, match="'diary' is not registered"):
        registry.find_by_name("diary")
    assert bob.list_all() == registry.list_all()
    assert bob.resolve("daily-guidance").skill_id == "custom@daily-guidance"
    # bob's folder appears later: only bob sees it
    make_skill(bob_dir, "notes")
    assert bob.refresh().added == ("agent@notes",)
    assert "agent@notes" in bob and "agent@notes" not in alice
    assert bob.generation == registry.generation + 1


def test_view_refresh_and_diagnostics(registry: SkillRegistry, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    make_skill(mine, "loop-a", extra="requires: [loop-b]\n")
    make_skill(mine, "loop-b", extra="requires: [loop-a]\n")
    (mine / "broken").mkdir()
    (mine / "broken" / "SKILL.md").write_text("")
    view = registry.view(mine)
    messages = [d.message for d in view.diagnostics]
    assert any("SKILL.md is empty" in m for m in messages)
    assert (
        "requires cycle: loop-a -> loop-b -> loop-a; remove one of these requires entries"
        in messages
    )
    assert view.refresh() == RefreshResult(generation=view.generation)
    touch(mine / "loop-b" / "SKILL.md", "---\nname: loop-b\ndescription: x\n---\n")
    assert view.refresh().changed == ("agent@loop-b",)
    assert not any("cycle" in d.message for d in view.diagnostics)
    # the registry still refreshes under the view
    make_skill(tmp_path / "custom", "later")
    registry.refresh()
    assert "custom@later" in view
    empty = registry.view(None)
    assert empty.refresh().any is False and empty.agent_skills_dir is None
    assert empty.diagnostics == registry.diagnostics


def test_snapshot_views_are_fixed(registry: SkillRegistry, tmp_path: Path) -> None:
    snap = registry.snapshot()
    assert isinstance(snap, RegistrySnapshot) and snap.snapshot() is snap
    view = snap.view(tmp_path / "none")
    make_skill(tmp_path / "custom", "later")
    registry.refresh()
    assert "custom@later" in registry and "custom@later" not in view
    assert view.refresh().any is False


def test_read_skill_doc_is_cached_and_rereads_after_an_edit(
    registry: SkillRegistry, roots: tuple[Path, Path]
) -> None:
    assert registry.read_skill_doc("custom@daily-guidance") == "Custom body.\n"
    md = roots[1] / "daily-guidance" / "SKILL.md"
    touch(md, md.read_text().replace("Custom body.", "Edited body, longer."))
    assert registry.read_skill_doc("custom@daily-guidance") == "Edited body, longer.\n"
    assert registry.snapshot().read_skill_doc("custom@daily-guidance") == "Edited body, longer.\n"
    md.write_bytes(b"---\xff\xfe")
    # Broken by an edit after a good read: the last good body stays (hot reload keeps it).
    assert registry.read_skill_doc("custom@daily-guidance") == "Edited body, longer.\n"
    md.unlink()
    with pytest.raises(SkillFileError, match="No such file or directory; refresh the registry"):
        registry.read_skill_doc("custom@daily-guidance")


def test_read_skill_doc_refuses_a_now_broken_file(
    registry: SkillRegistry, roots: tuple[Path, Path]
) -> None:
    touch(roots[0] / "weather" / "SKILL.md", "oops\n")
    with pytest.raises(SkillFileError, match="first line must be '---'"):
        registry.read_skill_doc("built-in@weather")
    (roots[0] / "weather" / "SKILL.md").write_bytes(b"---\xff\xfe")
    with pytest.raises(
        SkillFileError, match=r"cannot read 'SKILL.md': SKILL.md is not valid UTF-8"
    ):
        registry.read_skill_doc("built-in@weather")


def test_read_skill_file_reads_inside_and_refuses_traversal(
    registry: SkillRegistry, roots: tuple[Path, Path], tmp_path: Path
) -> None:
    sid = "built-in@weather"
    assert registry.read_skill_file(sid, "references/notes.md") == "Notes.\n"
    (tmp_path / "secret.txt").write_text("secret")
    (roots[0] / "weather" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    cases = {
        "/etc/passwd": "refused: '/etc/passwd' is absolute",
        "../daily-guidance/SKILL.md": r"refused: .*leaves the skill folder \('..'\)",
        "leak.txt": "refused: it resolves outside the skill folder",
        "references/nope.md": "no such file; the skill's files are: SKILL.md, leak.txt, "
        "references/notes.md, scripts/weather.py",
    }
    for rel, pattern in cases.items():
        with pytest.raises(SkillFileError, match=pattern):
            registry.read_skill_file(sid, rel)


def test_read_skill_file_refuses_binary_and_huge_files(
    registry: SkillRegistry, roots: tuple[Path, Path]
) -> None:
    folder = roots[0] / "weather"
    (folder / "blob.bin").write_bytes(b"\xff\xfe\x00")
    (folder / "huge.txt").write_bytes(b"a" * ((1 << 20) + 1))
    with pytest.raises(SkillFileError, match="not UTF-8 text"):
        registry.read_skill_file("built-in@weather", "blob.bin")
    with pytest.raises(SkillFileError, match="over the 1 MiB limit"):
        registry.read_skill_file("built-in@weather", "huge.txt")


def test_list_hooks(registry: SkillRegistry) -> None:
    assert [d.skill_id for d in registry.list_hooks("pre_step")] == ["built-in@daily-guidance"]
    assert registry.list_hooks("post_step") == ()
    with pytest.raises(SkillError, match="unknown hook type 'mid_step'; use one of pre_step"):
        registry.list_hooks("mid_step")


def test_registry_pickles_small_and_whole(registry: SkillRegistry) -> None:
    registry.read_skill_doc("built-in@weather")
    data = pickle.dumps(registry)
    clone = pickle.loads(data)
    assert [d.skill_id for d in clone.list_all()] == [d.skill_id for d in registry.list_all()]
    assert clone.find_by_name("daily-guidance") == registry.find_by_name("daily-guidance")
    assert clone.read_skill_doc("built-in@weather") == "Body.\n"
    assert clone.generation == registry.generation and clone.roots == registry.roots
    assert len(data) < 1536 * 3
    assert clone.snapshot().docs is not registry.snapshot().docs


def test_descriptor_to_dict_is_json_ready(registry: SkillRegistry) -> None:
    d = registry.get("built-in@daily-guidance").to_dict()
    assert d["hooks"] == {"pre_step": "scripts/daily_guidance.py"}
    assert d["skill_id"] == "built-in@daily-guidance" and d["tags"] == []
    assert d["allowed_tools"] is None


def test_unreadable_skill_md_is_a_diagnostic(tmp_path: Path) -> None:
    folder = make_skill(tmp_path, "locked", script=False)
    big = folder / "SKILL.md"
    big.write_bytes(b"a" * ((1 << 20) + 1))
    (tmp_path / "dir-md").mkdir()
    (tmp_path / "dir-md" / "SKILL.md").mkdir()
    (tmp_path / "latin").mkdir()
    (tmp_path / "latin" / "SKILL.md").write_bytes(b"---\nname: latin\ndescription: caf\xe9\n---\n")
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path)
    messages = sorted(d.message for d in reg.diagnostics)
    assert len(messages) == 3 and len(reg) == 0
    assert any("over the 1 MiB limit" in m for m in messages)
    assert (
        "cannot read SKILL.md: it is a folder, not a regular file; replace it with a text file"
        in messages
    )
    assert any("not valid UTF-8" in m for m in messages)


def test_a_descriptor_holds_the_parsed_manifest(tmp_path: Path) -> None:
    extra = (
        "hooks:\n  pre_step: scripts/full.py\n  post_step: scripts/full.py\n"
        'tags: [a, b]\nrequires: [full]\ntimeout: 2\nisolation: process\nversion: "2"\n'
        "status: deprecated\nidempotent: true\nretries: 3\nlicense: MIT\n"
        "compatibility: py3\nmetadata:\n  k: v\nallowed-tools: Read\n"
    )
    folder = make_skill(tmp_path, "full", extra=extra)
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path)
    desc = reg.get("built-in@full")
    parsed = load_skill_md(folder)
    assert parsed.manifest is not None and desc.manifest == parsed.manifest
    assert desc == SkillDescriptor.create("built-in", str(folder), parsed.manifest, 22)
    assert (desc.skill_id, desc.path, desc.body_line) == ("built-in@full", str(folder), 22)
    assert (
        desc.manifest.timeout,
        desc.manifest.isolation,
        desc.manifest.status,
        desc.manifest.retries,
    ) == (
        2.0,
        "process",
        "deprecated",
        3,
    )
    assert (
        desc.manifest.tags,
        desc.manifest.required_skills,
        desc.manifest.allowed_tools,
        desc.manifest.metadata,
    ) == (
        ("a", "b"),
        ("full",),
        ("Read",),
        {"k": "v"},
    )
    assert desc.hooks == (("pre_step", "scripts/full.py"), ("post_step", "scripts/full.py"))
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'path'"):
        desc.path = "other"  # type: ignore[misc]
    back = pickle.loads(pickle.dumps(desc))
    assert back == desc and back.manifest.hooks.post_step == "scripts/full.py"
    assert {desc, back} == {desc}  # hashable, though the manifest holds dicts


def test_odd_skill_md_files_are_diagnostics_and_never_block(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "SKILL.md")
    looped = tmp_path / "looped"
    looped.mkdir()
    (looped / "SKILL.md").symlink_to(looped / "OTHER.md")
    (looped / "OTHER.md").symlink_to(looped / "SKILL.md")
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    linked = make_skill(tmp_path, "linked", script=False)
    (linked / "real.md").write_text("---\nname: linked\ndescription: Via a link.\n---\n")
    (linked / "SKILL.md").unlink()
    (linked / "SKILL.md").symlink_to(linked / "real.md")
    (tmp_path / "README.md").write_text("not a skill folder\n")
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path)
    loop = "Too many levels of symbolic links"
    assert [str(d) for d in reg.diagnostics] == [
        f"{fifo / 'SKILL.md'}:1: error: cannot read SKILL.md: it is a FIFO (named pipe), not a "
        "regular file; replace it with a text file",
        f"{tmp_path / 'loop-a'}:0: warning: skipped: cannot open this skill folder ({loop}); "
        "fix or remove the symlink",
        f"{tmp_path / 'loop-b'}:0: warning: skipped: cannot open this skill folder ({loop}); "
        "fix or remove the symlink",
        f"{looped / 'SKILL.md'}:1: error: cannot read SKILL.md ({loop}); a symlink on the way "
        "loops back on itself; point it at a real file",
    ]
    assert reg.refresh().any is False  # met again, reported the same, no new generation
    assert reg.get("built-in@linked").manifest.description == "Via a link."
    # on refresh, a symlinked SKILL.md is checked again and re-read
    touch(linked / "real.md", "---\nname: linked\ndescription: Edited.\n---\n")
    assert reg.refresh().changed == ("built-in@linked",)
    assert reg.get("built-in@linked").manifest.description == "Edited."
    # a SKILL.md that disappears leaves a plain folder: the skill is removed
    (linked / "SKILL.md").unlink()
    assert reg.refresh().removed == ("built-in@linked",)


def _declare(folder: Path, rel: str) -> None:
    """Point the skill's script and pre_step hook at ``rel``."""
    md = folder / "SKILL.md"
    text = md.read_text()
    start = text.index("script: ")
    end = text.index("\n", start)
    touch(md, text[:start] + f"script: {rel}\nhooks:\n  pre_step: {rel}" + text[end:])


@pytest.mark.parametrize(
    "rel", ["run.py", "./scripts/run.py", "scripts/deep/run.py", "scripts/linked.py"]
)
def test_scripts_in_any_shape_inside_the_folder_register(tmp_path: Path, rel: str) -> None:
    folder = make_skill(tmp_path / "skills", "shapes")
    (folder / "run.py").write_text("def entrypoint(argv, ctx):\n    return 'top'\n")
    (folder / "scripts" / "deep").mkdir()
    (folder / "scripts" / "deep" / "run.py").write_text("x = 1\n")
    (folder / "scripts" / "run.py").write_text("x = 1\n")
    (folder / "scripts" / "linked.py").symlink_to(folder / "scripts" / "run.py")
    _declare(folder, rel)
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path / "skills")
    assert reg.diagnostics == ()
    desc = reg.get("built-in@shapes")
    assert desc.manifest.script == rel
    assert desc.hook_script("pre_step") == rel


@pytest.mark.parametrize(
    ("setup", "problem"),
    [
        ("missing", r"script 'scripts/run\.py' does not exist; create it or fix the path"),
        ("file", r"script 'scripts/run\.py' does not exist; create it or fix the path"),
        ("outside", r"script 'scripts/run\.py' is a symlink that leaves the skill folder"),
        ("folder", r"script 'scripts/run\.py' is not a regular file"),
    ],
)
def test_declared_scripts_that_are_not_plain_files_are_diagnosed(
    tmp_path: Path, setup: str, problem: str
) -> None:
    folder = make_skill(tmp_path / "skills", "broken-shape")
    scripts = folder / "scripts"
    for child in scripts.iterdir():
        child.unlink()
    scripts.rmdir()
    if setup == "missing":
        pass
    elif setup == "file":  # "scripts" is a file, so nothing can be under it
        scripts.write_text("not a folder\n")
    elif setup == "outside":  # "scripts" links to a folder outside the skill
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "run.py").write_text("x = 1\n")
        scripts.symlink_to(elsewhere, target_is_directory=True)
    else:  # "scripts/run.py" is a folder
        (scripts / "run.py").mkdir(parents=True)
    _declare(folder, "scripts/run.py")
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path / "skills")
    assert "built-in@broken-shape" not in reg
    assert len(reg.diagnostics) == 2  # the script and the hook that names it
    assert all(d.file.endswith("SKILL.md") for d in reg.diagnostics)
    assert re.search(problem, reg.diagnostics[0].message)
