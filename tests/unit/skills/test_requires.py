"""``requires`` names skills, env modules and tools; a run hides what it cannot serve."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentsim import open_run
from agentsim.cli import main
from agentsim.errors import SkillActivationError
from agentsim.skills.manifest import parse_skill_md, render_skill_md
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
from tests.unit import helpers

# -- the frontmatter form ----------------------------------------------------------------------


def front(requires: str) -> str:
    return f"---\nname: feed\ndescription: Use to read a feed.\nrequires: {requires}\n---\nBody.\n"


def test_requires_holds_skills_env_modules_and_tools() -> None:
    parsed = parse_skill_md(
        front("[opinion-update, env:social, tool:ask_env, env:city]"), source="SKILL.md"
    )
    m = parsed.manifest
    assert m is not None and parsed.diagnostics == ()
    assert m.required_skills == ("opinion-update",)
    assert m.required_env == ("social", "city")
    assert m.required_tools == ("ask_env",)
    again = parse_skill_md(render_skill_md(m, parsed.body), source="again").manifest
    assert again == m


@pytest.mark.parametrize(
    ("requires", "message"),
    [
        pytest.param(
            "[envs:social]",
            "requires[0] 'envs:social' has an unknown kind 'envs'; write a skill name (like "
            "opinion-update), env:<module> (like env:social) or tool:<tool> (like tool:ask_env)",
            id="kind",
        ),
        pytest.param(
            "[diary, env:socail]",
            "requires[1] 'env:socail' names no environment module; did you mean 'social'? "
            "known modules: city, social",
            id="module",
        ),
        pytest.param(
            "[tool:ask_enf]",
            "requires[0] 'tool:ask_enf' names no agent tool; did you mean 'ask_env'? known "
            "tools: activate_skill, deactivate_skill, read_skill_file, execute_skill_script, "
            "search_skills, ask_env, finish",
            id="tool",
        ),
        pytest.param(
            "['env:']",
            "requires[0] 'env:' names no environment module; known modules: city, social",
            id="empty",
        ),
        pytest.param("[Not Ok]", "requires[0] 'Not Ok' is not a valid skill name", id="skill-name"),
        pytest.param("env:social", "requires must be a list like [a, b], got string", id="str"),
    ],
)
def test_a_bad_requires_entry_is_reported_on_its_line(requires: str, message: str) -> None:
    parsed = parse_skill_md(front(requires), source="feed/SKILL.md")
    assert parsed.manifest is None
    (diag,) = parsed.errors
    assert diag.line == 4
    assert diag.message.startswith(message), diag.message


# -- the catalog of a run ----------------------------------------------------------------------


def make_skill(root: Path, name: str, requires: str = "") -> None:
    helpers.write_skill(
        root,
        name,
        description=f"Use for {name} things.",
        front=f"requires: {requires}\n" if requires else "",
        body=f"Body of {name}.\n",
        exist_ok=False,
    )


@pytest.fixture
def registry(tmp_path: Path) -> SkillRegistry:
    make_skill(tmp_path, "feed", "[env:social]")
    make_skill(tmp_path, "helper", "[feed]")  # hidden with what it requires
    make_skill(tmp_path, "mover", "[env:city, tool:ask_env]")
    make_skill(tmp_path, "plain")
    reg = SkillRegistry()
    reg.scan_builtin(tmp_path)
    return reg


def runtime(reg: SkillRegistry, tmp_path: Path, **space: Any) -> AgentSkillRuntime:
    return AgentSkillRuntime(
        SkillSpace(reg.snapshot(), **space), agent_id="a-1", workspace_root=tmp_path
    )


def entries(text: str) -> list[str]:
    return re.findall(r'<skill name="([^"]+)"', text)


async def test_a_city_run_hides_what_needs_the_social_module(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    rt = runtime(registry, tmp_path / "ws", env_modules=["city"])
    cat = rt.catalog()
    assert entries(cat.text) == ["mover", "plain"]
    assert cat.text.splitlines()[-1] == (
        "<!-- 2 skills hidden, not available in this run: feed (needs env module social), "
        "helper (needs skill feed) -->"
    )
    assert sorted(rt.handles()) == ["mover", "plain"]
    assert [h["name"] for h in rt.search("feed helper things")] == ["mover", "plain"]
    with pytest.raises(
        SkillActivationError,
        match=r"cannot activate skill 'helper': it is not available in this run: needs skill feed",
    ):
        await rt.activate("helper")
    assert rt.active == ()


async def test_a_run_without_modules_has_no_ask_env(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    cat = runtime(registry, tmp_path / "ws", env_modules=[]).catalog()
    assert entries(cat.text) == ["plain"]
    assert "mover (needs env module city, tool ask_env)" in cat.text
    assert cat.text.splitlines()[-1].startswith("<!-- 3 skills hidden")


async def test_a_social_run_offers_the_feed(registry: SkillRegistry, tmp_path: Path) -> None:
    rt = runtime(registry, tmp_path / "ws", env_modules=["social", "city"])
    cat = rt.catalog()
    assert entries(cat.text) == ["feed", "helper", "mover", "plain"]
    assert "hidden" not in cat.text
    res = await rt.activate("helper")
    assert res.newly_active == ("built-in@feed", "built-in@helper")


def test_a_bare_space_checks_no_modules(registry: SkillRegistry, tmp_path: Path) -> None:
    # No run, no modules known (tests, ``agentsim skills``): nothing is hidden for them.
    cat = runtime(registry, tmp_path / "ws").catalog()
    assert len(entries(cat.text)) == 4 and "hidden" not in cat.text


def test_the_note_stays_when_the_catalog_is_over_budget(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    rt = runtime(registry, tmp_path / "ws", env_modules=["city"], catalog_budget_tokens=70)
    for _ in range(2):  # the second render re-joins the kept selection
        cat = rt.catalog("mover things")
        assert entries(cat.text + cat.agent_text) == [] and cat.omitted == 2
        assert cat.agent_text.splitlines()[-1].startswith("<!-- 2 more skills not listed")
        last = cat.text.splitlines()[-1]
        assert last.startswith("<!-- 2 skills hidden, not available in this run: feed")


# -- runs and inspect --------------------------------------------------------------------------

EXAMPLE = helpers.REPO / "experiments" / "daily-mobility.yaml"
CITY_RUN = """
name: city-only
seed: 3
clock: {start: "2026-03-02T06:00:00", tick: 1h}
ticks: 6
agents:
  - group: people
    count: 6
    profile: {template: student}
    skills: {default: [daily-guidance]}
model: {backend: scripted}
environment:
  - {module: city}
"""


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text("utf-8").splitlines()]


def run(tmp_path: Path, text: str, *args: str) -> Path:
    exp = tmp_path / "exp.yaml"
    exp.write_text(text)
    out = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(out), "--json", *args]) == 0
    return out


@pytest.fixture(scope="module")
def city_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped daily-mobility example (city only), with fewer agents."""
    out = tmp_path_factory.mktemp("city") / "run"
    with pytest.MonkeyPatch.context() as mp:
        for group, count in enumerate((8, 3, 2)):
            mp.setenv(f"AGENTSIM_AGENTS__{group}__COUNT", str(count))
        args = ["run", str(EXAMPLE), "--out", str(out), "--ticks", "12", "--json"]
        assert main(args) == 0
    return out


def test_a_city_run_never_activates_social_feed_or_weather_lookup(city_run: Path) -> None:
    evs = events(city_run)
    activated = {e["skill"] for e in evs if e["type"] == "skill_activated"}
    # Agents did activate skills beyond their default: the model had choices to make.
    chosen = [e for e in evs if e["type"] == "skill_activated" and not e.get("default")]
    assert len({e["agent_id"] for e in chosen}) >= 2
    assert activated.isdisjoint(
        {"built-in@social-feed", "built-in@opinion-update", "built-in@weather-lookup"}
    )
    assert not [e for e in evs if e["type"] == "agent_error"]
    (start,) = [e for e in evs if e["type"] == "run_start"]
    assert start["skills_hidden"] == {
        "built-in@opinion-update": "needs env module social",
        "built-in@social-feed": "needs env module social, skill opinion-update",
    }


def test_inspect_shows_the_hidden_skills(
    city_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(city_run)]) == 0
    out = capsys.readouterr().out
    assert (
        "  hidden       2 skills not offered: built-in@opinion-update (needs env module "
        "social), built-in@social-feed (needs env module social, skill opinion-update)\n"
    ) in out
    assert main(["inspect", str(city_run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["skills_hidden"]["built-in@social-feed"].startswith("needs env module social")


def test_a_social_run_offers_social_feed(tmp_path: Path) -> None:
    text = CITY_RUN.replace("{module: city}", "{module: social, follow_k: 2}").replace(
        "default: [daily-guidance]", "default: []"
    )
    out = run(tmp_path, text, "--ticks", "1")
    (start,) = [e for e in events(out) if e["type"] == "run_start"]
    assert start["skills_hidden"] == {"built-in@daily-guidance": "needs env module city"}
    run_ = open_run(out)
    prompts = "".join(run_.agent(a).prompt_at(0).system for a in run_.agents)
    assert '<skill name="social-feed" id="built-in@social-feed">' in prompts
    assert '<skill name="daily-guidance"' not in prompts
    assert "<!-- 1 skill hidden, not available in this run: daily-guidance (needs env" in prompts


def test_a_default_skill_the_run_cannot_serve_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(CITY_RUN.replace("default: [daily-guidance]", "default: [social-feed]"))
    out = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "error: agents.0.skills.default: default skill 'social-feed' is not available in this "
        "run: it needs env module social, skill opinion-update; add what it needs under "
        "environment, or remove it from the defaults\n"
    )
    assert not out.exists()


async def test_a_required_skill_is_taken_from_the_skills_own_namespace_first(
    tmp_path: Path,
) -> None:
    builtin, custom = tmp_path / "builtin", tmp_path / "custom"
    make_skill(builtin, "feed", "[opinion]")
    make_skill(builtin, "opinion")
    make_skill(custom, "opinion")  # shadows the built-in's bare name
    make_skill(custom, "notes", "[opinion]")
    reg = SkillRegistry()
    reg.scan_builtin(builtin)
    reg.scan_custom(custom)
    rt = runtime(reg, tmp_path / "ws")
    assert (await rt.activate("feed")).newly_active == ("built-in@opinion", "built-in@feed")
    assert (await rt.activate("notes")).newly_active == ("custom@opinion", "custom@notes")


def test_hiding_follows_the_requirers_own_namespace(tmp_path: Path) -> None:
    builtin, custom = tmp_path / "builtin", tmp_path / "custom"
    make_skill(builtin, "feed", "[opinion]")
    make_skill(builtin, "opinion", "[env:social]")  # the one feed uses: needs social
    make_skill(custom, "opinion")  # a namesake that needs nothing
    reg = SkillRegistry()
    reg.scan_builtin(builtin)
    reg.scan_custom(custom)
    cat = runtime(reg, tmp_path / "ws", env_modules=["city"]).catalog()
    assert cat.text.splitlines()[-1] == (
        "<!-- 2 skills hidden, not available in this run: feed (needs skill opinion), "
        "built-in@opinion (needs env module social) -->"
    )
