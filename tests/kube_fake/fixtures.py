"""Pytest fixtures for the fake Kubernetes API server.

Import them into a ``conftest.py``::

    from tests.kube_fake.fixtures import kube_api, kubeconfig  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .server import DEFAULT_TOKEN, FakeKubeApi

CONTEXT = "tidegate-test"


def write_kubeconfig(
    directory: Path,
    server_url: str,
    *,
    context: str = CONTEXT,
    token: str = DEFAULT_TOKEN,
    filename: str = "kubeconfig",
) -> tuple[Path, str]:
    """Write a kubeconfig for ``server_url`` (one cluster, user and context, a bearer
    token) into ``directory``; returns (path, context name)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server_url}}],
        "users": [{"name": "tidegate", "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": "fake", "user": "tidegate"}}],
        "current-context": context,
    }
    path = directory / filename
    path.write_text(yaml.safe_dump(config))
    return path, context


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApi]:
    """A running fake API server, stopped after the test."""
    with FakeKubeApi() as api:
        yield api


@pytest.fixture
def kubeconfig(kube_api: FakeKubeApi, tmp_path: Path) -> tuple[Path, str]:
    """(path, context) of a kubeconfig pointing at ``kube_api``."""
    return write_kubeconfig(tmp_path, kube_api.url)
