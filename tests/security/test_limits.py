"""Limits on what one request may carry, each refused with a 400 (413 for the body as
a whole) naming the field: pod sets per workload, free text, list lengths."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from scheduler_bridge.api.inventory import MAX_GPUS_PER_NODE, MAX_TOLERATIONS
from scheduler_bridge.api.workloads import MAX_POD_SETS
from scheduler_bridge.quotas.models import TEXT_MAX_LENGTH, QuotaRequest
from scheduler_bridge.workloads.models import Workload
from tests.conftest import Cast, client_for
from tests.security.conftest import FakeCluster
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db

H100 = "gpu-east/h100-80gb"


def field_errors(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    errors: dict[str, Any] = json.loads(response.content)["errors"]
    return errors


def submit(cast: Cast, pod_sets: list[dict[str, Any]]) -> Any:
    return client_for(cast.lead).post(
        "/api/v1/workloads/",
        {"cluster": "gpu-east", "tenant": "vision", "name": "many", "pod_sets": pod_sets},
        format="json",
    )


def test_a_workload_of_10000_pod_sets_is_refused_before_any_pod_set_is_read(
    fake_cluster: FakeCluster, cast: Cast, django_assert_max_num_queries: Any
) -> None:
    pod_sets = [{"name": f"p{i}", "gpus_per_pod": 1} for i in range(10_000)]
    with django_assert_max_num_queries(6):
        errors = field_errors(submit(cast, pod_sets))
    assert errors == {"pod_sets": [f"Ensure this field has no more than {MAX_POD_SETS} elements."]}
    assert not Workload.objects.exists()


def test_as_many_pod_sets_as_the_limit_are_taken(fake_cluster: FakeCluster, cast: Cast) -> None:
    pod_sets = [{"name": f"p{i}", "gpus_per_pod": 1} for i in range(MAX_POD_SETS)]
    response = submit(cast, pod_sets)
    assert response.status_code == 201, response.content
    assert len(response.json()["pod_sets"]) == MAX_POD_SETS


def ask_quota(cast: Cast, justification: str) -> Any:
    return client_for(cast.lead).post(
        "/api/v1/quota-requests/",
        {"tenant": "vision", "flavour": H100, "guaranteed": 8, "justification": justification},
        format="json",
    )


def test_a_justification_longer_than_the_limit_is_refused(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    errors = field_errors(ask_quota(cast, "x" * (TEXT_MAX_LENGTH + 1)))
    assert errors == {
        "justification": [f"Ensure this field has no more than {TEXT_MAX_LENGTH} characters."]
    }
    # two megabytes is refused as a whole, before it is parsed
    assert ask_quota(cast, "x" * 2_000_000).status_code == 413
    assert not QuotaRequest.objects.exists()
    assert ask_quota(cast, "x" * TEXT_MAX_LENGTH).status_code == 201


def test_the_portal_form_refuses_a_justification_longer_than_the_limit(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client: Client = logged_in(cast.lead)
    response = client.post(
        "/tenants/vision/quota-requests/add/",
        {
            "flavour": fake_cluster.h100.pk,
            "guaranteed": "8",
            "justification": "x" * (TEXT_MAX_LENGTH + 1),
        },
    )
    assert response.status_code == 400
    assert f"at most {TEXT_MAX_LENGTH} characters" in response.content.decode()
    assert not QuotaRequest.objects.exists()


def test_a_decision_comment_longer_than_the_limit_is_refused(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    request_id = ask_quota(cast, "new model").json()["id"]
    response = client_for(cast.dept_admin).post(
        f"/api/v1/quota-requests/{request_id}/reject/",
        {"comment": "x" * (TEXT_MAX_LENGTH + 1)},
        format="json",
    )
    assert list(field_errors(response)) == ["comment"]
    assert QuotaRequest.objects.get().state == QuotaRequest.State.PENDING


def test_json_lists_have_a_length_limit(fake_cluster: FakeCluster, cast: Cast) -> None:
    admin = client_for(cast.platform_admin)
    tolerations = [{"key": f"k{i}", "operator": "Exists"} for i in range(MAX_TOLERATIONS + 1)]
    response = admin.patch(
        f"/api/v1/flavours/{fake_cluster.h100.pk}/", {"tolerations": tolerations}, format="json"
    )
    assert field_errors(response) == {
        "tolerations": [f"Give at most {MAX_TOLERATIONS} entries ({MAX_TOLERATIONS + 1} given)."]
    }
    node = fake_cluster.cluster.nodes.first()
    assert node is not None
    response = admin.post(
        f"/api/v1/nodes/{node.pk}/pin/",
        {"pinned_layout": [None] * (MAX_GPUS_PER_NODE + 1)},
        format="json",
    )
    assert list(field_errors(response)) == ["pinned_layout"]
    response = admin.post(
        "/api/v1/billing/budgets/",
        {
            "tenant": "vision",
            "cadence": "quarter",
            "amount": "900.00",
            "currency": "USD",
            "thresholds": list(range(1, 30)),
        },
        format="json",
    )
    assert list(field_errors(response)) == ["thresholds"]
    response = admin.post(
        "/api/v1/billing/rate-cards/",
        {
            "name": "L4",
            "product": "L4",
            "currency": "USD",
            "reserved_price": "0.5",
            "on_demand_price": "0.8",
            "valid_from": "2026-01-01",
            "priority_multipliers": {f"class-{i}": "1" for i in range(101)},
        },
        format="json",
    )
    assert list(field_errors(response)) == ["priority_multipliers"]
    response = admin.post(
        "/api/v1/what-if/",
        {"cluster": "gpu-east", "proposal": {"weights": {f"t{i}": 1 for i in range(1001)}}},
        format="json",
    )
    assert list(field_errors(response)) == ["proposal"]
