"""Saving a cycle's decisions fast: one UPDATE ... FROM (VALUES ...) per chunk on
PostgreSQL, instead of Django's bulk_update (a CASE per column per row, which costs
seconds for a deep queue). Other databases (the SQLite demo) use bulk_update."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction

from scheduler_bridge.workloads.models import Workload

# PostgreSQL binds at most 65,535 parameters per statement.
MAX_PARAMETERS = 60_000
# From this many rows on, rows are streamed with COPY instead of bound as parameters.
COPY_FROM_ROWS = 500

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
    "held_placements": "jsonb",
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
    if len(rows) >= COPY_FROM_ROWS:
        _update_through_copy(table, rows, columns, assignments, names)
        return
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
                params.extend(_value(row, column) for column in columns)
            cursor.execute(
                f'UPDATE "{table}" AS t SET {assignments} '  # noqa: S608 - names are ours
                f'FROM (VALUES {values}) AS v("id", {names}) WHERE t."id" = v."id"',
                params,
            )


def _value(row: dict[str, Any], column: str) -> Any:
    value = row[column]
    return json.dumps(value) if COLUMN_TYPES[column] == "jsonb" else value


def _update_through_copy(
    table: str,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    assignments: str,
    names: str,
) -> None:
    """Many rows: COPY them into a temporary table, then one UPDATE ... FROM it (binding
    tens of thousands of parameters costs more than streaming them)."""
    staging = "tidegate_workload_changes"
    definitions = ", ".join(['"id" bigint', *(f'"{c}" {COLUMN_TYPES[c]}' for c in columns)])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {staging} ({definitions}) ON COMMIT DROP"
        )
        cursor.execute(f"TRUNCATE {staging}")
        with cursor.cursor.copy(f'COPY {staging} ("id", {names}) FROM STDIN') as copy:
            for row in rows:
                copy.write_row((row["id"], *(_value(row, column) for column in columns)))
        cursor.execute(
            f'UPDATE "{table}" AS t SET {assignments} '  # noqa: S608 - names are ours
            f'FROM {staging} AS v WHERE t."id" = v."id"'
        )
        cursor.execute(f"DROP TABLE {staging}")
