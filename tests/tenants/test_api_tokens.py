"""API tokens: hashed at rest, expiring, listed and revoked by their owner only."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from tenants.models import ApiToken
from tenants.tokens import token_create
from tests.conftest import Cast, client_for

pytestmark = pytest.mark.django_db


def _bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def test_a_created_token_works_and_only_its_hash_is_stored(cast: Cast) -> None:
    response = client_for(cast.lead).post("/api/v1/tokens/", {"name": "ci"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    secret = body["token"]
    assert body["name"] == "ci" and len(secret) == 64
    stored = ApiToken.objects.get(pk=body["id"])
    assert secret not in (stored.digest, stored.token_key)
    assert body["prefix"] == stored.token_key and secret.startswith(stored.token_key)
    assert _bearer(secret).get("/api/v1/me/").json()["username"] == "vision-lead"


@override_settings(TIDEGATE_API_TOKEN_TTL=30)
def test_tokens_expire_after_the_configured_days(cast: Cast) -> None:
    body = client_for(cast.lead).post("/api/v1/tokens/", {"name": "ci"}, format="json").json()
    token = ApiToken.objects.get(pk=body["id"])
    assert timedelta(days=29, hours=23) < token.expiry - timezone.now() <= timedelta(days=30)
    ApiToken.objects.filter(pk=token.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    response = _bearer(body["token"]).get("/api/v1/me/")
    assert response.status_code == 401
    assert response["Content-Type"] == "application/problem+json"


def test_the_list_shows_ones_own_tokens_without_secrets(cast: Cast) -> None:
    lead = client_for(cast.lead)
    created = lead.post("/api/v1/tokens/", {"name": "laptop"}, format="json").json()
    client_for(cast.member).post("/api/v1/tokens/", {"name": "members"}, format="json")
    listed = lead.get("/api/v1/tokens/").json()["results"]
    assert [t["name"] for t in listed] == ["laptop"]
    assert set(listed[0]) == {"id", "name", "prefix", "created", "expiry", "last_used_at"}
    assert listed[0]["last_used_at"] is None
    _bearer(created["token"]).get("/api/v1/me/")
    again = lead.get("/api/v1/tokens/").json()["results"][0]
    assert again["last_used_at"] is not None
    assert created["token"] not in str(lead.get("/api/v1/tokens/").content)


def test_revoking_ones_own_token_stops_it_and_anothers_is_404(cast: Cast) -> None:
    lead = client_for(cast.lead)
    mine = lead.post("/api/v1/tokens/", {"name": "laptop"}, format="json").json()
    theirs = client_for(cast.member).post("/api/v1/tokens/", {"name": "x"}, format="json").json()
    assert lead.delete(f"/api/v1/tokens/{theirs['id']}/").status_code == 404
    assert _bearer(theirs["token"]).get("/api/v1/me/").status_code == 200
    assert lead.delete(f"/api/v1/tokens/{mine['id']}/").status_code == 204
    assert _bearer(mine["token"]).get("/api/v1/me/").status_code == 401


def test_a_token_needs_a_name_and_nothing_else(cast: Cast) -> None:
    lead = client_for(cast.lead)
    blank = lead.post("/api/v1/tokens/", {"name": "  "}, format="json")
    assert blank.status_code == 422 and "name" in blank.json()
    extra = lead.post("/api/v1/tokens/", {"name": "ci", "expiry": "2099-01-01"}, format="json")
    assert extra.status_code == 400 and "expiry" in extra.json()
    assert not ApiToken.objects.exists()


def test_anonymous_callers_cannot_make_tokens(api: Any) -> None:
    assert api.post("/api/v1/tokens/", {"name": "x"}, format="json").status_code in (401, 403)


def test_the_command_prints_a_working_token(cast: Cast) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", "vision-lead", "--name", "ci", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    assert _bearer(secret).get("/api/v1/me/").json()["username"] == "vision-lead"
    assert "expires" in err.getvalue()
    assert ApiToken.objects.get().name == "ci"


def test_clear_text_tokens_become_hashed_expiring_ones(cast: Cast) -> None:
    """The migration from DRF's clear-text tokens keeps them working until they expire
    and drops the clear-text table."""
    from importlib import import_module

    from django.apps import apps

    migration = import_module("tenants.migrations.0006_api_token")
    key = "f" * 40
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamptz,"
            " user_id integer)"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [key, cast.member.pk])
    migration.hash_clear_text_tokens(apps, connection.schema_editor())
    assert "authtoken_token" not in connection.introspection.table_names()
    token = ApiToken.objects.get(user=cast.member)
    assert token.name == "migrated token" and key not in (token.digest,)
    assert token.expiry > timezone.now() + timedelta(days=29)
    assert _bearer(key).get("/api/v1/me/").json()["username"] == "vision-member"


def test_platform_admins_see_and_revoke_tokens_in_the_admin_never_their_hash(cast: Cast) -> None:
    from django.test import Client

    token, secret = token_create(user=cast.lead, name="forgotten laptop")
    admin = Client()
    admin.force_login(cast.platform_admin)
    listing = admin.get("/admin/tenants/apitoken/").content.decode()
    assert "forgotten laptop" in listing and token.digest not in listing
    page = admin.get(f"/admin/tenants/apitoken/{token.pk}/change/").content.decode()
    assert token.digest not in page and secret not in page
    admin.post(f"/admin/tenants/apitoken/{token.pk}/delete/", {"post": "yes"})
    assert _bearer(secret).get("/api/v1/me/").status_code == 401


def test_a_request_reads_only_its_own_token_and_expired_ones_are_forgotten_hourly(
    cast: Cast,
) -> None:
    """Authenticating does not read the user's other tokens (one query less per request);
    the hourly task deletes the expired ones, and only those."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tenants.tokens import tokens_forget_expired

    _, secret = token_create(user=cast.lead, name="in use")
    old, _ = token_create(user=cast.lead, name="old")
    ApiToken.objects.filter(pk=old.pk).update(expiry=timezone.now() - timedelta(days=1))
    with CaptureQueriesContext(connection) as queries:
        assert _bearer(secret).get("/api/v1/tokens/").status_code == 200
    token_reads = [q for q in queries.captured_queries if "tenants_apitoken" in q["sql"]]
    assert all(
        "token_key" in q["sql"] or "UPDATE" in q["sql"] or "expiry" in q["sql"] for q in token_reads
    )
    assert ApiToken.objects.filter(pk=old.pk).exists()  # not deleted by a request
    assert tokens_forget_expired() == 1
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["in use"]


def _password_changed(user: Any, *, revoke: bool) -> Any:
    from django.test import Client

    user.set_password("old-password-1")
    user.save()
    browser = Client()
    browser.force_login(user)
    form = {
        "old_password": "old-password-1",
        "new_password1": "a-new-Passw0rd-9",
        "new_password2": "a-new-Passw0rd-9",
    }
    if revoke:
        form["revoke_api_tokens"] = "on"
    return browser.post("/accounts/password/", form, HTTP_ACCEPT_LANGUAGE="en")


def test_changing_ones_password_offers_to_revoke_ones_tokens_and_does_when_asked(
    cast: Cast,
) -> None:
    _, secret = token_create(user=cast.lead, name="laptop")
    _, other = token_create(user=cast.member, name="someone else's")
    page = _password_changed(cast.lead, revoke=True)
    assert page.status_code == 302, page.content
    assert _bearer(secret).get("/api/v1/me/").status_code == 401
    assert _bearer(other).get("/api/v1/me/").status_code == 200  # only the owner's go


def test_changing_ones_password_keeps_the_tokens_when_not_asked(cast: Cast) -> None:
    from django.test import Client

    _, secret = token_create(user=cast.lead, name="laptop")
    browser = Client()
    browser.force_login(cast.lead)
    page = browser.get("/accounts/password/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'name="revoke_api_tokens"' in page and "checked" in page  # offered, ticked
    assert _password_changed(cast.lead, revoke=False).status_code == 302
    assert _bearer(secret).get("/api/v1/me/").status_code == 200


def test_an_admin_setting_a_users_password_revokes_that_users_tokens(cast: Cast) -> None:
    from django.test import Client

    _, secret = token_create(user=cast.lead, name="ci")
    admin = Client()
    admin.force_login(cast.platform_admin)
    page = admin.post(
        f"/admin/auth/user/{cast.lead.pk}/password/",
        {
            "password1": "Reset-by-admin-42",
            "password2": "Reset-by-admin-42",
            "usable_password": "true",
        },
    )
    assert page.status_code == 302, page.content
    cast.lead.refresh_from_db()
    assert cast.lead.check_password("Reset-by-admin-42")
    assert _bearer(secret).get("/api/v1/me/").status_code == 401
