"""The package's arrows point one way: cli -> sim -> agent -> skills / llm / env, and
``events`` (the declaration of every event, used by all of them) imports none of them.

Every ``import`` in the package (module level or inside a function) is checked, so a new
upward import fails here with the file and line that made it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import agentsim

PACKAGE = Path(agentsim.__file__).parent

# What each layer may not import (besides itself).
FORBIDDEN = {
    "skills": ("agentsim.sim", "agentsim.agent", "agentsim.cli", "agentsim.inspect"),
    "llm": (
        "agentsim.sim",
        "agentsim.agent",
        "agentsim.skills",
        "agentsim.cli",
        "agentsim.inspect",
    ),
    "env": ("agentsim.sim", "agentsim.agent", "agentsim.cli", "agentsim.inspect"),
    "agent": ("agentsim.sim", "agentsim.cli", "agentsim.inspect"),
    "sim": ("agentsim.cli", "agentsim.inspect"),
    "testing": ("agentsim.sim", "agentsim.cli", "agentsim.inspect"),
    "events": (
        "agentsim.sim",
        "agentsim.agent",
        "agentsim.skills",
        "agentsim.llm",
        "agentsim.env",
        "agentsim.store",
        "agentsim.testing",
        "agentsim.cli",
        "agentsim.inspect",
        "agentsim.view",
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
    source.write_text("def f():\n    from agentsim.sim.engine import Engine\n")
    assert _imports(source) == [(2, "agentsim.sim.engine")]
