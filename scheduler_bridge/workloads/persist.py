"""Saving a cycle's decisions fast: the workload columns a cycle changes, written with
:func:`scheduler_bridge.rows.update_rows` (one UPDATE ... FROM (VALUES ...) per chunk on
PostgreSQL instead of Django's bulk_update)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

from scheduler_bridge.rows import COPY_FROM_ROWS, MAX_PARAMETERS, update_rows
from scheduler_bridge.workloads.models import Workload

__all__ = [
    "COLUMN_TYPES",
    "COPY_FROM_ROWS",
    "clear_job_events",
    "save_workloads",
    "update_workloads",
]

# column -> SQL type used to cast the VALUES list
COLUMN_TYPES = {
    "state": "varchar",
    "admitted_at": "timestamptz",
    "started_at": "timestamptz",
    "finished_at": "timestamptz",
    "flavour_id": "bigint",
    "placements": "jsonb",
    "borrowed": "jsonb",
    "gpus": "integer",
    "queue_position": "integer",
    "reason_code": "varchar",
    "reason": "text",
    "reason_args": "jsonb",
    "preemptions": "integer",
    "past_runs": "jsonb",
    "apply_error": "text",
    "apply_attempts": "integer",
    "job_events": "jsonb",
    "held_placements": "jsonb",
    "elastic_pods": "jsonb",
    "preempt_at": "timestamptz",
}


def update_workloads(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], *, only_in_state: str | None = None
) -> None:
    """Set `columns` of each workload in `rows` (dicts with "id" and those columns); with
    `only_in_state`, only of the workloads still in that state."""
    only_where = None if only_in_state is None else ("state", only_in_state)
    update_rows(Workload, rows, {c: COLUMN_TYPES[c] for c in columns}, only_where=only_where)


def save_workloads(workloads: Iterable[Workload], columns: Sequence[str]) -> None:
    """Write ``columns`` of each workload as it is in memory (what a transition set)."""
    rows = [{"id": w.pk} | {column: getattr(w, column) for column in columns} for w in workloads]
    update_workloads(rows, columns)


def clear_job_events(posted: Sequence[tuple[int, list[Any]]]) -> None:
    """Empty the owed Events of each ``(workload id, events posted)``, unless more were
    owed meanwhile (the column no longer equals what was posted): one UPDATE."""
    if not posted:
        return
    if connection.vendor != "postgresql":
        for pk, events in posted:
            Workload.objects.filter(pk=pk, job_events=events).update(job_events=[])
        return
    table = Workload._meta.db_table
    chunk = MAX_PARAMETERS // 2
    with connection.cursor() as cursor:
        for start in range(0, len(posted), chunk):
            part = posted[start : start + chunk]
            values = ", ".join(["(%s::bigint, %s::jsonb)"] * len(part))
            params: list[Any] = []
            for pk, events in part:
                params += [pk, json.dumps(events)]
            # the table's name and placeholders only; every value is a bound parameter
            sql = (
                f'UPDATE "{table}" AS t SET "job_events" = \'[]\'::jsonb '  # noqa: S608
                f"FROM (VALUES {values}) AS v(id, events) "
                'WHERE t."id" = v.id AND t."job_events" = v.events'
            )
            cursor.execute(sql, params)
