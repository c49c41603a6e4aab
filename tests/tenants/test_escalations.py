"""Roles cannot be stretched: a department admin cannot raise its own tenant's share
against its siblings, a lead cannot bind Kubernetes' namespaces nor change its own role."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tenants.models import Membership, NamespaceBinding, Role
from tests.conftest import Cast, client_for
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_a_department_admin_cannot_raise_its_own_departments_weight(cast: Cast) -> None:
    response = client_for(cast.dept_admin).patch(
        "/api/v1/tenants/research/", {"weight": "10"}, format="json"
    )
    assert response.status_code == 403
    body = response.json()
    assert "acme" in body["detail"] and "weight" in body
    cast.dept.refresh_from_db()
    assert cast.dept.weight == Decimal("1")


def test_a_department_admin_weighs_its_teams_against_each_other(cast: Cast) -> None:
    response = client_for(cast.dept_admin).patch(
        "/api/v1/tenants/vision/", {"weight": "3"}, format="json"
    )
    assert response.status_code == 200, response.content
    cast.team_a.refresh_from_db()
    assert cast.team_a.weight == Decimal("3")


def test_an_admin_of_a_team_may_rename_it_but_not_reweigh_it(cast: Cast) -> None:
    team_admin = UserFactory(username="vision-admin")
    MembershipFactory(user=team_admin, tenant=cast.team_a, role=Role.ADMIN)
    client = client_for(team_admin)
    assert (
        client.patch("/api/v1/tenants/vision/", {"name": "Vision"}, format="json").status_code
        == 200
    )
    unchanged = client.patch("/api/v1/tenants/vision/", {"weight": "1"}, format="json")
    assert unchanged.status_code == 200  # sending the same weight back changes nothing
    assert (
        client.patch("/api/v1/tenants/vision/", {"weight": "5"}, format="json").status_code == 403
    )


def test_only_platform_admins_weigh_top_level_tenants(cast: Cast) -> None:
    org_admin = UserFactory(username="acme-admin")
    MembershipFactory(user=org_admin, tenant=cast.org, role=Role.ADMIN)
    refused = client_for(org_admin).patch("/api/v1/tenants/acme/", {"weight": "2"}, format="json")
    assert refused.status_code == 403
    allowed = client_for(cast.platform_admin).patch(
        "/api/v1/tenants/acme/", {"weight": "2"}, format="json"
    )
    assert allowed.status_code == 200


@pytest.mark.parametrize(
    "namespace", ["kube-system", "kube-public", "kube-flannel", "default", "tidegate-system"]
)
def test_a_lead_cannot_bind_a_system_namespace(cast: Cast, namespace: str) -> None:
    response = client_for(cast.lead).post(
        "/api/v1/namespace-bindings/",
        {"tenant": "vision", "cluster_name": "gpu-east", "namespace": namespace},
        format="json",
    )
    assert response.status_code == 422
    message = " ".join(response.json()["namespace"])
    assert namespace in message and "system namespace" in message
    assert not NamespaceBinding.objects.filter(namespace=namespace).exists()


def test_a_lead_binds_its_teams_own_namespace(cast: Cast) -> None:
    response = client_for(cast.lead).post(
        "/api/v1/namespace-bindings/",
        {"tenant": "vision", "cluster_name": "gpu-east", "namespace": "kubeflow-vision"},
        format="json",
    )
    assert response.status_code == 201, response.content


def test_a_lead_cannot_promote_itself_or_touch_its_own_role(cast: Cast) -> None:
    own = Membership.objects.get(user=cast.lead)
    lead = client_for(cast.lead)
    to_admin = lead.patch(f"/api/v1/memberships/{own.pk}/", {"role": "admin"}, format="json")
    assert to_admin.status_code == 403
    same_power = lead.patch(f"/api/v1/memberships/{own.pk}/", {"role": "lead"}, format="json")
    assert same_power.status_code == 403 and "own role" in same_power.json()["detail"]
    made = lead.post(
        "/api/v1/memberships/",
        {"tenant": "vision", "user": "vision-lead", "role": "admin"},
        format="json",
    )
    assert made.status_code in (400, 403)
    own.refresh_from_db()
    assert own.role == Role.LEAD


def test_an_admin_above_changes_the_role_of_its_own_membership_below(cast: Cast) -> None:
    below = MembershipFactory(user=cast.dept_admin, tenant=cast.team_a, role=Role.MEMBER)
    response = client_for(cast.dept_admin).patch(
        f"/api/v1/memberships/{below.pk}/", {"role": "lead"}, format="json"
    )
    assert response.status_code == 200


def test_a_lead_still_manages_other_members(cast: Cast) -> None:
    member = Membership.objects.get(user=cast.member)
    response = client_for(cast.lead).patch(
        f"/api/v1/memberships/{member.pk}/", {"role": "lead"}, format="json"
    )
    assert response.status_code == 200
