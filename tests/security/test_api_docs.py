"""/api/docs/ speaks to API users: no schema describes Tidegate's own code (the mixin
every serializer inherits, module paths, test files)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import Cast, client_for

pytestmark = pytest.mark.django_db
DEVELOPER_TEXT = re.compile(r"Mixin|serializer|tests/|\b(?:billing|tenants|scheduler_bridge)\.\w")


def test_no_schema_description_is_written_for_developers(cast: Cast) -> None:
    response = client_for(cast.platform_admin).get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schemas = response.json()["components"]["schemas"]
    developer = {
        name: schema["description"]
        for name, schema in schemas.items()
        if DEVELOPER_TEXT.search(schema.get("description") or "")
    }
    assert developer == {}
    # a serializer's own description for API users stays
    assert schemas["ApiToken"]["description"].startswith("A token as its owner sees it")


def test_the_demo_shows_the_products_error_pages_not_djangos_debug_pages() -> None:
    """The demo's settings leave DEBUG off unless DJANGO_DEBUG asks for it, so a stale
    link gets Tidegate's 404 page, never the list of every URL pattern."""
    import subprocess
    import sys

    code = "import config.settings.demo as s; print(s.DEBUG)"
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SECRET_KEY": "x"}
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert found.stdout.strip() == "False"
