"""Rate limits: sign-in, token creation and the API, with the real throttle classes and
low rates set here (the suite's own settings are generous)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, override_settings
from rest_framework.test import APIClient

from tests.conftest import Cast, client_for

pytestmark = pytest.mark.django_db

LOW = {"user": "5/min", "anon": "3/min", "login": "3/min", "token_create": "2/hour"}


@override_settings(TIDEGATE_THROTTLE_RATES=LOW)
def test_the_portal_refuses_a_fourth_sign_in_a_minute_with_429(cast: Cast) -> None:
    browser = Client()
    for _ in range(3):
        wrong = browser.post("/accounts/login/", {"username": "vision-lead", "password": "no"})
        assert wrong.status_code == 200
        assert "Please try again" in wrong.content.decode()
    refused = browser.post("/accounts/login/", {"username": "vision-lead", "password": "pw"})
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert "Too many sign-in attempts" in refused.content.decode()
    assert "_auth_user_id" not in browser.session  # even the right password waits


@override_settings(TIDEGATE_THROTTLE_RATES=LOW)
def test_sign_in_is_limited_per_user_name_across_addresses(cast: Cast) -> None:
    for index in range(3):
        Client(REMOTE_ADDR=f"10.0.0.{index}").post(
            "/accounts/login/", {"username": "vision-lead", "password": "no"}
        )
    refused = Client(REMOTE_ADDR="10.0.0.9").post(
        "/accounts/login/", {"username": "vision-lead", "password": "pw"}
    )
    assert refused.status_code == 429
    other = Client(REMOTE_ADDR="10.0.0.10").post(
        "/accounts/login/", {"username": "vision-member", "password": "pw"}
    )
    assert other.status_code == 302


@override_settings(TIDEGATE_THROTTLE_RATES=LOW)
def test_the_admin_sign_in_is_limited_too(cast: Cast) -> None:
    browser = Client()
    for _ in range(3):
        browser.post("/admin/login/", {"username": "root", "password": "no"})
    refused = browser.post("/admin/login/", {"username": "root", "password": "pw"})
    assert "Too many sign-in attempts" in refused.content.decode()
    assert "_auth_user_id" not in browser.session


def _problem(response: Any) -> dict[str, Any]:
    assert response.status_code == 429
    assert response["Content-Type"] == "application/problem+json"
    assert 0 < int(response["Retry-After"]) <= 3600
    body: dict[str, Any] = response.json()
    assert body["status"] == 429 and body["detail"]
    return body


@override_settings(TIDEGATE_THROTTLE_RATES=LOW)
def test_token_creation_is_limited_per_user(cast: Cast) -> None:
    lead = client_for(cast.lead)
    for name in ("a", "b"):
        assert lead.post("/api/v1/tokens/", {"name": name}, format="json").status_code == 201
    _problem(lead.post("/api/v1/tokens/", {"name": "c"}, format="json"))
    assert lead.get("/api/v1/tokens/").status_code == 200  # listing is not creating
    assert (
        client_for(cast.member).post("/api/v1/tokens/", {"name": "a"}, format="json").status_code
        == 201
    )


@override_settings(TIDEGATE_THROTTLE_RATES=LOW)
def test_the_api_limits_each_user(cast: Cast) -> None:
    lead = client_for(cast.lead)
    for _ in range(5):
        assert lead.get("/api/v1/me/").status_code == 200
    _problem(lead.get("/api/v1/tenants/"))
    assert client_for(cast.member).get("/api/v1/me/").status_code == 200


@override_settings(TIDEGATE_THROTTLE_RATES=LOW)
def test_the_api_limits_anonymous_callers_per_address() -> None:
    for _ in range(3):
        assert APIClient(REMOTE_ADDR="10.1.1.1").get("/api/v1/me/").status_code in (401, 403)
    _problem(APIClient(REMOTE_ADDR="10.1.1.1").get("/api/v1/me/"))
    assert APIClient(REMOTE_ADDR="10.1.1.2").get("/api/v1/me/").status_code in (401, 403)


@override_settings(TIDEGATE_THROTTLE_RATES=LOW | {"user": None})
def test_an_empty_rate_means_no_limit(cast: Cast) -> None:
    lead = client_for(cast.lead)
    assert all(lead.get("/api/v1/me/").status_code == 200 for _ in range(8))


@override_settings(TIDEGATE_THROTTLE_RATES=LOW)
def test_a_cache_that_does_not_answer_lets_requests_through(cast: Cast, monkeypatch: Any) -> None:
    from django.core.cache import cache

    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(cache, "get", down)
    lead = client_for(cast.lead)
    assert all(lead.get("/api/v1/me/").status_code == 200 for _ in range(8))
    signed_in = Client().post("/accounts/login/", {"username": "vision-lead", "password": "pw"})
    assert signed_in.status_code == 302


@override_settings(TIDEGATE_THROTTLE_RATES=LOW, TIDEGATE_NUM_PROXIES=1)
def test_behind_a_proxy_each_client_is_counted_by_the_address_the_proxy_saw(cast: Cast) -> None:
    def attempt(forwarded: str, username: str) -> int:
        client = Client(REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR=forwarded)
        response = client.post("/accounts/login/", {"username": username, "password": "no"})
        return int(response.status_code)

    # a client cannot dodge the count by writing its own X-Forwarded-For
    tries = [attempt(f"1.1.1.{n}, 203.0.113.5", f"nobody-{n}") for n in range(4)]
    assert tries == [200, 200, 200, 429]
    assert attempt("203.0.113.6", "nobody-9") == 200  # another client behind the same proxy


@override_settings(TIDEGATE_THROTTLE_RATES=LOW)
def test_the_refusal_speaks_the_readers_language(cast: Cast) -> None:
    browser = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    for _ in range(4):
        response = browser.post("/accounts/login/", {"username": "x", "password": "no"})
    assert response.status_code == 429
    assert "登录尝试次数过多" in response.content.decode()
