"""platform/rbac.yaml grants exactly what the Kubernetes gateway uses: every gateway call
runs against the local API server enforcing those rules (a missing verb is a 403), and
every verb granted is used by some call."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from scheduler_bridge.gateways import GatewayError
from scheduler_bridge.gateways.base import JobRef
from scheduler_bridge.gateways.kubernetes import KubernetesGateway
from scheduler_bridge.gateways.manifests import managed_labels, quota_hard
from scheduler_bridge.gateways.watch_cache import drop_shared_caches
from scheduler_bridge.integrations import INTEGRATIONS
from scheduler_bridge.workloads.queue_watch import signature
from tests.gateways.conftest import kubernetes_gateway
from tests.gateways.test_kubernetes_gateway import _make_job
from tests.kube_fake.rbac import Rules
from tests.kube_fake.server import FakeKubeApi

RBAC = Path(__file__).resolve().parents[2] / "platform" / "rbac.yaml"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


@pytest.fixture
def gateway(kube_api: FakeKubeApi, tmp_path: Path) -> Iterator[KubernetesGateway]:
    opened = kubernetes_gateway(kube_api, tmp_path)
    with opened:
        yield opened


def rules() -> Rules:
    return Rules.from_documents(d for d in yaml.safe_load_all(RBAC.read_text()) if d)


def test_every_gateway_call_is_allowed_and_every_grant_is_used(kube_api, gateway, tmp_path) -> None:
    # a cluster before 1.36, where the gateway clears a preempted Job's startTime itself
    # (jobs/status): the grant must be there for those clusters
    kube_api.store.suspended_jobs_mutable = False
    kube_api.add_namespace("team-a")
    kube_api.add_namespace("gpu-operator")
    kube_api.add_node("gpu-1", labels=H100, allocatable={"nvidia.com/gpu": "8"})
    _make_job(kube_api)
    granted = rules()
    kube_api.enforce_rbac(granted)

    gateway.list_nodes()
    gateway.list_gpu_pods()
    gateway.list_namespaces()
    assert gateway.list_resource_slices() == []
    assert gateway.list_device_classes() == []
    assert gateway.list_resource_claim_templates() == []
    assert gateway.list_resource_claims() == []
    gateway.list_jobs("tidegate.io/queue")
    gateway.list_jobs(namespace="team-a")
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
    kube_api.run_job("team-a", "train")
    job = gateway.suspend_job("team-a", "train")
    gateway.record_job_event(
        JobRef(job.namespace, job.name, job.uid), "Preempted", "preempted for a reclaim"
    )
    gateway.delete_resource_quota("team-a", "tidegate-gpu")
    # every integrated kind: discovered, listed, resumed and suspended (replace); an
    # elastic Job scaled and a Job's announced preemption written (update)
    from scheduler_bridge.integrations import BY_KIND
    from scheduler_bridge.integrations import access as objects
    from tests.integrations import objects as manifests

    for kind, crd in manifests.CRD_OF.items():
        kube_api.install_crd(crd)
        kube_api.create_object(manifests.eight_gpus(kind, "team-a", kind.lower(), "a"))
        integration = BY_KIND[kind]
        (read,) = objects.list_queued(gateway, integration, "tidegate.io/queue") or []
        objects.start(gateway, integration, "team-a", read.name, H100, [])
        objects.stop(gateway, integration, "team-a", read.name)
    objects.scale(gateway, BY_KIND["Job"], "team-a", "train", {"main": 1})
    objects.announce_preemption(gateway, BY_KIND["Job"], "team-a", "train", "2026-12-02T00:00:00Z")
    # a gated pod: released onto its flavour, then taken back
    from scheduler_bridge.gateways.base import POD_KIND
    from scheduler_bridge.integrations.pods import released

    gated = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "serve-1",
            "namespace": "team-a",
            "labels": {"tidegate.io/queue": "a"},
        },
        "spec": {
            "schedulingGates": [{"name": "tidegate.io/admission"}],
            "containers": [
                {"name": "s", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }
    kube_api.create_object(gated)
    assert gateway.list_objects(POD_KIND, "tidegate.io/queue")
    assert objects.queued_pod_groups(gateway, "tidegate.io/queue")  # and their controllers
    gateway.update_object(POD_KIND, "team-a", "serve-1", lambda p: released(p, H100, []))
    assert gateway.delete_pod("team-a", "serve-1", 30)
    # what the workers do: read pods, nodes, Tidegate's quotas and DRA slices, classes
    # and claims from watched caches
    with kubernetes_gateway(kube_api, tmp_path, cache_key="rbac-test:watch") as cached:
        cached.list_nodes()
        cached.list_gpu_pods()
        cached.list_resource_quotas("app.kubernetes.io/managed-by=tidegate")
        cached.list_resource_slices()
        cached.list_device_classes()
        cached.list_resource_claims()
        deadline = time.monotonic() + 5
        while kube_api.open_watches < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
    drop_shared_caches("rbac-test:")
    # what the queue watch does: watch every served kind's queue-labelled objects
    kinds = [i.ref for i in INTEGRATIONS] + [POD_KIND]
    watching = gateway.watch_labelled(kinds, "tidegate.io/queue", signature, lambda: None)
    try:
        deadline = time.monotonic() + 5
        while kube_api.open_watches < len(kinds) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        watching.stop()

    assert [r for r in kube_api.requests if r.status == 403] == []
    assert granted.used == granted.granted(), granted.granted() - granted.used


def test_no_configmap_but_the_mig_one_is_writable(kube_api, gateway) -> None:
    kube_api.add_namespace("team-a")
    kube_api.add_namespace("gpu-operator")
    kube_api.enforce_rbac(rules())
    for namespace, name in (("team-a", "tidegate-mig-config"), ("gpu-operator", "other")):
        kube_api.create_object(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
                "data": {"k": "v"},
            }
        )
        with pytest.raises(GatewayError, match="refused access"):
            gateway.apply_config_map(namespace, name, {"k": "changed"}, {})
