"""Borrowed GPU-hours on the ledger follow the hourly rule, and a ledger written under the
old rule (a workload's share fixed at its admission) is re-derived by
`manage.py rederive_borrowing`; re-closing its period gives a new revision."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from billing.models import BillingPeriod, Statement, UsageRecord
from billing.months import add_months
from billing.statements.periods import period_close, period_reopen
from tests.billing.conftest import FEB, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast

pytestmark = pytest.mark.django_db


def on_demand(slug: str, revision: int) -> Decimal:
    statement = Statement.objects.get(tenant_slug=slug, revision=revision)
    return sum(
        (line.amount for line in statement.lines.all() if line.kind == "on_demand"),
        Decimal(0),
    )


def test_a_ledger_written_under_the_old_rule_is_re_derived_and_re_closed_as_a_revision(
    cast: Cast, gpu: GpuCluster
) -> None:
    """Vision (4 H100s guaranteed) ran one 8-GPU job for 3 hours of February, recorded
    as 8 of 8 borrowed (its share at admission). By the hourly rule 4 of the 8 are its
    own: on demand falls from 24 to 12 GPU-hours."""
    month = BillingPeriod.objects.create(name="2026-02", start=FEB, end=add_months(FEB, 1))
    day = FEB + timedelta(days=3)
    record_usage(cast.team_a, gpu.h100, day, hours=3, devices=8, borrowed=8, pod="vit")
    period_close(actor=cast.platform_admin, period=month)
    assert on_demand("vision", 1) == Decimal("72.00")  # 24 GPU-hours at 3.00

    call_command("rederive_borrowing", "--period", "2026-02")

    assert [r.gpu_seconds_borrowed for r in UsageRecord.objects.order_by("interval_start")] == [
        4 * 3600
    ] * 3
    period_reopen(actor=cast.platform_admin, period=month, reason="hourly borrowing")
    month.refresh_from_db()
    period_close(actor=cast.platform_admin, period=month)
    assert on_demand("vision", 2) == Decimal("36.00")
    changes = Statement.objects.get(tenant_slug="vision", revision=2).changes
    assert any(c["field"] == "amount" for c in changes)
    # a second run changes nothing
    call_command("rederive_borrowing", "--period", "2026-02")
    assert {r.gpu_seconds_borrowed for r in UsageRecord.objects.all()} == {4 * 3600}


def test_a_month_that_is_not_one_is_refused_with_the_form_to_give() -> None:
    with pytest.raises(CommandError, match=r"--period '2026-13': give a month as YYYY-MM"):
        call_command("rederive_borrowing", "--period", "2026-13")
