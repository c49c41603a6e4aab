"""Workload fixtures: the bridge's fake cluster plus priority classes."""

from __future__ import annotations

from decimal import Decimal

import pytest

from scheduler_bridge.workloads.models import PriorityClass
from tests.bridge.conftest import FakeCluster, fake_cluster, fast_gateway
from tests.factories import PriorityClassFactory
from tests.kube_fake.fixtures import kube_api, kubeconfig

__all__ = ["FakeCluster", "fake_cluster", "fast_gateway", "kube_api", "kubeconfig"]


@pytest.fixture
def priorities(db: None) -> dict[str, PriorityClass]:
    return {
        "batch": PriorityClassFactory(
            name="batch",
            value=0,
            preemptible=True,
            price_multiplier=Decimal("0.6"),
            is_default=True,
        ),
        "prod": PriorityClassFactory(
            name="prod", value=100, preemptible=False, price_multiplier=Decimal("1.5")
        ),
    }
