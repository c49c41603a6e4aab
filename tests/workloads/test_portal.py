"""The queue in the portal: the cluster's queue page (paged, filtered) and a page per
workload with its standing, its runs and a cancel button, scoped like the API."""

from __future__ import annotations

import re

import pytest

from scheduler_bridge.portal.queue import QUEUE_PAGE_SIZE
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.models import Workload
from tests.conftest import ROLE_NAMES, Cast
from tests.tenants.test_portal import logged_in
from tests.workloads.conftest import FakeCluster
from tests.workloads.test_queue import CANCEL, submit

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_queue_page_and_workload_page_are_scoped_to_the_users_tenants(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    mine = submit(cast.member, "vision", 2, name="vision-job").json()["id"]
    client = logged_in(cast.user(role))
    queue = client.get("/clusters/gpu-east/queue/")
    detail = client.get(f"/workloads/{mine}/")
    if role == "outsider":  # globex also runs on gpu-east: it sees the page, not our work
        assert detail.status_code == 404
        assert queue.status_code == 404 or "vision-job" not in queue.content.decode()
        return
    assert queue.status_code == 200 and 'id="holdings-chart"' in queue.content.decode()
    assert f'href="/workloads/{mine}/"' in queue.content.decode()
    assert detail.status_code == 200
    page = detail.content.decode()
    assert "vision-job" in page and "waiting for the next admission cycle" in page


def test_a_waiting_workload_shows_its_position_and_reason(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    for name in ("first", "second", "third"):
        submit(cast.platform_admin, "vision", 8, name=name)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    waiting = Workload.objects.get(name="third")
    page = logged_in(cast.member).get(f"/workloads/{waiting.pk}/").content.decode()
    assert f"Waiting, position {waiting.queue_position}" in page
    assert waiting.reason and waiting.reason in page


def test_a_preempted_workload_shows_each_run_on_a_chart(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    borrower = submit(cast.platform_admin, "speech", 8, name="big").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    submit(cast.lead, "vision", 6, name="owner")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    page = logged_in(cast.dept_admin).get(f"/workloads/{borrower}/").content.decode()
    assert 'id="runs-chart"' in page and "Runs (1 preemption)" in page
    assert "preempted" in page and "reclaim" in page  # the reason it waits again
    history = page[page.index('id="history"') :]
    assert "reclaim: vision needs its guaranteed h100-80gb" in history
    runs = page[page.index('id="runs"') :]
    table = runs[runs.index("<table") : runs.index("</table>")]
    assert "+00:00" not in table  # times shown as dates, not ISO strings


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_the_cancel_button_is_offered_to_who_may_cancel_and_works(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    workload = submit(cast.member, "vision", 1).json()["id"]
    client = logged_in(cast.user(role))
    page = client.get(f"/workloads/{workload}/").content.decode()
    allowed = CANCEL[role] == 200
    assert ("Cancel this workload" in page) == allowed
    response = client.post(f"/workloads/{workload}/cancel/", follow=True)
    state = Workload.objects.get(pk=workload).state
    if role == "outsider":
        assert response.status_code == 404 and state == "pending"
    elif allowed:
        assert state == "cancelled" and "Workload cancelled" in response.content.decode()
    else:
        assert state == "pending" and "may cancel it" in response.content.decode()


def test_cancelling_twice_says_so(fake_cluster: FakeCluster, cast: Cast) -> None:
    workload = submit(cast.member, "vision", 1).json()["id"]
    client = logged_in(cast.member)
    client.post(f"/workloads/{workload}/cancel/")
    again = client.post(f"/workloads/{workload}/cancel/", follow=True).content.decode()
    assert "already cancelled" in again


def test_a_deep_queue_is_paged_and_filtered(fake_cluster: FakeCluster, cast: Cast) -> None:
    template = Workload.objects.get(pk=submit(cast.member, "vision", 1, name="w-0").json()["id"])
    extra = []
    for i in range(1, QUEUE_PAGE_SIZE + 20):
        template.pk = None
        template.name = f"w-{i}"
        extra.append(
            Workload(
                **{f.attname: getattr(template, f.attname) for f in Workload._meta.concrete_fields}
            )
        )
    Workload.objects.bulk_create(extra)
    submit(cast.platform_admin, "speech", 1, name="speech-job")
    client = logged_in(cast.platform_admin)
    first = client.get("/clusters/gpu-east/queue/").content.decode()
    assert first.count('href="/workloads/') == QUEUE_PAGE_SIZE
    assert "1 / 2" in first and "121 waiting, 0 running" in first
    second = client.get("/clusters/gpu-east/queue/?page=2").content.decode()
    assert second.count('href="/workloads/') == 21
    speech = client.get("/clusters/gpu-east/queue/?tenant=speech").content.decode()
    assert "speech-job" in speech and "w-0<" not in speech
    running = client.get("/clusters/gpu-east/queue/?state=running").content.decode()
    assert "Nothing queued or running." in running


def test_an_elastic_workload_page_shows_its_pods_and_each_shrink(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from scheduler_bridge.quotas.models import Quota

    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(guaranteed=8)
    elastic = submit(
        cast.platform_admin,
        "speech",
        1,
        count=8,
        name="elastic",
        pod={"flavour": "h100-80gb", "min_count": 4},
    ).json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    page = logged_in(cast.dept_admin).get(f"/workloads/{elastic}/").content.decode()
    pods = page[page.index('id="pods"') :]
    pods = pods[: pods.index("</table>")]
    assert "<td>main</td><td>8</td><td>4</td><td>8</td>" in pods
    assert "elastic, at least 4" in page
    speech = logged_in(cast.dept_admin).get("/tenants/speech/").content.decode()
    quotas = speech[speech.index('id="quotas"') :]
    assert '<td class="held">4 + 4 elastic</td>' in quotas
    submit(cast.lead, "vision", 4, count=2, name="owner")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    page = logged_in(cast.dept_admin).get(f"/workloads/{elastic}/").content.decode()
    assert "<td>main</td><td>4</td><td>4</td><td>8</td>" in page
    assert page.count("elastic pod stopped") == 4
    assert "grew or shrank (elastic pods)" in page[page.index('id="history"') :]
    assert logged_in(cast.outsider).get(f"/workloads/{elastic}/").status_code == 404


def test_work_that_cannot_run_as_asked_says_so_and_what_to_change(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    # work that may not be preempted runs only inside its tenant's guarantee (6)
    stuck = submit(cast.lead, "vision", 8, name="too-big", priority_class="prod").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(pk=stuck)
    assert workload.inadmissible, workload.reason_code
    queue = logged_in(cast.lead).get("/clusters/gpu-east/queue/").content.decode()
    assert "Cannot run as asked" in queue
    page = logged_in(cast.lead).get(f"/workloads/{stuck}/").content.decode()
    hint = page[page.index('id="what-to-change"') :]
    link = re.search(r'href="([^"]+)"', hint)
    assert link is not None
    assert link.group(1).replace("&amp;", "&") == (
        f"/tenants/vision/?flavour={fake_cluster.h100.pk}&guaranteed=8#quota-request-form"
    )
    form = logged_in(cast.lead).get(link.group(1).replace("&amp;", "&")).content.decode()
    assert 'name="guaranteed" value="8"' in form
    assert f'<option value="{fake_cluster.h100.pk}" selected>' in form


def test_cancelling_asks_first_and_says_what_happens(fake_cluster: FakeCluster, cast: Cast) -> None:
    mine = submit(cast.member, "vision", 2, name="careful").json()["id"]
    page = logged_in(cast.member).get(f"/workloads/{mine}/").content.decode()
    form = page[page.index('action="/workloads/') :]
    form = form[: form.index(">")]
    assert 'data-confirm="Cancel careful?' in form  # static/tidegate/portal.js asks


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_the_live_queue_parts_are_scoped_and_are_fragments_for_htmx(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    submit(cast.member, "vision", 2, name="vision-job")
    client = logged_in(cast.user(role))
    panel = client.get("/tenants/vision/queue/", HTTP_HX_REQUEST="true")
    queue = client.get("/clusters/gpu-east/queue/?state=pending", HTTP_HX_REQUEST="true")
    if role == "outsider":
        assert panel.status_code == 404
        assert queue.status_code == 404 or "vision-job" not in queue.content.decode()
        assert client.get("/tenants/vision/queue/").status_code == 404
        return
    fragment = panel.content.decode()
    assert "<html" not in fragment and "vision-job" in fragment
    assert 'hx-get="/tenants/vision/queue/"' in fragment and 'hx-swap="outerHTML"' in fragment
    live = queue.content.decode()
    assert "<html" not in live and "vision-job" in live
    # chart, counts and table are one live part: they refresh together
    assert 'id="holdings-chart"' in live and 'id="queue-counts"' in live
    # it asks again for the same filtered view
    assert 'hx-get="/clusters/gpu-east/queue/?state=pending"' in live
    plain = client.get("/tenants/vision/queue/")
    assert plain.status_code == 302 and plain["Location"] == "/tenants/vision/#queue"


def test_the_position_column_says_why_work_has_no_number(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    submit(cast.lead, "vision", 6, name="runs")
    submit(cast.lead, "vision", 8, name="too-big", priority_class="prod")
    submit(cast.lead, "vision", 8, name="waits")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    submit(cast.lead, "vision", 1, name="brand-new")
    page = logged_in(cast.lead).get("/clusters/gpu-east/queue/").content.decode()
    positions = dict(
        (name, re.sub(r"<[^>]+>", "", cell))
        for cell, name in re.findall(
            r'<td class="position">(.*?)</td><td><a href="/workloads/\d+/">([\w-]+)</a>', page
        )
    )
    waits = Workload.objects.get(name="waits").queue_position
    assert positions == {
        "runs": "holds GPUs",
        "waits": str(waits),
        "too-big": "not in line",
        "brand-new": "next cycle",
    }


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_workload_page_polls_where_it_stands_until_it_is_closed(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    mine = submit(cast.member, "vision", 2, name="watched").json()["id"]
    client = logged_in(cast.user(role))
    url = f"/workloads/{mine}/standing/"
    polled = client.get(url, headers={"HX-Request": "true"})
    if role == "outsider":
        assert polled.status_code == 404 and client.get(url).status_code == 404
        return
    fragment = polled.content.decode()
    assert fragment.lstrip().startswith(f'<section class="card" id="standing" hx-get="{url}"')
    assert "<html" not in fragment and 'id="state-badge"' in fragment
    assert 'hx-swap-oob="true"' in fragment  # the heading's badge changes with it
    assert client.get(url)["Location"] == f"/workloads/{mine}/"
    logged_in(cast.member).post(f"/workloads/{mine}/cancel/")
    closed = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "Cancelled" in closed and "hx-get" not in closed  # nothing more to wait for


def test_the_queue_page_reads_a_constant_number_of_queries_whatever_the_queue(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = logged_in(cast.platform_admin)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/clusters/gpu-east/queue/").status_code == 200
        return len(captured.captured_queries)

    submit(cast.member, "vision", 1, name="first")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    queries()
    before = queries()
    for i in range(6):
        submit(cast.platform_admin, "speech" if i % 2 else "vision", 2, name=f"more-{i}")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.filter(state__in=Workload.ACTIVE_STATES).count() > 1
    assert queries() == before


def test_what_to_change_offers_only_what_the_reader_can_ask_and_names_who_can_do_the_rest(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    """vision (6 H100s of research's 10; speech holds 2) needs 12 for work that cannot be
    preempted. Its lead can ask for 8 (6 plus research's 2 unassigned), not 12: the page
    offers 8 and names research's admins for the other 4. A member cannot ask at all:
    the page names who can. (It offered a quota of 12, which the request refused.)"""
    stuck = submit(cast.lead, "vision", 6, count=2, name="huge", priority_class="prod").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(pk=stuck).inadmissible

    lead_page = logged_in(cast.lead).get(f"/workloads/{stuck}/").content.decode()
    offer = lead_page[lead_page.index('id="quota-offer"') :]
    offer = offer[: offer.index("</span>")]
    link = re.search(r'href="([^"]+)"', offer)
    assert link is not None and "guaranteed=8#" in link.group(1)
    assert "Ask for a quota of 8 GPUs</a> (the most vision can ask for now)" in offer
    assert "For 4 more GPUs, the quota of research must grow first: ask its admins" in offer
    assert "dept-admin" in offer
    # what is offered can be asked (the 12 it offered before was refused: at most 8)
    from scheduler_bridge.quotas.services import quota_request_create

    request = quota_request_create(
        actor=cast.lead,
        tenant=cast.team_a,
        flavour=fake_cluster.h100,
        guaranteed=8,
        justification="huge",
    )
    assert request.guaranteed == 8

    member_page = logged_in(cast.member).get(f"/workloads/{stuck}/").content.decode()
    offer = member_page[member_page.index('id="quota-offer"') :]
    offer = offer[: offer.index("</span>")]
    assert "href=" not in offer
    assert "only a lead or admin of vision can ask for it (dept-admin, vision-lead)" in offer
