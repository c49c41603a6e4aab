"""The team lead dashboard: scoped to the user's subtrees, what each team holds, borrows
and lends, the queue with positions and what to change, usage and efficiency, and the
htmx partials that keep it live."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.models import Workload
from tests.billing.factories import record_usage
from tests.conftest import ROLE_NAMES, Cast
from tests.dashboard.conftest import FakeCluster
from tests.tenants.test_portal import logged_in
from tests.workloads.test_portal_languages import data_values, untranslated, visible_text
from tests.workloads.test_queue import submit

pytestmark = pytest.mark.django_db

PARTS = ["holdings", "queue", "running", "usage", "efficiency", "budget"]
HTMX = {"HX-Request": "true"}


def section(page: str, start: str, end: str = "</section>") -> str:
    """The part of ``page`` from ``start`` to the first ``end`` after it."""
    text = page[page.index(start) :]
    return text[: text.index(end)]


def cells(page: str, flavour: str, tenant: str) -> tuple[int, int, int, int]:
    """guaranteed, in use, borrowed, lent of one holdings row."""
    row = re.search(
        rf'<tr[^>]*data-flavour="{flavour}" data-tenant="{tenant}">(.*?)</tr>', page, re.S
    )
    assert row is not None, f"no holdings row for {tenant}"
    found = []
    for name in ("guaranteed", "in-use", "borrowed", "lent"):
        cell = re.search(rf'class="num {name}">(\d+)', row.group(1))
        assert cell is not None, name
        found.append(int(cell.group(1)))
    return found[0], found[1], found[2], found[3]


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_every_dashboard_url_is_a_404_outside_the_users_subtrees(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    client = logged_in(cast.user(role))
    sees_vision = role != "outsider"
    urls = ["/dashboard/vision/", *(f"/dashboard/vision/parts/{p}/" for p in PARTS)]
    for url in urls:
        for headers in ({}, HTMX):
            status = client.get(url, headers=headers).status_code
            assert (status != 404) == sees_vision, (url, headers, status)
    assert client.get("/dashboard/vision/parts/nothing/", headers=HTMX).status_code == 404
    assert client.get("/dashboard/?tenant=vision").status_code == (302 if sees_vision else 404)
    globex = client.get("/dashboard/globex/").status_code
    assert (globex == 200) == (role in ("outsider", "platform_admin"))


def test_a_lead_sees_only_its_subtree_and_lands_on_the_team_it_leads(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client = logged_in(cast.lead)
    landing = client.get("/dashboard/")
    assert landing.status_code == 302 and landing["Location"] == "/dashboard/vision/"
    page = client.get("/dashboard/vision/").content.decode()
    switcher = section(page, 'id="tenant-switcher"', "</form>")
    assert '<label for="switch-tenant">' in switcher
    offered = set(re.findall(r'<option value="([\w-]+)"', switcher))
    assert offered == {"vision"}
    for elsewhere in ("speech", "research", "acme", "globex"):
        assert client.get(f"/dashboard/{elsewhere}/").status_code == 404
    # the department admin switches between its teams
    admin = logged_in(cast.dept_admin)
    assert admin.get("/dashboard/")["Location"] == "/dashboard/research/"
    page = admin.get("/dashboard/research/").content.decode()
    switcher = section(page, 'id="tenant-switcher"', "</form>")
    assert set(re.findall(r'<option value="([\w-]+)"', switcher)) == {
        "research",
        "vision",
        "speech",
    }
    assert admin.get("/dashboard/?tenant=speech")["Location"] == "/dashboard/speech/"


def test_a_team_borrowing_its_sisters_idle_guarantee_shows_as_borrowed_and_lent(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    # research guarantees 10 H100: vision 6, speech 2, 2 unassigned; vision is idle
    submit(cast.platform_admin, "speech", 8, name="big")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(name="big").borrowed_gpus == {"nvidia.com/gpu": 6}
    page = logged_in(cast.dept_admin).get("/dashboard/research/").content.decode()
    assert cells(page, "h100-80gb", "research") == (10, 8, 0, 0)
    assert cells(page, "h100-80gb", "speech") == (2, 8, 6, 0)
    # the department's own unassigned 2 are used first, then 4 of vision's idle 6
    assert cells(page, "h100-80gb", "vision") == (6, 0, 0, 4)
    lead = logged_in(cast.lead).get("/dashboard/vision/").content.decode()
    assert cells(lead, "h100-80gb", "vision") == (6, 0, 0, 4)
    assert "speech" not in lead[lead.index('id="holdings"') : lead.index('id="queue"')]


def test_elastic_pods_are_counted_in_use_and_named(fake_cluster: FakeCluster, cast: Cast) -> None:
    from scheduler_bridge.quotas.models import Quota

    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(guaranteed=8)
    submit(
        cast.platform_admin,
        "speech",
        1,
        count=8,
        name="elastic",
        pod={"flavour": "h100-80gb", "min_count": 4},
    )
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    page = logged_in(cast.dept_admin).get("/dashboard/research/").content.decode()
    assert cells(page, "h100-80gb", "speech")[1] == 8
    assert "4 elastic" in page
    running = page[page.index('id="running"') :]
    assert "elastic" in running[: running.index("</section>")]


def test_waiting_work_is_listed_by_its_position_in_the_cluster_queue(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    for name in ("first", "second", "third", "fourth"):
        submit(cast.platform_admin, "vision", 8, name=name)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    waiting = list(
        Workload.objects.filter(state="pending")
        .order_by("queue_position")
        .values_list("name", "queue_position")
    )
    assert waiting and all(position for _, position in waiting)
    page = logged_in(cast.lead).get("/dashboard/vision/parts/queue/", headers=HTMX).content.decode()
    assert page.lstrip().startswith('<section class="card" id="queue"')  # the fragment only
    rows = re.findall(
        r'<td class="position">(\d+) .*?<a href="/workloads/\d+/">([\w-]+)</a>', page, re.S
    )
    assert [(name, int(position)) for position, name in rows] == waiting
    # the cluster's queue page fills the column too
    queue = logged_in(cast.lead).get("/clusters/gpu-east/queue/").content.decode()
    for name, position in waiting:
        assert re.search(rf'<td class="position">{position}</td><td><a [^>]*>{name}<', queue)


def test_work_that_cannot_run_as_asked_says_what_to_change_with_a_prefilled_quota_link(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    # work that may not be preempted runs only inside vision's guarantee of 6
    submit(cast.lead, "vision", 8, name="too-big", priority_class="prod")
    submit(cast.lead, "vision", 8, name="fits-later")
    submit(cast.lead, "vision", 8, name="after-that")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    page = logged_in(cast.lead).get("/dashboard/vision/").content.decode()
    queue = page[page.index('id="queue"') :]
    queue = queue[: queue.index("</section>")]
    stuck = re.search(r'<tr class="stuck" data-workload="\d+">(.*?)</tr>', queue, re.S)
    assert stuck is not None and "too-big" in stuck.group(1)
    row = stuck.group(1)
    assert "Cannot run as asked" in row and "not in line" in row
    assert "The largest request its quota allows: 6 × h100-80gb." in row
    # the workload's page offers what the reader can ask for (up to what the parent can
    # give), or names who can: the queue row links there, never to a request refused
    link = re.search(r'href="(/workloads/\d+/#what-to-change)"', row)
    assert link is not None
    offer = logged_in(cast.lead).get(link.group(1).split("#")[0]).content.decode()
    assert "guaranteed=8#quota-request-form" in offer
    # work that will run is not marked
    will_run = re.search(r'<tr data-workload="\d+">(.*?)</tr>', queue, re.S)
    assert will_run is not None and "after-that" in will_run.group(1)
    assert "Cannot run as asked" not in will_run.group(1)
    assert "1 of them cannot run as asked" in queue


def test_usage_chart_and_efficiency_per_team_come_from_the_ledger(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=10)
    record_usage(cast.team_a, fake_cluster.h100, start, hours=8, devices=2, busy_ratio="0.25")
    record_usage(cast.team_b, fake_cluster.h100, start, hours=4, busy_ratio="1", pod="speech-0")
    page = logged_in(cast.dept_admin).get("/dashboard/research/").content.decode()
    assert 'id="usage-chart"' in page and "data-plotly-figure" in page
    for label in ("1 day", "7 days", "30 days", "all"):
        assert f'"label":"{label}"' in page
    table = page[page.index('id="efficiency-table"') :]
    table = table[: table.index("</table>")]
    vision = re.search(r'data-tenant="vision">(.*?)</tr>', table, re.S)
    speech = re.search(r'data-tenant="speech">(.*?)</tr>', table, re.S)
    assert vision is not None and speech is not None
    assert "16.0" in vision.group(1) and "4.0" in vision.group(1) and "25 %" in vision.group(1)
    assert "100 %" in speech.group(1)
    assert 'id="efficiency-chart"' in page
    # a member of vision sees vision's usage only
    member = logged_in(cast.member).get("/dashboard/vision/").content.decode()
    assert 'id="usage-chart"' in member and "speech" not in member


def test_empty_states_say_what_to_do(cast: Cast) -> None:
    page = logged_in(cast.outsider).get("/dashboard/globex/").content.decode()
    assert "No GPU quota yet" in page and "#quota-request-form" in page
    assert "Nothing waiting." in page and 'href="/api/docs/"' in page
    assert "Nothing running now." in page
    assert "No usage recorded yet" in page
    assert "No GPU usage in the last 7 days." in page


def test_partials_are_fragments_for_htmx_and_send_a_plain_visit_to_the_page(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client = logged_in(cast.lead)
    page = client.get("/dashboard/vision/").content.decode()
    for part in PARTS[:-1]:
        assert f'hx-get="/dashboard/vision/parts/{part}/"' in page
        fragment = client.get(f"/dashboard/vision/parts/{part}/", headers=HTMX).content.decode()
        assert "<html" not in fragment and f'id="{part}"' in fragment
        assert 'hx-swap="outerHTML"' in fragment
        plain = client.get(f"/dashboard/vision/parts/{part}/")
        assert plain.status_code == 302 and plain["Location"] == f"/dashboard/vision/#{part}"


def test_idle_gpus_name_the_workload_to_stop(fake_cluster: FakeCluster, cast: Cast) -> None:
    workload = submit(cast.lead, "vision", 2, name="sleepy").json()["id"]
    Workload.objects.filter(pk=workload).update(
        namespace="vision-train",
        job_name="sleepy",
        state=Workload.State.RUNNING,
        admitted_at=timezone.now() - timedelta(hours=6),
    )
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
    record_usage(
        cast.team_a,
        fake_cluster.h100,
        start,
        hours=3,
        devices=2,
        busy_ratio=Decimal("0.01"),
        job="sleepy",
        pod="sleepy-0",
    )
    page = logged_in(cast.lead).get("/dashboard/vision/").content.decode()
    warnings = page[page.index('id="idle-warnings"') :]
    warnings = warnings[: warnings.index("</section>")]
    assert f'href="/workloads/{workload}/"' in warnings and "stop sleepy" in warnings
    # members read no money: no budget panel, no warnings
    member = logged_in(cast.member).get("/dashboard/vision/").content.decode()
    assert 'id="budget-panel"' not in member


def test_idle_gpus_lists_only_what_can_be_stopped_now(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """Work that ended (or waits again) has nothing to stop, and a pod outside the queue
    last seen idle days ago is gone: neither is listed. A pod outside the queue idle in
    the latest hours is, with its namespace. (The panel listed about twenty such red
    items, some days old, and called queued work "not a queued workload".)"""
    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    ended = submit(cast.lead, "vision", 2, name="ended").json()["id"]
    Workload.objects.filter(pk=ended).update(state=Workload.State.FINISHED)
    common: dict[str, Any] = {"devices": 2, "busy_ratio": Decimal("0.01")}
    # queued work, billed through its workload (no namespace: submitted through the API)
    record_usage(
        cast.team_a,
        fake_cluster.h100,
        this_hour - timedelta(hours=4),
        hours=2,
        job="ended",
        pod="ended",
        namespace="",
        workload_id=ended,
        **common,
    )
    record_usage(
        cast.team_a,
        fake_cluster.h100,
        this_hour - timedelta(days=3),
        hours=2,
        pod="old-notebook",
        namespace="vision-dev",
        **common,
    )
    record_usage(
        cast.team_a,
        fake_cluster.h100,
        this_hour - timedelta(hours=3),
        hours=2,
        pod="notebook",
        namespace="vision-dev",
        **common,
    )
    page = logged_in(cast.lead).get("/dashboard/vision/").content.decode()
    warnings = page[page.index('id="idle-warnings"') :]
    warnings = warnings[: warnings.index("</section>")]
    assert warnings.count("<li") == 1
    assert "pod notebook in vision-dev" in warnings
    assert "old-notebook" not in warnings and "ended" not in warnings


def test_the_query_count_does_not_grow_with_the_data(fake_cluster: FakeCluster, cast: Cast) -> None:
    client = logged_in(cast.dept_admin)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/dashboard/research/").status_code == 200
        return len(captured.captured_queries)

    submit(cast.platform_admin, "speech", 1, name="one")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    # some usage in every window the page sums (this hour back over the month), so that
    # what grows below is the amount of data, never which sections have any
    recent = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    record_usage(cast.team_b, fake_cluster.h100, recent, hours=2, pod="p0")
    # the first page ever shown also writes the platform's default billing policy, and
    # fills the cache of usage sums
    queries()
    before = queries()
    for i in range(12):
        submit(cast.platform_admin, "vision" if i % 2 else "speech", 3, name=f"more-{i}")
    submit(cast.lead, "vision", 30, name="never")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    start = timezone.now() - timedelta(days=40)
    record_usage(cast.team_a, fake_cluster.h100, start, hours=24 * 35, busy_ratio="0.5")
    record_usage(cast.team_b, fake_cluster.h100, start, hours=24 * 35, pod="p2")
    queries()  # new ledger rows: the usage sums are read again once, then cached
    assert queries() == before


@pytest.mark.parametrize("role", ["lead", "dept_admin", "member"])
def test_the_dashboard_speaks_chinese_but_for_its_data(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict, role: str
) -> None:
    submit(cast.lead, "vision", 8, name="too-big", priority_class="prod")
    submit(cast.platform_admin, "speech", 8, name="big")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
    record_usage(cast.team_a, fake_cluster.h100, start, hours=3, busy_ratio="0.01", job="x")
    data = data_values()
    client = logged_in(cast.user(role))
    slug = "research" if role == "dept_admin" else "vision"
    left = []
    for url in [f"/dashboard/{slug}/", f"/tenants/{slug}/"]:
        page = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
        assert '<html lang="zh-hans">' in page
        left += [f"{url}: {t}" for t in visible_text(page) if untranslated(t, data)]
    assert left == []


def test_a_polled_section_sends_a_signed_out_browser_to_the_login_page(
    fake_cluster: FakeCluster, client: Any
) -> None:
    for url in (
        "/dashboard/vision/parts/queue/",
        "/tenants/vision/queue/",
        "/clusters/gpu-east/queue/",
    ):
        polled = client.get(url, headers=HTMX)
        # after signing in, a plain visit of a section URL lands on its page
        assert polled.headers["HX-Redirect"] == f"/accounts/login/?next={url}"
        assert b"<form" not in polled.content  # nothing swapped into the section
        assert client.get(url).status_code == 302


def test_everyone_signed_in_finds_the_dashboard_in_the_navigation(cast: Cast) -> None:
    from tests.factories import UserFactory

    page = logged_in(cast.member).get("/").content.decode()
    nav = section(page, 'aria-label="Main"', "</nav>")
    assert 'href="/dashboard/"' in nav and ">Dashboard<" in nav
    newcomer = logged_in(UserFactory(username="newcomer")).get("/dashboard/")
    assert newcomer.status_code == 200
    assert "Ask the lead of your team to add you" in newcomer.content.decode()
