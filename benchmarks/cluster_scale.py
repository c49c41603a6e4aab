"""Inventory and quota sync of a 5,000-node, 100,000-pod cluster on the local API server.

The server runs in a child process (its own memory is not Tidegate's); Tidegate reads
it through the real Kubernetes client with its watched cache, as a worker does:

* ``first_sync_s``: the first inventory sync and quota sync (the cache lists pods,
  nodes and quotas once, then watches; 1,000 quotas are created);
* then 1 % of the pods change (1,000: some finish, some are deleted, new ones start),
  the watches deliver it, and one steady round (inventory sync, then quota sync) runs:
  ``steady_round_s`` and ``steady_round_requests`` (requests the API server received
  during the round: the quota writes that the changes call for);
* ``peak_rss_mb``: the worker process's peak resident memory up to then;
* for comparison, the same round again with a gateway that lists everything
  (``listed_round_s``, ``listed_round_requests``).

Prints one JSON line: bench, scenario, nodes, pods, gpu_pods, first_sync_s,
steady_round_s, steady_round_cpu_s (the worker's own CPU time in it), steady_round_requests, steady_round_writes, peak_rss_mb,
listed_round_s, listed_round_requests.

Then the same measurements on a real control plane (``scenario: real``, ``server:
real``; kube-apiserver, etcd, the controllers and KWOK of ``toolchain/``) with KWOK nodes,
1,000 nodes and 20,000 pods (``REAL_SCALE``, default 0.2 of the cluster above), beside
the local API server at that same size (``scenario: sync``, ``server: fake``). Pods are
created bound to their nodes (KWOK runs them; no scheduling is measured), requests are
counted from the API server's audit log of Tidegate's user.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import resource
import sys
import tempfile
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._support import (  # noqa: E402
    bench_database,
    emit,
    progress,
    teams_under_one_org,
)

# CLUSTER_SCALE=0.1 builds a tenth of the cluster (a quick look while working on it).
SCALE = float(os.environ.get("CLUSTER_SCALE", "1"))
REAL_SCALE = os.environ.get("REAL_SCALE", "0.2")
NODES = int(5_000 * SCALE)
GPUS_PER_NODE = 8
DAEMON_PODS_PER_NODE = 8  # kube-proxy, CNI, node-exporter, dcgm-exporter, device plugin, ...
GPU_PODS = int(35_000 * SCALE)
SERVICE_PODS = int(100_000 * SCALE) - NODES * DAEMON_PODS_PER_NODE - GPU_PODS
TENANTS = max(1, int(100 * SCALE))
NAMESPACES_PER_TENANT = 10
CHANGED = 0.01

H100_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": str(GPUS_PER_NODE),
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.machine": "PowerEdge-XE9680",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.dcgm-exporter": "true",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    "nvidia.com/cuda.driver.major": "570",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
    "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
    "feature.node.kubernetes.io/kernel-version.full": "6.8.0-45-generic",
    "kubernetes.io/arch": "amd64",
    "kubernetes.io/os": "linux",
    "node.kubernetes.io/instance-type": "xe9680",
    "topology.kubernetes.io/zone": "zone-a",
}


def _namespace(i: int) -> str:
    return f"team-{i // NAMESPACES_PER_TENANT}-ns-{i % NAMESPACES_PER_TENANT}"


def _node(i: int) -> dict[str, Any]:
    name = f"gpu-{i:05d}"
    images = [
        {"names": [f"registry.example/image-{k}@sha256:{uuid.uuid4().hex}"], "sizeBytes": 10**9}
        for k in range(12)
    ]
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                **H100_LABELS,
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.clique": f"fabric-{i // 18}.1",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "csi.volume.kubernetes.io/nodeid": "{}",
            },
        },
        "spec": {"podCIDR": f"10.{i // 256}.{i % 256}.0/24", "providerID": f"metal://{name}"},
        "status": {
            "capacity": {"cpu": "224", "memory": "2063588Mi", "pods": "110", "nvidia.com/gpu": "8"},
            "allocatable": {
                "cpu": "220",
                "memory": "2000000Mi",
                "pods": "110",
                "nvidia.com/gpu": "8",
            },
            "conditions": [
                {
                    "type": t,
                    "status": "False" if t != "Ready" else "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-11-30T10:00:00Z",
                    "lastTransitionTime": "2026-11-01T00:00:00Z",
                }
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256}.{i % 256}"}],
            "nodeInfo": {
                "kubeletVersion": "v1.33.2",
                "containerRuntimeVersion": "containerd://2.0.5",
                "kernelVersion": "6.8.0-45-generic",
                "osImage": "Ubuntu 24.04.1 LTS",
            },
            "images": images,
        },
    }


def _pod(
    name: str, namespace: str, node: str, requests: dict[str, str], owner: str
) -> dict[str, Any]:
    """A pod about as big as a real one (about 3.5 KB of JSON)."""
    uid = str(uuid.uuid4())
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "labels": {
                "app.kubernetes.io/name": owner,
                "batch.kubernetes.io/job-name": owner,
                "controller-uid": uid,
                "team": namespace.split("-ns-")[0],
            },
            "annotations": {
                "kubectl.kubernetes.io/default-container": "main",
                "prometheus.io/scrape": "true",
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": owner,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-30T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {}}},
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-30T10:00:05Z",
                    "fieldsType": "FieldsV1",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {"f:phase": {}}},
                },
            ],
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:2026.11",
                    "command": ["python", "-m", "train", "--config", "/etc/train/config.yaml"],
                    "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(8)],
                    "resources": {
                        "requests": {"cpu": "8", "memory": "64Gi", **requests},
                        "limits": {"memory": "64Gi", **requests},
                    },
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/train"},
                        {
                            "name": "kube-api-access",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        },
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": "train-config"}},
                {
                    "name": "kube-api-access",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
                        ]
                    },
                },
            ],
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        },
        "status": {
            "phase": "Running",
            "startTime": "2026-11-30T10:00:05Z",
            "podIP": "10.1.2.3",
            "hostIP": "10.0.0.1",
            "qosClass": "Burstable",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-11-30T10:00:05Z"}
                for t in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "image": "registry.example/train:2026.11",
                    "imageID": f"sha256:{uuid.uuid4().hex}",
                    "containerID": f"containerd://{uuid.uuid4().hex}",
                    "state": {"running": {"startedAt": "2026-11-30T10:00:06Z"}},
                }
            ],
        },
    }


def _cluster_objects() -> list[dict[str, Any]]:
    namespaces = [
        {
            "kind": "Namespace",
            "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        for n in ["kube-system"] + [_namespace(i) for i in range(TENANTS * NAMESPACES_PER_TENANT)]
    ]
    objects = namespaces + [_node(i) for i in range(NODES)]
    for i in range(NODES):
        for d in range(DAEMON_PODS_PER_NODE):
            objects.append(
                _pod(f"daemon-{d}-{i:05d}", "kube-system", f"gpu-{i:05d}", {}, f"daemon-{d}")
            )
    namespaces_total = TENANTS * NAMESPACES_PER_TENANT
    for i in range(GPU_PODS):
        node = f"gpu-{i % NODES:05d}"
        objects.append(
            _pod(
                f"train-{i:05d}",
                _namespace(i % namespaces_total),
                node,
                {"nvidia.com/gpu": "1"},
                f"train-{i:05d}",
            )
        )
    for i in range(SERVICE_PODS):
        objects.append(
            _pod(
                f"web-{i:05d}",
                _namespace(i % namespaces_total),
                f"gpu-{i % NODES:05d}",
                {},
                f"web-{i // 10:05d}",
            )
        )
    return objects


def _serve(conn: Connection) -> None:
    """The child: a local API server holding the whole cluster, driven over ``conn``."""
    from tests.kube_fake.server import FakeKubeApi

    api = FakeKubeApi().start()
    api.store.load(_cluster_objects())
    conn.send(api.url)
    rng = random.Random(7)
    added = 0
    while True:
        command = conn.recv()
        if command == "change":
            changed = int((NODES * DAEMON_PODS_PER_NODE + GPU_PODS + SERVICE_PODS) * CHANGED)
            gpu_pods = [
                p["metadata"]
                for p in api.store.of("pods")
                if p["metadata"]["name"].startswith("train-")
            ]
            picked = rng.sample(gpu_pods, changed // 2)
            for meta in picked[: changed // 4]:  # finished
                api.edit_object(
                    "Pod",
                    meta["namespace"],
                    meta["name"],
                    lambda p: p["status"].update(phase="Succeeded"),
                )
            for meta in picked[changed // 4 :]:  # deleted
                api.delete_object("Pod", meta["namespace"], meta["name"])
            for _ in range(changed - changed // 2):  # started
                i = rng.randrange(TENANTS * NAMESPACES_PER_TENANT)
                api.put_object(
                    _pod(
                        f"new-{added:05d}",
                        _namespace(i),
                        f"gpu-{rng.randrange(NODES):05d}",
                        {"nvidia.com/gpu": "1"},
                        f"new-{added:05d}",
                    )
                )
                added += 1
            conn.send(api.store.version)
        elif command == "reset":
            api.reset_counts()
            conn.send(None)
        elif command == "counts":
            conn.send((api.count(), api.write_count(), api.open_watches))
        elif command == "stop":
            api.stop()
            conn.send(None)
            return


def _ask(conn: Connection, command: str) -> Any:
    conn.send(command)
    return conn.recv()


def main() -> None:
    """Both servers: this cluster on the local API server, then the real control plane and
    the local API server at the real scenario's size (each in a process of its own, its
    sizes from its environment)."""
    scenario = sys.argv[1] if len(sys.argv) > 1 else "all"
    if scenario == "fake":
        _fake()
    elif scenario == "real":
        _real()
    else:
        import subprocess

        _fake()
        for which in ("fake", "real"):
            env = {**os.environ, "CLUSTER_SCALE": REAL_SCALE}
            subprocess.run([sys.executable, __file__, which], env=env, check=True)


def _quiet_tasks() -> None:
    # Follow-up tasks (the admission cycle an inventory sync queues) stay queued in
    # memory: the benchmark measures the syncs alone.
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "false"
    os.environ["CELERY_BROKER_URL"] = "memory://"
    os.environ["CELERY_RESULT_BACKEND"] = "cache+memory://"


def _fake() -> None:
    _quiet_tasks()
    parent, child = multiprocessing.get_context("fork").Pipe()
    server = multiprocessing.get_context("fork").Process(target=_serve, args=(child,), daemon=True)
    server.start()
    progress(
        f"building a cluster of {NODES} nodes and {NODES * DAEMON_PODS_PER_NODE + GPU_PODS + SERVICE_PODS} pods ..."
    )
    url = parent.recv()
    try:
        with bench_database("cluster_scale"):
            _run(parent, url)
    finally:
        _ask(parent, "stop")
        server.join(timeout=10)


def _run(conn: Connection, url: str) -> None:
    from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
    from scheduler_bridge.gateways.watch_cache import drop_shared_caches
    from scheduler_bridge.inventory.models import Cluster
    from scheduler_bridge.inventory.services import inventory_sync
    from scheduler_bridge.quotas.models import Quota
    from scheduler_bridge.quotas.sync import quota_sync
    from scheduler_bridge.workloads.selectors import admitted_jobs, queue_holdings
    from tenants.models import NamespaceBinding
    from tests.kube_fake.fixtures import write_kubeconfig

    with tempfile.TemporaryDirectory() as tmp:
        path, context = write_kubeconfig(Path(tmp), url)
        cluster = Cluster.objects.create(
            name="scale", kubeconfig_path=str(path), kube_context=context
        )
        retry = RetryPolicy(attempts=3, base_delay=0.05)
        gateway = KubernetesGateway.from_kubeconfig(
            str(path), context, retry=retry, cache_key="scale:bench"
        )
        teams = teams_under_one_org(TENANTS, description="tenants and namespaces")
        NamespaceBinding.objects.bulk_create(
            NamespaceBinding(tenant=team, cluster_name="scale", namespace=f"team-{t}-ns-{n}")
            for t, team in enumerate(teams)
            for n in range(NAMESPACES_PER_TENANT)
        )

        progress("first inventory and quota sync (lists once, then watches) ...")
        started = time.perf_counter()
        inventory = inventory_sync(cluster, gateway, admitted=admitted_jobs)
        flavour = cluster.flavours.get(name="h100-80gb")
        Quota.objects.bulk_create(
            Quota(tenant=team, flavour=flavour, guaranteed=400) for team in teams
        )
        first = quota_sync(cluster, gateway, queue=queue_holdings(cluster))
        first_s = time.perf_counter() - started
        assert inventory.nodes == NODES and first.created == TENANTS * NAMESPACES_PER_TENANT, first
        gpu_pods = len(gateway.list_gpu_pods())

        progress("1 % of the pods change; waiting for the watch to deliver it ...")
        version = int(_ask(conn, "change"))
        pods = gateway.cache["pods"] if gateway.cache else None
        assert pods is not None
        deadline = time.monotonic() + 120
        while int(pods._version or 0) < version and time.monotonic() < deadline:
            time.sleep(0.05)
        _ask(conn, "reset")
        progress("steady round: inventory sync, then quota sync ...")
        started, cpu = time.perf_counter(), time.process_time()
        inventory_sync(cluster, gateway, admitted=admitted_jobs)
        inventory_s = time.perf_counter() - started
        steady = quota_sync(cluster, gateway, queue=queue_holdings(cluster))
        steady_s = time.perf_counter() - started
        steady_cpu_s = time.process_time() - cpu
        requests, writes, watches = _ask(conn, "counts")
        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        health = gateway.cache.health() if gateway.cache else {}
        gateway.close()
        drop_shared_caches("scale:")

        progress("the same round with a gateway that lists everything ...")
        listing = KubernetesGateway.from_kubeconfig(str(path), context, retry=retry)
        _ask(conn, "reset")
        started = time.perf_counter()
        inventory_sync(cluster, listing, admitted=admitted_jobs)
        quota_sync(cluster, listing, queue=queue_holdings(cluster))
        listed_s = time.perf_counter() - started
        listed_requests = _ask(conn, "counts")[0]
        listing.close()

        emit(
            bench="cluster_scale",
            scenario="sync",
            server="fake",
            nodes=NODES,
            pods=NODES * DAEMON_PODS_PER_NODE + GPU_PODS + SERVICE_PODS,
            gpu_pods=gpu_pods,
            first_sync_s=round(first_s, 3),
            steady_round_s=round(steady_s, 3),
            steady_round_cpu_s=round(steady_cpu_s, 3),
            steady_inventory_s=round(inventory_s, 3),
            steady_quota_s=round(steady_s - inventory_s, 3),
            steady_round_requests=requests,
            steady_round_writes=writes,
            steady_round_quota_updates=steady.updated,
            open_watches=watches,
            peak_rss_mb=round(peak_rss_mb, 1),
            listed_round_s=round(listed_s, 3),
            listed_round_requests=listed_requests,
            # lists after each started collection's first (ResourceClaims are watched only
            # once some GPU pod names claims: not here)
            relists=sum(c["lists"] - 1 for c in health.values() if c["lists"]),
        )


# --- the real control plane ---------------------------------------------------------------


def _as_created(obj: dict[str, Any]) -> dict[str, Any]:
    """What a client sends to create ``obj``: no uid, owners, managed fields or status
    (the garbage collector would delete a pod whose owner does not exist)."""
    meta = {
        k: v
        for k, v in obj["metadata"].items()
        if k not in ("uid", "ownerReferences", "managedFields")
    }
    created = {"apiVersion": "v1", **{k: v for k, v in obj.items() if k != "status"}}
    created["metadata"] = meta
    if obj["kind"] == "Pod":
        spec = dict(obj["spec"])
        spec["automountServiceAccountToken"] = False
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "kube-api-access"]
        spec["containers"] = [
            {
                **c,
                "volumeMounts": [m for m in c["volumeMounts"] if m["name"] != "kube-api-access"],
            }
            for c in spec["containers"]
        ]
        created["spec"] = spec
    if obj["kind"] == "Node":
        created["metadata"]["labels"] = {**meta["labels"], "type": "kwok"}
        created["metadata"]["annotations"] = {**meta["annotations"], "kwok.x-k8s.io/node": "fake"}
        created["status"] = {
            k: obj["status"][k] for k in ("capacity", "allocatable", "nodeInfo", "addresses")
        }
    return created


def _send(admin: Any, method: str, path: str, body: Any = None, *, patch: bool = False) -> Any:
    """One administrator request (toolchain.admin.AdminClient, a session per thread),
    asked again while the API server is throttling or busy."""
    from toolchain.admin import RETRIED_STATUSES

    headers = {"Content-Type": "application/merge-patch+json"} if patch else {}
    for _ in range(20):
        answer = admin.request(method, path, json=body, headers=headers, timeout_s=60)
        if answer.status_code in RETRIED_STATUSES:
            time.sleep(0.5)
            continue
        if answer.status_code >= 400 and answer.status_code != 409:
            raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text[:300]}")
        return answer
    raise RuntimeError(f"{method} {path}: the API server kept refusing")


def _path(obj: dict[str, Any]) -> str:
    plural = {"Namespace": "namespaces", "Node": "nodes", "Pod": "pods"}[obj["kind"]]
    namespace = obj["metadata"].get("namespace")
    return f"/api/v1/namespaces/{namespace}/{plural}" if namespace else f"/api/v1/{plural}"


def _create_all(admin: Any, objects: list[dict[str, Any]], what: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from rich.console import Console
    from rich.progress import track

    with ThreadPoolExecutor(12) as pool:
        done = pool.map(lambda o: _send(admin, "POST", _path(o), _as_created(o)), objects)
        for _ in track(done, total=len(objects), description=what, console=Console(stderr=True)):
            pass


def _real() -> None:
    _quiet_tasks()
    from toolchain.control_plane import ControlPlane

    with tempfile.TemporaryDirectory(prefix="tidegate-scale-") as tmp:
        progress("starting the real control plane ...")
        plane = ControlPlane.prepare(Path(tmp) / "plane")
        plane.start()
        try:
            with bench_database("cluster_scale_real"):
                _run_real(plane)
        finally:
            plane.stop()


def _audit_requests(plane: Any, since: int) -> tuple[int, int]:
    """(requests, writes) of Tidegate's user in the audit log after line ``since``."""
    import json

    lines = plane.audit_log.read_text().splitlines()[since:]
    events = [json.loads(line) for line in lines]
    mine = [
        e
        for e in events
        if e.get("stage") == "ResponseComplete" and e["user"]["username"] == "tidegate"
    ]
    writes = sum(1 for e in mine if e["verb"] in ("create", "update", "patch", "delete"))
    return len(mine), writes


def _audit_lines(plane: Any) -> int:
    return len(plane.audit_log.read_text().splitlines()) if plane.audit_log.exists() else 0


def _run_real(plane: Any) -> None:
    from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
    from scheduler_bridge.gateways.watch_cache import drop_shared_caches
    from scheduler_bridge.inventory.models import Cluster
    from scheduler_bridge.inventory.services import inventory_sync
    from scheduler_bridge.quotas.models import Quota
    from scheduler_bridge.quotas.sync import quota_sync
    from scheduler_bridge.workloads.selectors import admitted_jobs, queue_holdings
    from tenants.models import NamespaceBinding

    admin = plane.admin
    objects = _cluster_objects()
    namespaces = [
        o for o in objects if o["kind"] == "Namespace" and o["metadata"]["name"] != "kube-system"
    ]
    nodes = [o for o in objects if o["kind"] == "Node"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    _create_all(admin, namespaces, "namespaces")
    for namespace in [n["metadata"]["name"] for n in namespaces] + ["kube-system"]:
        plane.wait_for_default_service_account(namespace)
    _create_all(admin, nodes, "KWOK nodes")
    _create_all(admin, pods, "pods, bound to their nodes")
    progress("waiting for KWOK to run the pods ...")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        listed = _send(
            admin, "GET", "/api/v1/pods?fieldSelector=status.phase%3DPending&limit=1"
        ).json()
        remaining = listed["metadata"].get("remainingItemCount", 0) + len(listed["items"])
        if remaining == 0:
            break
        time.sleep(2)

    cluster = Cluster.objects.create(
        name="scale-real",
        kubeconfig_path=str(plane.gateway_kubeconfig),
        kube_context="tidegate",
    )
    retry = RetryPolicy(attempts=5, base_delay=0.2)
    gateway = KubernetesGateway.from_kubeconfig(
        str(plane.gateway_kubeconfig), "tidegate", retry=retry, cache_key="scale-real:bench"
    )
    teams = teams_under_one_org(TENANTS, description="tenants and namespaces")
    NamespaceBinding.objects.bulk_create(
        NamespaceBinding(tenant=team, cluster_name="scale-real", namespace=f"team-{t}-ns-{n}")
        for t, team in enumerate(teams)
        for n in range(NAMESPACES_PER_TENANT)
    )
    progress("first inventory and quota sync (lists once, then watches) ...")
    started = time.perf_counter()
    inventory = inventory_sync(cluster, gateway, admitted=admitted_jobs)
    flavour = cluster.flavours.get(name="h100-80gb")
    Quota.objects.bulk_create(Quota(tenant=team, flavour=flavour, guaranteed=400) for team in teams)
    first = quota_sync(cluster, gateway, queue=queue_holdings(cluster))
    first_s = time.perf_counter() - started
    assert inventory.nodes == NODES and first.created == TENANTS * NAMESPACES_PER_TENANT, first
    gpu_pods = len(gateway.list_gpu_pods())

    progress("1 % of the pods change; waiting for the watch to deliver it ...")
    rng = random.Random(7)
    changed = int(len(pods) * CHANGED)
    trained = [p for p in pods if p["metadata"]["name"].startswith("train-")]
    picked = rng.sample(trained, changed // 2)
    for pod in picked[: changed // 4]:  # finished, as a kubelet reports it
        meta = pod["metadata"]
        _send(
            admin,
            "PATCH",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            {"status": {"phase": "Succeeded"}},
            patch=True,
        )
    for pod in picked[changed // 4 :]:  # deleted
        meta = pod["metadata"]
        _send(
            admin,
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            {"gracePeriodSeconds": 0},
        )
    new = [
        _pod(
            f"new-{k:05d}",
            _namespace(rng.randrange(TENANTS * NAMESPACES_PER_TENANT)),
            f"gpu-{rng.randrange(NODES):05d}",
            {"nvidia.com/gpu": "1"},
            f"new-{k:05d}",
        )
        for k in range(changed - changed // 2)
    ]
    _create_all(admin, new, "new pods")
    expected = gpu_pods - (changed // 2 - changed // 4) + len(new)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        cached = gateway.list_gpu_pods()
        if len(cached) == expected and sum(p.phase == "Succeeded" for p in cached) >= changed // 4:
            break
        time.sleep(0.2)
    since = _audit_lines(plane)
    progress("steady round: inventory sync, then quota sync ...")
    started, cpu = time.perf_counter(), time.process_time()
    inventory_sync(cluster, gateway, admitted=admitted_jobs)
    inventory_s = time.perf_counter() - started
    steady = quota_sync(cluster, gateway, queue=queue_holdings(cluster))
    steady_s = time.perf_counter() - started
    steady_cpu_s = time.process_time() - cpu
    requests_made, writes = _audit_requests(plane, since)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gateway.close()
    drop_shared_caches("scale-real:")

    progress("the same round with a gateway that lists everything ...")
    listing = KubernetesGateway.from_kubeconfig(
        str(plane.gateway_kubeconfig), "tidegate", retry=retry
    )
    since = _audit_lines(plane)
    started = time.perf_counter()
    inventory_sync(cluster, listing, admitted=admitted_jobs)
    quota_sync(cluster, listing, queue=queue_holdings(cluster))
    listed_s = time.perf_counter() - started
    listed_requests, _ = _audit_requests(plane, since)
    listing.close()
    emit(
        bench="cluster_scale",
        scenario="real",
        server="real",
        nodes=NODES,
        pods=len(pods),
        gpu_pods=gpu_pods,
        first_sync_s=round(first_s, 3),
        steady_round_s=round(steady_s, 3),
        steady_round_cpu_s=round(steady_cpu_s, 3),
        steady_inventory_s=round(inventory_s, 3),
        steady_quota_s=round(steady_s - inventory_s, 3),
        steady_round_requests=requests_made,
        steady_round_writes=writes,
        steady_round_quota_updates=steady.updated,
        peak_rss_mb=round(peak_rss_mb, 1),
        listed_round_s=round(listed_s, 3),
        listed_round_requests=listed_requests,
    )


if __name__ == "__main__":
    main()
