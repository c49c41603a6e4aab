"""The audit trail page: administrators filter and search the events of their subtrees,
page through them with the filters kept, download them as CSV, and get field errors in
their language for bad filters."""

from __future__ import annotations

import csv
import datetime as dt
import io
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tenants.models import AuditEvent, Tenant
from tests.conftest import Cast
from tests.factories import ClusterFactory, WorkloadFactory

pytestmark = pytest.mark.django_db


def event(
    tenant: Tenant | None,
    *,
    actor: str = "root",
    kind: str = "tenants.tenant",
    action: str = "update",
    name: str = "thing",
    message: str = "",
    when: dt.datetime | None = None,
    object_id: str = "0",
) -> AuditEvent:
    created = AuditEvent.objects.create(
        actor_repr=actor,
        source="portal",
        action=action,
        object_type=kind,
        object_id=object_id,
        object_repr=name,
        tenant=tenant,
        tenant_path=tenant.path if tenant else "",
        message=message,
    )
    if when is not None:
        AuditEvent.objects.filter(pk=created.pk).update(created_at=when)
    return created


def page_for(user: Any, lang: str = "en") -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE=lang)
    client.force_login(user)
    return client


def names_shown(response: Any) -> list[str]:
    return [e.object_repr for e in response.context["page"]]


def csv_of(response: Any) -> list[dict[str, str]]:
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture
def trail(cast: Cast) -> dict[str, AuditEvent]:
    day = dt.datetime(2026, 11, 10, 12, tzinfo=dt.UTC)
    return {
        "vision": event(cast.team_a, name="vision-quota", kind="scheduler_bridge.quota", when=day),
        "speech": event(
            cast.team_b,
            actor="dept-admin",
            action="create",
            kind="tenants.membership",
            name="speech-member",
            message="added by the department",
            when=day + dt.timedelta(days=2),
        ),
        "research": event(
            cast.dept, action="delete", name="old-binding", when=day + dt.timedelta(days=5)
        ),
        "globex": event(cast.other_org, name="globex-secret", message="vision", when=day),
        "system": event(None, actor="system", name="cluster-sync", when=day),
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"tenant": "speech"}, {"speech-member"}),
        ({"tenant": "research"}, {"vision-quota", "speech-member", "old-binding"}),
        ({"kind": "tenants.membership"}, {"speech-member"}),
        ({"action": "delete"}, {"old-binding"}),
        ({"actor": "DEPT-ADMIN"}, {"speech-member"}),
        ({"date_from": "2026-11-11"}, {"speech-member", "old-binding"}),
        ({"date_to": "2026-11-12"}, {"vision-quota", "speech-member"}),
        ({"date_from": "2026-11-12", "date_to": "2026-11-12"}, {"speech-member"}),
        ({"q": "department"}, {"speech-member"}),
        ({"q": "QUOTA"}, {"vision-quota"}),
        ({"tenant": "research", "action": "update", "date_to": "2026-11-11"}, {"vision-quota"}),
    ],
)
def test_each_filter_narrows_the_trail_to_what_matches(
    cast: Cast, trail: dict[str, AuditEvent], query: dict[str, str], expected: set[str]
) -> None:
    response = page_for(cast.dept_admin).get("/audit/", query)
    assert response.status_code == 200
    assert set(names_shown(response)) == expected


def test_the_form_keeps_what_was_chosen(cast: Cast, trail: dict[str, AuditEvent]) -> None:
    response = page_for(cast.dept_admin).get(
        "/audit/", {"tenant": "speech", "actor": "dept-admin", "q": "member"}
    )
    html = response.content.decode()
    assert '<option value="speech" selected>' in html
    assert 'value="dept-admin"' in html and 'value="member"' in html


def test_a_department_admin_sees_only_its_subtree_and_platform_admins_everything(
    cast: Cast, trail: dict[str, AuditEvent]
) -> None:
    dept = names_shown(page_for(cast.dept_admin).get("/audit/"))
    assert set(dept) == {"vision-quota", "speech-member", "old-binding"}
    everything = names_shown(page_for(cast.platform_admin).get("/audit/"))
    assert set(everything) == {e.object_repr for e in trail.values()}


def test_a_search_does_not_reach_outside_the_readers_subtree(
    cast: Cast, trail: dict[str, AuditEvent]
) -> None:
    # "vision" is also the message of another organisation's event
    assert names_shown(page_for(cast.dept_admin).get("/audit/", {"q": "vision"})) == [
        "vision-quota"
    ]


def test_a_tenant_outside_the_readers_scope_is_a_field_error_not_data(
    cast: Cast, trail: dict[str, AuditEvent]
) -> None:
    response = page_for(cast.dept_admin).get("/audit/", {"tenant": "globex"})
    assert response.status_code == 400
    assert response.context["form"].errors["tenant"]
    assert "globex-secret" not in response.content.decode()
    assert "globex" not in {t.slug for t in response.context["form"].fields["tenant"].queryset}


def test_events_are_newest_first_and_pages_keep_the_filters(cast: Cast) -> None:
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    for i in range(60):
        event(cast.team_a, name=f"v-{i:02}", when=start + dt.timedelta(hours=i))
        event(cast.team_b, name=f"s-{i:02}", when=start + dt.timedelta(hours=i))
    client = page_for(cast.dept_admin)
    first = client.get("/audit/", {"tenant": "vision", "q": "v-"})
    assert names_shown(first)[:2] == ["v-59", "v-58"] and len(names_shown(first)) == 50
    html = first.content.decode()
    assert 'href="?tenant=vision&amp;q=v-&amp;page=2"' in html
    second = client.get("/audit/", {"tenant": "vision", "q": "v-", "page": "2"})
    assert names_shown(second) == [f"v-{i:02}" for i in range(9, -1, -1)]
    assert 'href="?tenant=vision&amp;q=v-&amp;page=1"' in second.content.decode()


def test_nothing_matching_says_so_and_offers_to_clear_the_filters(
    cast: Cast, trail: dict[str, AuditEvent]
) -> None:
    response = page_for(cast.dept_admin).get("/audit/", {"q": "no such thing"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "Nothing matches these filters" in html and 'href="/audit/">clear them</a>' in html


def test_objects_link_to_their_portal_pages_while_they_exist(cast: Cast) -> None:
    workload = WorkloadFactory(cluster=ClusterFactory(name="gpu-west"), tenant=cast.team_a)
    event(cast.team_a, kind="scheduler_bridge.workload", name="w", object_id=str(workload.pk))
    event(cast.team_a, kind="scheduler_bridge.workload", name="gone", object_id="999999")
    event(cast.team_a, kind="tenants.tenant", name="team", object_id=str(cast.team_a.pk))
    html = page_for(cast.dept_admin).get("/audit/").content.decode()
    assert f'<a href="/workloads/{workload.pk}/">w</a>' in html
    assert '<a href="/tenants/vision/">team</a>' in html
    assert ">gone</a>" not in html


def test_the_query_count_does_not_grow_with_the_page(cast: Cast) -> None:
    def queries() -> int:
        client = page_for(cast.dept_admin)
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/audit/").status_code == 200
        return len(captured)

    workload = WorkloadFactory(cluster=ClusterFactory(name="gpu-west"), tenant=cast.team_a)
    event(cast.team_a, kind="scheduler_bridge.workload", object_id=str(workload.pk))
    few = queries()
    for _ in range(30):
        other = WorkloadFactory(cluster=workload.cluster, tenant=cast.team_b)
        event(cast.team_b, kind="scheduler_bridge.workload", object_id=str(other.pk))
        event(cast.team_a, kind="tenants.tenant", object_id=str(cast.team_a.pk))
    assert queries() == few + 1  # the tenant kind's one lookup, whatever the rows


def test_the_csv_holds_the_filtered_events_of_the_readers_scope(
    cast: Cast, trail: dict[str, AuditEvent]
) -> None:
    response = page_for(cast.dept_admin, "zh-hans").get("/audit/export/csv/", {"action": "create"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = csv_of(response)
    assert [r["object_repr"] for r in rows] == ["speech-member"]
    assert rows[0] == {
        "created_at": "2026-11-12T12:00:00+00:00",
        "actor": "dept-admin",
        "source": "portal",
        "action": "create",
        "object_type": "tenants.membership",
        "object_id": "0",
        "object_repr": "speech-member",
        "tenant": "speech",
        "message": "added by the department",
    }
    unfiltered = csv_of(page_for(cast.dept_admin).get("/audit/export/csv/"))
    assert {r["object_repr"] for r in unfiltered} == {
        "vision-quota",
        "speech-member",
        "old-binding",
    }


def test_the_csv_of_a_tenant_outside_the_readers_scope_is_refused(
    cast: Cast, trail: dict[str, AuditEvent]
) -> None:
    response = page_for(cast.dept_admin).get("/audit/export/csv/", {"tenant": "globex"})
    assert response.status_code == 400
    assert "globex-secret" not in response.content.decode()


def test_the_page_links_the_csv_with_the_same_filters(
    cast: Cast, trail: dict[str, AuditEvent]
) -> None:
    html = page_for(cast.dept_admin).get("/audit/", {"action": "create"}).content.decode()
    assert 'href="/audit/export/csv/?action=create"' in html


@pytest.mark.parametrize(
    ("lang", "date_error", "kind_error", "order_error"),
    [
        ("en", "Enter a valid date.", "Select a valid choice.", "end date is before"),
        ("zh-hans", "输入一个有效的日期。", "选择一个有效的选项", "结束日期早于开始日期"),
    ],
)
def test_bad_filters_are_field_errors_in_the_readers_language(
    cast: Cast,
    trail: dict[str, AuditEvent],
    lang: str,
    date_error: str,
    kind_error: str,
    order_error: str,
) -> None:
    client = page_for(cast.dept_admin, lang)
    for url in ("/audit/", "/audit/export/csv/"):
        response = client.get(url, {"date_from": "yesterday-ish", "kind": "auth.user"})
        assert response.status_code == 400
        html = response.content.decode()
        assert date_error in html and kind_error in html
        assert 'value="yesterday-ish"' in html
    swapped = client.get("/audit/", {"date_from": "2026-11-12", "date_to": "2026-11-01"})
    assert swapped.status_code == 400 and order_error in swapped.content.decode()


@pytest.mark.parametrize("role", ["outsider", "member", "lead", "finance"])
@pytest.mark.parametrize("url", ["/audit/", "/audit/export/csv/"])
def test_whoever_administers_nothing_gets_404(
    cast: Cast, trail: dict[str, AuditEvent], role: str, url: str
) -> None:
    assert page_for(cast.user(role)).get(url, {"tenant": "vision"}).status_code == 404


def test_dates_are_days_in_the_current_time_zone(cast: Cast) -> None:
    # 23:30 UTC on the 9th is the 10th in Shanghai
    event(cast.team_a, name="late", when=dt.datetime(2026, 11, 9, 23, 30, tzinfo=dt.UTC))
    client = page_for(cast.dept_admin)
    with timezone.override("Asia/Shanghai"):
        shown = names_shown(client.get("/audit/", {"date_from": "2026-11-10"}))
    assert shown == ["late"]
    assert names_shown(client.get("/audit/", {"date_from": "2026-11-10"})) == []
