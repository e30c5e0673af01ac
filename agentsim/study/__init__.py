"""Studies: arms and replicates of one experiment, run as ordinary runs in one folder
(docs/studies.md)."""

from agentsim.study.runner import StudyResult, resume_study, run_study
from agentsim.study.spec import Study, StudySpec, load_study, parse_study

__all__ = [
    "Study",
    "StudyResult",
    "StudySpec",
    "load_study",
    "parse_study",
    "resume_study",
    "run_study",
]
