"""The bridge's fake cluster for the security tests, and how a test authenticates to
the API as a given user (one place: a change of token scheme changes only this)."""

from __future__ import annotations

from typing import Any

from tenants.tokens import token_create
from tests.bridge.conftest import FakeCluster, fake_cluster
from tests.kube_fake.fixtures import kube_api, kubeconfig

__all__ = ["FakeCluster", "fake_cluster", "kube_api", "kubeconfig"]


def auth_headers(user: Any) -> dict[str, str]:
    """The headers an API client of ``user`` sends."""
    _, secret = token_create(user=user, name="security test")
    return {"Authorization": f"Token {secret}"}
