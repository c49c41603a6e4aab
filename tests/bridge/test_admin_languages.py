"""The admin pages in Simplified Chinese leave no English but data: the inbox, decided
requests, priority classes, a cluster page with its GPU drawing and sync health, and a
refused quota request form."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from billing.models import CollectorWatermark
from scheduler_bridge.quotas.models import QuotaRequest
from tests.conftest import Cast
from tests.factories import PriorityClassFactory
from tests.tenants.test_portal import logged_in
from tests.workloads.conftest import FakeCluster
from tests.workloads.test_portal_languages import data_values, untranslated, visible_text
from tests.workloads.test_queue import submit

pytestmark = pytest.mark.django_db


def chinese_only(page: str, data: set[str]) -> list[str]:
    assert '<html lang="zh-hans">' in page
    return [t for t in visible_text(page) if untranslated(t, data)]


def test_the_admin_pages_speak_chinese_but_for_their_data(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    submit(cast.member, "vision", 2, name="vision-job")
    PriorityClassFactory(name="batch", description="default for training runs")
    for tenant, state, comment in (
        (cast.team_a, "pending", ""),
        (cast.team_b, "rejected", "wait for the next quarter"),
    ):
        QuotaRequest.objects.create(
            tenant=tenant,
            flavour=fake_cluster.h100,
            guaranteed=7,
            justification="bigger model",
            requested_by=cast.lead,
            state=state,
            decision_comment=comment,
        )
    CollectorWatermark.objects.create(
        cluster=fake_cluster.cluster,
        collected_until=datetime(2026, 12, 1, 10, tzinfo=UTC),
        last_run_at=datetime(2026, 12, 1, 10, 5, tzinfo=UTC),
        last_error="Prometheus answered 503",
        dcgm_pod_labels="pod/namespace",
    )
    data = data_values() | {
        "bigger model",
        "wait for the next quarter",
        "default for training runs",
        "Prometheus answered 503",
        "pod/namespace",
    }
    left: list[str] = []
    for user, url in (
        (cast.dept_admin, "/quota-requests/"),
        (cast.dept_admin, "/quota-requests/decided/"),
        (cast.lead, "/priority-classes/"),
        (cast.platform_admin, "/clusters/gpu-east/"),
        (cast.lead, "/tenants/vision/"),
    ):
        response = logged_in(user).get(url, HTTP_ACCEPT_LANGUAGE="zh-hans")
        assert response.status_code == 200, url
        left += [f"{url}: {t}" for t in chinese_only(response.content.decode(), data)]
    for justification in ("", "bigger model"):  # refused by the form, then by the rules
        refused = logged_in(cast.lead).post(
            "/tenants/vision/quota-requests/add/",
            {"flavour": fake_cluster.h100.pk, "guaranteed": "500", "justification": justification},
            HTTP_ACCEPT_LANGUAGE="zh-hans",
        )
        assert refused.status_code == 400
        page = refused.content.decode()
        left += [f"refused form: {t}" for t in chinese_only(page, data)]
    assert "现在最多可申请" in page
    assert left == []
