"""The Django admin saves clusters and quotas through their services: an admin edit is
checked, audited, syncs ResourceQuotas and runs a cycle exactly as an API edit does."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.quotas.models import Quota
from tenants.models import AuditEvent, OutboxMessage
from tests.bridge.conftest import FakeCluster
from tests.conftest import Cast, client_for

pytestmark = pytest.mark.django_db


def queued() -> set[tuple[str, tuple[Any, ...]]]:
    """The background work the test's open transaction would queue when it commits
    (the test never commits; what it asks for waits in the outbox)."""
    return {(m.task, tuple(m.args)) for m in OutboxMessage.objects.all()}


def quota_form(quota: Quota, **changes: Any) -> dict[str, Any]:
    form = {
        "tenant": quota.tenant_id,
        "flavour": quota.flavour_id,
        "guaranteed": quota.guaranteed,
        "borrow_limit": quota.borrow_limit if quota.borrow_limit is not None else "",
        "lend_limit": quota.lend_limit if quota.lend_limit is not None else "",
    }
    return form | changes


def test_an_admin_quota_edit_syncs_resource_quotas_and_runs_a_cycle(
    fake_cluster: FakeCluster, cast: Cast, client: Any
) -> None:
    quota = Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100)
    client.force_login(cast.platform_admin)
    OutboxMessage.objects.all().delete()  # what the set-up queued
    response = client.post(
        f"/admin/scheduler_bridge/quota/{quota.pk}/change/", quota_form(quota, guaranteed=5)
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    quota.refresh_from_db()
    assert quota.guaranteed == 5
    cluster_id = fake_cluster.cluster.pk
    assert queued() >= {
        ("scheduler_bridge.tasks.quota_sync", (cluster_id,)),
        ("scheduler_bridge.tasks.admission_cycle", (cluster_id,)),
    }
    event = AuditEvent.objects.filter(object_type="scheduler_bridge.quota").latest("id")
    before, after = event.before or {}, event.after or {}
    assert (event.source, before["guaranteed"], after["guaranteed"]) == ("admin", 6, 5)


def test_an_admin_quota_edit_that_breaks_a_rule_is_a_form_error(
    fake_cluster: FakeCluster, cast: Cast, client: Any
) -> None:
    quota = Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100)
    client.force_login(cast.platform_admin)
    response = client.post(
        f"/admin/scheduler_bridge/quota/{quota.pk}/change/", quota_form(quota, guaranteed=50)
    )
    assert response.status_code == 200  # the form again, with the error
    assert "errorlist" in response.content.decode()
    quota.refresh_from_db()
    assert quota.guaranteed == 6


def test_an_admin_cluster_save_is_audited_and_syncs_its_inventory(cast: Cast, client: Any) -> None:
    client.force_login(cast.platform_admin)
    form = client.get("/admin/scheduler_bridge/cluster/add/").context["adminform"].form
    # what a browser posts back: each field as the form renders it
    data = {name: form[name].value() or "" for name in form.fields}
    data |= {"name": "gpu-west", "gateway": "simulated", "in_cluster": ""}
    response = client.post("/admin/scheduler_bridge/cluster/add/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    cluster = Cluster.objects.get(name="gpu-west")
    assert ("scheduler_bridge.tasks.inventory_sync", (cluster.pk,)) in queued()
    event = AuditEvent.objects.get(object_type="scheduler_bridge.cluster", object_id=cluster.pk)
    assert (event.source, event.action) == ("admin", "create")


@pytest.mark.parametrize(
    ("typed", "saved"),
    [
        ("prometheus.monitoring.svc:9090", "http://prometheus.monitoring.svc:9090"),
        ("prometheus.monitoring.svc", "http://prometheus.monitoring.svc"),
        ("  10.0.0.5:9090 ", "http://10.0.0.5:9090"),
        ("https://metrics.example.com/prom", "https://metrics.example.com/prom"),
        ("", ""),
    ],
)
def test_a_prometheus_address_typed_without_a_scheme_is_saved_as_http(
    cast: Cast, client: Any, typed: str, saved: str
) -> None:
    client.force_login(cast.platform_admin)
    form = client.get("/admin/scheduler_bridge/cluster/add/").context["adminform"].form
    data = {name: form[name].value() or "" for name in form.fields}
    data |= {"name": "gpu-west", "gateway": "simulated", "in_cluster": ""}
    response = client.post("/admin/scheduler_bridge/cluster/add/", data | {"prometheus_url": typed})
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Cluster.objects.get(name="gpu-west").prometheus_url == saved


def test_an_address_that_is_not_one_is_a_form_error(cast: Cast, client: Any) -> None:
    client.force_login(cast.platform_admin)
    form = client.get("/admin/scheduler_bridge/cluster/add/").context["adminform"].form
    data = {name: form[name].value() or "" for name in form.fields}
    data |= {"name": "gpu-west", "gateway": "simulated", "in_cluster": ""}
    response = client.post(
        "/admin/scheduler_bridge/cluster/add/", data | {"prometheus_url": "not an address"}
    )
    assert response.status_code == 200
    assert "prometheus_url" in response.context["adminform"].form.errors
    assert not Cluster.objects.filter(name="gpu-west").exists()


def test_a_cluster_still_holding_quotas_cannot_be_deleted_through_the_api(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    response = client_for(cast.platform_admin).delete("/api/v1/clusters/gpu-east/")
    assert response.status_code == 409
    assert "remove its quotas first" in response.json()["detail"]
    assert Cluster.objects.filter(name="gpu-east").exists()


def test_an_admin_cluster_form_checks_its_dra_driver_map(cast: Cast, client: Any) -> None:
    client.force_login(cast.platform_admin)
    form = client.get("/admin/scheduler_bridge/cluster/add/").context["adminform"].form
    data = {name: form[name].value() or "" for name in form.fields}
    data |= {"name": "gpu-west", "gateway": "simulated", "in_cluster": ""}
    refused = client.post(
        "/admin/scheduler_bridge/cluster/add/", data | {"dra_flavours": '{"gpu.nvidia.com": "h"}'}
    )
    assert refused.status_code == 200
    assert "named from their own attributes" in refused.content.decode()
    assert not Cluster.objects.filter(name="gpu-west").exists()
    # an emptied box maps nothing
    saved = client.post("/admin/scheduler_bridge/cluster/add/", data | {"dra_flavours": ""})
    assert saved.status_code == 302
    assert Cluster.objects.get(name="gpu-west").dra_flavours == {}
