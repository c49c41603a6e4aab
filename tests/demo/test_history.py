"""The demo's month of history is the trace replayed through the admission simulator: the
closed month's idle line is the capacity that replay left unheld, hour for hour."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from fractions import Fraction

import pytest
from django.utils import timezone

from billing.models import BillingPeriod, StatementLine, UsageRecord
from billing.months import add_months, month_start
from billing.usage.metering import floor_hour
from scheduler_bridge.demo.clock import history_replay
from scheduler_bridge.gateways import simulated
from scheduler_bridge.inventory.models import Cluster, Flavour
from tenants.demo import seed_demo

pytestmark = pytest.mark.django_db


def test_the_closed_months_idle_hours_are_capacity_less_what_the_replay_held() -> None:
    simulated.reset()
    now = timezone.now()
    seed_demo()
    cluster = Cluster.objects.get(name="demo")
    start = add_months(month_start(now), -1)
    end = add_months(start, 1)
    period = BillingPeriod.objects.get(start=start)
    assert not period.is_open
    replayed = history_replay(cluster, start, floor_hour(now))
    assert replayed.preemptions > 0  # owners took lent GPUs back during the month
    lo, hi = start.timestamp(), end.timestamp()
    held_devices: dict[str, int] = defaultdict(int)  # device-seconds per flavour
    for run in replayed.runs:
        held_devices[run.flavour] += round(run.seconds_within(lo, hi)) * run.devices
    month_s = int((end - start).total_seconds())
    idle: dict[str, Decimal] = defaultdict(Decimal)
    for line in StatementLine.objects.filter(statement__period=period, kind="idle"):
        idle[line.flavour_name] += line.gpu_hours
    checked = 0
    for flavour in Flavour.objects.filter(cluster=cluster, capacity__gt=0):
        # GPU-hours count a MIG slice as its compute slices out of 7 (billing/charging/pricing.py)
        slices = flavour.mig_profile.split("g.")[0]
        fraction = Fraction(int(slices), 7) if slices else Fraction(flavour.gpu_equivalent)
        unheld = flavour.capacity * month_s - held_devices.get(flavour.name, 0)
        expected = unheld * fraction / 3600
        assert abs(Fraction(idle[flavour.name]) - expected) < Fraction(1, 1000), flavour.name
        checked += 1
    assert checked == 7 and held_devices["h100-80gb"] > 0
    # and the ledger holds exactly what the replay held in that month
    rows = UsageRecord.objects.filter(
        interval_start__gte=start, interval_start__lt=end, flavour__name="h100-80gb"
    )
    assert sum(r.gpu_seconds_allocated for r in rows) == held_devices["h100-80gb"]
