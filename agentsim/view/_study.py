"""The viewer's study pages: a study's runs listed together by arm, and its comparison
(``agentsim.study.compare``), read from the study folder and never written to it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentsim.errors import ConfigError, RunError

__all__ = ["study_entry", "study_page"]


def study_entry(name: str, folder: Path, rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A study on the Runs page: its arms, each with the names of its runs (``rows`` are
    the served runs' rows by name) and the state its manifest gives them."""
    from agentsim.study.compare import read_study

    try:
        manifest, runs = read_study(folder)
    except ConfigError as exc:
        return {"id": name, "error": str(exc), "arms": []}
    arms = []
    for arm in manifest["arms"]:
        members = [
            {
                "run": r.id,
                "id": f"{name}~{r.id}",
                "replicate": r.replicate,
                "seed": r.seed,
                "state": r.state,
                "served": f"{name}~{r.id}" in rows,
                "fork_of": dict(r.fork_of) if r.fork_of else None,
            }
            for r in runs
            if r.arm == arm["name"]
        ]
        arms.append({"name": arm["name"], "from_tick": arm.get("from_tick"), "runs": members})
    return {
        "id": name,
        "name": manifest.get("name") or name,
        "control": manifest["control"],
        "measures": manifest.get("measures") or [],
        "arms": arms,
    }


def study_page(name: str, folder: Path, entry: Mapping[str, Any]) -> dict[str, Any]:
    """A study's page: its runs by arm and the comparison of its complete runs (or why there
    is none yet)."""
    from agentsim.study.compare import compare_study

    try:
        cmp = compare_study(folder).to_dict()
    except (ConfigError, RunError) as exc:
        return {**entry, "comparison": None, "comparison_error": str(exc)}
    cmp.pop("path", None)  # the folder on disk is not the page's business
    return {**entry, "comparison": cmp, "comparison_error": None}
