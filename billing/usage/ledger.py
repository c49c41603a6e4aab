"""Writing the usage ledger: idempotent bulk inserts and the period each row is billed in.

PostgreSQL gets COPY into a temporary table, then one ``INSERT ... SELECT ... ON CONFLICT
DO NOTHING`` (hundreds of thousands of rows per second; rows already in the ledger are
skipped, so collecting the same hour twice never counts it twice). Other databases (the
SQLite demo) use ``bulk_create(ignore_conflicts=True)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from billing.models import BillingPeriod, UsageRecord
from billing.months import add_months, month_name, month_start

HOUR = timedelta(hours=1)
COLUMNS = (
    "tenant_id",
    "cluster_id",
    "flavour_id",
    "period_id",
    "namespace",
    "pod_uid",
    "pod_name",
    "workload_id",
    "job_name",
    "priority_class",
    "source",
    "interval_start",
    "interval_end",
    "devices",
    "gpu_seconds_allocated",
    "gpu_seconds_busy",
    "gpu_seconds_borrowed",
    "busy_partial",
    "busy_estimated",
    "created_at",
)


@dataclass(frozen=True, slots=True)
class LedgerRow:
    tenant_id: int
    cluster_id: int
    flavour_id: int
    namespace: str
    pod_uid: str
    interval_start: datetime
    devices: int
    gpu_seconds_allocated: int
    gpu_seconds_busy: Decimal | None = None
    gpu_seconds_borrowed: int = 0
    pod_name: str = ""
    workload_id: int | None = None
    job_name: str = ""
    priority_class: str = ""
    source: str = UsageRecord.Source.POD
    busy_partial: bool = False
    busy_estimated: bool = False


def period_create(start: datetime) -> BillingPeriod:
    """The period of the month starting at ``start``, created open if it does not exist."""
    start = month_start(start)
    period, _created = BillingPeriod.objects.get_or_create(
        name=month_name(start), defaults={"start": start, "end": add_months(start, 1)}
    )
    return period


def billing_period_for(interval_start: datetime, *, lock: bool = True) -> BillingPeriod:
    """The open period usage of ``interval_start`` is billed in: its own month's while that
    is open, else the first open month after it (late usage becomes an adjustment there).

    Inside a transaction, ``lock`` holds the period row so a close cannot start until the
    rows that name it are committed (the close claims the row with a conditional UPDATE).
    """
    start = month_start(interval_start)
    for _step in range(240):  # twenty years of closed months would be a bug, not data
        period = period_create(start)
        if lock and connection.features.has_select_for_update:
            period = BillingPeriod.objects.select_for_update(no_key=True).get(pk=period.pk)
        if period.is_open:
            return period
        start = add_months(start, 1)
    raise RuntimeError(f"no open billing period after {month_name(interval_start)}")


def ledger_append(rows: Sequence[LedgerRow]) -> int:
    """Insert ``rows`` into the ledger, skipping those whose key is already there.

    Runs in (or opens) a transaction; returns how many rows were new. Each row is billed
    in the open period of its hour (see :func:`billing_period_for`). Interval starts are
    UTC hours.
    """
    if not rows:
        return 0
    with transaction.atomic():
        periods: dict[tuple[int, int], int] = {}
        for row in rows:
            key = (row.interval_start.year, row.interval_start.month)
            if key not in periods:
                periods[key] = billing_period_for(month_start(row.interval_start)).pk
        now = timezone.now()
        values = [
            (
                row.tenant_id,
                row.cluster_id,
                row.flavour_id,
                periods[(row.interval_start.year, row.interval_start.month)],
                row.namespace,
                row.pod_uid,
                row.pod_name,
                row.workload_id,
                row.job_name,
                row.priority_class,
                row.source,
                row.interval_start,
                row.interval_start + HOUR,
                row.devices,
                row.gpu_seconds_allocated,
                row.gpu_seconds_busy,
                row.gpu_seconds_borrowed,
                row.busy_partial,
                row.busy_estimated,
                now,
            )
            for row in rows
        ]
        if connection.vendor == "postgresql":
            return copy_into_ledger(values)
        return _bulk_create(values)


_COLUMN_TYPES: list[int] = []


def _column_types(cursor: Any) -> list[int]:
    """Type OIDs of :data:`COLUMNS`, for binary COPY (read from the catalogue once)."""
    if not _COLUMN_TYPES:
        cursor.execute(
            "SELECT attname, atttypid FROM pg_attribute "
            "WHERE attrelid = 'billing_usagerecord'::regclass AND attnum > 0 AND NOT attisdropped"
        )
        oids = dict(cursor.fetchall())
        _COLUMN_TYPES.extend(int(oids[column]) for column in COLUMNS)
    return _COLUMN_TYPES


def copy_into_ledger(values: Sequence[tuple[object, ...]]) -> int:
    """COPY ``values`` (in :data:`COLUMNS` order) into the ledger, skipping known keys.

    PostgreSQL only; call inside a transaction. New hours (the normal case) are copied
    straight into the ledger; if any key is already there (a repeated collection), that
    attempt is rolled back to a savepoint and the rows go through a staging table and
    ``INSERT ... ON CONFLICT DO NOTHING`` instead.
    """
    import psycopg

    columns = ", ".join(COLUMNS)
    with connection.cursor() as cursor:
        types = _column_types(cursor)
        try:
            with transaction.atomic():
                with cursor.cursor.copy(
                    f"COPY billing_usagerecord ({columns}) FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(types)
                    for value in values:
                        copy.write_row(value)
                return len(values)
        except psycopg.errors.UniqueViolation:
            pass  # some keys exist already: take the slower, conflict-skipping path
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS billing_usage_incoming ON COMMIT DROP AS "  # noqa: S608
            f"SELECT {columns} FROM billing_usagerecord WITH NO DATA"
        )
        cursor.execute("TRUNCATE billing_usage_incoming")
        with cursor.cursor.copy(
            f"COPY billing_usage_incoming ({columns}) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(types)
            for value in values:
                copy.write_row(value)
        cursor.execute(
            f"INSERT INTO billing_usagerecord ({columns}) "  # noqa: S608 - constants
            f"SELECT {columns} FROM billing_usage_incoming "
            "ON CONFLICT (pod_uid, flavour_id, interval_start) DO NOTHING"
        )
        return int(cursor.rowcount)


def _bulk_create(values: Sequence[tuple[object, ...]]) -> int:
    objects = [UsageRecord(**dict(zip(COLUMNS, value, strict=True))) for value in values]
    keys = {(o.pod_uid, o.flavour_id, o.interval_start) for o in objects}
    starts = [o.interval_start for o in objects]
    existing = set(
        UsageRecord.objects.filter(
            interval_start__gte=min(starts),
            interval_start__lte=max(starts),
            pod_uid__in={k[0] for k in keys},
        ).values_list("pod_uid", "flavour_id", "interval_start")
    )
    UsageRecord.objects.bulk_create(objects, batch_size=500, ignore_conflicts=True)
    return len(keys - existing)
