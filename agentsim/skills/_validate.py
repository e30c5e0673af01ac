"""Compatibility name for ``runtime.py``, which imports ``path_problem`` from here.

The hand-written validator is gone (``manifest.SkillManifest`` holds the rules); once
``runtime.py`` imports ``path_problem`` from ``agentsim.skills._paths``, delete this module.
"""

from agentsim.skills._paths import path_problem

__all__ = ["path_problem"]
