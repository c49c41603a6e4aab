"""Every API view keeps the contract /api/schema/ publishes (tenants.api.contract): what
the schema refuses is a 400 naming the parameter or field, before the view acts; the
schema says what the server refuses (unknown fields, NUL characters, empty references)
and every answer it can give (429 included); a task that asks to be tried later is not
a 500 in the demo, where tasks run inside the request."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from rest_framework.views import APIView

from scheduler_bridge.inventory.models import Cluster
from tenants.api.contract import KeepsContract
from tests.conftest import Cast, client_for
from tests.security.conftest import FakeCluster
from tests.security.test_unknown_fields import API_MODULES

pytestmark = pytest.mark.django_db


def test_every_api_view_checks_requests_against_the_schema() -> None:
    import tenants.api.views

    views = [
        cls
        for module in [*API_MODULES, tenants.api.views]
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, APIView) and cls.__module__ == module.__name__
    ]
    assert len(views) >= 25  # the discovery itself works
    assert [cls.__name__ for cls in views if not issubclass(cls, KeepsContract)] == []


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/api/v1/tenants/?top_level=null", "top_level"),
        ("/api/v1/billing/reports/efficiency/?until=", "until"),
        ("/api/v1/billing/reports/idle/?since=yesterday", "since"),
        ("/api/v1/tenants/?page=", "page"),
        ("/api/v1/tenants/?is_active=true&is_active=false", "is_active"),
        ("/api/v1/billing/statements/?mode=", "mode"),
    ],
)
def test_a_query_the_schema_refuses_is_a_400_naming_the_parameter(
    cast: Cast, path: str, parameter: str
) -> None:
    response = client_for(cast.platform_admin).get(path, HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert list(response.json()["errors"]) == [parameter]


def test_a_body_the_schema_refuses_changes_nothing_and_says_why(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    admin = client_for(cast.platform_admin)
    before = admin.get("/api/v1/priority-classes/").json()["count"]
    response = admin.post(
        "/api/v1/priority-classes/",
        {"name": "x", "value": "high", "price_multiplier": ""},
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert response.status_code == 400, response.content
    assert set(response.json()["errors"]) >= {"value", "price_multiplier"}
    assert admin.get("/api/v1/priority-classes/").json()["count"] == before
    form = admin.post("/api/v1/priority-classes/", {"name": "x"}, format="multipart")
    assert form.status_code == 415  # the API takes JSON, as its schema says


def test_the_schema_declares_what_the_server_refuses_and_answers(cast: Cast) -> None:
    schema = client_for(cast.platform_admin).get("/api/schema/?format=json").json()
    components = schema["components"]["schemas"]
    quota = components["QuotaRequest"]
    assert quota["additionalProperties"] is False
    assert quota["properties"]["tenant"]["minLength"] == 1
    assert quota["properties"]["flavour"]["pattern"]
    assert "\\d{1,8}" in components["RateCardRequest"]["properties"]["reserved_price"]["pattern"]
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if path.startswith("/api/v1/") and isinstance(operation, dict):
                assert "429" in operation["responses"], (method, path)
                for content in (operation.get("requestBody") or {}).get("content", {}):
                    assert content == "application/json", (method, path)


def test_a_collection_that_cannot_reach_prometheus_is_queued_not_a_500(
    fake_cluster: FakeCluster,
    cast: Cast,
    settings: Any,
    caplog: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True  # as in the demo: the task runs in the request
    settings.CELERY_TASK_EAGER_PROPAGATES = True
    Cluster.objects.filter(name="gpu-east").update(prometheus_url="http://127.0.0.1:9/")
    admin = client_for(cast.platform_admin)
    with (
        caplog.at_level("WARNING", logger="tenants.outbox"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = admin.post("/api/v1/billing/collections/", {"cluster": "gpu-east"})
    assert response.status_code == 202, response.content
    assert "asked to be tried again later" in caplog.text


def test_a_request_the_schema_takes_is_refused_by_what_it_means(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """404 when it names what the caller may not see, 409 when another row holds the
    name, 422 when a rule between its fields or against the current state refuses it:
    each with the field named, and each declared by /api/schema/."""
    lead = client_for(cast.lead)
    hidden = lead.post(
        "/api/v1/namespace-bindings/",
        {"tenant": "globex", "cluster_name": "gpu-east", "namespace": "x"},
    )
    assert hidden.status_code == 404 and "tenant" in hidden.json()["errors"], hidden.content
    admin = client_for(cast.platform_admin)
    taken = admin.post("/api/v1/tenants/", {"slug": "vision", "name": "Again"})
    assert taken.status_code == 409 and "slug" in taken.json()["errors"], taken.content
    ruled = admin.post(
        "/api/v1/billing/exchange-rates/",
        {"month": "2026-02", "from_currency": "USD", "to_currency": "USD", "rate": "1"},
    )
    assert ruled.status_code == 422, ruled.content
    assert ruled.json()["type"] == "https://tidegate.io/problems/refused"
    assert "to_currency" in ruled.json()["errors"]
    malformed = admin.post(
        "/api/v1/billing/exchange-rates/",
        {"month": "February", "from_currency": "USD", "to_currency": "CNY", "rate": "1"},
    )
    assert malformed.status_code == 400 and "month" in malformed.json()["errors"]


def test_a_patched_rate_card_answers_every_field_its_schema_lists(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    admin = client_for(cast.platform_admin)
    created = admin.post(
        "/api/v1/billing/rate-cards/",
        {
            "name": "H100",
            "product": "NVIDIA-H100-80GB-HBM3",
            "currency": "USD",
            "reserved_price": "2.0",
            "on_demand_price": "3.0",
            "valid_from": "2026-01-01",
        },
    )
    assert created.status_code == 201, created.content
    patched = admin.patch(f"/api/v1/billing/rate-cards/{created.json()['id']}/", {})
    assert patched.status_code == 200
    assert set(created.json()) == set(patched.json())
    assert patched.json()["flavour_name"] is None


def test_a_signed_in_browser_session_is_held_to_the_same_contract(cast: Cast) -> None:
    """With a session, the CSRF check reads the body before the view: it is checked
    against the schema all the same (400), and a rule's refusal is still a 422."""
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(cast.platform_admin)
    browser.get("/")  # the portal sets the CSRF cookie
    token = browser.cookies["csrftoken"].value
    malformed = browser.post(
        "/api/v1/tenants/",
        {"slug": "new-team", "name": "New", "weight": "heavy"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert malformed.status_code == 400, malformed.content
    ruled = browser.post(
        "/api/v1/tenants/",
        {"slug": "new-team", "name": "New", "weight": "-1"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert ruled.status_code == 422, ruled.content
