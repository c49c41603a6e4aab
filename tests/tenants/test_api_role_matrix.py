"""The role matrix: every tenants endpoint, each role, and an outsider who gets 404."""

from __future__ import annotations

from typing import Any

import pytest

from tenants.models import AuditEvent, Membership, NamespaceBinding, Tenant
from tests.conftest import ROLE_NAMES, Cast, client_for
from tests.factories import BindingFactory, MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def _expect(role: str, table: dict[str, int]) -> int:
    return table[role]


READ_TEAM = dict.fromkeys(ROLE_NAMES, 200) | {"outsider": 404}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_reading_a_team_is_open_to_its_subtree_roles_and_404_to_outsiders(
    cast: Cast, role: str
) -> None:
    client = client_for(cast.user(role))
    assert client.get(f"/api/v1/tenants/{cast.team_a.slug}/").status_code == READ_TEAM[role]
    binding = BindingFactory(tenant=cast.team_a)
    assert client.get(f"/api/v1/namespace-bindings/{binding.pk}/").status_code == READ_TEAM[role]
    membership = Membership.objects.get(user=cast.member)
    assert client.get(f"/api/v1/memberships/{membership.pk}/").status_code == READ_TEAM[role]


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_lists_contain_only_the_callers_subtrees(cast: Cast, role: str) -> None:
    BindingFactory(tenant=cast.team_a, namespace="vision-train")
    BindingFactory(tenant=cast.other_org, namespace="globex-train")
    client = client_for(cast.user(role))
    tenants = {t["slug"] for t in client.get("/api/v1/tenants/?page_size=100").json()["results"]}
    namespaces = {
        b["namespace"] for b in client.get("/api/v1/namespace-bindings/").json()["results"]
    }
    members = {m["user"] for m in client.get("/api/v1/memberships/").json()["results"]}
    if role == "platform_admin":
        assert tenants == {"acme", "research", "vision", "speech", "globex"}
        assert namespaces == {"vision-train", "globex-train"}
    elif role == "outsider":
        assert tenants == {"globex"}
        assert namespaces == {"globex-train"}
        assert members == {"globex-member"}
    else:
        assert "globex" not in tenants and "vision" in tenants
        assert namespaces == {"vision-train"}
        assert "globex-member" not in members
    if role in ("lead", "member"):
        assert tenants == {"vision"}
    if role == "dept_admin":
        assert tenants == {"research", "vision", "speech"}


UPDATE_TEAM = {
    "platform_admin": 200,
    "dept_admin": 200,
    "finance": 403,
    "lead": 403,
    "member": 403,
    "outsider": 404,
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_only_admins_change_a_tenant(cast: Cast, role: str) -> None:
    response = client_for(cast.user(role)).patch(
        f"/api/v1/tenants/{cast.team_a.slug}/", {"cost_center": "CC-9"}, format="json"
    )
    assert response.status_code == UPDATE_TEAM[role]
    cast.team_a.refresh_from_db()
    assert (cast.team_a.cost_center == "CC-9") == (UPDATE_TEAM[role] == 200)


CREATE_CHILD = {
    "platform_admin": 201,
    "dept_admin": 201,
    "finance": 403,
    "lead": 403,
    "member": 403,
    "outsider": 404,  # the parent is not among the tenants the outsider can see
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_only_admins_create_sub_tenants(cast: Cast, role: str) -> None:
    response = client_for(cast.user(role)).post(
        "/api/v1/tenants/", {"slug": "vision-3d", "name": "3D", "parent": "vision"}, format="json"
    )
    assert response.status_code == CREATE_CHILD[role], response.content
    assert Tenant.objects.filter(slug="vision-3d").exists() == (CREATE_CHILD[role] == 201)
    if role == "outsider":
        assert "globex" not in response.content.decode()


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_only_platform_admins_create_top_level_tenants(cast: Cast, role: str) -> None:
    response = client_for(cast.user(role)).post(
        "/api/v1/tenants/", {"slug": "initech", "name": "Initech"}, format="json"
    )
    assert response.status_code == (201 if role == "platform_admin" else 403)


DELETE_LEAF = {  # team_b (speech): vision's lead and member cannot even see it
    "platform_admin": 204,
    "dept_admin": 204,
    "finance": 403,
    "lead": 404,
    "member": 404,
    "outsider": 404,
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_deleting_a_free_leaf_tenant_needs_admin(cast: Cast, role: str) -> None:
    response = client_for(cast.user(role)).delete(f"/api/v1/tenants/{cast.team_b.slug}/")
    assert response.status_code == DELETE_LEAF[role]
    assert Tenant.objects.filter(pk=cast.team_b.pk).exists() == (DELETE_LEAF[role] != 204)


ADD_MEMBER = {
    "platform_admin": 201,
    "dept_admin": 201,
    "finance": 403,
    "lead": 201,
    "member": 403,
    "outsider": 404,  # vision is not a tenant they can see
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_leads_and_admins_add_members(cast: Cast, role: str) -> None:
    newcomer = UserFactory(username="newcomer")
    response = client_for(cast.user(role)).post(
        "/api/v1/memberships/",
        {"tenant": "vision", "user": newcomer.username, "role": "member"},
        format="json",
    )
    assert response.status_code == ADD_MEMBER[role], response.content
    assert Membership.objects.filter(user=newcomer).exists() == (ADD_MEMBER[role] == 201)


CHANGE_MEMBER = {
    "platform_admin": 200,
    "dept_admin": 200,
    "finance": 403,
    "lead": 200,
    "member": 403,
    "outsider": 404,
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_leads_and_admins_change_and_remove_members(cast: Cast, role: str) -> None:
    target = MembershipFactory(tenant=cast.team_a, role="member")
    client = client_for(cast.user(role))
    response = client.patch(f"/api/v1/memberships/{target.pk}/", {"role": "lead"}, format="json")
    assert response.status_code == CHANGE_MEMBER[role]
    response = client.delete(f"/api/v1/memberships/{target.pk}/")
    expected = 204 if CHANGE_MEMBER[role] == 200 else CHANGE_MEMBER[role]
    assert response.status_code == expected
    assert Membership.objects.filter(pk=target.pk).exists() == (expected != 204)


def test_a_lead_cannot_grant_admin_or_finance(cast: Cast) -> None:
    newcomer = UserFactory(username="newcomer")
    response = client_for(cast.lead).post(
        "/api/v1/memberships/",
        {"tenant": "vision", "user": newcomer.username, "role": "admin"},
        format="json",
    )
    assert response.status_code == 403
    assert "lead" in response.json()["detail"] and "admin" in response.json()["detail"]


BIND = {
    "platform_admin": 201,
    "dept_admin": 201,
    "finance": 403,
    "lead": 201,
    "member": 403,
    "outsider": 404,  # vision is not a tenant they can see
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_leads_and_admins_bind_and_unbind_namespaces(cast: Cast, role: str) -> None:
    client = client_for(cast.user(role))
    response = client.post(
        "/api/v1/namespace-bindings/",
        {"tenant": "vision", "cluster_name": "gpu-east", "namespace": "vision-dev"},
        format="json",
    )
    assert response.status_code == BIND[role], response.content
    binding = BindingFactory(tenant=cast.team_a, namespace="vision-prod")
    response = client.delete(f"/api/v1/namespace-bindings/{binding.pk}/")
    expected = {201: 204, 403: 403, 404: 404}[BIND[role]]
    assert response.status_code == expected
    assert NamespaceBinding.objects.filter(pk=binding.pk).exists() == (expected != 204)


AUDIT = {
    "platform_admin": {"vision", "globex"},
    "dept_admin": {"vision"},
    "finance": set(),
    "lead": set(),
    "member": set(),
    "outsider": set(),
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_audit_trail_is_for_admins_of_the_subtree(cast: Cast, role: str) -> None:
    root = client_for(cast.platform_admin)
    root.patch("/api/v1/tenants/vision/", {"cost_center": "CC-1"}, format="json")
    root.patch("/api/v1/tenants/globex/", {"cost_center": "CC-2"}, format="json")
    rows = client_for(cast.user(role)).get("/api/v1/audit-events/").json()["results"]
    assert {row["tenant"] for row in rows} == AUDIT[role]
    event = AuditEvent.objects.filter(tenant=cast.other_org).get()
    status = client_for(cast.user(role)).get(f"/api/v1/audit-events/{event.pk}/").status_code
    assert status == (200 if role == "platform_admin" else 404)


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_me_describes_the_caller_only(cast: Cast, role: str) -> None:
    body: dict[str, Any] = client_for(cast.user(role)).get("/api/v1/me/").json()
    assert body["username"] == cast.user(role).username
    assert body["is_platform_admin"] == (role == "platform_admin")
    if role == "outsider":
        assert body["visible_tenants"] == ["globex"]
        assert body["memberships"] == [
            {"tenant": "globex", "tenant_name": "Globex", "role": "lead"}
        ]


def test_anonymous_callers_are_refused(api: Any) -> None:
    for url in ("/api/v1/tenants/", "/api/v1/me/", "/api/v1/audit-events/"):
        assert api.get(url).status_code in (401, 403)


def test_token_authentication_works(cast: Cast, api: Any) -> None:
    from tenants.tokens import token_create

    _, secret = token_create(user=cast.lead, name="laptop")
    api.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert api.get("/api/v1/me/").json()["username"] == "vision-lead"
