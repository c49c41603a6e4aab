"""Portal pages of the bridge: cluster pages and the quota panel, scoped like the API."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from scheduler_bridge.quotas.models import QuotaRequest
from tests.bridge.conftest import FakeCluster
from tests.conftest import ROLE_NAMES, Cast
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_cluster_page_shows_capacity_chart_flavours_and_nodes(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    response = logged_in(cast.user(role)).get("/clusters/gpu-east/")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="capacity-chart"' in page and "tidegate/vendor/plotly.min.js" in page
    assert "a100-sxm4-40gb-mig-1g.5gb" in page and "h100-2" in page


def test_a_cluster_none_of_my_tenants_uses_is_404(fake_cluster: FakeCluster, cast: Cast) -> None:
    from tests.factories import MembershipFactory, TenantFactory, UserFactory

    stranger = UserFactory(username="stranger")
    MembershipFactory(user=stranger, tenant=TenantFactory(slug="initech"), role="lead")
    client = logged_in(stranger)
    assert client.get("/clusters/gpu-east/").status_code == 404
    assert "gpu-east" not in client.get("/clusters/").content.decode()


def test_plotly_is_served_from_our_own_static_files(client: Client) -> None:
    response = client.get("/static/tidegate/vendor/plotly.min.js")
    assert response.status_code == 200


def test_tenant_page_shows_quotas_and_lets_a_lead_ask_for_more(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client = logged_in(cast.lead)
    page = client.get("/tenants/vision/").content.decode()
    assert 'id="quotas"' in page and "h100-80gb" in page and "Ask for this quota" in page
    response = client.post(
        "/tenants/vision/quota-requests/add/",
        {"flavour": fake_cluster.h100.pk, "guaranteed": 8, "justification": "bigger model"},
    )
    assert response.status_code == 302
    request = QuotaRequest.objects.get()
    assert (request.tenant, request.guaranteed, request.requested_by) == (cast.team_a, 8, cast.lead)
    member_page = logged_in(cast.member).get("/tenants/vision/").content.decode()
    assert "Ask for this quota" not in member_page


def test_a_department_admin_approves_in_the_portal(fake_cluster: FakeCluster, cast: Cast) -> None:
    request = QuotaRequest.objects.create(
        tenant=cast.team_a,
        flavour=fake_cluster.h100,
        guaranteed=7,
        justification="x",
        requested_by=cast.lead,
    )
    # the lead may not approve their own request: not theirs to decide, so not found
    assert logged_in(cast.lead).post(f"/quota-requests/{request.pk}/approve/").status_code == 404
    request.refresh_from_db()
    assert request.state == "pending"
    assert (
        logged_in(cast.outsider).post(f"/quota-requests/{request.pk}/approve/").status_code == 404
    )
    logged_in(cast.dept_admin).post(f"/quota-requests/{request.pk}/approve/")
    request.refresh_from_db()
    assert request.state == "approved"


@pytest.mark.parametrize(
    ("decision", "english", "chinese"),
    [
        ("approve", "Quota request approved.", "配额申请已批准。"),
        ("reject", "Quota request rejected.", "配额申请已拒绝。"),
    ],
)
def test_a_decision_says_what_was_decided_in_the_users_language(
    fake_cluster: FakeCluster, cast: Cast, decision: str, english: str, chinese: str
) -> None:
    for language, said in (("en", english), ("zh-hans", chinese)):
        request = QuotaRequest.objects.create(
            tenant=cast.team_a,
            flavour=fake_cluster.h100,
            guaranteed=7,
            justification="x",
            requested_by=cast.lead,
        )
        client = logged_in(cast.dept_admin)
        page = client.post(
            f"/quota-requests/{request.pk}/{decision}/",
            {"comment": "not now"},
            follow=True,
            HTTP_ACCEPT_LANGUAGE=language,
        ).content.decode()
        assert said in page


def test_approving_a_request_with_blank_limits_keeps_the_current_ones(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from scheduler_bridge.quotas.models import Quota

    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(
        borrow_limit=16, lend_limit=3
    )
    logged_in(cast.lead).post(
        "/tenants/vision/quota-requests/add/",
        {"flavour": fake_cluster.h100.pk, "guaranteed": 7, "justification": "bigger model"},
    )
    request = QuotaRequest.objects.get()
    assert request.borrow_limit is None  # left blank
    logged_in(cast.dept_admin).post(f"/quota-requests/{request.pk}/approve/")
    quota = Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100)
    assert (quota.guaranteed, quota.borrow_limit, quota.lend_limit) == (7, 16, 3)


def test_a_request_beyond_what_the_parent_can_give_is_refused_with_the_largest_ask(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client = logged_in(cast.lead)
    page = client.post(
        "/tenants/vision/quota-requests/add/",
        {"flavour": fake_cluster.h100.pk, "guaranteed": 500, "justification": "everything"},
        follow=True,
    ).content.decode()
    assert not QuotaRequest.objects.exists()
    # research holds 10, speech was given 2: vision may hold 8
    assert "The most vision can ask for now is 8 h100-80gb." in page


def test_the_cluster_page_shows_what_runs_on_each_node(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from scheduler_bridge.workloads.cycle import admission_cycle
    from tests.workloads.test_queue import submit

    assert submit(cast.member, "vision", 4, count=1).status_code == 201
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    page = logged_in(cast.lead).get("/clusters/gpu-east/").content.decode()
    cells = re.findall(r'<td class="in-use">(.*?)</td>', page)
    assert "4 × h100-80gb" in " ".join(cells)
    assert sum(cell.strip() == "—" for cell in cells) == len(cells) - 1  # the others idle
