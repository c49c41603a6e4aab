"""An in-process GPU cluster: the state behind :class:`~.simulated.SimulatedGateway`.

Objects are stored in Kubernetes' own JSON shape (the same parser reads them as reads
a real cluster), and the few controllers Tidegate depends on are imitated:

* MIG Manager: setting ``nvidia.com/mig.config`` on a node marks it ``pending``; the
  next :meth:`SimulatedCluster.tick` applies the named layout from the mig-parted
  ConfigMap (allocatable ``nvidia.com/gpu`` / ``nvidia.com/mig-*``) and marks ``success``.
* Job controller and scheduler: an unsuspended Job gets ``parallelism`` pods placed
  best-fit on nodes that match its selector, affinity and taints (the rest wait,
  Pending); suspending deletes them; with a ``sim.tidegate.io/duration-seconds``
  annotation each pod succeeds that long after it started, and the Job completes when
  all have.
* Quota controller: a ResourceQuota's ``status.used`` sums its namespace's GPU requests.

Everything is deterministic for a given seed: uids and pod names come from a seeded RNG
and time only moves when :meth:`tick` moves it.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from random import Random
from typing import Any

from scheduler_bridge.quantity import resource_amounts

from . import manifests
from . import simulated_objects as objects
from .base import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from .manifests import MigDeviceGroup
from .mig_layout import PRODUCTS, mig_allocatable
from .parsing import parse_time
from .placement import node_accepts
from .pod_resources import gpu_requests
from .simulated_objects import DURATION_ANNOTATION, stamp
from .validation import validate_job_update, validate_object

MIG_NAMESPACE = "gpu-operator"
DEFAULT_MIG_CONFIG_MAP = "default-mig-parted-config"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_API_VERSIONS = {
    "Namespace": "v1",
    "Node": "v1",
    "Pod": "v1",
    "ConfigMap": "v1",
    "ResourceQuota": "v1",
    "Job": "batch/v1",
}
CLUSTER_SCOPED = frozenset({"Namespace", "Node"})
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the Job controller's pod-name suffixes

Key = tuple[str, str, str]


def _key(kind: str, namespace: str | None, name: str) -> Key:
    return (kind, "" if kind in CLUSTER_SCOPED else namespace or "", name)


class SimulatedCluster:
    """In-memory cluster state; all methods are thread-safe."""

    def __init__(self, name: str = "simulated", *, seed: int = 0, start: datetime = EPOCH):
        self.name = name
        self.now = start
        self.write_count = 0  # writes made through the gateway (API-like calls)
        self._rng = Random(seed)
        self._version = 0
        self._objects: dict[Key, dict[str, Any]] = {}
        self._failing_mig_nodes: set[str] = set()
        self._lock = threading.RLock()

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    # --- object store ----------------------------------------------------------------

    def get_object(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects.get(_key(kind, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(obj)
                for (k, ns, _), obj in sorted(self._objects.items())
                if k == kind and (namespace is None or ns == namespace)
            ]

    def put_object(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as is ("by hand": no validation, not counted as a write)."""
        with self._lock:
            return self._save(copy.deepcopy(dict(obj)))

    def store(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store ``obj`` the way the API server would: validated, namespace checked,
        counted in ``write_count``. Raises NamespaceMissing or GatewayError."""
        with self._lock:
            stored = copy.deepcopy(dict(obj))
            kind, meta = stored["kind"], stored["metadata"]
            namespace_known = (
                kind in CLUSTER_SCOPED
                or _key("Namespace", None, meta["namespace"]) in self._objects
            )
            validate_object(stored, namespace_known=namespace_known)
            old = self._objects.get(_key(kind, meta.get("namespace"), meta["name"]))
            if kind == "Job" and old is not None:
                validate_job_update(old, stored)
            self.write_count += 1
            return self._save(stored)

    def edit_object(
        self, kind: str, namespace: str | None, name: str, edit: Callable[[dict[str, Any]], Any]
    ) -> dict[str, Any]:
        """Change an object in place "by hand" (simulating drift); returns the result."""
        with self._lock:
            obj = self.get_object(kind, namespace, name)
            if obj is None:
                raise KeyError(f"{kind} {namespace}/{name} does not exist")
            edit(obj)
            return self._save(obj)

    def delete_object(
        self, kind: str, namespace: str | None, name: str, *, counted: bool = False
    ) -> bool:
        with self._lock:
            obj = self._objects.pop(_key(kind, namespace, name), None)
            if obj is None:
                return False
            self.write_count += counted
            if kind == "Pod":
                self._refresh_quotas(namespace or "")
            if kind == "Namespace":
                for key in [k for k in self._objects if k[1] == name]:
                    del self._objects[key]
            return True

    def _save(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind = obj["kind"]
        meta = obj.setdefault("metadata", {})
        obj["apiVersion"] = _API_VERSIONS[kind]
        key = _key(kind, meta.get("namespace"), meta["name"])
        old = self._objects.get(key)
        if kind in CLUSTER_SCOPED:
            meta.pop("namespace", None)
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        if old is None:
            meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            meta["creationTimestamp"] = stamp(self.now)
            meta["generation"] = 1
        else:
            for field in ("uid", "creationTimestamp"):
                meta[field] = old["metadata"][field]
            changed = {k: v for k, v in obj.items() if k not in ("metadata", "status")} != {
                k: v for k, v in old.items() if k not in ("metadata", "status")
            }
            meta["generation"] = old["metadata"].get("generation", 1) + changed
        self._objects[key] = obj
        self._react(old, obj)
        if kind in ("Pod", "ResourceQuota"):
            self._refresh_quotas(meta["namespace"])
        return copy.deepcopy(obj)

    # --- seeding ---------------------------------------------------------------------

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> dict:
        return self.put_object(objects.namespace(name, labels))

    def add_node(self, name: str, **options: Any) -> dict[str, Any]:
        """A GPU node (options: see :func:`.simulated_objects.gpu_node`); its
        allocatable follows its ``mig_config`` if a mig-parted ConfigMap in
        ``gpu-operator`` defines it, else all its GPUs are whole."""
        node = objects.gpu_node(name, **options)
        with self._lock:
            self._configure_mig(node, seeding=True)
            return self.put_object(node)

    def add_pod(self, namespace: str, name: str, **options: Any) -> dict[str, Any]:
        """A standalone GPU pod (options: see :func:`.simulated_objects.pod`)."""
        return self.put_object(objects.pod(namespace, name, started=self.now, **options))

    def add_job(self, namespace: str, name: str, **options: Any) -> dict[str, Any]:
        """A Job, suspended by default (options: see :func:`.simulated_objects.job`)."""
        return self.put_object(objects.job(namespace, name, **options))

    def fail_next_mig_config(self, node: str) -> None:
        """Make the next MIG reconfiguration of ``node`` end in ``failed``."""
        with self._lock:
            self._failing_mig_nodes.add(node)

    # --- time ------------------------------------------------------------------------

    def tick(self, seconds: float = 0.0, *, until: datetime | None = None) -> None:
        """Advance simulated time (by ``seconds`` or to the aware datetime ``until``,
        never backwards) and let the controllers act, in this order: finish pending MIG
        reconfigurations, end pods whose Job's duration has passed (each pod runs that
        long from its own start), place waiting pods on the capacity that frees,
        complete Jobs whose pods have all succeeded. Time moves in steps: a pod placed
        now starts now."""
        with self._lock:
            target = until if until is not None else self.now + timedelta(seconds=seconds)
            self.now = max(self.now, target)
            for node in self.objects("Node"):
                labels = node["metadata"].get("labels") or {}
                if labels.get(manifests.MIG_CONFIG_STATE_LABEL) == "pending":
                    self._configure_mig(node)
                    self._save(node)
            jobs = self.objects("Job")
            for job in jobs:
                self._finish_due_pods(job)
            for pod in self.objects("Pod"):
                if pod["status"].get("phase") == "Pending" and not pod["spec"].get("nodeName"):
                    self._schedule(pod)
            for job in self.objects("Job"):
                pods = self._job_pods(job)
                if (
                    pods
                    and not _job_finished(job)
                    and not job["spec"].get("suspend")
                    and all(p["status"]["phase"] == "Succeeded" for p in pods)
                ):
                    last = max(_finished(p) or self.now for p in pods)
                    self._complete(job, at=last)

    def finish_job(self, namespace: str, name: str, *, failed: bool = False) -> None:
        """End a running Job now (its pods Succeeded, or Failed)."""
        with self._lock:
            job = self.get_object("Job", namespace, name)
            if job is None:
                raise KeyError(f"Job {namespace}/{name} does not exist")
            self._complete(job, failed=failed)

    # --- controllers -----------------------------------------------------------------

    def _react(self, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        if new["kind"] == "Node":
            self._react_node(old, new)
        elif new["kind"] == "Job":
            was_running = old is not None and not old["spec"].get("suspend")
            running = not new["spec"].get("suspend")
            if running and not was_running and not _job_finished(new):
                self._start_job(new)
            elif was_running and not running:
                self._stop_job(new)

    def _react_node(self, old: dict[str, Any] | None, node: dict[str, Any]) -> None:
        label = manifests.MIG_CONFIG_LABEL
        before = ((old or {}).get("metadata", {}).get("labels") or {}).get(label)
        labels = node["metadata"].get("labels") or {}
        if old is not None and labels.get(label) != before and labels.get(label):
            # MIG Manager notices the new label and starts: state pending until tick().
            labels[manifests.MIG_CONFIG_STATE_LABEL] = "pending"

    def _refresh_quotas(self, namespace: str) -> None:
        # The quota controller's part: status.hard mirrors spec.hard and status.used
        # sums the GPU requests of the namespace's pods that hold resources.
        used: dict[str, int] = {}
        for (kind, ns, _), pod in self._objects.items():
            if kind == "Pod" and ns == namespace and _holds_resources(pod):
                for resource, amount in gpu_requests(pod["spec"]).items():
                    used[resource] = used.get(resource, 0) + amount
        for (kind, ns, _), quota in self._objects.items():
            if kind == "ResourceQuota" and ns == namespace:
                hard = dict((quota.get("spec") or {}).get("hard") or {})
                counted = {k: str(used.get(k.removeprefix("requests."), 0)) for k in hard}
                quota["status"] = {"hard": hard, "used": counted}

    def _mig_configs(self) -> dict[str, list[MigDeviceGroup]]:
        # MIG Manager reads the one ConfigMap ClusterPolicy names
        # (spec.migManager.config.name): Tidegate's once the cluster is set up as
        # platform/README.md says, the operator's default before Tidegate wrote one.
        for name in (manifests.MIG_CONFIG_MAP_NAME, DEFAULT_MIG_CONFIG_MAP):
            config_map = self._objects.get(_key("ConfigMap", MIG_NAMESPACE, name))
            text = ((config_map or {}).get("data") or {}).get(manifests.MIG_CONFIG_KEY)
            if text:
                try:
                    return manifests.parse_mig_parted_yaml(text)
                except ValueError:
                    return {}  # MIG Manager logs it and applies nothing
        return {}

    def _configure_mig(self, node: dict[str, Any], *, seeding: bool = False) -> None:
        """What MIG Manager does for the node's config label; an unknown config fails,
        except for a node being seeded (its GPUs are then whole)."""
        labels = node["metadata"]["labels"]
        state = manifests.MIG_CONFIG_STATE_LABEL
        if node["metadata"]["name"] in self._failing_mig_nodes:
            self._failing_mig_nodes.discard(node["metadata"]["name"])
            labels[state] = "failed"
            return
        groups = self._mig_configs().get(labels.get(manifests.MIG_CONFIG_LABEL, ""))
        if groups is None and not seeding:
            labels[state] = "failed"  # mig-parted: the selected config does not exist
            return
        labels[state] = "success"
        gpus = int(labels.get("nvidia.com/gpu.count", "0"))
        device_id, _ = PRODUCTS.get(labels.get("nvidia.com/gpu.product", ""), ("", 0))
        amounts = mig_allocatable(groups or [], gpus, device_id)
        for key in [k for k in labels if k.startswith("nvidia.com/mig-")]:
            del labels[key]
        for resource, count in amounts.items():
            if resource.startswith(MIG_RESOURCE_PREFIX) and count:
                labels[f"{resource}.count"] = str(count)
        for section in ("capacity", "allocatable"):
            resources = node["status"][section]
            for key in [
                k for k in resources if k == GPU_RESOURCE or k.startswith(MIG_RESOURCE_PREFIX)
            ]:
                del resources[key]
            resources.update({k: str(v) for k, v in amounts.items() if v or k == GPU_RESOURCE})

    def _start_job(self, job: dict[str, Any]) -> None:
        meta, spec = job["metadata"], job["spec"]
        job["status"] = {
            **{k: v for k, v in job.get("status", {}).items() if k != "conditions"},
            "startTime": stamp(self.now),
            "active": _pods_at_once(spec),
        }
        template = spec.get("template", {})
        for _ in range(_pods_at_once(spec)):
            suffix = "".join(self._rng.choice(_NAME_ALPHABET) for _ in range(5))
            labels = {
                **(template.get("metadata", {}).get("labels") or {}),
                "batch.kubernetes.io/job-name": meta["name"],
                "batch.kubernetes.io/controller-uid": meta["uid"],
            }
            owner = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
            pod = {
                "kind": "Pod",
                "metadata": {
                    "name": f"{meta['name']}-{suffix}",
                    "namespace": meta["namespace"],
                    "labels": labels,
                    "ownerReferences": [owner],
                },
                "spec": copy.deepcopy(template.get("spec", {})),
                "status": {"phase": "Pending"},
            }
            self._schedule(pod)

    def _stop_job(self, job: dict[str, Any]) -> None:
        # Suspension deletes active pods and keeps startTime, as the real Job controller
        # does (whoever wants to change the template clears startTime first).
        for pod in self._job_pods(job):
            if _holds_resources(pod):
                self.delete_object("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
        job["status"]["active"] = 0
        job["status"]["conditions"] = [
            {
                "type": "Suspended",
                "status": "True",
                "reason": "JobSuspended",
                "lastTransitionTime": stamp(self.now),
            }
        ]

    def _job_pods(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        uid = job["metadata"]["uid"]
        return [
            p
            for p in self.objects("Pod", job["metadata"]["namespace"])
            if any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or [])
        ]

    def _finish_due_pods(self, job: dict[str, Any]) -> None:
        duration = (job["metadata"].get("annotations") or {}).get(DURATION_ANNOTATION)
        if duration is None or job["spec"].get("suspend") or _job_finished(job):
            return
        for pod in self._job_pods(job):
            started = parse_time(pod["status"].get("startTime"))
            if pod["status"].get("phase") != "Running" or started is None:
                continue
            end = started + timedelta(seconds=float(duration))
            if end <= self.now:
                self._end_pod(pod, "Succeeded", end)

    def _end_pod(self, pod: dict[str, Any], phase: str, moment: datetime) -> None:
        failed = phase == "Failed"
        terminated = {
            "exitCode": int(failed),
            "reason": "Error" if failed else "Completed",
            "finishedAt": stamp(moment),
        }
        pod["status"]["phase"] = phase
        pod["status"]["containerStatuses"] = [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "image": "sim",
                "imageID": "",
                "state": {"terminated": terminated},
            }
        ]
        self._save(pod)

    def _complete(
        self, job: dict[str, Any], *, failed: bool = False, at: datetime | None = None
    ) -> None:
        moment = stamp(at or self.now)
        phase = "Failed" if failed else "Succeeded"
        for pod in self._job_pods(job):
            if _holds_resources(pod):
                self._end_pod(pod, phase, at or self.now)
        count = int(job["spec"].get("parallelism", 1))
        status = job.setdefault("status", {})
        status.update({"active": 0, "failed" if failed else "succeeded": count})
        condition = "Failed" if failed else "Complete"
        status["conditions"] = [{"type": condition, "status": "True", "lastTransitionTime": moment}]
        if not failed:
            status["completionTime"] = moment
        self._save(job)

    def _schedule(self, pod: dict[str, Any]) -> None:
        node = self._pick_node(pod)
        if node is not None:
            pod["spec"]["nodeName"] = node
            pod["status"] = {"phase": "Running", "startTime": stamp(self.now)}
        self._save(pod)

    def _pick_node(self, pod: dict[str, Any]) -> str | None:
        wants = gpu_requests(pod["spec"])
        free = self._free_gpus()
        fitting = []
        for node in self.objects("Node"):
            name = node["metadata"]["name"]
            if node_accepts(node, pod["spec"]) and all(
                free.get(name, {}).get(r, 0) >= n for r, n in wants.items()
            ):
                # Best fit: the node left with the least of the requested resources.
                left = sum(free[name].get(r, 0) - n for r, n in wants.items())
                fitting.append((left, name))
        return min(fitting)[1] if fitting else None

    def _free_gpus(self) -> dict[str, dict[str, int]]:
        free = {
            n["metadata"]["name"]: resource_amounts(n["status"].get("allocatable"))
            for n in self.objects("Node")
        }
        for pod in self.objects("Pod"):
            node = pod["spec"].get("nodeName")
            if node in free and _holds_resources(pod):
                for resource, amount in gpu_requests(pod["spec"]).items():
                    free[node][resource] = free[node].get(resource, 0) - amount
        return free

    # --- the demo cluster ------------------------------------------------------------

    @classmethod
    def demo(
        cls, seed: int = 0, *, name: str = "demo", start: datetime = EPOCH
    ) -> SimulatedCluster:
        """Twelve 8-GPU nodes: six H100 80GB (two NVLink cliques of three; h100-05 and
        -06 split with ``all-balanced``) and six A100 80GB (a100-05 half split into
        3g.40gb, a100-06 all 1g.10gb), with the operator's mig-parted ConfigMap."""
        cluster = cls(name, seed=seed, start=start)
        for namespace in ("default", "kube-system", MIG_NAMESPACE):
            cluster.add_namespace(namespace)
        cluster.put_object(
            manifests.mig_config_map(MIG_NAMESPACE, DEMO_MIG_CONFIGS, DEFAULT_MIG_CONFIG_MAP)
        )
        # A made-up fabric id; GFD's clique label is "<cluster uuid>.<clique id>".
        fabric = str(uuid.UUID(int=Random(seed).getrandbits(128), version=4))
        for i in range(1, 7):
            config = "all-balanced" if i >= 5 else "all-disabled"
            clique = {"nvidia.com/gpu.clique": f"{fabric}.{1 if i <= 3 else 2}"}
            cluster.add_node(f"h100-{i:02d}", mig_config=config, labels=clique)
        for i in range(1, 7):
            config = {5: "a100-half-3g", 6: "all-1g.10gb"}.get(i, "all-disabled")
            cluster.add_node(f"a100-{i:02d}", product="NVIDIA-A100-SXM4-80GB", mig_config=config)
        return cluster


# mig-parted configs of the demo (format and profile names: docs/mig.md).
DEMO_MIG_CONFIGS: dict[str, list[MigDeviceGroup]] = {
    "all-disabled": [MigDeviceGroup(devices="all", mig_enabled=False)],
    "all-balanced": [
        MigDeviceGroup(
            device_filter=(device,),
            devices="all",
            mig_enabled=True,
            mig_devices={"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        )
        for device in ("0x233010DE", "0x20B210DE")
    ],
    "all-1g.10gb": [MigDeviceGroup(devices="all", mig_enabled=True, mig_devices={"1g.10gb": 7})],
    "a100-half-3g": [
        MigDeviceGroup(devices=(0, 1, 2, 3), mig_enabled=True, mig_devices={"3g.40gb": 2}),
        MigDeviceGroup(devices=(4, 5, 6, 7), mig_enabled=False),
    ],
}


def _finished(pod: Mapping[str, Any]) -> datetime | None:
    statuses = pod["status"].get("containerStatuses") or [{}]
    return parse_time(((statuses[0].get("state") or {}).get("terminated") or {}).get("finishedAt"))


def _holds_resources(pod: Mapping[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Pending", "Running")


def _job_finished(job: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in job.get("status", {}).get("conditions") or []
    )


def _pods_at_once(spec: Mapping[str, Any]) -> int:
    """The Job controller runs at most ``parallelism`` pods and never more than the
    completions to go (pkg/controller/job/job_controller.go, manageJob)."""
    count = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    return min(count, int(completions)) if completions is not None else count
