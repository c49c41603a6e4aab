"""The audit trail records every change, in the same transaction as the change."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from tenants import services
from tenants.models import AuditEvent
from tests.conftest import Cast, client_for
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_api_changes_record_who_what_before_and_after(cast: Cast) -> None:
    client_for(cast.dept_admin).patch(
        "/api/v1/tenants/vision/", {"weight": "3", "name": "Vision AI"}, format="json"
    )
    event = AuditEvent.objects.get()
    assert (event.actor, event.source, event.action) == (cast.dept_admin, "api", "update")
    assert event.object_type == "tenants.tenant" and event.object_id == str(cast.team_a.pk)
    assert event.before is not None and event.after is not None
    assert (event.before["weight"], event.after["weight"]) == ("1.000", "3.000")
    assert event.after["name"] == "Vision AI"


def test_every_kind_of_change_is_audited(cast: Cast) -> None:
    client = client_for(cast.platform_admin)
    client.post("/api/v1/tenants/", {"slug": "x", "name": "X", "parent": "acme"}, format="json")
    newcomer = UserFactory(username="newcomer")
    m = client.post(
        "/api/v1/memberships/", {"tenant": "x", "user": "newcomer", "role": "lead"}, format="json"
    ).json()
    client.patch(f"/api/v1/memberships/{m['id']}/", {"role": "member"}, format="json")
    b = client.post(
        "/api/v1/namespace-bindings/",
        {"tenant": "x", "cluster_name": "c1", "namespace": "x-ns"},
        format="json",
    ).json()
    client.patch(f"/api/v1/namespace-bindings/{b['id']}/", {"tenant": "vision"}, format="json")
    client.delete(f"/api/v1/namespace-bindings/{b['id']}/")
    client.delete(f"/api/v1/memberships/{m['id']}/")
    client.delete("/api/v1/tenants/x/")
    trail = list(AuditEvent.objects.order_by("id").values_list("object_type", "action"))
    assert trail == [
        ("tenants.tenant", "create"),
        ("tenants.membership", "create"),
        ("tenants.membership", "update"),
        ("tenants.namespacebinding", "create"),
        ("tenants.namespacebinding", "update"),
        ("tenants.namespacebinding", "delete"),
        ("tenants.membership", "delete"),
        ("tenants.tenant", "delete"),
    ]
    created = AuditEvent.objects.get(object_type="tenants.membership", action="create")
    assert created.after is not None and created.after["user_id"] == newcomer.pk


def test_a_change_rolled_back_leaves_no_audit_record(cast: Cast) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        services.tenant_update(actor=cast.platform_admin, tenant=cast.team_a, name="Renamed")
        assert AuditEvent.objects.count() == 1
        raise RuntimeError("the surrounding transaction fails after the change")
    cast.team_a.refresh_from_db()
    assert cast.team_a.name != "Renamed"
    assert AuditEvent.objects.count() == 0


def test_django_admin_changes_are_audited(cast: Cast, client: Any) -> None:
    client.force_login(cast.platform_admin)
    response = client.post(
        f"/admin/tenants/tenant/{cast.team_b.pk}/change/",
        {
            "slug": "speech",
            "name": "Speech & Audio",
            "parent": cast.dept.pk,
            "cost_center": "CC-7",
            "weight": "1",
            "is_active": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    event = AuditEvent.objects.get()
    assert (event.source, event.action) == ("admin", "update")
    assert event.after is not None and event.after["name"] == "Speech & Audio"
    response = client.post(
        "/admin/tenants/namespacebinding/add/",
        {
            "tenant": cast.team_b.pk,
            "cluster_name": "c1",
            "namespace": "speech-ns",
            "sync_state": "pending",
            "sync_message": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert AuditEvent.objects.filter(source="admin", action="create").count() == 1


def test_django_admin_refuses_a_cycle_as_a_form_error(cast: Cast, client: Any) -> None:
    client.force_login(cast.platform_admin)
    response = client.post(
        f"/admin/tenants/tenant/{cast.dept.pk}/change/",
        {
            "slug": "research",
            "name": "R",
            "parent": cast.team_a.pk,
            "cost_center": "",
            "weight": "1",
            "is_active": "on",
        },
    )
    assert response.status_code == 200
    assert "cannot be moved under its own subtree" in response.content.decode()
    cast.dept.refresh_from_db()
    assert cast.dept.parent == cast.org


def test_audit_events_can_be_filtered(cast: Cast) -> None:
    client = client_for(cast.platform_admin)
    client.patch("/api/v1/tenants/vision/", {"cost_center": "A"}, format="json")
    client_for(cast.dept_admin).patch(
        "/api/v1/tenants/speech/", {"cost_center": "B"}, format="json"
    )
    rows = client.get("/api/v1/audit-events/?actor=dept-admin").json()["results"]
    assert [r["tenant"] for r in rows] == ["speech"]
    rows = client.get("/api/v1/audit-events/?tenant=vision&action=update").json()["results"]
    assert [r["actor_repr"] for r in rows] == ["root"]
