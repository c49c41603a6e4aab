"""The dashboard reads the queue of the bridge's fake cluster."""

from __future__ import annotations

from tests.workloads.conftest import FakeCluster, fake_cluster, kube_api, kubeconfig, priorities

__all__ = ["FakeCluster", "fake_cluster", "kube_api", "kubeconfig", "priorities"]
