"""History replays need a cluster with work on it: the workloads' fake cluster."""

from tests.workloads.conftest import fake_cluster, kube_api, kubeconfig, priorities

__all__ = ["fake_cluster", "kube_api", "kubeconfig", "priorities"]
