"""Settings billing prices the past by are recorded as they change, whichever way they are
changed: a tenant moved or given a cost centre through the services, a quota set, a flavour's
capacity lost at an inventory sync, billing settings saved; and a history reads back as the
constant pieces of a window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from billing.charging.history import resolve_period_settings
from billing.models import TenantBillingSettings
from scheduler_bridge.history import quota_key
from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.quotas.services import quota_set
from tenants import services
from tenants.history import pieces_within, record_setting
from tenants.models import SettingChange
from tests.billing.conftest import FEB, MAR, GpuCluster
from tests.conftest import Cast

pytestmark = pytest.mark.django_db


def values(topic: str, key: object) -> list[Any]:
    return list(
        SettingChange.objects.filter(topic=topic, key=str(key))
        .order_by("id")
        .values_list("value", flat=True)
    )


def test_a_cost_centre_and_a_move_through_the_services_are_recorded(cast: Cast) -> None:
    def place_at(at: datetime) -> Any:
        return resolve_period_settings(at, at + timedelta(hours=1)).spans[cast.team_a.pk][0]

    # the first cost centre names who paid all along (nobody was named before it)
    services.tenant_update(actor=cast.platform_admin, tenant=cast.team_a, cost_center="CC-9")
    assert place_at(FEB).attribution.cost_center == "CC-9"
    # a later one takes effect when saved: February stays with CC-9
    services.tenant_update(actor=cast.platform_admin, tenant=cast.team_a, cost_center="CC-10")
    assert place_at(FEB).attribution.cost_center == "CC-9"
    now = datetime.now(UTC) + timedelta(minutes=1)
    assert place_at(now).attribution.cost_center == "CC-10"
    # a move is recorded with the new path; a rename is not a billing change
    services.tenant_update(actor=cast.platform_admin, tenant=cast.team_a, parent=cast.org)
    cast.team_a.refresh_from_db()
    assert values("tenant", cast.team_a.pk)[-1]["path"] == cast.team_a.path
    count = len(values("tenant", cast.team_a.pk))
    services.tenant_update(actor=cast.platform_admin, tenant=cast.team_a, name="Renamed")
    assert len(values("tenant", cast.team_a.pk)) == count


def test_a_quota_change_and_billing_settings_are_recorded(cast: Cast, gpu: GpuCluster) -> None:
    quota_set(actor=cast.platform_admin, tenant=cast.team_b, flavour=gpu.h100, guaranteed=1)
    assert values("quota", quota_key(cast.team_b.pk, gpu.h100.pk))[-2:] == [2, 1]
    settings = TenantBillingSettings.objects.create(tenant=cast.team_b, mode="showback")
    settings.charge_reserved = True
    settings.save()
    assert values("billing", cast.team_b.pk)[-1] == {
        "mode": "showback",
        "charge_reserved": True,
        "currency": "",
    }


def test_capacity_lost_at_a_bulk_update_is_recorded(gpu: GpuCluster) -> None:
    from scheduler_bridge.history import record_capacities

    Flavour.objects.filter(pk=gpu.mig_3g.pk).update(capacity=0)
    record_capacities([(gpu.mig_3g.pk, 0)])
    assert values("capacity", gpu.mig_3g.pk)[-2:] == [4, 0]


def test_a_history_reads_back_as_constant_pieces() -> None:
    day = timedelta(days=1)
    changes = [(None, 5), (FEB + 19 * day, 3), (MAR + day, 7)]
    assert pieces_within(changes, FEB, MAR, current=7) == [
        (FEB, FEB + 19 * day, 5),
        (FEB + 19 * day, MAR, 3),
    ]
    # no history: today's value throughout
    assert pieces_within([], FEB, MAR, current=4) == [(FEB, MAR, 4)]


def test_a_dated_first_change_needs_what_it_replaced(cast: Cast, gpu: GpuCluster) -> None:
    at = datetime(2026, 2, 10, tzinfo=UTC)
    record_setting(
        "billing",
        cast.team_a.pk,
        {"mode": "showback", "charge_reserved": True},
        at=at,
        previous=None,
    )
    settings = resolve_period_settings(FEB, MAR)
    spans = settings.spans[cast.team_a.pk]
    assert [(s.start, s.attribution.mode, s.charge_reserved) for s in spans] == [
        (FEB, "chargeback", False),
        (at, "showback", True),
    ]
    # vision's guarantee is reserved from the 10th only
    assert {
        (r.start, r.end, r.devices) for r in settings.reservations if r.tenant_id == cast.team_a.pk
    } == {(at, MAR, 4)}
