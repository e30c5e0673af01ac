"""Studies: arms and replicates of one experiment, run as ordinary runs in one folder
(docs/studies.md) and compared (``compare_study``, docs/comparisons.md)."""

from agentsim.study.compare import Comparison, compare_study
from agentsim.study.runner import StudyResult, resume_study, run_study
from agentsim.study.spec import Study, StudySpec, load_study, parse_study

__all__ = [
    "Comparison",
    "Study",
    "StudyResult",
    "StudySpec",
    "compare_study",
    "load_study",
    "parse_study",
    "resume_study",
    "run_study",
]
