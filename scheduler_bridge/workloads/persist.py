"""Saving a cycle's decisions fast: the workload columns a cycle changes, written with
:func:`scheduler_bridge.rows.update_rows` (one UPDATE ... FROM (VALUES ...) per chunk on
PostgreSQL instead of Django's bulk_update)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler_bridge.rows import COPY_FROM_ROWS, update_rows
from scheduler_bridge.workloads.models import Workload

__all__ = ["COLUMN_TYPES", "COPY_FROM_ROWS", "update_workloads"]

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
