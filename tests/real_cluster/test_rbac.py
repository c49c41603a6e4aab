"""Tidegate's workers run in a cluster as the ServiceAccount the chart creates, bound to
exactly the chart's roles: rendered by helm from platform/helm/tidegate and applied to the
real API server, whose RBAC authorizer then judges every call the gateway makes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from scheduler_bridge.gateways.base import JOB_KIND, POD_KIND, JobRef
from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
from scheduler_bridge.gateways.manifests import managed_labels, quota_hard
from scheduler_bridge.workloads.queue_watch import signature
from tests.kube_real.chart import NAMESPACE, rendered_chart
from tests.kube_real.cluster import RealCluster

from .conftest import job_manifest

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture
def chart_rbac(real_cluster: RealCluster) -> Iterator[list[dict[str, Any]]]:
    """The chart's ServiceAccount and roles, applied; the cluster-wide ones removed after."""
    documents = [d for d in rendered_chart() if d["kind"] in RBAC_KINDS]
    real_cluster.add_namespace(NAMESPACE)
    real_cluster.add_namespace("gpu-operator")
    for document in documents:
        document["metadata"].setdefault(
            "namespace", NAMESPACE if document["kind"] == "ServiceAccount" else None
        )
        if document["metadata"]["namespace"] is None:
            del document["metadata"]["namespace"]
        real_cluster.create_object(document)
    try:
        yield documents
    finally:
        for document in documents:
            meta = document["metadata"]
            real_cluster.delete_object(document["kind"], meta.get("namespace"), meta["name"])


def service_account_gateway(real: RealCluster, tmp_path: Path, name: str) -> KubernetesGateway:
    """A gateway holding a token the API server issued for the ServiceAccount."""
    answer = real.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert answer.status_code == 201, answer.text
    token = answer.json()["status"]["token"]
    path = real.plane.write_kubeconfig(tmp_path / "sa.kubeconfig", "tidegate-sa", token)
    return KubernetesGateway.from_kubeconfig(
        str(path), "tidegate-sa", retry=RetryPolicy(attempts=5, base_delay=0.2)
    )


def test_every_gateway_call_is_allowed_to_the_charts_service_account_and_no_more(
    real_cluster: RealCluster, chart_rbac: list[dict[str, Any]], tmp_path: Path
) -> None:
    (account,) = [d for d in chart_rbac if d["kind"] == "ServiceAccount"]
    real = real_cluster
    real.add_namespace("team-a")
    real.add_node("gpu-1", labels=H100, allocatable={"nvidia.com/gpu": "8"})
    real.create_object(job_manifest("team-a", "train", queue="a", gpus=1))

    gateway = service_account_gateway(real, tmp_path, account["metadata"]["name"])
    with gateway:
        assert [n.name for n in gateway.list_nodes()] == ["gpu-1"]
        gateway.list_gpu_pods()
        assert "team-a" in gateway.list_namespaces()
        assert gateway.list_resource_slices() is not None  # resource.k8s.io/v1 is served
        assert gateway.list_device_classes() is not None
        assert gateway.list_resource_claim_templates() is not None
        assert gateway.list_resource_claims() is not None
        assert [j.name for j in gateway.list_jobs("tidegate.io/queue")] == ["train"]
        hard = quota_hard({"nvidia.com/gpu": 4})
        gateway.apply_resource_quota("team-a", "tidegate-gpu", hard, managed_labels("team-a"))
        gateway.apply_resource_quota(
            "team-a", "tidegate-gpu", quota_hard({"nvidia.com/gpu": 2}), managed_labels("team-a")
        )
        gateway.list_resource_quotas("app.kubernetes.io/managed-by=tidegate")
        gateway.apply_config_map("gpu-operator", "tidegate-mig-config", {"config.yaml": "a"}, {})
        gateway.apply_config_map("gpu-operator", "tidegate-mig-config", {"config.yaml": "b"}, {})
        gateway.set_node_labels("gpu-1", {"nvidia.com/mig.config": "all-disabled"})
        gateway.admit_job("team-a", "train", H100, [])
        real.active_job_pods("team-a", "train")
        job = gateway.suspend_job("team-a", "train")
        gateway.record_job_event(
            JobRef(job.namespace, job.name, job.uid), "Preempted", "preempted for a reclaim"
        )
        assert gateway.delete_resource_quota("team-a", "tidegate-gpu") is True
        # the queue watch: Jobs (the kinds whose CRDs are installed likewise) and pods,
        # each listed, then watched
        watching = gateway.watch_labelled(
            [JOB_KIND, POD_KIND], "tidegate.io/queue", signature, lambda: None
        )
        try:
            real.wait_for(
                lambda: all(h["watches"] >= 1 for h in watching.health().values()),
                f"both collections to list and watch: {watching.health()}",
            )
            real.create_object(job_manifest("team-a", "later", queue="a", gpus=1))
            real.wait_for(
                lambda: watching.health()["jobs.batch"]["events"] >= 1,
                f"the new Job through the watch: {watching.health()}",
            )
        finally:
            watching.stop()

        # outside the roles: Secrets are nobody's business here, and no other ConfigMap
        with pytest.raises(ApiException) as secrets:
            gateway._core.list_namespaced_secret("team-a")
        assert secrets.value.status == 403
        with pytest.raises(ApiException) as config_map:
            gateway._core.read_namespaced_config_map("kube-root-ca.crt", "gpu-operator")
        assert config_map.value.status == 403

    # the chart runs the queue watch as that same account
    (watch,) = [
        d
        for d in rendered_chart()
        if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-watch")
    ]
    pod = watch["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["containers"][0]["command"][:3] == ["python", "manage.py", "watch_queues"]

    # every request the ServiceAccount made was allowed, as the audit log records it
    user = f"system:serviceaccount:{NAMESPACE}:{account['metadata']['name']}"
    refused = real.refused_requests_of(user)
    assert len(refused) == 2 and {r["objectRef"]["resource"] for r in refused} == {
        "secrets",
        "configmaps",
    }
