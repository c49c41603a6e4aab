"""Updating many rows of one table fast: one UPDATE ... FROM (VALUES ...) per chunk on
PostgreSQL (or COPY into a temporary table, then one UPDATE, for many rows), instead of
Django's bulk_update, whose CASE per column per row costs seconds for thousands of rows.
Other databases (the SQLite demo) use bulk_update."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, models, transaction

# PostgreSQL binds at most 65,535 parameters per statement.
MAX_PARAMETERS = 60_000
# From this many rows on, rows are streamed with COPY instead of bound as parameters.
COPY_FROM_ROWS = 500


def update_rows(
    model: type[models.Model],
    rows: Sequence[Mapping[str, Any]],
    column_types: Mapping[str, str],
) -> None:
    """Set the columns named in ``column_types`` (column -> PostgreSQL type, e.g.
    ``jsonb``) of each row in ``rows`` (mappings with "id" and those columns)."""
    if not rows:
        return
    columns = list(column_types)
    if connection.vendor != "postgresql":
        objects = []
        for row in rows:
            instance = model(pk=row["id"])
            for column in columns:
                setattr(instance, column, row[column])
            objects.append(instance)
        model.objects.bulk_update(objects, columns, batch_size=500)  # type: ignore[attr-defined]
        return
    table = model._meta.db_table
    assignments = ", ".join(f'"{c}" = v."{c}"' for c in columns)
    names = ", ".join(f'"{c}"' for c in columns)
    if len(rows) >= COPY_FROM_ROWS:
        _update_through_copy(table, rows, column_types, assignments, names)
        return
    casts = ", ".join(["%s::bigint", *(f"%s::{column_types[c]}" for c in columns)])
    chunk = max(1, MAX_PARAMETERS // (len(columns) + 1))
    with connection.cursor() as cursor:
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            values = ", ".join([f"({casts})"] * len(part))
            params: list[Any] = []
            for row in part:
                params.append(row["id"])
                params.extend(_value(row, column, column_types) for column in columns)
            cursor.execute(
                f'UPDATE "{table}" AS t SET {assignments} '  # noqa: S608 - names are ours
                f'FROM (VALUES {values}) AS v("id", {names}) WHERE t."id" = v."id"',
                params,
            )


def _value(row: Mapping[str, Any], column: str, column_types: Mapping[str, str]) -> Any:
    value = row[column]
    return json.dumps(value) if column_types[column] == "jsonb" else value


def _update_through_copy(
    table: str,
    rows: Sequence[Mapping[str, Any]],
    column_types: Mapping[str, str],
    assignments: str,
    names: str,
) -> None:
    """Many rows: COPY them into a temporary table, then one UPDATE ... FROM it (binding
    tens of thousands of parameters costs more than streaming them)."""
    staging = f"tidegate_{table}_changes"
    definitions = ", ".join(['"id" bigint', *(f'"{c}" {t}' for c, t in column_types.items())])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {staging} ({definitions}) ON COMMIT DROP"
        )
        cursor.execute(f"TRUNCATE {staging}")
        with cursor.cursor.copy(f'COPY {staging} ("id", {names}) FROM STDIN') as copy:
            for row in rows:
                copy.write_row((row["id"], *(_value(row, c, column_types) for c in column_types)))
        cursor.execute(
            f'UPDATE "{table}" AS t SET {assignments} '  # noqa: S608 - names are ours
            f'FROM {staging} AS v WHERE t."id" = v."id"'
        )
        cursor.execute(f"DROP TABLE {staging}")
