"""Portal pages: scoped to the user's tenants (404 otherwise), forms with clear errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tenants.models import AuditEvent, Membership, NamespaceBinding
from tests.conftest import ROLE_NAMES, Cast
from tests.factories import BindingFactory, UserFactory

pytestmark = pytest.mark.django_db


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_pages_need_a_login(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


TEAM_PAGE = dict.fromkeys(ROLE_NAMES, 200) | {"outsider": 404}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_tenant_page_is_scoped_and_shows_members_namespaces_and_sub_teams(
    cast: Cast, role: str
) -> None:
    BindingFactory(tenant=cast.team_a, namespace="vision-train")
    response = logged_in(cast.user(role)).get("/tenants/vision/")
    assert response.status_code == TEAM_PAGE[role]
    if response.status_code == 200:
        page = response.content.decode()
        assert "vision-train" in page and "vision-member" in page
        assert ("Add member" in page) == (role in ("platform_admin", "dept_admin", "lead"))


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_home_lists_only_the_users_tenants(cast: Cast, role: str) -> None:
    page = logged_in(cast.user(role)).get("/").content.decode()
    assert ("Globex" in page) == (role in ("platform_admin", "outsider"))
    assert ("/tenants/vision/" in page) == (role != "outsider")


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_member_and_binding_forms_are_404_for_outsiders_and_403_for_readers(
    cast: Cast, role: str
) -> None:
    UserFactory(username="newcomer")
    client = logged_in(cast.user(role))
    response = client.post(
        "/tenants/vision/members/add/", {"username": "newcomer", "role": "member"}
    )
    added = Membership.objects.filter(user__username="newcomer").exists()
    response_b = client.post(
        "/tenants/vision/bindings/add/", {"cluster_name": "c1", "namespace": "vision-x"}
    )
    bound = NamespaceBinding.objects.filter(namespace="vision-x").exists()
    if role == "outsider":
        assert (response.status_code, response_b.status_code) == (404, 404)
    elif role in ("platform_admin", "dept_admin", "lead"):
        assert (response.status_code, response_b.status_code) == (302, 302)
    else:
        assert (response.status_code, response_b.status_code) == (403, 403)
    assert added == bound == (role in ("platform_admin", "dept_admin", "lead"))


def test_bad_binding_in_the_portal_is_a_form_error_not_a_500(cast: Cast) -> None:
    BindingFactory(tenant=cast.team_b, cluster_name="c1", namespace="taken")
    client = logged_in(cast.lead)
    response = client.post(
        "/tenants/vision/bindings/add/", {"cluster_name": "c1", "namespace": "Bad!"}
    )
    assert response.status_code == 400 and "DNS-1123" in response.content.decode()
    response = client.post(
        "/tenants/vision/bindings/add/", {"cluster_name": "c1", "namespace": "taken"}
    )
    assert response.status_code == 400 and "already bound" in response.content.decode()


def test_removing_from_the_portal_is_audited_with_the_portal_as_source(cast: Cast) -> None:
    binding = BindingFactory(tenant=cast.team_a, namespace="vision-old")
    response = logged_in(cast.lead).post(f"/tenants/vision/bindings/{binding.pk}/remove/")
    assert response.status_code == 302
    assert not NamespaceBinding.objects.filter(pk=binding.pk).exists()
    assert AuditEvent.objects.get().source == "portal"


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_audit_page_shows_only_the_admins_subtree(cast: Cast, role: str) -> None:
    from tenants import services

    services.tenant_update(actor=cast.platform_admin, tenant=cast.other_org, cost_center="G1")
    services.tenant_update(actor=cast.platform_admin, tenant=cast.team_a, cost_center="V1")
    response = logged_in(cast.user(role)).get("/audit/")
    if role not in ("platform_admin", "dept_admin"):  # administers nothing: not its page
        assert response.status_code == 404
        return
    page = response.content.decode()
    # each event names its tenant, linked to the tenant's page
    assert ('tenant <a href="/tenants/globex/">globex</a>' in page) == (role == "platform_admin")
    assert 'tenant <a href="/tenants/vision/">vision</a>' in page


def test_the_portal_speaks_simplified_chinese_when_asked(cast: Cast) -> None:
    client = logged_in(cast.lead)
    response = client.get("/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 200
    assert 'lang="zh-hans"' in response.content.decode()


def test_api_docs_are_served_from_local_static_files(cast: Cast) -> None:
    page = logged_in(cast.lead).get("/api/docs/").content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in page
    assert "cdn" not in page.lower()


def test_destructive_actions_ask_first(cast: Cast) -> None:
    """Removing a member or a namespace binding and cancelling work each ask for a
    confirmation that says what happens."""
    from tenants.models import NamespaceBinding

    NamespaceBinding.objects.get_or_create(
        tenant=cast.team_a, cluster_name="gpu-east", namespace="vision-scratch"
    )
    page = logged_in(cast.platform_admin).get("/tenants/vision/").content.decode()
    forms = re.findall(r'<form method="post" action="[^"]*/remove/"[^>]*>', page)
    assert forms, "no remove forms on the page"
    for form in forms:
        assert 'class="confirm"' in form and 'data-confirm="' in form  # portal.js asks
    assert "They lose access" in page and "Its ResourceQuota is removed" in page


def test_finance_lands_on_the_billing_home_and_others_on_their_tenants(cast: Any) -> None:
    """Where a login goes (LOGIN_REDIRECT_URL): finance to the billing home, what it comes
    for; its tenants stay one click away ("/")."""
    response = logged_in(cast.finance).get("/start/")
    assert response.status_code == 302 and response["Location"] == "/billing/"
    assert logged_in(cast.finance).get("/").status_code == 200
    for user in (cast.lead, cast.platform_admin, cast.dept_admin):
        assert logged_in(user).get("/start/")["Location"] == "/"


def test_a_lead_is_offered_only_the_roles_it_may_hand_out(cast: Any) -> None:
    """A lead was offered Admin and Finance, then refused."""
    page = logged_in(cast.lead).get("/tenants/vision/").content.decode()
    select = page[page.index('name="role"') :]
    select = select[: select.index("</select>")]
    assert 'value="member"' in select and 'value="lead"' in select
    assert 'value="admin"' not in select and 'value="finance"' not in select
    admin_page = logged_in(cast.dept_admin).get("/tenants/vision/").content.decode()
    assert 'value="finance"' in admin_page[admin_page.index('name="role"') :]
    refused = logged_in(cast.lead).post(
        "/tenants/vision/members/add/", {"username": cast.member.username, "role": "admin"}
    )
    assert refused.status_code == 400
    assert not cast.team_a.memberships.filter(user=cast.member, role="admin").exists()
