"""The typed table of a survey's answers: ``RUN/surveys/NAME.parquet``, the same rows as
``NAME.jsonl`` with typed columns, for readers that want a table (pandas, polars, DuckDB).

The ``value`` column is typed by the instrument: ``int64`` (likert), ``float64`` (number),
``string`` (choice), the JSON text of the value (json) and ``string`` (always null) for a
free-text survey; ``instrument`` is null for a free-text survey.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["SURVEY_COLUMNS", "write_survey_table"]

SURVEY_COLUMNS = (
    "agent_id",
    "group",
    "question",
    "answer",
    "status",
    "reason",
    "echo",
    "tick",
    "time",
    "instrument",
    "value",
)
"""The columns of ``NAME.parquet``, in order."""


def write_survey_table(
    path: Path, rows: Sequence[Mapping[str, Any]], instrument: str | None
) -> None:
    """Write ``rows`` (a survey's answer rows) to ``path`` as Parquet, atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    value_type = {"likert": pa.int64(), "number": pa.float64()}.get(instrument or "", pa.string())

    def value(row: Mapping[str, Any]) -> Any:
        v = row.get("value")
        if v is None or instrument != "json":
            return v
        return json.dumps(v, ensure_ascii=False, sort_keys=True)

    string = pa.string()
    schema = pa.schema(
        [
            ("agent_id", string),
            ("group", string),
            ("question", string),
            ("answer", string),
            ("status", string),
            ("reason", string),
            ("echo", pa.bool_()),
            ("tick", pa.int64()),
            ("time", string),
            ("instrument", string),
            ("value", value_type),
        ]
    )
    columns: dict[str, list[Any]] = {c: [] for c in SURVEY_COLUMNS}
    for row in rows:
        for c in SURVEY_COLUMNS:
            columns[c].append(value(row) if c == "value" else row.get(c))
    table = pa.Table.from_pydict(columns, schema=schema)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
