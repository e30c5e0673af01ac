"""The public API: every name in ``agentsim.__all__`` resolves, and importing is cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentsim


@pytest.mark.parametrize("name", agentsim.__all__)
def test_every_exported_name_resolves(name: str) -> None:
    assert getattr(agentsim, name) is not None


def test_all_is_sorted_and_complete() -> None:
    assert agentsim.__all__ == sorted(agentsim.__all__)
    assert set(dir(agentsim)) == set(agentsim.__all__)


def test_unknown_attribute_names_the_module() -> None:
    with pytest.raises(AttributeError, match="module 'agentsim' has no attribute 'nope'"):
        _ = agentsim.nope  # type: ignore[attr-defined]


def test_import_does_not_load_ray_or_pyarrow() -> None:
    code = "import sys, agentsim; print('ray' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
