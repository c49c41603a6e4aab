"""API errors are problem documents (RFC 9457) in application/problem+json: type, title,
status, detail, and field errors where a field was wrong; never an HTML page."""

from __future__ import annotations

from typing import Any

import kombu
import pytest
from django.test import Client
from django.utils import translation
from kombu.exceptions import OperationalError as BrokerUnavailable

from tenants.api.errors import exception_handler
from tests.conftest import Cast, client_for
from tests.factories import BindingFactory
from tests.observability.server import closed_port

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def test_bad_input_is_a_problem_naming_each_field(cast: Cast) -> None:
    response = client_for(cast.platform_admin).post(
        "/api/v1/tenants/", {"slug": "Not A Slug", "parent": "research"}, format="json"
    )
    assert response.status_code == 400 and response["Content-Type"] == PROBLEM
    problem = response.json()
    assert problem["type"] == "https://tidegate.io/problems/invalid-input"
    assert problem["title"] == "Invalid input" and problem["status"] == 400
    assert problem["detail"].startswith("slug: ")
    assert problem["errors"]["slug"] == problem["slug"]  # where clients read it before
    assert "name" in problem["errors"]


def test_a_conflict_is_a_problem_with_the_domain_message(cast: Cast) -> None:
    BindingFactory(tenant=cast.team_a, namespace="vision-train")
    response = client_for(cast.platform_admin).delete("/api/v1/tenants/vision/")
    assert response.status_code == 409 and response["Content-Type"] == PROBLEM
    problem = response.json()
    assert problem["type"] == "https://tidegate.io/problems/conflict"
    assert "gpu-east/vision-train" in problem["detail"]


def test_other_tenants_objects_and_unknown_paths_are_404_problems(cast: Cast) -> None:
    hidden = client_for(cast.outsider).get("/api/v1/tenants/vision/")
    unrouted = client_for(cast.member).get("/api/v1/no-such-thing/")
    for response in (hidden, unrouted):
        assert response.status_code == 404 and response["Content-Type"] == PROBLEM
        assert response.json() == {
            "type": "about:blank",
            "title": "Not Found",
            "status": 404,
            "detail": "Not found.",
        }


def test_an_anonymous_request_is_a_401_or_403_problem() -> None:
    response = Client().get("/api/v1/workloads/")
    assert response.status_code in (401, 403) and response["Content-Type"] == PROBLEM
    assert response.json()["detail"] and response.json()["type"] == "about:blank"


def test_problems_are_worded_in_the_requests_language(cast: Cast) -> None:
    response = client_for(cast.platform_admin).post(
        "/api/v1/tenants/", {"slug": "x"}, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert response.status_code == 400 and response.json()["title"] == "输入无效"
    hidden = client_for(cast.outsider).get(
        "/api/v1/tenants/vision/", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert hidden.json()["detail"] == "未找到。"


def test_a_broker_that_does_not_answer_is_a_503_problem_with_retry_after(
    settings: Any,
) -> None:
    settings.TIDEGATE_RETRY_AFTER_S = 7
    broker = kombu.Connection(f"redis://127.0.0.1:{closed_port()}/0", connect_timeout=1)
    with pytest.raises(BrokerUnavailable) as refused:
        broker.ensure_connection(max_retries=1)
    with translation.override("en"):
        response = exception_handler(refused.value, {})
    assert response is not None and response.status_code == 503
    assert response["Retry-After"] == "7" and response.content_type == PROBLEM
    assert response.data["type"] == "https://tidegate.io/problems/unavailable"
    assert "try again in 7 seconds" in response.data["detail"]
