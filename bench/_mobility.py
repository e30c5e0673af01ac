"""The benches' experiment: daily-mobility scaled to ``agents`` (its groups in their
proportions), ``ticks`` of plain running, against an OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def daily_mobility(
    agents: int, ticks: int, concurrency: int, base_url: str, out: Path
) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "experiments" / "daily-mobility.yaml").read_text())
    groups = doc["agents"]
    total = sum(g["count"] for g in groups)
    for g in groups:
        g["count"] = g["count"] * agents // total
    groups[0]["count"] += agents - sum(g["count"] for g in groups)
    doc["workflow"] = [{"run": {"ticks": ticks}}]
    doc["model"] = {
        "backend": "openai",
        "model": "bench",
        "base_url": base_url,
        "max_concurrency": concurrency,
    }
    doc["output"]["dir"] = str(out)
    return doc
