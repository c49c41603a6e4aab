"""The dashboard reads the queue of the bridge's fake cluster."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from tests.workloads.conftest import FakeCluster, fake_cluster, kube_api, kubeconfig, priorities

__all__ = ["FakeCluster", "fake_cluster", "kube_api", "kubeconfig", "priorities"]


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    """Ledger reads are cached by the newest ledger row; each test starts without."""
    cache.clear()
