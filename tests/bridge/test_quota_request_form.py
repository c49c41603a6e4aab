"""The quota change request form on a tenant page: blank numbers keep the current ones,
bad input comes back (400) with errors at the fields and what was typed, a form sent
twice makes one request, a stale form is refused with the numbers of now."""

from __future__ import annotations

import html
import re
import threading
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from scheduler_bridge.portal.quota_requests import encode_seen, flavour_asks
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from tests.bridge.conftest import FakeCluster
from tests.conftest import Cast
from tests.tenants.test_portal import logged_in

ADD = "/tenants/vision/quota-requests/add/"


def seen_on_page(client: Client) -> str:
    """The hidden numbers the tenant page's form carries, as a browser would send them."""
    page = client.get("/tenants/vision/").content.decode()
    found = re.search(r'<input type="hidden" name="seen" value="([^"]*)"', page)
    assert found is not None, "the form carries the numbers it showed"
    return html.unescape(found.group(1))


def field_errors(page: str, field: str) -> str:
    found = re.search(rf'<div class="field-errors" id="{field}-errors">(.*?)</div>', page, re.S)
    return found.group(1) if found else ""


@pytest.mark.django_db
def test_the_form_shows_the_largest_ask_next_to_each_flavour(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    page = logged_in(cast.lead).get("/tenants/vision/").content.decode()
    # research holds 10 h100, speech was given 2: vision may hold 8 (it holds 6)
    assert "h100-80gb (gpu-east): now 6, at most 8" in page
    table = page.split('id="largest-asks"', 1)[1].split("</table>", 1)[0]
    assert '<td class="largest">8</td>' in table


@pytest.mark.django_db
def test_blank_numbers_keep_the_current_ones_in_the_request_and_the_approval(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(
        borrow_limit=16, lend_limit=3
    )
    client = logged_in(cast.lead)
    response = client.post(
        ADD,
        {
            "flavour": fake_cluster.h100.pk,
            "guaranteed": "",
            "borrow_limit": "20",
            "lend_limit": "",
            "justification": "more headroom",
            "seen": seen_on_page(client),
        },
    )
    assert response.status_code == 302
    request = QuotaRequest.objects.get()
    assert (request.guaranteed, request.borrow_limit, request.lend_limit) == (6, 20, None)
    logged_in(cast.dept_admin).post(f"/quota-requests/{request.pk}/approve/")
    quota = Quota.objects.get(tenant=cast.team_a, flavour=fake_cluster.h100)
    assert (quota.guaranteed, quota.borrow_limit, quota.lend_limit) == (6, 20, 3)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("language", "range_error", "required_error"),
    [
        ("en", "Ensure this value is greater than or equal to 0.", "This field is required."),
        ("zh-hans", "确保该值大于或等于0。", "该字段是必填项。"),
    ],
)
def test_bad_input_comes_back_with_field_errors_in_the_users_language_and_the_input_kept(
    fake_cluster: FakeCluster, cast: Cast, language: str, range_error: str, required_error: str
) -> None:
    client = logged_in(cast.lead)
    response = client.post(
        ADD,
        {
            "flavour": fake_cluster.h100.pk,
            "guaranteed": "7",
            "borrow_limit": "-3",
            "justification": "",
        },
        HTTP_ACCEPT_LANGUAGE=language,
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert range_error in field_errors(page, "borrow_limit")
    assert required_error in field_errors(page, "justification")
    assert 'name="guaranteed" value="7"' in page and 'name="borrow_limit" value="-3"' in page
    assert not QuotaRequest.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("language", "words"),
    [
        ("en", "The most vision can ask for now is 8 h100-80gb."),
        ("zh-hans", "vision 现在最多可申请 8 个 h100-80gb。"),
    ],
)
def test_an_ask_beyond_the_parent_comes_back_at_the_field_in_the_users_language(
    fake_cluster: FakeCluster, cast: Cast, language: str, words: str
) -> None:
    response = logged_in(cast.lead).post(
        ADD,
        {"flavour": fake_cluster.h100.pk, "guaranteed": "500", "justification": "everything"},
        HTTP_ACCEPT_LANGUAGE=language,
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert words in field_errors(page, "guaranteed")
    assert 'name="guaranteed" value="500"' in page and "everything</textarea>" in page


@pytest.mark.django_db
def test_a_form_sent_twice_makes_one_request(fake_cluster: FakeCluster, cast: Cast) -> None:
    client = logged_in(cast.lead)
    form = {
        "flavour": fake_cluster.h100.pk,
        "guaranteed": "8",
        "justification": "bigger model",
        "seen": seen_on_page(client),
    }
    first = client.post(ADD, form)
    second = client.post(ADD, form, follow=True)
    assert first.status_code == 302 and second.status_code == 200
    assert QuotaRequest.objects.count() == 1
    assert "This request was already sent" in second.content.decode()


@pytest.mark.django_db(transaction=True)
def test_two_identical_submits_at_once_make_one_request(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    seen = encode_seen(flavour_asks(cast.lead, cast.team_a))
    form = {
        "flavour": fake_cluster.h100.pk,
        "guaranteed": "8",
        "justification": "bigger model",
        "seen": seen,
    }
    barrier = threading.Barrier(2)
    statuses: list[Any] = []

    def send() -> None:
        try:
            client = logged_in(cast.lead)
            barrier.wait()
            statuses.append(client.post(ADD, form).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [302, 302]  # both told: sent, or already sent
    assert QuotaRequest.objects.count() == 1


@pytest.mark.django_db
def test_a_stale_form_is_refused_with_the_current_numbers(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client = logged_in(cast.lead)
    seen = seen_on_page(client)
    # meanwhile the department admin changes vision's quota
    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(
        guaranteed=5, borrow_limit=12
    )
    form = {
        "flavour": fake_cluster.h100.pk,
        "guaranteed": "",
        "borrow_limit": "",
        "lend_limit": "4",
        "justification": "lend less",
        "seen": seen,
    }
    response = client.post(ADD, form)
    assert response.status_code == 400
    page = response.content.decode()
    errors = page.split('id="quota-request-errors"', 1)[1].split("</div>", 1)[0]
    assert "changed while the form was open" in errors
    assert "guaranteed 5, borrow limit 12, lend limit all unused" in errors
    assert not QuotaRequest.objects.exists()
    # the form came back with the numbers of now: sent again, it goes through
    form["seen"] = html.unescape(
        re.search(r'name="seen" value="([^"]*)"', page).group(1)  # type: ignore[union-attr]
    )
    assert client.post(ADD, form).status_code == 302
    assert QuotaRequest.objects.get().guaranteed == 5


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["member", "finance", "outsider"])
def test_who_may_not_ask_for_quota_gets_404(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    response = logged_in(cast.user(role)).post(
        ADD, {"flavour": fake_cluster.h100.pk, "guaranteed": "8", "justification": "x"}
    )
    assert response.status_code == 404
    assert not QuotaRequest.objects.exists()


@pytest.mark.django_db
def test_the_requester_withdraws_a_waiting_request_after_confirming(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    request = QuotaRequest.objects.create(
        tenant=cast.team_a,
        flavour=fake_cluster.h100,
        guaranteed=8,
        justification="x",
        requested_by=cast.lead,
    )
    page = logged_in(cast.lead).get("/tenants/vision/").content.decode()
    form = page[page.index(f'action="/quota-requests/{request.pk}/withdraw/"') :]
    assert 'data-confirm="' in form[: form.index(">")]  # portal.js asks
    for someone_else in ("member", "dept_admin", "outsider"):
        response = logged_in(cast.user(someone_else)).post(
            f"/quota-requests/{request.pk}/withdraw/"
        )
        assert response.status_code == 404
    response = logged_in(cast.lead).post(f"/quota-requests/{request.pk}/withdraw/", follow=True)
    assert "Quota request withdrawn." in response.content.decode()
    request.refresh_from_db()
    assert request.state == "cancelled"
    again = logged_in(cast.lead).post(f"/quota-requests/{request.pk}/withdraw/")
    assert again.status_code == 404
