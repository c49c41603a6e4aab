"""The usage chart keeps the year before today and reads today's hours fresh: new hours,
and late usage for a past day, show as soon as they are in the ledger, as a cold
cache would draw them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from dashboard.selectors import UsagePoint, usage_series
from tests.billing.factories import record_usage
from tests.conftest import Cast
from tests.dashboard.conftest import FakeCluster

pytestmark = pytest.mark.django_db


def cold(cast: Cast) -> list[UsagePoint]:
    cache.clear()
    return usage_series(cast.dept, timezone.now())


def test_new_hours_and_late_usage_change_the_usage_chart(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    now = timezone.now()
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    record_usage(cast.team_a, fake_cluster.h100, today - timedelta(days=45), hours=30)
    record_usage(
        cast.team_b, fake_cluster.h100, today - timedelta(days=3), hours=5, busy_ratio="0.5"
    )
    first = usage_series(cast.dept, now)
    assert usage_series(cast.dept, now) == first == cold(cast)
    record_usage(cast.team_a, fake_cluster.h100, today, hours=1, pod="today")
    with_today = usage_series(cast.dept, now)
    assert len(with_today) == len(first) + 1 and with_today == cold(cast)
    usage_series(cast.dept, now)  # the year before today is kept again
    late = today - timedelta(days=45)
    record_usage(cast.team_b, fake_cluster.h100, late, hours=1, devices=3, pod="late")
    with_late = usage_series(cast.dept, now)
    assert with_late != with_today
    assert with_late == cold(cast)
