"""/metrics: off without a token, 401 without the right one, answered whatever the Host
header; after a cycle it carries the cycle's series, the pending queue, request counts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from billing.models import CollectorWatermark
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.models import Workload
from tests.conftest import Cast, client_for
from tests.workloads.conftest import FakeCluster, fake_cluster, kube_api, kubeconfig, priorities

__all__ = ["fake_cluster", "kube_api", "kubeconfig", "priorities"]

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-scrape-token"
PROMETHEUS = Client(HTTP_HOST="10.244.1.17:8000", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")


def scrape() -> dict[str, Any]:
    response = PROMETHEUS.get("/metrics")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return {f.name: f for f in text_string_to_metric_families(response.content.decode())}


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    """The value of ``sample`` with exactly ``labels`` (0 when it was never counted)."""
    family = families[sample.removesuffix("_total").removesuffix("_count")]
    return next((s.value for s in family.samples if s.name == sample and s.labels == labels), 0.0)


def test_metrics_are_off_without_a_token_and_need_it_when_set(settings: Any) -> None:
    settings.TIDEGATE_METRICS_TOKEN = ""
    assert PROMETHEUS.get("/metrics").status_code == 404
    settings.TIDEGATE_METRICS_TOKEN = TOKEN
    anonymous = Client(HTTP_HOST="10.244.1.17:8000").get("/metrics")
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    wrong = Client(HTTP_AUTHORIZATION="Bearer not-the-token").get("/metrics")
    assert wrong.status_code == 401 and b"tidegate_" not in wrong.content
    settings.SECURE_SSL_REDIRECT = True  # Prometheus scrapes the pod IP over plain HTTP
    assert PROMETHEUS.get("/metrics").status_code == 200


def test_a_cycle_shows_in_the_metrics_with_the_pending_queue_and_the_requests(
    settings: Any, fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    settings.TIDEGATE_METRICS_TOKEN = TOKEN
    before = scrape()
    cluster = "gpu-east"
    for number in range(4):  # 32 GPUs asked of 16: some wait
        response = client_for(cast.member).post(
            "/api/v1/workloads/",
            {
                "cluster": cluster,
                "tenant": "vision",
                "name": f"train-{number}",
                "pod_sets": [{"count": 1, "gpus_per_pod": 8, "flavour": "h100-80gb"}],
            },
            format="json",
        )
        assert response.status_code == 201, response.content
    outcome = admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    CollectorWatermark.objects.create(
        cluster=fake_cluster.cluster, collected_until=timezone.now() - timedelta(hours=3)
    )
    after = scrape()

    assert {
        "tidegate_admission_cycle_seconds",
        "tidegate_admissions",
        "tidegate_preemptions",
        "tidegate_elastic_shrinks",
        "tidegate_reconcile_errors",
        "tidegate_sync_errors",
        "tidegate_budget_alerts",
        "tidegate_pending_workloads",
        "tidegate_collector_lag_seconds",
        "tidegate_http_requests",
        "tidegate_http_request_duration_seconds",
    } <= set(after)
    cycles = "tidegate_admission_cycle_seconds_count"
    assert value(after, cycles, cluster=cluster) >= value(before, cycles, cluster=cluster) + 1
    admitted = value(after, "tidegate_admissions_total", cluster=cluster)
    assert outcome.admitted
    assert admitted - value(before, "tidegate_admissions_total", cluster=cluster) >= len(
        outcome.admitted
    )
    waiting = Workload.objects.filter(state="pending", tenant__slug="vision").count()
    assert waiting >= 1
    pending = value(
        after, "tidegate_pending_workloads", cluster=cluster, tenant="vision", flavour="h100-80gb"
    )
    assert pending == waiting
    lag = value(after, "tidegate_collector_lag_seconds", cluster=cluster)
    assert 3 * 3600 <= lag < 4 * 3600
    posted = {"route": "workload-list", "method": "POST", "status": "201"}
    assert (
        value(after, "tidegate_http_requests_total", **posted)
        - value(before, "tidegate_http_requests_total", **posted)
        == 4
    )
