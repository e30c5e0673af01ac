"""``agentsim env new NAME``: scaffold an environment module of one's own.

It writes a folder with an experiment, the module beside it (``envs/<name>.py``), one skill
of the module's own (``envs/skills/``, registered as ``env:<name>``) and a test that runs the
experiment and passes as written. Exit codes: 0 written, 2 bad name or existing folder.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_env_commands", "scaffold_module"]

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

_MODULE = '''"""The {name} module: each agent keeps a tally; ``add`` raises it at the step's end.

Edit it into your own world: options in ``{cls}Options``, read actions and writes in
``{cls}View.ACTIONS``, state changes in ``apply`` (its events built with ``clock.event``, which
stamps the tick and time), and ``get_state``/``set_state`` for checkpoints
(docs/experiments.md, "Your own environment module")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentsim.env import (
    ActionSpec,
    AgentInfo,
    ArgReader,
    EnvAnswer,
    EnvModule,
    EnvView,
    Intent,
    SimClock,
    parse_options,
    sorted_intents,
)
from agentsim.events import EventType
from agentsim.events import Field as EventField


class {cls}Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    start: int = Field(default=0, ge=0)
    step: int = Field(default=1, ge=1, le=100)


@dataclass(frozen=True, slots=True, kw_only=True)
class {cls}View(EnvView):
    ACTIONS: ClassVar[tuple[ActionSpec, ...]] = (
        ActionSpec(name="tally", doc="your tally"),
        ActionSpec(name="add", doc="raise your tally", writes=True),
    )

    tallies: Mapping[str, int]

    def _do_tally(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        return EnvAnswer(result={{"tally": self.tallies.get(agent_id, 0)}})

    def _do_add(self, agent_id: str, args: ArgReader, seq: int) -> EnvAnswer:
        return EnvAnswer(result={{"ok": True}}, intent=self._intent(agent_id, "add", {{}}, seq))


class {cls}(EnvModule):
    name = "{name}"
    INTERVENTIONS = ("reset",)
    EVENTS = (
        EventType(
            name="{name}_added",
            writer="env:{name}",
            doc="an agent raised its tally",
            fields=(EventField(name="tally", type=int, doc="the new tally"),),
        ),
        EventType(name="{name}_reset", writer="env:{name}", doc="a workflow reset the tallies"),
    )

    def __init__(
        self, options: Mapping[str, Any], *, seed: int, base_dir: Path, config_path: str = ""
    ) -> None:
        super().__init__(options, seed=seed, base_dir=base_dir, config_path=config_path)
        self.opts = parse_options({cls}Options, self.options, path=config_path)
        self.tallies: dict[str, int] = {{}}

    def setup(self, agents: Sequence[AgentInfo]) -> None:
        self.tallies = {{a.agent_id: self.opts.start for a in self._by_id(agents)}}

    def view(self, clock: SimClock) -> {cls}View:
        return {cls}View(
            module=self.name,
            tick=clock.tick,
            now=clock.now,
            tick_length=clock.tick_length,
            tallies=dict(self.tallies),
        )

    def apply(self, intents: Sequence[Intent], clock: SimClock) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for intent in sorted_intents(intents, self.name):
            self.tallies[intent.agent_id] += self.opts.step
            tally = self.tallies[intent.agent_id]
            events.append(clock.event("{name}_added", agent_id=intent.agent_id, tally=tally))
        return events

    def intervene(
        self, action: str, args: Mapping[str, Any], clock: SimClock
    ) -> list[dict[str, Any]]:
        self._check_intervention(action)
        self.tallies = dict.fromkeys(self.tallies, self.opts.start)
        return [clock.event("{name}_reset")]

    def get_state(self) -> dict[str, Any]:
        return {{"tallies": dict(self.tallies)}}

    def set_state(self, state: dict[str, Any]) -> None:
        try:
            self.tallies = {{str(k): int(v) for k, v in state["tallies"].items()}}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._malformed_state(exc) from None
'''

_SKILL = """---
name: {skill}
description: Use to read and raise your tally in the {name} module.
tags: [{name}]
requires: [env:{name}]
---
# The {name} module

Call `ask_env` with `module: "{name}"`: `tally` (args `{{}}`) reads your tally; `add`
(args `{{}}`) raises it at the end of the step.

```playbook
ask_env {{"module": "{name}", "action": "tally", "args": {{}}}}
ask_env {{"module": "{name}", "action": "add", "args": {{}}}}
```
"""

_EXPERIMENT = """# An experiment of the {name} module (run: agentsim run experiment.yaml).
name: {name}
seed: 1
clock: {{start: "2026-03-02T08:00:00", tick: 1h}}
workflow:
  - run: {{ticks: 2}}
  - intervene: {{env: {name}, action: reset}}
  - run: {{ticks: 1}}
agents:
  - group: people
    count: 3
    skills: {{default: [{skill}]}}
model: {{backend: scripted}}
environment:
  - {{module: ./envs/{name}.py:{cls}, step: 2}}
output: {{dir: workspace, formats: [jsonl]}}
"""

_TEST = '''"""The {name} module runs in its experiment (python -m pytest {folder})."""

import asyncio
import json
from pathlib import Path

from agentsim.config.experiment import load_experiment
from agentsim.run.engine import Engine

EXPERIMENT = Path(__file__).parent / "experiment.yaml"


def test_the_experiment_runs_and_agents_raise_their_tallies(tmp_path: Path) -> None:
    config = load_experiment(EXPERIMENT, environ={{}})
    summary = asyncio.run(Engine(config, run_dir=tmp_path / "run").run())
    assert summary.status == "completed"
    lines = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    added = [e for e in events if e["type"] == "{name}_added"]
    assert {{e["agent_id"] for e in added}} == {{"people-00000", "people-00001", "people-00002"}}
    assert [e["tally"] for e in added if e["agent_id"] == "people-00000"] == [2, 4, 2]
    assert sum(e["type"] == "{name}_reset" for e in events) == 1
'''


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_") if part) + "Module"


def scaffold_module(name: str, parent: Path) -> Path:
    """Write the module ``name``'s folder under ``parent``; ``ValueError`` for a bad name or
    a folder that exists."""
    if not _NAME_RE.match(name):
        raise ValueError(
            f"module name {name!r} is invalid; use at most 40 lower-case letters, digits and "
            "'_', starting with a letter, like 'market'"
        )
    folder = parent / name
    if folder.exists():
        raise ValueError(f"{folder} already exists; choose another name or remove the folder")
    skill = f"{name.replace('_', '-')}-tally"
    values = {"name": name, "cls": _class_name(name), "skill": skill, "folder": name}
    files = {
        "experiment.yaml": _EXPERIMENT,
        f"envs/{name}.py": _MODULE,
        f"envs/skills/{skill}/SKILL.md": _SKILL,
        f"test_{name}.py": _TEST,
    }
    for rel, template in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**values), encoding="utf-8")
    return folder


def _cmd_new(args: argparse.Namespace) -> int:
    try:
        folder = scaffold_module(args.name, Path(args.dir))
    except ValueError as exc:
        print(f"agentsim env: {exc}", file=sys.stderr)
        return 2
    print(
        f"created {folder}: the module envs/{args.name}.py, its skill under envs/skills/, "
        f"experiment.yaml and test_{args.name}.py; try: python -m pytest {folder}"
    )
    return 0


def add_env_commands(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register ``env new`` on the top-level parser's subparsers."""
    env = subparsers.add_parser("env", help="scaffold environment modules of your own")
    sub = env.add_subparsers(dest="env_command", required=True, metavar="COMMAND")
    p = sub.add_parser("new", help="scaffold a module, its skill, an experiment and a test")
    p.add_argument("name", help="the module's name (lower-case letters, digits and '_')")
    p.add_argument("--dir", metavar="DIR", default=".", help="parent folder (default .)")
    p.set_defaults(func=_cmd_new)
