"""The package's arrows point one way: cli -> study -> run -> hosts -> agent -> skills / llm /
env (``view`` reads studies and runs; ``inspect`` reads runs), ``config`` is a leaf (it
reads ``env``'s pure helpers only), and ``events`` (the declaration of every event, used by
all of them) imports none of them.

Every ``import`` in the package (module level or inside a function) is checked, so a new
upward import fails here with the file and line that made it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import agentsim

PACKAGE = Path(agentsim.__file__).parent

# What each layer may not import (besides itself).
UP_FROM_AGENT = (
    "agentsim.run",
    "agentsim.hosts",
    "agentsim.cli",
    "agentsim.inspect",
    "agentsim.study",
)
FORBIDDEN = {
    "config": (
        *UP_FROM_AGENT,
        "agentsim.agent",
        "agentsim.skills",
        "agentsim.llm",
        "agentsim.store",
        "agentsim.testing",
        "agentsim.view",
    ),
    "skills": (*UP_FROM_AGENT, "agentsim.agent", "agentsim.config"),
    "llm": (*UP_FROM_AGENT, "agentsim.agent", "agentsim.skills"),
    "env": (*UP_FROM_AGENT, "agentsim.agent"),
    "agent": UP_FROM_AGENT,
    "hosts": ("agentsim.run", "agentsim.cli", "agentsim.inspect", "agentsim.study"),
    "run": ("agentsim.cli", "agentsim.inspect", "agentsim.study"),
    "inspect": ("agentsim.cli", "agentsim.study", "agentsim.view"),
    "study": ("agentsim.cli", "agentsim.view"),
    "testing": UP_FROM_AGENT,
    "events": (
        "agentsim.config",
        "agentsim.run",
        "agentsim.hosts",
        "agentsim.agent",
        "agentsim.skills",
        "agentsim.llm",
        "agentsim.env",
        "agentsim.store",
        "agentsim.testing",
        "agentsim.cli",
        "agentsim.inspect",
        "agentsim.view",
        "agentsim.study",
    ),
}


def _layer_files(layer: str) -> list[Path]:
    """A layer is a package (its folder) or a single module (``events.py``)."""
    module = PACKAGE / f"{layer}.py"
    return [module] if module.is_file() else sorted((PACKAGE / layer).rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_layer_imports_upward(layer: str) -> None:
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in _layer_files(layer)
        for line, module in _imports(path)
        if module.startswith(FORBIDDEN[layer])
    ]
    assert wrong == []


def test_a_module_layer_is_checked_as_its_file() -> None:
    assert _layer_files("events") == [PACKAGE / "events.py"]


def test_the_check_sees_function_level_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from agentsim.run.engine import Engine\n")
    assert _imports(source) == [(2, "agentsim.run.engine")]


# Outside the skills package, only its public modules are imported: a private
# ``agentsim.skills._x`` (or ``from agentsim.skills import _x``) is a seam the package may
# move without notice.
REPO = PACKAGE.parent
OUTSIDE_SKILLS = ("agentsim", "tests", "bench", "skills")


def _is_private_skills(name: str) -> bool:
    parts = name.split(".")
    return parts[:2] == ["agentsim", "skills"] and any(p.startswith("_") for p in parts[2:])


def _private_skills_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _is_private_skills(node.module):
                found.append((node.lineno, node.module))
                continue
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if _is_private_skills(name)]
    return found


def test_no_module_outside_skills_imports_a_private_skills_module() -> None:
    inside = PACKAGE / "skills"
    wrong = [
        f"{path.relative_to(REPO)}:{line} imports {module}"
        for top in OUTSIDE_SKILLS
        for path in sorted((REPO / top).rglob("*.py"))
        if inside not in path.parents
        for line, module in _private_skills_imports(path)
    ]
    assert wrong == []


def test_the_check_sees_private_skills_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from agentsim.skills._toolnames import TOOL_NAMES\n"
        "from agentsim.skills import _builtin, registry\n"
        "def f():\n    import agentsim.skills.scripts._old\n"
        "from agentsim.skills.manifest import TOOL_NAMES as _T\n"
    )
    assert _private_skills_imports(source) == [
        (1, "agentsim.skills._toolnames"),
        (2, "agentsim.skills._builtin"),
        (4, "agentsim.skills.scripts._old"),
    ]


# A schedule sees the engine through ``agentsim.run.schedules.Stepping`` only: no private
# name of the engine (or of anything but the schedule's own object).
SCHEDULES = PACKAGE / "run" / "schedules"


def _private_uses(path: Path) -> list[tuple[int, str]]:
    """``x._name`` where ``x`` is not ``self``, and private names imported from the engine."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute):
            private = node.attr.startswith("_") and not node.attr.endswith("__")
            of_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if private and not of_self:
                found.append((node.lineno, f"{ast.unparse(node.value)}.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module == "agentsim.run.engine":
            found += [
                (node.lineno, f"{node.module}.{alias.name}")
                for alias in node.names
                if alias.name.startswith("_")
            ]
    return found


def test_no_schedule_uses_a_private_name_of_the_engine() -> None:
    files = sorted(SCHEDULES.rglob("*.py"))
    assert {p.name for p in files} >= {"__init__.py", "barrier.py", "dependencies.py"}
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line} uses {name}"
        for path in files
        for line, name in _private_uses(path)
    ]
    assert wrong == []


def test_the_schedule_check_catches_a_private_use(tmp_path: Path) -> None:
    source = tmp_path / "s.py"
    source.write_text(
        "from agentsim.run.engine import Engine, _NO_SPACE\n"
        "class S:\n"
        "    def run(self, eng):\n"
        "        self._mine = eng.views()\n"
        "        eng.__class__\n"
        "        return eng._model_gave_up() or self.eng._views()\n"
    )
    assert _private_uses(source) == [
        (1, "agentsim.run.engine._NO_SPACE"),
        (6, "eng._model_gave_up"),
        (6, "self.eng._views"),
    ]
