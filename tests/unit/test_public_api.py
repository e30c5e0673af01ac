"""The public API: ``agentsim.__all__`` names what the package really defines, and importing
it is cheap."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import agentsim
from agentsim import _EXPORTS


@pytest.mark.parametrize("name", sorted(_EXPORTS))
def test_each_export_is_defined_where_the_index_says(name: str) -> None:
    """A re-export of a re-export, or a name that moved, makes the index lie."""
    module = importlib.import_module(_EXPORTS[name])
    value = getattr(module, name)
    assert getattr(agentsim, name) is value
    assert value.__module__ == module.__name__, f"{name} is defined in {value.__module__}"
    assert name in getattr(module, "__all__", ()), f"{module.__name__}.__all__ lacks {name}"


def _public_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(agentsim.__path__, "agentsim."):
        parts = info.name.split(".")
        if not any(p.startswith("_") for p in parts) and "ray_executor" not in info.name:
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("module_name", _public_modules())
def test_every_module_all_names_what_it_defines(module_name: str) -> None:
    module = importlib.import_module(module_name)
    missing = [n for n in getattr(module, "__all__", ()) if not hasattr(module, n)]
    assert missing == [], f"{module_name}.__all__ names what it does not define: {missing}"


def test_top_level_all_is_the_index_and_the_version() -> None:
    assert agentsim.__all__ == sorted([*_EXPORTS, "__version__"])
    namespace: dict[str, object] = {}
    exec("from agentsim import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(agentsim.__all__)


def test_the_main_seams_are_exported() -> None:
    """What users build on: running, models, skills, executors, inspection."""
    for name in (
        "Engine",
        "LocalExecutor",
        "ChatModel",
        "OpenAIChatModel",
        "ScriptedModel",
        "SkillRegistry",
        "ScriptRunner",
        "current_context",
        "open_run",
        "load_experiment",
    ):
        assert name in agentsim.__all__, name


def test_unknown_attribute_names_the_module() -> None:
    with pytest.raises(AttributeError, match="module 'agentsim' has no attribute 'nope'"):
        _ = agentsim.nope  # type: ignore[attr-defined]


def test_import_does_not_load_ray_or_pyarrow() -> None:
    code = "import sys, agentsim; print('ray' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_the_wheel_lists_every_subpackage() -> None:
    """setuptools ships only the packages pyproject.toml names: a missing one installs a
    package that fails on import outside a source checkout."""
    import tomllib
    from pathlib import Path

    root = Path(agentsim.__file__).parent
    pyproject = root.parent / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("an installed agentsim without its source checkout")
    listed = set(tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(("agentsim", *p.parent.relative_to(root).parts))
        for p in root.rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set()
