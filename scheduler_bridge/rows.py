"""Updating many rows of one table fast: one UPDATE ... FROM (VALUES ...) per chunk on
PostgreSQL (or COPY into a temporary table, then one UPDATE, for many rows), instead of
Django's bulk_update, whose CASE per column per row costs seconds for thousands of rows.
Other databases (the SQLite demo) use bulk_update."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, models, transaction
from django.db.models.expressions import RawSQL

# PostgreSQL binds at most 65,535 parameters per statement.
MAX_PARAMETERS = 60_000
# From this many rows on, rows are streamed with COPY instead of bound as parameters.
COPY_FROM_ROWS = 500


def update_rows(
    model: type[models.Model],
    rows: Sequence[Mapping[str, Any]],
    column_types: Mapping[str, str],
    *,
    only_where: tuple[str, str] | None = None,
) -> None:
    """Set the columns named in ``column_types`` (column -> PostgreSQL type, e.g.
    ``jsonb``) of each row in ``rows`` (mappings with "id" and those columns).
    ``only_where`` (column, value) leaves rows alone whose column has changed meanwhile
    (on PostgreSQL; SQLite has a single writer)."""
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
    condition, condition_params = "", []
    if only_where is not None:
        condition, condition_params = f' AND t."{only_where[0]}" = %s', [only_where[1]]
    if len(rows) >= COPY_FROM_ROWS and only_where is None:
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
                f'FROM (VALUES {values}) AS v("id", {names}) WHERE t."id" = v."id"{condition}',
                params + condition_params,
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


class RememberedRows:
    """Rows of one model as last read or written, each with the version it had then:
    PostgreSQL's ``xmin`` (the transaction that wrote that version of the row) and
    ``ctid`` (where the version lies; a write in the same transaction gets a new one).
    Any write by anyone moves them. Reading again fetches in full only the rows whose
    version moved, so a sync comparing thousands of rows with what the cluster says
    decodes their JSON columns once, not on every run.

    Use one instance per set of rows (e.g. a cluster's nodes), inside the transaction
    that locks them. Other databases (the SQLite demo) read every row every time.
    """

    def __init__(self, model: type[models.Model], columns: Sequence[str]) -> None:
        self.model = model
        self.columns = ["id", *columns]
        self._rows: dict[Any, tuple[str, dict[str, Any]]] = {}

    def _version(self) -> RawSQL:
        table = self.model._meta.db_table
        return RawSQL(f'"{table}".xmin::text || \'@\' || "{table}".ctid::text', ())  # noqa: S611

    def read(self, queryset: models.QuerySet[Any]) -> list[dict[str, Any]]:
        """The rows of ``queryset`` as ``values(*columns)`` dicts (shared: do not
        change them)."""
        if connection.vendor != "postgresql":
            return list(queryset.values(*self.columns))
        if not self._rows:  # nothing remembered: one query reads them all
            self._rows = {}
            for row in queryset.annotate(_xmin=self._version()).values("_xmin", *self.columns):
                self._rows[row["id"]] = (row.pop("_xmin"), row)
            return [row for _, row in self._rows.values()]
        heads = list(queryset.annotate(_xmin=self._version()).values_list("id", "_xmin"))
        stale = [pk for pk, version in heads if self._rows.get(pk, ("",))[0] != version]
        fresh: dict[Any, tuple[str, dict[str, Any]]] = {}
        for start in range(0, len(stale), 10_000):
            rows = (
                self.model._default_manager.filter(pk__in=stale[start : start + 10_000])
                .annotate(_xmin=self._version())
                .values("_xmin", *self.columns)
            )
            for row in rows:
                fresh[row["id"]] = (row.pop("_xmin"), row)
        unchanged = self._rows
        self._rows = {
            pk: fresh[pk] if pk in fresh else unchanged[pk]
            for pk, version in heads
            if pk in fresh or unchanged.get(pk, ("",))[0] == version
        }
        return [row for _, row in self._rows.values()]

    def wrote(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Take in ``rows`` as just written in the current transaction, with the
        ``xmin`` that gave them: mappings with "id" and some of the columns (a row
        already remembered) or all of them (a row just created)."""
        if connection.vendor != "postgresql" or not rows:
            return
        ids = [row["id"] for row in rows]
        versions = dict(
            self.model._default_manager.filter(pk__in=ids)
            .annotate(_xmin=self._version())
            .values_list("id", "_xmin")
        )
        columns = set(self.columns)
        for row in rows:
            if row["id"] not in versions:
                continue
            known = self._rows.get(row["id"])
            if known is not None:
                self._rows[row["id"]] = (versions[row["id"]], {**known[1], **row})
            elif columns <= row.keys():
                self._rows[row["id"]] = (versions[row["id"]], {c: row[c] for c in self.columns})
