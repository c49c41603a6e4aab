"""A POST sent again with the same Idempotency-Key answers as the first one did: a client
that lost the answer to a submit never creates a second workload."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler_bridge.workloads.models import Workload
from tenants.idempotency import forget_expired
from tenants.models import IdempotentRequest
from tests.conftest import Cast
from tests.workloads.conftest import FakeCluster

pytestmark = pytest.mark.django_db

URL = "/api/v1/workloads/"


def signed_in(user: Any) -> APIClient:
    """A client with a real session cookie: the key is scoped to its credentials."""
    client = APIClient()
    client.force_login(user)
    return client


def body(name: str = "train", gpus: int = 2) -> dict[str, Any]:
    return {
        "cluster": "gpu-east",
        "tenant": "vision",
        "name": name,
        "pod_sets": [{"count": 1, "gpus_per_pod": gpus, "flavour": "h100-80gb"}],
    }


def test_the_same_key_returns_the_first_answer_and_creates_once(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client = signed_in(cast.member)
    first = client.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="submit-1")
    again = client.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="submit-1")
    assert first.status_code == again.status_code == 201, first.content
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert Workload.objects.filter(name="train").count() == 1


def test_without_a_key_each_post_creates(fake_cluster: FakeCluster, cast: Cast) -> None:
    client = signed_in(cast.member)
    for _ in range(2):
        assert client.post(URL, body(), format="json").status_code == 201
    assert Workload.objects.filter(name="train").count() == 2


def test_a_key_reused_for_another_request_is_refused(fake_cluster: FakeCluster, cast: Cast) -> None:
    client = signed_in(cast.member)
    assert client.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="k").status_code == 201
    other = client.post(URL, body(gpus=4), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert other.status_code == 422
    assert other["Content-Type"] == "application/problem+json"
    assert "different request" in other.json()["detail"]
    assert Workload.objects.filter(name="train").count() == 1


def test_keys_are_scoped_to_the_credentials_that_sent_them(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """A lead using the member's key gets its own workload, never the member's answer."""
    member = signed_in(cast.member).post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="k")
    lead = signed_in(cast.lead).post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert member.status_code == lead.status_code == 201
    assert member.json()["id"] != lead.json()["id"]


def test_a_refusal_is_answered_again_and_a_bad_key_is_a_400(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client = signed_in(cast.member)
    bad = {**body(), "pod_sets": []}
    first = client.post(URL, bad, format="json", HTTP_IDEMPOTENCY_KEY="bad-1")
    again = client.post(URL, bad, format="json", HTTP_IDEMPOTENCY_KEY="bad-1")
    assert first.status_code == again.status_code == 422
    assert again.json() == first.json()
    too_long = client.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="x" * 256)
    assert too_long.status_code == 400 and "Idempotency-Key" in too_long.json()["detail"]
    assert not Workload.objects.exists()


def test_keys_are_forgotten_after_their_retention(fake_cluster: FakeCluster, cast: Cast) -> None:
    client = signed_in(cast.member)
    client.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="old")
    IdempotentRequest.objects.update(created_at=timezone.now() - timedelta(hours=25))
    assert forget_expired() == 1
    assert client.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="old").status_code == 201
    assert Workload.objects.filter(name="train").count() == 2


@pytest.mark.django_db(transaction=True)
def test_two_requests_with_one_key_at_once_create_one_workload(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client = signed_in(cast.member)
    cookie = client.cookies
    answers: list[int] = []
    start = threading.Barrier(2)

    def send() -> None:
        try:
            own = APIClient()
            own.cookies = cookie
            start.wait(10)
            answers.append(
                own.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="same").status_code
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # the second is either the first's answer replayed, or told to retry while it runs
    assert sorted(answers) in ([201, 201], [201, 409])
    assert Workload.objects.filter(name="train").count() == 1


def test_a_body_too_large_is_refused_as_without_a_key(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client = signed_in(cast.member)
    huge = {**body(), "name": "x" * (2 * 1024 * 1024)}
    without = client.post(URL, huge, format="json")
    with_key = client.post(URL, huge, format="json", HTTP_IDEMPOTENCY_KEY="huge")
    assert with_key.status_code == without.status_code == 413
    assert with_key["Content-Type"] == without["Content-Type"] == "application/problem+json"
    assert not IdempotentRequest.objects.exists()
