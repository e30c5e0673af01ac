"""``SkillDescriptor`` keeps the seed API's fields as read-only attributes: code written for
AgentSociety2's ``SkillRegistry.get(...)`` reads ``name``, ``description``, ``script``,
``hooks`` and the source path on what the registry returns."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentsim.skills import SkillDescriptor, SkillRegistry, load_skill_md
from tests.unit.helpers import make_skill


def test_registry_get_gives_the_seed_fields(tmp_path: Path) -> None:
    folder = make_skill(
        tmp_path / "custom",
        "bike-repair",
        description="Use to repair a bike.",
        extra="hooks:\n  pre_step: scripts/bike_repair.py\n",
    )
    reg = SkillRegistry()
    reg.scan_custom(tmp_path / "custom")
    desc = reg.get("custom@bike-repair")
    assert desc.skill_id == "custom@bike-repair"
    assert desc.name == "bike-repair"
    assert desc.description == "Use to repair a bike."
    assert desc.script == "scripts/bike_repair.py"
    assert desc.hooks == (("pre_step", "scripts/bike_repair.py"),)
    assert desc.source_path == folder and desc.source_path.is_dir()
    assert (desc.source_path / "SKILL.md").is_file()
    (by_name,) = reg.find_by_name("bike-repair")
    assert (by_name.name, by_name.description) == (desc.name, desc.description)
    with pytest.raises((AttributeError, TypeError)):  # a property: read-only
        desc.name = "other"  # type: ignore[misc]
    assert desc.name == "bike-repair"
    with pytest.raises(dataclasses.FrozenInstanceError):
        desc.skill_id = "custom@other"  # type: ignore[misc]


def test_a_descriptor_built_directly_has_them_too(tmp_path: Path) -> None:
    folder = make_skill(tmp_path, "weather", description="Use to read the weather.", script=False)
    parsed = load_skill_md(folder)
    assert parsed.manifest is not None
    desc = SkillDescriptor(
        skill_id="custom@weather", namespace="custom", path=str(folder), manifest=parsed.manifest
    )
    assert desc.name == "weather"
    assert desc.description == "Use to read the weather."
    assert desc.script is None and desc.hooks == ()
    assert desc.source_path == folder
