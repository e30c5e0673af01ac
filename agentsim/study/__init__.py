"""Studies: arms and replicates of one experiment, run as ordinary runs and compared.

``compare_study(STUDY_DIR)`` compares a study's arms (docs/comparisons.md).
"""

from agentsim.study.compare import Comparison, compare_study

__all__ = ["Comparison", "compare_study"]
