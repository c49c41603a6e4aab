"""Lists that fit one page are answered without a COUNT query, with the same body."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tenants.models import Tenant
from tests.conftest import Cast, client_for
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def _counts(queries: CaptureQueriesContext) -> int:
    return sum("COUNT(" in q["sql"].upper() for q in queries.captured_queries)


def test_a_list_that_fits_one_page_is_not_counted_and_says_its_count(cast: Cast) -> None:
    client = client_for(cast.platform_admin)
    with CaptureQueriesContext(connection) as queries:
        body = client.get("/api/v1/tenants/").json()
    assert _counts(queries) == 0
    assert body["count"] == Tenant.objects.count() == len(body["results"])
    assert body["next"] is None and body["previous"] is None


def test_a_list_longer_than_a_page_is_counted_and_pages_as_before(cast: Cast) -> None:
    for number in range(60):
        TenantFactory(slug=f"team-{number}", parent=cast.org)
    client = client_for(cast.platform_admin)
    total = Tenant.objects.count()
    first = client.get("/api/v1/tenants/").json()
    assert first["count"] == total and len(first["results"]) == 50
    assert first["next"].endswith("?page=2")
    second = client.get("/api/v1/tenants/?page=2").json()
    assert second["count"] == total and len(second["results"]) == total - 50
    assert {t["slug"] for t in first["results"]}.isdisjoint(t["slug"] for t in second["results"])
    assert client.get("/api/v1/tenants/?page=9").status_code == 404
