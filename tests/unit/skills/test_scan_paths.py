"""The registry's scan and refresh of a root: what is registered, what is reported, and what
a refresh sees after files are added, edited, touched, linked or removed."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest

from agentsim.skills import SkillDescriptor, SkillRegistry
from tests.unit.helpers import make_skill, touch


def _mixed_root(root: Path) -> Path:
    """Good skills with some of every kind of trouble between them."""
    for i in range(40):
        make_skill(root, f"skill-{i:02d}", extra="tags: [a, b]\nisolation: inline\n")
    make_skill(root, "broken-yaml", extra="tags: [unclosed\n")
    make_skill(root, "wrong-name").joinpath("SKILL.md").write_text(
        "---\nname: other\ndescription: d\n---\n"
    )
    gone = make_skill(root, "no-script")
    (gone / "scripts" / "no_script.py").unlink()
    (root / "not-a-skill").mkdir()
    (root / "README.md").write_text("Not a skill.\n")
    make_skill(root, ".hidden")
    make_skill(root, "_draft")
    outside = make_skill(root.parent / "elsewhere", "far-away")
    (root / "far-away").symlink_to(outside, target_is_directory=True)
    (root / "alias").symlink_to(root / "skill-00", target_is_directory=True)
    return root


def _scan(root: Path | str) -> SkillRegistry:
    reg = SkillRegistry()
    reg.scan_builtin(root)
    return reg


@pytest.fixture
def skills(tmp_path: Path) -> tuple[Path, SkillRegistry]:
    root = tmp_path / "skills"
    for name in ("alpha", "beta", "gamma"):
        make_skill(root, name)
    (root / "drafts").mkdir()
    return root, _scan(root)


def test_a_mixed_root_registers_the_good_skills_and_reports_each_problem(tmp_path: Path) -> None:
    root = _mixed_root(tmp_path / "skills")
    reg = _scan(root)
    assert [d.manifest.name for d in reg.list_all()] == [f"skill-{i:02d}" for i in range(40)]
    by_folder = {Path(d.file).relative_to(root).parts[0]: d for d in reg.diagnostics}
    assert sorted(by_folder) == ["alias", "broken-yaml", "far-away", "no-script", "wrong-name"]
    assert "invalid YAML" in by_folder["broken-yaml"].message
    assert by_folder["no-script"].message.startswith("script 'scripts/no_script.py' does not")
    assert "leaves the skills root" in by_folder["far-away"].message
    # the alias stays inside the root, so it is followed, and its name is not its folder's
    assert "does not match its folder 'alias'" in by_folder["alias"].message
    assert by_folder["wrong-name"].line == 2


def test_descriptors_pickle_to_equal_frozen_descriptors(tmp_path: Path) -> None:
    reg = _scan(_mixed_root(tmp_path / "skills"))
    clone = pickle.loads(pickle.dumps(reg))
    assert clone.list_all() == reg.list_all() and clone.diagnostics == reg.diagnostics
    for desc in reg.list_all():
        back = pickle.loads(pickle.dumps(desc))
        assert back == desc and type(back) is SkillDescriptor
        with pytest.raises(AttributeError, match="cannot assign to field 'skill_id'"):
            back.skill_id = "x"  # type: ignore[misc]


def test_an_unchanged_root_refreshes_without_a_new_generation(
    skills: tuple[Path, SkillRegistry],
) -> None:
    root, reg = skills
    gen = reg.generation
    assert reg.refresh() == reg.refresh()
    result = reg.refresh()
    assert (result.generation, result.added, result.changed, result.removed) == (gen, (), (), ())
    # a body edit is re-read and reported; the next refresh is quiet again
    md = root / "alpha" / "SKILL.md"
    touch(md, md.read_text() + "More body.\n")
    assert reg.refresh().changed == ("built-in@alpha",) and reg.generation == gen + 1
    assert reg.refresh().any is False and reg.generation == gen + 1


def test_refresh_picks_up_edits_deletions_and_a_skill_born_in_a_plain_folder(
    skills: tuple[Path, SkillRegistry],
) -> None:
    root, reg = skills
    touch(root / "beta" / "SKILL.md", "---\nname: beta\ndescription: Edited.\n---\n")
    (root / "gamma" / "SKILL.md").unlink()  # the folder stays
    make_skill(root, "drafts")  # a SKILL.md appears in a folder that had none
    result = reg.refresh()
    assert result.changed == ("built-in@beta",)
    assert result.removed == ("built-in@gamma",)
    assert result.added == ("built-in@drafts",)
    assert [d.manifest.name for d in reg.list_all()] == ["alpha", "beta", "drafts"]
    assert reg.get("built-in@beta").manifest.description == "Edited."


def test_refresh_sees_folders_added_and_removed(skills: tuple[Path, SkillRegistry]) -> None:
    root, reg = skills
    make_skill(root, "delta")
    assert reg.refresh().added == ("built-in@delta",)
    shutil.rmtree(root / "alpha")
    assert reg.refresh().removed == ("built-in@alpha",)


def test_refresh_sees_an_edited_or_deleted_script(skills: tuple[Path, SkillRegistry]) -> None:
    root, reg = skills
    script = root / "beta" / "scripts" / "beta.py"
    script.unlink()
    result = reg.refresh()
    assert result.changed == ("built-in@beta",) and "built-in@beta" not in reg
    assert "script 'scripts/beta.py' does not exist" in reg.diagnostics[0].message
    script.write_text("x = 2\n")
    assert reg.refresh().changed == ("built-in@beta",) and "built-in@beta" in reg


def test_a_root_that_disappears_is_reported(skills: tuple[Path, SkillRegistry]) -> None:
    root, reg = skills
    shutil.rmtree(root)
    result = reg.refresh()
    assert sorted(result.removed) == ["built-in@alpha", "built-in@beta", "built-in@gamma"]
    assert "does not exist; create it or fix the path" in str(reg.diagnostics[-1])


def test_a_symlinked_skill_md_is_followed_on_each_refresh(
    skills: tuple[Path, SkillRegistry],
) -> None:
    root, reg = skills
    md = root / "beta" / "SKILL.md"
    md.rename(root / "beta" / "REAL.md")
    md.symlink_to("REAL.md")  # inside the skill: followed
    reg.refresh()  # the rename moved the file's ctime: it may be read again once
    assert reg.refresh().any is False and "built-in@beta" in reg
    touch(root / "beta" / "REAL.md", "---\nname: beta\ndescription: Via a link.\n---\n")
    assert reg.refresh().changed == ("built-in@beta",)
    assert reg.get("built-in@beta").manifest.description == "Via a link."


def test_a_root_named_with_a_trailing_slash_gives_the_same_paths(
    skills: tuple[Path, SkillRegistry],
) -> None:
    root, _ = skills
    reg = _scan(str(root) + os.sep)
    touch(root / "beta" / "SKILL.md", "---\nname: beta\ndescription: Edited.\n---\n")
    assert reg.refresh().changed == ("built-in@beta",)
    assert reg.get("built-in@beta").path == str(root / "beta")
    assert reg.list_all() == _scan(root).list_all()


def test_links_that_leave_are_reported_in_folder_order_on_every_refresh(
    skills: tuple[Path, SkillRegistry], tmp_path: Path
) -> None:
    root, reg = skills
    outside = make_skill(tmp_path / "elsewhere", "far") / "SKILL.md"
    (root / "drafts" / "SKILL.md").symlink_to(outside)  # a plain folder, now a link out
    (root / "gamma" / "SKILL.md").unlink()
    (root / "gamma" / "SKILL.md").symlink_to(outside)  # a known skill, now a link out
    first = reg.refresh()
    assert first.removed == ("built-in@gamma",)
    assert [Path(d.file).parent.name for d in reg.diagnostics] == ["drafts", "gamma"]
    assert all("leaves the skills root" in d.message for d in reg.diagnostics)
    again = reg.refresh()
    assert (again.generation, again.any) == (first.generation, False)


def test_a_second_root_of_a_namespace_loses_its_duplicate_ids(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    make_skill(first, "alpha", description="First alpha.")
    make_skill(second, "alpha", description="Second alpha.")
    make_skill(second, "beta")
    broken = make_skill(second, "gamma")
    (broken / "SKILL.md").write_text("---\nname: gamma\n---\n")
    reg = SkillRegistry()
    reg.scan_builtin(first)
    result = reg.scan_builtin(second)
    assert "built-in@beta" in result.added
    assert [d.skill_id for d in reg.list_all()] == ["built-in@alpha", "built-in@beta"]
    assert reg.get("built-in@alpha").manifest.description == "First alpha."
    messages = [d.message for d in reg.diagnostics]
    assert any("has no description:" in m for m in messages)
    assert any(m.startswith("duplicate skill id 'built-in@alpha'") for m in messages)


def test_an_agent_view_shows_a_new_diagnostic_though_no_skill_moved(
    skills: tuple[Path, SkillRegistry], tmp_path: Path
) -> None:
    root, reg = skills
    view = reg.view(root)  # the root, seen as one agent's own folder
    before = view.diagnostics
    outside = make_skill(tmp_path / "elsewhere", "far") / "SKILL.md"
    (root / "drafts" / "SKILL.md").symlink_to(outside)
    result = view.refresh()
    assert (result.added, result.changed, result.removed) == ((), (), ())
    new = [d for d in view.diagnostics if d not in before]
    assert len(new) == 1 and "leaves the skills root" in new[0].message


def test_a_fifo_or_a_loop_that_appears_is_reported_by_refresh(
    skills: tuple[Path, SkillRegistry],
) -> None:
    root, reg = skills
    (root / "alpha" / "SKILL.md").unlink()
    os.mkfifo(root / "alpha" / "SKILL.md")
    (root / "beta" / "SKILL.md").unlink()
    (root / "beta" / "SKILL.md").symlink_to("SKILL.md")
    result = reg.refresh()
    # Broken by the change: reported, and their last good versions stay registered.
    assert (result.broken, result.changed) == (("built-in@alpha", "built-in@beta"), ())
    assert [d.message.split(";")[0] for d in reg.diagnostics] == [
        "cannot read SKILL.md: it is a FIFO (named pipe), not a regular file",
        "cannot read SKILL.md (Too many levels of symbolic links)",
    ]
    assert [d.manifest.name for d in reg.list_all()] == ["alpha", "beta", "gamma"]
