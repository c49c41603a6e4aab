"""Fixtures for the gateway tests: the fake API server, and one test-facing view over
either gateway so behavioural tests run against both."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scheduler_bridge.gateways import simulated
from scheduler_bridge.gateways.base import ClusterGateway
from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
from scheduler_bridge.gateways.simulated import SimulatedCluster, SimulatedGateway
from tests.kube_fake import FakeKubeApi
from tests.kube_fake.fixtures import kube_api, kubeconfig, write_kubeconfig  # noqa: F401
from tests.kube_real.cluster import GATEWAY_USER, RUNS_UNTIL_FINISHED, RealCluster
from tests.kube_real.fixtures import control_plane, real_cluster  # noqa: F401

# Fast retries: the behaviour is the same, the suite is not.
FAST_RETRY = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)


def kubernetes_gateway(api: FakeKubeApi, tmp_path: Path, **settings: Any) -> KubernetesGateway:
    path, context = write_kubeconfig(tmp_path, api.url)
    settings.setdefault("retry", FAST_RETRY)
    return KubernetesGateway.from_kubeconfig(path, context, **settings)


@dataclass
class Backend:
    """A cluster seen by a test: the gateway under test plus ways to seed, inspect and
    tamper with the cluster behind it (the fake API server, the simulated cluster or the
    real control plane)."""

    kind: str
    gateway: ClusterGateway
    store: FakeKubeApi | SimulatedCluster | RealCluster

    def writes(self) -> int:
        """Writes the gateway made (the real server's audit log counts them)."""
        if isinstance(self.store, FakeKubeApi):
            return self.store.write_count()
        if isinstance(self.store, RealCluster):
            return self.store.writes_by(GATEWAY_USER)
        return self.store.write_count

    def eventually(self, check: Callable[[], Any], what: str) -> Any:
        """``check()`` once it is true: at once on the fake and the simulated cluster, whose
        controllers act inside the write; the real control plane's act a moment later."""
        if isinstance(self.store, RealCluster):
            return self.store.wait_for(check, what)
        result = check()
        assert result, what
        return result

    def get(self, kind: str, namespace: str | None, name: str) -> Any:
        """The stored object (a dict), or None."""
        return self.store.get_object(kind, namespace, name)

    def edit(
        self, kind: str, namespace: str | None, name: str, change: Callable[[dict], Any]
    ) -> None:
        self.store.edit_object(kind, namespace, name, change)

    def delete(self, kind: str, namespace: str | None, name: str) -> None:
        assert self.store.delete_object(kind, namespace, name)

    def add_namespace(self, name: str) -> None:
        self.store.add_namespace(name)

    def add_gpu_node(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        if isinstance(self.store, FakeKubeApi | RealCluster):
            self.store.add_node(
                name, labels=labels, allocatable={"cpu": "64", "nvidia.com/gpu": "8"}
            )
        else:
            self.store.add_node(name, labels=labels)

    def add_job(
        self,
        namespace: str,
        name: str,
        *,
        requests: Mapping[str, int],
        parallelism: int = 1,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, str]] = (),
        labels: Mapping[str, str] | None = None,
        suspended: bool = True,
        completion_mode: str | None = None,
    ) -> None:
        """A Job as a user creates it (an Indexed one with ``completion_mode``: the mode
        cannot change after creation)."""
        if isinstance(self.store, SimulatedCluster):
            self.store.add_job(
                namespace,
                name,
                requests=requests,
                parallelism=parallelism,
                node_selector=node_selector,
                tolerations=tolerations,
                labels=labels,
                suspended=suspended,
            )
            if completion_mode:
                self.store.edit_object(
                    "Job",
                    namespace,
                    name,
                    lambda j: j["spec"].update(completionMode=completion_mode),
                )
            return
        amounts = {k: str(v) for k, v in requests.items()}
        pod_spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "train",
                    "image": "registry.example/train:1",
                    "resources": {"requests": amounts, "limits": amounts},
                }
            ],
        }
        if node_selector:
            pod_spec["nodeSelector"] = dict(node_selector)
        if tolerations:
            pod_spec["tolerations"] = [dict(t) for t in tolerations]
        template: dict[str, Any] = {"spec": pod_spec}
        if isinstance(self.store, RealCluster):
            template["metadata"] = {"annotations": dict(RUNS_UNTIL_FINISHED)}
        job: dict[str, Any] = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "suspend": suspended,
                "template": template,
            },
        }
        if completion_mode:
            job["spec"]["completionMode"] = completion_mode
        self.store.create_object(job)

    def pods_of(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """Pods the Job controller runs for ``job`` (the fake starts them on request,
        the simulated cluster by itself, the real one once its controller and scheduler
        have settled them)."""
        if isinstance(self.store, RealCluster):
            return self.store.active_job_pods(namespace, job)
        if isinstance(self.store, FakeKubeApi):
            live = self.store.get_object("Job", namespace, job)
            if live and not live["spec"].get("suspend") and not self.store.store.owned_pods(live):
                self.store.run_job(namespace, job)
        uid = self.get("Job", namespace, job)["metadata"]["uid"]
        return [
            p
            for p in self.store.objects("Pod", namespace)
            if any(o["uid"] == uid for o in p["metadata"].get("ownerReferences") or [])
            and p["status"]["phase"] in ("Pending", "Running")
        ]


@pytest.fixture
def sim_cluster() -> Iterator[SimulatedCluster]:
    simulated.reset()
    cluster = simulated.register(SimulatedCluster("test"))
    yield cluster
    simulated.reset()


@pytest.fixture(params=["kubernetes", "simulated", "real"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each behavioural test runs once per gateway: the Kubernetes gateway against the
    fake API server and against the real control plane, and the simulated gateway. Where
    the fake and the real server disagree, the real one is right."""
    if request.param == "kubernetes":
        api: FakeKubeApi = request.getfixturevalue("kube_api")
        gateway = kubernetes_gateway(api, tmp_path)
        with gateway:
            yield Backend("kubernetes", gateway, api)
    elif request.param == "real":
        real: RealCluster = request.getfixturevalue("real_cluster")
        gateway = KubernetesGateway.from_kubeconfig(
            real.plane.gateway_kubeconfig, "tidegate", retry=FAST_RETRY
        )
        with gateway:
            yield Backend("real", gateway, real)
    else:
        cluster = request.getfixturevalue("sim_cluster")
        yield Backend("simulated", SimulatedGateway(cluster), cluster)
