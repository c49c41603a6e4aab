"""The ledger summed for pricing: summed per UTC day first (PostgreSQL), the sums are the
ones of every row placed on its own, across price bounds, months and a tenant's own
changes at any hour."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from billing.models import UsageRecord
from billing.usage.usage_sums import SumRow, summed_per_row, summed_usage
from tests.billing.conftest import FEB, MAR, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast

pytestmark = pytest.mark.django_db


def totals(
    rows: Iterable[SumRow], by: tuple[str, ...] = ()
) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    out: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        key = (
            row["tenant_id"],
            row["flavour_id"],
            row["priority_class"],
            row["segment"],
            row["month"],
            row["piece"] or 0,
            *(row[field] for field in by),
        )
        acc = out.setdefault(key, [0, 0, Decimal(0), 0])
        acc[0] += int(row["allocated"] or 0)
        acc[1] += int(row["borrowed"] or 0)
        acc[2] += row["busy"] or Decimal(0)
        acc[3] += int(row["with_busy"])
    return {key: tuple(acc) for key, acc in out.items()}


def test_sums_per_day_are_the_sums_of_every_row_across_bounds_months_and_changes(
    cast: Cast, gpu: GpuCluster
) -> None:
    # late February rows, a price bound on 15 March, team A changing at 13:00 on 10 March
    record_usage(cast.team_a, gpu.h100, FEB + timedelta(days=27), hours=30, busy_ratio="0.5")
    record_usage(cast.team_a, gpu.h100, MAR + timedelta(days=8), hours=24 * 10, devices=2)
    record_usage(
        cast.team_a, gpu.mig_1g, MAR + timedelta(days=9, hours=5), hours=20, priority="spot"
    )
    record_usage(
        cast.team_b, gpu.h100, MAR + timedelta(days=13), hours=72, busy_ratio="0.25", borrowed=1
    )
    record_usage(cast.team_b, gpu.h100, MAR + timedelta(days=14), hours=5, pod="pod-2")
    bounds = [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 3, 15, tzinfo=UTC)]
    change = MAR + timedelta(days=9, hours=13)
    cuts = {cast.team_a.pk: [change, change + timedelta(days=3, hours=2)]}
    rows = UsageRecord.objects.all()

    for by in [(), ("namespace", "pod_name")]:
        per_day = totals(summed_usage(rows, bounds, by, cuts), by)
        assert per_day == totals(summed_per_row(rows, bounds, by, cuts), by)
    pieces = {
        key[5]: sums[0]
        for key, sums in totals(summed_usage(rows, bounds, (), cuts)).items()
        if key[0] == cast.team_a.pk and key[1] == gpu.mig_1g.pk
    }
    # the MIG pod ran 05:00-01:00 on the 10th/11th: 8 hours before the change, 12 after
    assert pieces == {0: 8 * 3600, 1: 12 * 3600}


def test_a_price_bound_within_a_day_splits_that_days_rows_at_its_hour(
    cast: Cast, gpu: GpuCluster
) -> None:
    record_usage(cast.team_a, gpu.h100, MAR + timedelta(hours=10), hours=6)
    bound = MAR + timedelta(hours=13)
    sums = totals(summed_usage(UsageRecord.objects.all(), [bound], (), {}))
    assert {key[3]: allocated for key, (allocated, *_rest) in sums.items()} == {
        0: 3 * 3600,
        1: 3 * 3600,
    }
