"""Saving a cycle's decisions fast: one UPDATE ... FROM (VALUES ...) per chunk on
PostgreSQL, instead of Django's bulk_update (a CASE per column per row, which costs
seconds for a deep queue). Other databases (the SQLite demo) use bulk_update."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import connection

from scheduler_bridge.workloads.models import Workload

# PostgreSQL binds at most 65,535 parameters per statement.
MAX_PARAMETERS = 60_000

# column -> SQL type used to cast the VALUES list
COLUMN_TYPES = {
    "state": "varchar",
    "admitted_at": "timestamptz",
    "started_at": "timestamptz",
    "flavour_id": "bigint",
    "placements": "jsonb",
    "borrowed": "jsonb",
    "gpus": "integer",
    "queue_position": "integer",
    "reason_code": "varchar",
    "reason": "text",
    "preemptions": "integer",
    "past_runs": "jsonb",
    "apply_error": "text",
    "apply_attempts": "integer",
    "job_events": "jsonb",
}


def update_workloads(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """Set `columns` of each workload in `rows` (dicts with "id" and those columns)."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        objects = []
        for row in rows:
            workload = Workload(pk=row["id"])
            for column in columns:
                setattr(workload, column, row[column])
            objects.append(workload)
        Workload.objects.bulk_update(objects, list(columns), batch_size=500)
        return
    table = Workload._meta.db_table
    assignments = ", ".join(f'"{c}" = v."{c}"' for c in columns)
    names = ", ".join(f'"{c}"' for c in columns)
    casts = ", ".join(["%s::bigint", *(f"%s::{COLUMN_TYPES[c]}" for c in columns)])
    per_row = len(columns) + 1
    chunk = max(1, MAX_PARAMETERS // per_row)
    with connection.cursor() as cursor:
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            values = ", ".join([f"({casts})"] * len(part))
            params: list[Any] = []
            for row in part:
                params.append(row["id"])
                for column in columns:
                    value = row[column]
                    if COLUMN_TYPES[column] == "jsonb":
                        value = json.dumps(value)
                    params.append(value)
            cursor.execute(
                f'UPDATE "{table}" AS t SET {assignments} '  # noqa: S608 - names are ours
                f'FROM (VALUES {values}) AS v("id", {names}) WHERE t."id" = v."id"',
                params,
            )
