"""Input that once made the API answer 500 is a 4xx problem document naming what was
wrong: a row still in use, a missing field, a NUL character, an impossible time zone
offset, a body nested too deep or too large."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import DataError
from rest_framework.test import APIClient

from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.quotas.models import QuotaRequest
from tenants.api.errors import exception_handler
from tenants.api.parsers import MAX_NESTING, nesting_exceeds, nul_location
from tenants.models import AuditEvent, Tenant
from tests.conftest import Cast, client_for
from tests.factories import ClusterFactory, FlavourFactory
from tests.security.conftest import FakeCluster

pytestmark = pytest.mark.django_db

PROBLEM_JSON = "application/problem+json"


def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == PROBLEM_JSON
    body: dict[str, Any] = json.loads(response.content)
    assert body["status"] == status
    return body


def post_raw(client: APIClient, path: str, body: str | bytes) -> Any:
    return client.generic("POST", path, body, content_type="application/json")  # type: ignore[arg-type]


def test_deleting_a_cluster_still_used_says_what_uses_it_and_what_to_do(cast: Cast) -> None:
    cluster = ClusterFactory(name="gpu-west", gateway=Cluster.Gateway.SIMULATED)
    flavour = FlavourFactory(cluster=cluster)
    QuotaRequest.objects.create(
        tenant=cast.team_a, flavour=flavour, guaranteed=2, justification="more"
    )
    response = client_for(cast.platform_admin).delete("/api/v1/clusters/gpu-west/")
    body = problem(response, 409)
    assert body["used_by"] == {"quotarequest": 1}
    assert "still used by 1 quota requests" in body["detail"]
    assert "delete or move those first" in body["detail"]
    assert Cluster.objects.filter(name="gpu-west").exists()


def test_a_quota_without_guaranteed_is_a_field_error(fake_cluster: FakeCluster, cast: Cast) -> None:
    response = client_for(cast.dept_admin).post(
        "/api/v1/quotas/",
        {"tenant": "vision", "flavour": "gpu-east/h100-80gb"},
        format="json",
    )
    assert problem(response, 400)["errors"] == {"guaranteed": ["This field is required."]}


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/tenants/vi%00sion/",
        "/api/v1/clusters/gpu%00east/",
        "/api/v1/priority-classes/batch%00/",
        "/api/v1/tenants/vision/?x=1",
    ],
)
def test_a_nul_character_in_a_path_is_a_400_naming_the_parameter(cast: Cast, path: str) -> None:
    if "?" in path:  # a NUL in a query parameter's value and in its name
        client = client_for(cast.platform_admin)
        body = problem(client.get("/api/v1/tenants/?search=vi%00sion"), 400)
        assert "search" in body["errors"]
        body = problem(client.get("/api/v1/audit-events/?act%00or=x"), 400)
        assert "act\\u0000or" in body["errors"]
        return
    body = problem(client_for(cast.platform_admin).get(path), 400)
    assert "NUL" in body["detail"]
    assert list(body["errors"]) in (["slug"], ["name"])


def test_a_nul_character_in_json_is_a_400_naming_the_field(cast: Cast) -> None:
    client = client_for(cast.platform_admin)
    body = problem(
        client.post(
            "/api/v1/tenants/", {"slug": "ok", "name": "a\x00b", "parent": None}, format="json"
        ),
        400,
    )
    assert list(body["errors"]) == ["name"]
    body = problem(
        post_raw(client, "/api/v1/priority-classes/", '{"name": "x", "description": "a\\u0000"}'),
        400,
    )
    assert list(body["errors"]) == ["description"]
    assert not Tenant.objects.filter(slug="ok").exists()


def test_a_nul_character_inside_a_json_value_stored_as_jsonb_is_a_400(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    response = client_for(cast.platform_admin).patch(
        f"/api/v1/flavours/{fake_cluster.h100.pk}/",
        {"tolerations": [{"key": "gpu\x00", "operator": "Exists"}]},
        format="json",
    )
    errors = problem(response, 400)["errors"]
    assert list(errors) == ["tolerations"]  # nested as a serializer nests them
    assert "NUL" in errors["tolerations"]["0"]["key"][0]


# 400: not a date-time or a month at all (the schema's format or pattern refuses it);
# 422: a well-formed moment or month that UTC, or the calendar, cannot hold
@pytest.mark.parametrize(
    ("path", "field", "status"),
    [
        ("/api/v1/audit-events/?since=2026-01-01T00:00:00%2B24:00", "since", 400),
        ("/api/v1/audit-events/?until=0001-01-01T00:00:00%2B05:00", "until", 422),
        ("/api/v1/billing/usage/?since=2026-01-01T00:00:00-24:30", "since", 400),
        ("/api/v1/billing/usage/?until=9999-12-31T23:59:00-01:00", "until", 422),
        ("/api/v1/billing/reports/efficiency/?since=2026-01-01T00:00:00%2B25:00", "since", 400),
        ("/api/v1/billing/reports/idle/?since=0001-01-01T00:00:00%2B01:00", "since", 422),
        ("/api/v1/allocation/?start=2026-01-01T00:00:00%2B25:00&end=2026-02-01", "start", 422),
        ("/api/v1/allocation/?start=2026-13-01&end=2026-02-01", "start", 400),
        ("/api/v1/allocation/?start=2026-01-01&end=0001-01-01T00:00:00%2B01:00", "end", 422),
        ("/api/v1/allocation/?window=9999-12", "window", 422),
        ("/api/v1/allocation/?window=0000-01", "window", 422),
    ],
)
def test_an_impossible_moment_or_month_is_refused_naming_the_parameter(
    cast: Cast, path: str, field: str, status: int
) -> None:
    body = problem(client_for(cast.platform_admin).get(path), status)
    assert field in body["errors"]


def test_a_large_but_possible_offset_is_read_in_utc(cast: Cast) -> None:
    AuditEvent.objects.all().delete()
    client = client_for(cast.platform_admin)
    client.post("/api/v1/tenants/", {"slug": "fresh", "name": "Fresh"}, format="json")
    # 20:54 behind UTC: far beyond any real zone, yet a moment ISO 8601 can write
    response = client.get("/api/v1/audit-events/?since=2000-01-01T00:00:00-20:54")
    assert response.status_code == 200
    assert [e["object_repr"] for e in response.json()["results"]] == ["fresh"]
    response = client.get("/api/v1/billing/usage/?since=2026-01-01T00:00:00%2B23:59")
    assert response.status_code == 200


def test_json_nested_100000_deep_is_a_400_not_a_crash(cast: Cast) -> None:
    client = client_for(cast.platform_admin)
    deep = "[" * 100_000 + "]" * 100_000
    body = problem(post_raw(client, "/api/v1/tenants/", deep), 400)
    assert f"deeper than {MAX_NESTING} levels" in body["detail"]
    deep_object = '{"slug": "x", "name": "x", "cost_center": ' + '{"a": ' * 40 + "1" + "}" * 41
    problem(post_raw(client, "/api/v1/tenants/", deep_object), 400)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    assert not nesting_exceeds(json.dumps({"name": "[" * 1000, "tags": [[["ok"]]]}))
    assert not nesting_exceeds('{"a": "\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}')
    assert nesting_exceeds("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1))
    assert nul_location({"a": [{"b": "ok"}, {"c\x00": 1}]}) == "a.1.c\x00"
    assert nul_location({"a": ["fine", 1, None]}) is None


def test_invalid_json_and_non_finite_numbers_are_400s(cast: Cast) -> None:
    client = client_for(cast.platform_admin)
    assert "not valid JSON" in problem(post_raw(client, "/api/v1/tenants/", "{"), 400)["detail"]
    body = problem(post_raw(client, "/api/v1/tenants/", '{"slug": NaN}'), 400)
    assert "not valid JSON" in body["detail"]
    problem(post_raw(client, "/api/v1/tenants/", b"\xff\xfe"), 400)


def test_a_body_larger_than_the_limit_is_a_413_problem_document(cast: Cast, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    client = client_for(cast.platform_admin)
    big = json.dumps({"slug": "big", "name": "x" * 20_000})
    body = problem(post_raw(client, "/api/v1/tenants/", big), 413)
    assert "larger than the 10000 bytes" in body["detail"]
    form = client.post("/api/v1/tenants/", {"slug": "big", "name": "x" * 20_000})
    problem(form, 413)
    assert not Tenant.objects.filter(slug="big").exists()


def test_a_value_the_database_cannot_store_is_a_400_not_a_500() -> None:
    response = exception_handler(DataError("integer out of range"), {})
    assert response is not None
    assert response.status_code == 400
    assert "cannot be stored" in response.data["detail"]


def test_a_nul_character_in_a_portal_path_is_a_plain_400(cast: Cast) -> None:
    from tests.tenants.test_portal import logged_in

    response = logged_in(cast.finance).get("/billing/periods/2026-0%001/cost-centre/")
    assert response.status_code == 400
    assert "NUL" in response.content.decode()
