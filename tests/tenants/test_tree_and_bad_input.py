"""Tree rules and bad input: clear 400/409 answers, nothing half-written."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from tenants import access, services
from tenants.errors import TreeCycle
from tenants.models import AuditEvent, Tenant
from tests.conftest import Cast, client_for
from tests.factories import BindingFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("payload", "field", "words", "status"),
    [  # 400: the schema refuses it; 422: a rule refuses it; 409: the slug is taken
        ({"slug": "Bad_Slug", "name": "x"}, "slug", "DNS-1123", 400),
        ({"slug": "-starts-with-dash", "name": "x"}, "slug", "DNS-1123", 400),
        ({"slug": "a" * 64, "name": "x"}, "slug", "63", 400),
        ({"slug": "ok-slug", "name": "   "}, "name", "blank", 422),
        ({"slug": "ok-slug", "name": "x", "weight": "-1"}, "weight", "greater than 0", 422),
        ({"slug": "vision", "name": "x"}, "slug", "already exists", 409),
    ],
)
def test_bad_tenant_fields_are_refused_naming_the_field_and_rule(
    cast: Cast, payload: dict[str, str], field: str, words: str, status: int
) -> None:
    before = Tenant.objects.count()
    response = client_for(cast.platform_admin).post(
        "/api/v1/tenants/", payload | {"parent": "research"}, format="json"
    )
    assert response.status_code == status
    assert words in " ".join(response.json()[field])
    assert Tenant.objects.count() == before
    assert not AuditEvent.objects.exists()


def test_moving_a_tenant_under_its_descendant_is_refused_naming_the_cycle(cast: Cast) -> None:
    response = client_for(cast.platform_admin).patch(
        "/api/v1/tenants/research/", {"parent": "vision"}, format="json"
    )
    assert response.status_code == 422
    assert "research -> vision -> research" in response.json()["parent"][0]
    cast.dept.refresh_from_db()
    assert cast.dept.parent == cast.org


def test_moving_a_tenant_under_itself_is_refused(cast: Cast) -> None:
    with pytest.raises(TreeCycle):
        services.tenant_update(actor=cast.platform_admin, tenant=cast.dept, parent=cast.dept)


def test_moving_a_subtree_rewrites_every_descendants_path(cast: Cast) -> None:
    deep = TenantFactory(slug="vision-3d", parent=cast.team_a)
    services.tenant_update(actor=cast.platform_admin, tenant=cast.team_a, parent=cast.other_org)
    deep.refresh_from_db()
    assert deep.path == f"{cast.other_org.path}{cast.team_a.pk}/{deep.pk}/"
    assert deep.depth == 2
    # roles follow the tree: the research admin no longer covers vision's subtree
    assert not access.has_role(cast.dept_admin, deep, ["admin"])
    assert access.has_role(cast.outsider, deep, ["lead"])


def test_a_role_covers_the_whole_subtree_at_any_depth(cast: Cast) -> None:
    deep = TenantFactory(slug="vision-3d", parent=cast.team_a)
    deeper = TenantFactory(slug="vision-3d-nerf", parent=deep)
    assert access.role_on(cast.lead, deeper) == "lead"
    assert access.role_on(cast.dept_admin, deeper) == "admin"
    assert access.role_on(cast.finance, deeper) == "finance"
    assert access.role_on(cast.outsider, deeper) is None


def test_deleting_a_tenant_with_children_or_bindings_is_409_and_deletes_nothing(
    cast: Cast,
) -> None:
    BindingFactory(tenant=cast.team_a, namespace="vision-train")
    client = client_for(cast.platform_admin)
    response = client.delete("/api/v1/tenants/research/")
    assert response.status_code == 409
    assert "2 sub-tenant(s): speech, vision" in response.json()["detail"]
    response = client.delete("/api/v1/tenants/vision/")
    assert response.status_code == 409
    assert "gpu-east/vision-train" in response.json()["detail"]
    assert Tenant.objects.filter(slug__in=["research", "vision"]).count() == 2
    assert not AuditEvent.objects.filter(action="delete").exists()


def test_binding_an_already_bound_namespace_names_its_tenant_when_visible(cast: Cast) -> None:
    BindingFactory(tenant=cast.team_b, cluster_name="gpu-east", namespace="shared")
    payload = {"tenant": "vision", "cluster_name": "gpu-east", "namespace": "shared"}
    response = client_for(cast.dept_admin).post(
        "/api/v1/namespace-bindings/", payload, format="json"
    )
    assert response.status_code == 422
    assert "already bound to tenant speech" in response.json()["namespace"][0]


def test_binding_conflict_does_not_leak_a_foreign_tenant(cast: Cast) -> None:
    BindingFactory(tenant=cast.other_org, cluster_name="gpu-east", namespace="shared")
    payload = {"tenant": "vision", "cluster_name": "gpu-east", "namespace": "shared"}
    response = client_for(cast.lead).post("/api/v1/namespace-bindings/", payload, format="json")
    assert response.status_code == 422
    assert "already bound." in response.json()["namespace"][0]
    assert "globex" not in response.content.decode()


def test_bad_namespace_name_is_400(cast: Cast) -> None:
    payload = {"tenant": "vision", "cluster_name": "gpu-east", "namespace": "Not_A_Namespace"}
    response = client_for(cast.lead).post("/api/v1/namespace-bindings/", payload, format="json")
    assert response.status_code == 400
    assert "DNS-1123" in response.json()["namespace"][0]


def test_unknown_role_is_400(cast: Cast) -> None:
    newcomer = UserFactory(username="newcomer")
    response = client_for(cast.lead).post(
        "/api/v1/memberships/",
        {"tenant": "vision", "user": newcomer.username, "role": "owner"},
        format="json",
    )
    assert response.status_code == 400
    assert "role" in response.json()


def test_duplicate_membership_is_422_pointing_at_the_existing_one(cast: Cast) -> None:
    response = client_for(cast.lead).post(
        "/api/v1/memberships/",
        {"tenant": "vision", "user": cast.member.username, "role": "member"},
        format="json",
    )
    assert response.status_code == 422
    assert "already a member" in response.json()["user"][0]


@pytest.mark.django_db(transaction=True)
def test_two_opposite_moves_at_once_never_create_a_cycle() -> None:
    """Two admins move a under b and b under a at the same moment: one wins, one is refused."""
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    org = TenantFactory(slug="org")
    a = TenantFactory(slug="a", parent=org)
    b = TenantFactory(slug="b", parent=org)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def move(child_slug: str, parent_slug: str) -> None:
        try:
            child = Tenant.objects.get(slug=child_slug)
            parent = Tenant.objects.get(slug=parent_slug)
            barrier.wait()
            services.tenant_update(actor=root, tenant=child, parent=parent)
            outcomes.append("moved")
        except TreeCycle:
            outcomes.append("cycle")
        finally:
            connection.close()

    threads = [threading.Thread(target=move, args=p) for p in (("a", "b"), ("b", "a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["cycle", "moved"]
    a.refresh_from_db()
    b.refresh_from_db()
    assert not (a.path.startswith(b.path) and b.path.startswith(a.path))
    assert a.parent_id in (org.pk, b.pk) and b.parent_id in (org.pk, a.pk)
