"""A close whose process is killed half-way: its lease runs out in seconds and the next
close resumes it with the totals of an uninterrupted close; meanwhile nobody is shown the
half-written statements as final."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from billing.errors import PeriodBusy
from billing.models import BillingPeriod, Statement
from billing.statements.close_lease import lease_renew
from billing.statements.periods import period_close, periods_resume_closes
from tests.billing.conftest import GpuCluster
from tests.billing.test_periods import february
from tests.conftest import Cast, client_for
from tests.tenants.test_portal import logged_in

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def closer_killed_half_way(transactional_db: Any, cast: Cast, gpu: GpuCluster) -> Iterator[None]:
    """February closed by another process with a 1 s lease, killed after its first chunk."""
    february(cast, gpu)
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.billing.closer_process", "2026-02"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line == b"half-way\n", line + process.stdout.read()
        process.kill()
        process.wait(timeout=30)
        yield
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def test_a_killed_closer_is_resumed_once_its_lease_ran_out(
    closer_killed_half_way: None, cast: Cast, settings: Any
) -> None:
    settings.TIDEGATE_BILLING = {"CLOSE_CHUNK": 2, "CLOSE_LEASE_SECONDS": 1}
    period = BillingPeriod.objects.get(name="2026-02")
    assert period.state == "closing" and period.close_owner
    assert Statement.objects.count() == 2  # the first chunk; the second died with it

    # Resumed as soon as the dead closer's lease ran out: seconds, not a quarter of an hour.
    resumed: list[str] = []
    for _attempt in range(100):
        resumed = periods_resume_closes()
        if resumed:
            break
        time.sleep(0.1)
    assert resumed == ["2026-02"]

    period.refresh_from_db()
    assert period.state == "closed"
    totals = dict(Statement.objects.values_list("tenant_slug", "total"))
    # the totals of an uninterrupted close (test_closing_writes_hand_computed_statements)
    assert totals == {
        "acme": Decimal("0.00"),
        "research": Decimal("0.00"),
        "vision": Decimal("48.86"),
        "speech": Decimal("7.50"),
        "globex": Decimal("0.00"),
        "__idle__": Decimal("15685.14"),
    }


def test_a_live_lease_turns_another_close_away_saying_until_when(
    closer_killed_half_way: None, cast: Cast, settings: Any
) -> None:
    # a closer that is alive renews its lease (here for a minute) as it works
    settings.TIDEGATE_BILLING = {"CLOSE_LEASE_SECONDS": 60}
    BillingPeriod.objects.filter(name="2026-02").update(close_token="alive")
    period = BillingPeriod.objects.get(name="2026-02")
    lease_renew(period, "alive")
    with pytest.raises(PeriodBusy, match="lease runs until"):
        period_close(actor=cast.platform_admin, period=period)
    assert periods_resume_closes() == []
    assert BillingPeriod.objects.get(name="2026-02").state == "closing"


def test_statements_of_a_closing_period_are_not_shown_as_final(
    closer_killed_half_way: None, cast: Cast
) -> None:
    finance = client_for(cast.finance)
    assert finance.get("/api/v1/billing/statements/").json()["results"] == []
    assert finance.get("/api/v1/billing/statements/?superseded=true").json()["results"] == []
    written = Statement.objects.filter(tenant__isnull=False).first()
    assert written is not None
    assert finance.get(f"/api/v1/billing/statements/{written.pk}/").status_code == 404
    assert finance.get("/api/v1/billing/periods/2026-02/").json()["state"] == "closing"
    # the export carries the period's provisional lines, not the half-written statements
    export = finance.get("/api/v1/billing/exports/?period=2026-02&as=csv")
    assert export.status_code == 200 and export["X-Tidegate-Provisional"] == "true"
    rows = export.content.decode().splitlines()[1:]
    assert rows and all(",provisional," in row for row in rows)
    portal = logged_in(cast.finance)
    assert portal.get(f"/billing/statements/{written.pk}/").status_code == 404
    assert portal.get(f"/billing/statements/{written.pk}/pdf/").status_code == 404
