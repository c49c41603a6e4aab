"""Ledger rows summed in SQL for pricing: per tenant, flavour, priority class, price segment
(between rate-card bounds), month and piece (between a tenant's own changes), plus any
``by`` fields.

On PostgreSQL a row is first summed into its UTC day: one ``date_bin`` per row, a key whose
distinct count the planner knows (the ``usage_day_groups`` statistics), so millions of rows
are hashed into a few thousand sums instead of being sorted; the statement gets
USAGE_SUM_WORK_MEM to hash them in memory. The day sums are then placed in segments,
months and pieces by the same statement: rate-card bounds fall on midnights, so no day
straddles one. Tenants whose attribution changes within the window are summed per hour
(their cuts fall at any instant), in a query of their own so the others' key stays the
plain day.

Elsewhere (the SQLite demo), when a bound is not a midnight, or when ``by`` holds an
expression rather than a ledger column, every row is placed on its own
(:func:`summed_per_row`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, time
from itertools import chain
from typing import Any

from django.db import connection, transaction
from django.db.models import (
    Case,
    Count,
    DateTimeField,
    F,
    Func,
    IntegerField,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import TruncMonth

from billing.conf import billing_setting
from billing.models import UsageRecord

SumRow = dict[str, Any]
"""tenant_id, flavour_id, priority_class, segment (index among the bounds), month,
piece (number of the tenant's cuts at or before the hour, None without cuts), the ``by``
fields, allocated, borrowed, busy and with_busy (rows with busy time)."""


class UtcDay(Func):
    """The midnight (UTC) that starts an instant's day. Written exactly as the expression
    of the ``usage_day_groups`` statistics (billing migration 0010), or the planner will
    not know how many days there are."""

    template = "date_bin('1 day'::interval, %(expressions)s, '2000-01-01 00:00:00+00'::timestamptz)"
    output_field = DateTimeField()


def summed_usage(
    rows: QuerySet[UsageRecord],
    bounds: Sequence[datetime],
    by: tuple[str, ...],
    cuts: Mapping[int, Sequence[datetime]],
) -> Iterable[SumRow]:
    """``rows`` summed per tenant, flavour, priority class, segment, month, piece and
    ``by`` field; ``cuts`` (sorted instants, per tenant that has any) split a tenant's rows
    into pieces."""
    if connection.vendor == "postgresql" and _per_day_is_exact(bounds, by):
        return _summed_per_day(rows, bounds, by, cuts)
    return summed_per_row(rows, bounds, by, cuts)


def _per_day_is_exact(bounds: Sequence[datetime], by: tuple[str, ...]) -> bool:
    columns = {field.attname for field in UsageRecord._meta.concrete_fields}
    return all(b.astimezone(UTC).time() == time(0) for b in bounds) and all(
        field in columns for field in by
    )


def _summed_per_day(
    rows: QuerySet[UsageRecord],
    bounds: Sequence[datetime],
    by: tuple[str, ...],
    cuts: Mapping[int, Sequence[datetime]],
) -> list[SumRow]:
    if not cuts:
        return _placed(rows, UtcDay("interval_start"), bounds, by, {})
    changing = sorted(cuts)
    return _placed(
        rows.exclude(tenant_id__in=changing), UtcDay("interval_start"), bounds, by, {}
    ) + _placed(rows.filter(tenant_id__in=changing), F("interval_start"), bounds, by, cuts)


def _placed(
    rows: QuerySet[UsageRecord],
    bucket: Any,
    bounds: Sequence[datetime],
    by: tuple[str, ...],
    cuts: Mapping[int, Sequence[datetime]],
) -> list[SumRow]:
    """Sum ``rows`` per ``bucket`` (a day or an hour), then the buckets per segment, month
    and piece, in one statement."""
    inner_sql, inner_params = (
        rows.order_by()
        .annotate(bucket=bucket)
        .values("tenant_id", "flavour_id", "priority_class", "bucket", *by)
        .annotate(
            allocated=Sum("gpu_seconds_allocated"),
            borrowed=Sum("gpu_seconds_borrowed"),
            busy=Sum("gpu_seconds_busy"),
            with_busy=Count("gpu_seconds_busy"),
        )
        .query.sql_with_params()
    )
    name = connection.ops.quote_name
    segment_sql, segment_params = _count_before(list(bounds), 0, len(bounds))
    piece_sql, piece_params = _pieces(cuts)
    extra = "".join(f", {name(field)}" for field in by)
    sql = (
        f"SELECT tenant_id, flavour_id, priority_class, {segment_sql} AS segment, "  # noqa: S608 - values are parameters
        f"date_trunc('month', bucket, 'UTC') AS month, {piece_sql} AS piece{extra}, "
        "SUM(allocated), SUM(borrowed), SUM(busy), SUM(with_busy) "
        f"FROM ({inner_sql}) AS day_sums "
        f"GROUP BY {', '.join(str(i) for i in range(1, 7 + len(by)))}"
    )
    columns = ["tenant_id", "flavour_id", "priority_class", "segment", "month", "piece", *by]
    # More memory than the server's default for this statement only (set locally in a
    # savepoint, put back after): the day sums are hashed, not spilled to disk.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('work_mem')")
        (work_mem,) = cursor.fetchone()
        cursor.execute(
            "SELECT set_config('work_mem', %s, true)", [billing_setting("USAGE_SUM_WORK_MEM")]
        )
        cursor.execute(sql, [*segment_params, *piece_params, *inner_params])
        found = cursor.fetchall()
        cursor.execute("SELECT set_config('work_mem', %s, true)", [work_mem])
        return [
            dict(zip(columns, row[: len(columns)], strict=True))
            | {
                "allocated": row[-4],
                "borrowed": row[-3],
                "busy": row[-2],
                "with_busy": int(row[-1]),
            }
            for row in found
        ]


def _pieces(cuts: Mapping[int, Sequence[datetime]]) -> tuple[str, list[Any]]:
    """SQL numbering a bucket's piece: how many of its tenant's cuts are at or before it
    (tenants with the same cuts share one tree)."""
    if not cuts:
        return "NULL::integer", []
    alike: dict[tuple[datetime, ...], list[int]] = defaultdict(list)
    for tenant, instants in sorted(cuts.items()):
        alike[tuple(instants)].append(tenant)
    parts, params = [], []
    for instants, tenants in alike.items():
        tree, tree_params = _count_before(list(instants), 0, len(instants))
        parts.append(f"WHEN tenant_id IN ({', '.join(str(int(t)) for t in tenants)}) THEN {tree}")
        params += tree_params
    return f"CASE {' '.join(parts)} ELSE 0 END", params


def _count_before(instants: list[datetime], lo: int, hi: int) -> tuple[str, list[datetime]]:
    """SQL for how many of ``instants`` (sorted) are at or before a bucket's start, as a
    balanced tree of CASEs: log2(n) comparisons per bucket. Over rate-card bounds that
    is the bucket's segment; over a tenant's cuts, its piece."""
    if lo == hi:
        return str(lo), []
    mid = (lo + hi) // 2
    above, above_params = _count_before(instants, mid + 1, hi)
    below, below_params = _count_before(instants, lo, mid)
    return (
        f"CASE WHEN bucket >= %s THEN {above} ELSE {below} END",
        [instants[mid], *above_params, *below_params],
    )


def summed_per_row(
    rows: QuerySet[UsageRecord],
    bounds: Sequence[datetime],
    by: tuple[str, ...],
    cuts: Mapping[int, Sequence[datetime]],
) -> Iterable[SumRow]:
    """Each row placed on its own: the number of bounds at or before its hour is its
    segment; a row of a tenant with cuts gets the number of its cuts at or before its
    hour (tenants with the same cuts share a tree of CASEs over them); other tenants'
    rows skip that at one hashed IN test."""
    segment: Any = Value(0, output_field=IntegerField())
    if bounds:
        segment = Case(
            *[When(interval_start__lt=b, then=Value(i)) for i, b in enumerate(bounds)],
            default=Value(len(bounds)),
            output_field=IntegerField(),
        )
    alike: dict[tuple[datetime, ...], list[int]] = defaultdict(list)
    for tenant, instants in sorted(cuts.items()):
        alike[tuple(instants)].append(tenant)
    no_piece: Any = Value(None, output_field=IntegerField())

    def summed(subset: QuerySet[UsageRecord], piece: Any) -> Any:
        return (
            subset.order_by()
            .annotate(segment=segment, month=TruncMonth("interval_start"), piece=piece)
            .values("tenant_id", "flavour_id", "priority_class", "segment", "month", "piece", *by)
            .annotate(
                allocated=Sum("gpu_seconds_allocated"),
                borrowed=Sum("gpu_seconds_borrowed"),
                busy=Sum("gpu_seconds_busy"),
                with_busy=Count("gpu_seconds_busy"),
            )
        )

    if not alike:
        return summed(rows, no_piece)
    # Two queries: the others' rows as before, the changing tenants' rows (read through
    # the (period, tenant) index) with the number of their cuts before each hour.
    piece = Case(
        *[
            When(tenant_id__in=tenants, then=_instants_before(list(instants), 0, len(instants)))
            for instants, tenants in alike.items()
        ],
        default=Value(0),
        output_field=IntegerField(),
    )
    return chain(
        summed(rows.exclude(tenant_id__in=sorted(cuts)), no_piece),
        summed(rows.filter(tenant_id__in=sorted(cuts)), piece),
    )


def _instants_before(instants: list[datetime], lo: int, hi: int) -> Any:
    """How many of ``instants`` (sorted) are at or before a row's ``interval_start``,
    as a balanced tree of CASEs: log2(n) comparisons per row instead of n."""
    if lo == hi:
        return Value(lo, output_field=IntegerField())
    mid = (lo + hi) // 2
    return Case(
        When(interval_start__gte=instants[mid], then=_instants_before(instants, mid + 1, hi)),
        default=_instants_before(instants, lo, mid),
        output_field=IntegerField(),
    )
