"""`gpu-east` on the real control plane: KWOK GPU nodes labelled as GPU Feature Discovery
labels them, the teams' namespaces bound, quotas handed down the tree, and Tidegate
talking to the API server as its own user."""

from __future__ import annotations

import base64
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from django.core.wsgi import get_wsgi_application

from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.workloads.selectors import admitted_jobs
from tests.clusters import bind_team_namespaces, hand_down
from tests.conftest import Cast
from tests.kube_real.chart import rendered_chart
from tests.kube_real.cluster import RUNS_UNTIL_FINISHED, RealCluster
from tests.kube_real.fixtures import control_plane, real_cluster
from tests.workloads.conftest import priorities

__all__ = ["control_plane", "priorities", "real_cluster"]

H100_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
}
A100_MIG_LABELS = H100_LABELS | {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.memory": "40960",
    "nvidia.com/mig.config": "all-1g.5gb",
}
NAMESPACES = ("vision-train", "vision-dev", "speech-train", "globex-train")


@dataclass
class RealGpuCluster:
    real: RealCluster
    cluster: Cluster
    gateway: KubernetesGateway
    h100: Flavour
    mig_1g: Flavour


def seed_gpu_nodes(real: RealCluster) -> None:
    """Two whole-GPU H100 nodes in one NVLink clique (16 GPUs, all the organisation's
    guarantee) and an A100 split into 1g.5gb slices; each a KWOK node with GPUs in its
    capacity."""
    for name, clique in (("h100-1", "fabric.1"), ("h100-2", "fabric.1")):
        real.add_node(
            name,
            labels=H100_LABELS | {"nvidia.com/gpu.clique": clique},
            allocatable={"nvidia.com/gpu": "8"},
        )
    real.add_node("a100-1", labels=A100_MIG_LABELS, allocatable={"nvidia.com/mig-1g.5gb": "56"})


def tidegate_gateway(real: RealCluster) -> KubernetesGateway:
    return KubernetesGateway.from_kubeconfig(
        str(real.plane.gateway_kubeconfig),
        "tidegate",
        retry=RetryPolicy(attempts=5, base_delay=0.2),
    )


@pytest.fixture
def gpu_cluster(cast: Cast, real_cluster: RealCluster) -> Iterator[RealGpuCluster]:
    """`gpu-east` with its nodes synced from the real API server, vision and speech bound,
    quotas handed down the tree (the same shape as the fake cluster of tests/bridge)."""
    seed_gpu_nodes(real_cluster)
    for namespace in NAMESPACES:
        real_cluster.add_namespace(namespace)
    cluster = Cluster.objects.create(
        name="gpu-east",
        gateway="kubernetes",
        kubeconfig_path=str(real_cluster.plane.gateway_kubeconfig),
        kube_context="tidegate",
    )
    gateway = tidegate_gateway(real_cluster)
    inventory_sync(cluster, gateway, admitted=admitted_jobs)
    h100 = Flavour.objects.get(cluster=cluster, name="h100-80gb")
    mig = Flavour.objects.get(cluster=cluster, name="a100-sxm4-40gb-mig-1g.5gb")
    bind_team_namespaces(cast)
    hand_down(
        [
            (cast.org, h100, 16),
            (cast.dept, h100, 12),
            (cast.team_a, h100, 8),
            (cast.team_b, h100, 4),
            (cast.other_org, h100, 4),
            (cast.org, mig, 28),
            (cast.dept, mig, 28),
            (cast.team_a, mig, 14),
        ]
    )
    yield RealGpuCluster(real_cluster, cluster, gateway, h100, mig)
    gateway.close()


def job_manifest(
    namespace: str,
    name: str,
    *,
    queue: str | None,
    gpus: int,
    pods: int = 1,
    resource: str = "nvidia.com/gpu",
    suspend: bool | None = True,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Job as a user writes it: GPU requests and limits, a queue label, pods that run
    until the test finishes them."""
    amounts = {resource: str(gpus)}
    spec: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "template": {
            "metadata": {"annotations": dict(RUNS_UNTIL_FINISHED)},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "train",
                        "image": "registry.example/train:1",
                        "resources": {"requests": amounts, "limits": amounts},
                    }
                ],
            },
        },
    }
    if suspend is not None:
        spec["suspend"] = suspend
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if queue:
        metadata["labels"] = {"tidegate.io/queue": queue}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return


def _wait_until_the_api_server_calls(real: RealCluster, timeout_s: float = 30.0) -> None:
    """A webhook configuration takes effect once the API server's informer has seen it,
    not when its create returns: until then a queue Job is created running. Dry-run
    creates (the webhook has no side effects, so it is called for them) until one comes
    back held."""
    probe = job_manifest("default", "webhook-probe", queue="probe", gpus=1, suspend=None)
    path = real.path("Job", "default") + "?dryRun=All"
    deadline = time.monotonic() + timeout_s
    while True:
        answer = real.request("POST", path, json=probe)
        if answer.status_code < 400 and answer.json()["spec"].get("suspend") is True:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the API server did not call the webhook within {timeout_s:.0f} s: "
                f"{answer.status_code} {answer.text[:300]}"
            )
        time.sleep(0.1)


@pytest.fixture
def tidegate_webhook(real_cluster: RealCluster, tmp_path: Path) -> Iterator[str]:
    """Tidegate's web application over HTTPS on a local port (a certificate of the test CA)
    and the chart's own MutatingWebhookConfiguration (rendered by helm), pointed at it: the
    API server sends it every create of a queue Job and of a queue pod. Removed after."""
    cert, key = real_cluster.plane.issue_serving_certificate("tidegate-webhook", tmp_path)
    server: WSGIServer = make_server("127.0.0.1", 0, get_wsgi_application(), handler_class=_Quiet)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"https://127.0.0.1:{server.server_port}"
    ca_bundle = base64.b64encode(real_cluster.plane.ca_file.read_bytes()).decode()
    (config,) = [d for d in rendered_chart() if d["kind"] == "MutatingWebhookConfiguration"]
    config["metadata"].pop("annotations", None)  # cert-manager's: the CA is given here
    for webhook in config["webhooks"]:
        path = webhook["clientConfig"]["service"]["path"]
        webhook["clientConfig"] = {"url": f"{base}{path}", "caBundle": ca_bundle}
    real_cluster.create_object(config)
    try:
        _wait_until_the_api_server_calls(real_cluster)
        yield base
    finally:
        real_cluster.delete_object("MutatingWebhookConfiguration", None, config["metadata"]["name"])
        server.shutdown()
        server.server_close()
