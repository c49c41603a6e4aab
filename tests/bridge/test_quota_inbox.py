"""The quota request inbox: exactly the requests the reader may decide, approve or
reject with a comment, then back to the inbox; the history of decided requests."""

from __future__ import annotations

import re
from typing import Any

import pytest

from scheduler_bridge.quotas.models import Quota, QuotaRequest
from tenants.models import Tenant
from tests.bridge.conftest import FakeCluster
from tests.conftest import Cast
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db


def ask(
    cast: Cast, fake_cluster: FakeCluster, tenant: Tenant, guaranteed: int, **kw: Any
) -> QuotaRequest:
    return QuotaRequest.objects.create(
        tenant=tenant,
        flavour=fake_cluster.h100,
        guaranteed=guaranteed,
        justification=kw.pop("justification", "bigger model"),
        requested_by=cast.lead,
        **kw,
    )


def listed(page: str) -> set[int]:
    return {int(pk) for pk in re.findall(r'<article class="inbox-row" id="request-(\d+)"', page)}


def test_the_inbox_lists_exactly_the_requests_the_reader_may_decide(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    vision = ask(cast, fake_cluster, cast.team_a, 7)
    speech = ask(cast, fake_cluster, cast.team_b, 3)
    research = ask(cast, fake_cluster, cast.dept, 11)  # decided above the department
    globex = ask(cast, fake_cluster, cast.other_org, 5)  # top level: platform admins
    decided = ask(cast, fake_cluster, cast.team_a, 5, state="rejected")
    dept_page = logged_in(cast.dept_admin).get("/quota-requests/").content.decode()
    assert listed(dept_page) == {vision.pk, speech.pk}
    root_page = logged_in(cast.platform_admin).get("/quota-requests/").content.decode()
    assert listed(root_page) == {vision.pk, speech.pk, research.pk, globex.pk}
    assert decided.pk not in listed(root_page)


def test_a_row_says_what_is_held_what_is_asked_and_what_the_parent_can_give(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(borrow_limit=16)
    request = ask(cast, fake_cluster, cast.team_a, 7, justification="vit-huge needs 7")
    page = logged_in(cast.dept_admin).get("/quota-requests/").content.decode()
    row = page.split(f'id="request-{request.pk}"', 1)[1].split("</article>", 1)[0]
    assert "guaranteed 6, borrow limit 16, lend limit all unused" in row
    assert "guaranteed 7" in row and 'borrow limit <span class="meta">kept</span> (16)' in row
    assert "at most 8" in row
    assert "vit-huge needs 7" in row and "vision-lead" in row and "ago" in row


def test_a_request_that_no_longer_fits_is_marked(fake_cluster: FakeCluster, cast: Cast) -> None:
    request = ask(cast, fake_cluster, cast.team_a, 9)
    page = logged_in(cast.dept_admin).get("/quota-requests/").content.decode()
    row = page.split(f'id="request-{request.pk}"', 1)[1].split("</article>", 1)[0]
    assert "does not fit now" in row


def test_approving_from_the_inbox_keeps_a_blank_borrow_limit_and_returns_to_the_inbox(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(borrow_limit=16)
    request = ask(cast, fake_cluster, cast.team_a, 8)
    response = logged_in(cast.dept_admin).post(
        f"/quota-requests/{request.pk}/approve/", {"comment": "go"}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/quota-requests/"
    assert "Quota request approved." in response.content.decode()
    assert listed(response.content.decode()) == set()
    quota = Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100)
    assert (quota.guaranteed, quota.borrow_limit) == (8, 16)
    request.refresh_from_db()
    assert (request.state, request.decision_comment) == ("approved", "go")


@pytest.mark.parametrize(
    ("language", "words"),
    [("en", "Say why you reject it"), ("zh-hans", "请说明拒绝的原因")],
)
def test_rejecting_without_a_comment_is_a_field_error(
    fake_cluster: FakeCluster, cast: Cast, language: str, words: str
) -> None:
    request = ask(cast, fake_cluster, cast.team_a, 7)
    response = logged_in(cast.dept_admin).post(
        f"/quota-requests/{request.pk}/reject/", {"comment": "  "}, HTTP_ACCEPT_LANGUAGE=language
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert words in page.split(f'id="comment-errors-{request.pk}"', 1)[1].split("</div>", 1)[0]
    request.refresh_from_db()
    assert request.state == "pending"


def test_a_rejection_with_a_comment_is_shown_to_the_lead(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    request = ask(cast, fake_cluster, cast.team_a, 7)
    response = logged_in(cast.dept_admin).post(
        f"/quota-requests/{request.pk}/reject/", {"comment": "wait for Q1"}, follow=True
    )
    assert "Quota request rejected." in response.content.decode()
    lead_page = logged_in(cast.lead).get("/tenants/vision/").content.decode()
    assert "Rejected: wait for Q1" in lead_page


def test_the_history_lists_decided_requests_filtered_by_state(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    approved = ask(cast, fake_cluster, cast.team_a, 7, state="approved", decision_comment="ok")
    rejected = ask(cast, fake_cluster, cast.team_b, 3, state="rejected", decision_comment="no!")
    ask(cast, fake_cluster, cast.team_a, 8)  # pending: in the inbox, not the history
    client = logged_in(cast.dept_admin)
    everything = client.get("/quota-requests/decided/").content.decode()
    assert "ok" in everything and "no!" in everything
    assert everything.count('<td class="state">') == 2
    only_rejected = client.get("/quota-requests/decided/?state=rejected").content.decode()
    assert only_rejected.count('<td class="state">') == 1 and "no!" in only_rejected
    assert approved.pk != rejected.pk
    empty = client.get("/quota-requests/decided/?state=cancelled").content.decode()
    assert "No decided request in this state." in empty


def test_the_navigation_counts_what_waits_for_the_reader(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    ask(cast, fake_cluster, cast.team_a, 7)
    ask(cast, fake_cluster, cast.team_b, 3)
    page = logged_in(cast.dept_admin).get("/").content.decode()
    assert 'href="/quota-requests/">Quota requests (2 waiting)</a>' in page
    assert "/quota-requests/" not in logged_in(cast.lead).get("/").content.decode()


def test_an_empty_inbox_says_what_happens_next(fake_cluster: FakeCluster, cast: Cast) -> None:
    page = logged_in(cast.dept_admin).get("/quota-requests/").content.decode()
    assert 'id="inbox-empty"' in page and "When a team lead below you asks" in page


@pytest.mark.parametrize("role", ["lead", "member", "finance", "outsider"])
def test_who_decides_nothing_gets_404_on_every_inbox_url(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    request = ask(cast, fake_cluster, cast.team_a, 7)
    client = logged_in(cast.user(role))
    assert client.get("/quota-requests/").status_code == 404
    assert client.get("/quota-requests/decided/").status_code == 404
    for decision in ("approve", "reject"):
        response = client.post(f"/quota-requests/{request.pk}/{decision}/", {"comment": "x"})
        assert response.status_code == 404
    request.refresh_from_db()
    assert request.state == "pending"


def test_an_admin_of_another_subtree_cannot_decide_or_see_the_request(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    request = ask(cast, fake_cluster, cast.team_a, 7)
    other_admin = UserFactory(username="globex-admin")
    MembershipFactory(user=other_admin, tenant=cast.other_org, role="admin")
    TenantFactory(slug="globex-ml", parent=cast.other_org)
    client = logged_in(other_admin)
    assert listed(client.get("/quota-requests/").content.decode()) == set()
    assert client.post(f"/quota-requests/{request.pk}/approve/").status_code == 404
    assert client.post(f"/quota-requests/{request.pk}/maybe/").status_code == 404


def test_approving_what_no_longer_fits_is_refused_at_the_request(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    request = ask(cast, fake_cluster, cast.team_a, 9)  # research has 8 left for vision
    response = logged_in(cast.dept_admin).post(
        f"/quota-requests/{request.pk}/approve/", {"comment": "fine by me"}
    )
    assert response.status_code == 400
    page = response.content.decode()
    row = page.split(f'id="request-{request.pk}"', 1)[1].split("</article>", 1)[0]
    assert "parent research has 8 unassigned" in row
    assert "fine by me</textarea>" in row  # what was typed is kept
    request.refresh_from_db()
    assert request.state == "pending"
    assert Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100).guaranteed == 6
