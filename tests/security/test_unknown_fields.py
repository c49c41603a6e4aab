"""A field an endpoint does not know is a 400 naming it and listing the fields it takes,
on every write endpoint: not silently dropped."""

from __future__ import annotations

import inspect
import json
from types import ModuleType
from typing import Any

import pytest
from rest_framework import serializers

import billing.api.budgeting
import billing.api.charging
import billing.api.common
import billing.api.reporting
import billing.api.statements
import billing.api.usage
import billing.api.whatif
import scheduler_bridge.api.inventory
import scheduler_bridge.api.quotas
import scheduler_bridge.api.workloads
import tenants.api.serializers
from tenants.api.serializers import RejectUnknownFields
from tests.conftest import Cast, client_for
from tests.security.conftest import FakeCluster

API_MODULES: list[ModuleType] = [
    tenants.api.serializers,
    scheduler_bridge.api.inventory,
    scheduler_bridge.api.quotas,
    scheduler_bridge.api.workloads,
    billing.api.budgeting,
    billing.api.charging,
    billing.api.common,
    billing.api.reporting,
    billing.api.statements,
    billing.api.usage,
    billing.api.whatif,
]
# read from the query string, where paging and ordering parameters also live
QUERY_SERIALIZERS = {"ReportQuerySerializer"}
# shapes of answers only (fields with a source are not read-only to DRF); a statement is
# frozen, so its PATCH and PUT answer 409 whatever the body
OUTPUT_ONLY = {
    "MeMembershipSerializer",
    "MeSerializer",
    "MigDemandOutcomeSerializer",
    "MigPlanGpuSerializer",
    "MigPlanSerializer",
    "NodeSerializer",
    "PodCountSerializer",
    "BudgetAlertSerializer",
    "StatementSerializer",
    "StatementSummarySerializer",
    "UsageRecordSerializer",
    "QueuedSerializer",
    "SpendReportSerializer",
    "EfficiencyReportSerializer",
    "IdleReportSerializer",
    "WorkloadReportSerializer",
    "AllocationReportSerializer",
    "CollectionStateSerializer",
}


def input_serializers() -> list[type[serializers.Serializer[Any]]]:
    """Every serializer of the API that takes at least one field as input."""
    found = []
    for module in API_MODULES:
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if not issubclass(cls, serializers.Serializer) or cls.__module__ != module.__name__:
                continue
            if cls.__name__ in QUERY_SERIALIZERS | OUTPUT_ONLY:
                continue
            if any(not field.read_only for field in cls(context={}).fields.values()):
                found.append(cls)
    return found


def test_every_input_serializer_rejects_unknown_fields() -> None:
    taking_input = input_serializers()
    assert len(taking_input) >= 20  # the discovery itself works
    missing = [cls.__name__ for cls in taking_input if not issubclass(cls, RejectUnknownFields)]
    assert missing == []


def problem_errors(response: Any) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content
    errors: dict[str, list[str]] = json.loads(response.content)["errors"]
    return errors


@pytest.mark.django_db
def test_unknown_fields_are_named_with_the_known_ones(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    admin = client_for(cast.platform_admin)
    errors = problem_errors(
        admin.post(
            "/api/v1/tenants/",
            {"slug": "new", "name": "New", "wieght": 2, "colour": "red"},
            format="json",
        )
    )
    assert errors == {
        "colour": [
            "Unknown field. Known fields: cost_center, is_active, name, parent, slug, weight."
        ],
        "wieght": [
            "Unknown field. Did you mean 'weight'? Known fields: cost_center, is_active, name, "
            "parent, slug, weight."
        ],
    }
    errors = problem_errors(admin.patch("/api/v1/tenants/vision/", {"depth": 0}, format="json"))
    assert list(errors) == ["depth"]  # read-only fields are not taken either
    errors = problem_errors(
        client_for(cast.dept_admin).post(
            "/api/v1/quotas/",
            {
                "tenant": "vision",
                "flavour": "gpu-east/h100-80gb",
                "guaranteed": 1,
                "borow_limit": 2,
            },
            format="json",
        )
    )
    assert "Did you mean 'borrow_limit'?" in errors["borow_limit"][0]
    errors = problem_errors(
        admin.post(
            "/api/v1/billing/budgets/",
            {"tenant": "vision", "cadence": "quarter", "amount": "9", "currency": "USD", "x": 1},
            format="json",
        )
    )
    assert list(errors) == ["x"]
    errors = problem_errors(admin.post("/api/v1/billing/policy/", {"idle": "x"}, format="json"))
    assert "Did you mean 'idle_mode'?" in errors["idle"][0]
    errors = problem_errors(
        admin.post(
            "/api/v1/what-if/",
            {"cluster": "gpu-east", "proposal": {"quotas": [{"tenant": "vision", "flav": "x"}]}},
            format="json",
        )
    )
    assert "flav" in json.dumps(errors["proposal"])


@pytest.mark.django_db
def test_an_action_that_takes_no_body_refuses_fields_in_one(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    lead = client_for(cast.lead)
    submitted = lead.post(
        "/api/v1/workloads/",
        {"cluster": "gpu-east", "tenant": "vision", "name": "w", "pod_sets": [{"gpus_per_pod": 1}]},
        format="json",
    )
    assert submitted.status_code == 201, submitted.content
    cancel = f"/api/v1/workloads/{submitted.json()['id']}/cancel/"
    errors = problem_errors(lead.post(cancel, {"force": True}, format="json"))
    assert errors == {"force": ["Unknown field: this request takes no fields."]}
    assert lead.get(f"/api/v1/workloads/{submitted.json()['id']}/").json()["state"] != "cancelled"
    assert lead.post(cancel).status_code == 200
    admin = client_for(cast.platform_admin)
    errors = problem_errors(
        admin.post("/api/v1/billing/collections/", {"cluster": "gpu-east", "now": 1}, format="json")
    )
    assert list(errors) == ["now"]
    errors = problem_errors(admin.post("/api/v1/billing/collections/", [], format="json"))
    assert list(errors) == ["non_field_errors"]  # a list is not a request: 400, not 500
    collect = admin.post("/api/v1/billing/collections/", {"cluster": "gpu-east"}, format="json")
    assert collect.status_code == 202
