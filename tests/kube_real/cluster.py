"""The real control plane as a test sees it: seed, read, edit and delete objects as a cluster
administrator would with kubectl, play the kubelet where KWOK does not (finishing a pod),
and count the writes one user made from the API server's audit log."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import requests

from toolchain.admin import wait_until
from toolchain.control_plane import KWOK_NODE_LABEL, ControlPlane

# Kind -> (API path prefix, plural, namespaced).
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Event": ("/api/v1", "events", True),
    "Job": ("/apis/batch/v1", "jobs", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "CustomResourceDefinition": (
        "/apis/apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        False,
    ),
}
WAIT_S = 30.0
# KWOK finishes a Job's pods a few seconds after they start; pods whose template carries
# these annotations run until a test finishes them (``RealCluster.finish_pod``).
RUNS_UNTIL_FINISHED = {
    "pod-complete.stage.kwok.x-k8s.io/delay": "24h",
    # KWOK waits the jitter delay when it is not longer than the delay
    "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "24h",
}
# Users the API server knows (toolchain/control_plane.py writes their tokens): Tidegate's
# gateway in the tests, whose writes the audit log counts.
GATEWAY_USER = "tidegate"


class RealCluster:
    """Administrator access to the run's control plane, for seeding and checking."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.created_nodes: set[str] = set()
        self.touched_namespaces: set[str] = set()
        self.kinds = dict(KINDS)

    # --- paths ---------------------------------------------------------------------------

    def path(self, kind: str, namespace: str | None, name: str | None = None) -> str:
        prefix, plural, namespaced = self.kinds[kind]
        path = prefix
        if namespaced and namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{plural}"
        if name:
            path += f"/{name}"
        return path

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self.plane.admin.request(method, path, **kwargs)

    def register_kind(self, kind: str, group_version: str, plural: str, namespaced: bool) -> None:
        self.kinds[kind] = (f"/apis/{group_version}", plural, namespaced)

    # --- the store interface of the gateway tests -------------------------------------------

    def get_object(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        answer = self.request("GET", self.path(kind, namespace, name))
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        result: dict[str, Any] = answer.json()
        return result

    def read(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        """The object, which must exist."""
        found = self.get_object(kind, namespace, name)
        assert found is not None, f"{kind} {namespace}/{name} does not exist"
        return found

    def objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        answer = self.request("GET", self.path(kind, namespace))
        answer.raise_for_status()
        items: list[dict[str, Any]] = answer.json()["items"]
        return items

    def create_object(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        kind = obj["kind"]
        namespace = obj["metadata"].get("namespace")
        answer = self.request("POST", self.path(kind, namespace), json=obj)
        if answer.status_code >= 400:
            raise AssertionError(f"creating {kind} failed: {answer.status_code} {answer.text}")
        created: dict[str, Any] = answer.json()
        return created

    def edit_object(
        self, kind: str, namespace: str | None, name: str, change: Callable[[dict], Any]
    ) -> dict[str, Any]:
        """Read, change and write back (a PUT with the read resourceVersion), as a person
        with ``kubectl edit`` does; a conflict is read again and retried."""
        for _ in range(10):
            obj = self.get_object(kind, namespace, name)
            assert obj is not None, f"{kind} {namespace}/{name} does not exist"
            change(obj)
            answer = self.request("PUT", self.path(kind, namespace, name), json=obj)
            if answer.status_code == 409:
                continue
            if answer.status_code >= 400:
                raise AssertionError(f"editing {kind} failed: {answer.status_code} {answer.text}")
            edited: dict[str, Any] = answer.json()
            return edited
        raise AssertionError(f"{kind} {namespace}/{name} kept changing under the edit")

    def delete_object(self, kind: str, namespace: str | None, name: str) -> bool:
        answer = self.request(
            "DELETE",
            self.path(kind, namespace, name),
            json={"propagationPolicy": "Background"},
        )
        if answer.status_code == 404:
            return False
        answer.raise_for_status()
        return True

    def patch_status(
        self, kind: str, namespace: str | None, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        answer = self.request(
            "PATCH",
            self.path(kind, namespace, name) + "/status",
            data=json.dumps({"status": status}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if answer.status_code >= 400:
            raise AssertionError(f"status of {kind} {name}: {answer.status_code} {answer.text}")
        patched: dict[str, Any] = answer.json()
        return patched

    # --- namespaces and nodes ----------------------------------------------------------------

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create ``name`` (or keep it), and wait for its ``default`` ServiceAccount: until
        the service-account controller made it, pods in it are refused."""
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        if labels:
            body["metadata"]["labels"] = dict(labels)  # type: ignore[index]
        answer = self.request("POST", "/api/v1/namespaces", json=body)
        if answer.status_code not in (201, 409):
            raise AssertionError(f"namespace {name}: {answer.status_code} {answer.text}")
        self.touched_namespaces.add(name)
        self.plane.wait_for_default_service_account(name)

    def add_node(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
    ) -> dict[str, Any]:
        """A node KWOK plays: ready, running the pods the scheduler binds to it."""
        key, value = KWOK_NODE_LABEL
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110", **(allocatable or {})}
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    key: value,
                    **(labels or {}),
                },
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "spec": {"taints": [dict(t) for t in taints]} if taints else {},
            "status": {"capacity": resources, "allocatable": resources},
        }
        created = self.create_object(node)
        self.created_nodes.add(name)
        self.wait_for(
            lambda: self._node_ready(name), f"node {name} to be made ready by KWOK", WAIT_S
        )
        return created

    def _node_ready(self, name: str) -> bool:
        node = self.get_object("Node", None, name)
        conditions = (node or {}).get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def remove_test_objects(self, namespaces: Sequence[str]) -> None:
        """Empty ``namespaces`` of what tests create and delete the nodes they added, so
        the next test starts from a clean cluster without waiting for namespace deletion.
        Waits until no pod, ReplicaSet or Job is left (a controller would otherwise make
        pods again, and they would land on the next test's nodes)."""
        try:
            owners = ("Job", "Deployment", "StatefulSet", "ReplicaSet")
            for namespace in namespaces:
                custom = [k for k in self.kinds if k not in KINDS]
                for kind in (*custom, *owners, "ResourceQuota", "ConfigMap"):
                    for obj in self.objects(kind, namespace):
                        if kind == "ConfigMap" and obj["metadata"]["name"] == "kube-root-ca.crt":
                            continue
                        self.delete_object(kind, namespace, obj["metadata"]["name"])

            def emptied() -> bool:
                left = 0
                for namespace in namespaces:
                    self.force_delete_pods(namespace)
                    left += len(self.objects("Pod", namespace))
                    left += sum(len(self.objects(k, namespace)) for k in owners)
                return left == 0

            self.wait_for(emptied, f"namespaces {', '.join(namespaces)} to be emptied")
        finally:
            for name in sorted(self.created_nodes):
                self.delete_object("Node", None, name)
            self.created_nodes.clear()

    def delete_pod_now(self, namespace: str, name: str) -> None:
        """Delete a pod without a grace period, as ``kubectl delete --force`` does."""
        self.request("DELETE", self.path("Pod", namespace, name), json={"gracePeriodSeconds": 0})

    def force_delete_pods(self, namespace: str) -> None:
        for pod in self.objects("Pod", namespace):
            name = pod["metadata"]["name"]
            if pod["metadata"].get("finalizers"):
                self.request(
                    "PATCH",
                    self.path("Pod", namespace, name),
                    data=json.dumps({"metadata": {"finalizers": None}}),
                    headers={"Content-Type": "application/merge-patch+json"},
                )
            self.request(
                "DELETE", self.path("Pod", namespace, name), json={"gracePeriodSeconds": 0}
            )

    # --- pods --------------------------------------------------------------------------------

    def pods_owned_by(self, kind: str, namespace: str, name: str) -> list[dict[str, Any]]:
        owner = self.get_object(kind, namespace, name)
        if owner is None:
            return []
        uid = owner["metadata"]["uid"]
        return [
            p
            for p in self.objects("Pod", namespace)
            if any(o["uid"] == uid for o in p["metadata"].get("ownerReferences") or [])
        ]

    def active_job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """The Job's pods as the Job controller and the scheduler leave them once settled:
        when it runs, its pods are bound to nodes; when it is suspended, none are left."""
        live = self.get_object("Job", namespace, job)
        assert live is not None, f"Job {namespace}/{job} does not exist"
        suspended = bool(live["spec"].get("suspend"))
        wanted = 0 if suspended else min(live["spec"]["parallelism"], live["spec"]["completions"])

        def settled() -> tuple[list[dict[str, Any]]] | None:
            pods = [
                p
                for p in self.pods_owned_by("Job", namespace, job)
                if p["status"].get("phase") in ("Pending", "Running")
                and not p["metadata"].get("deletionTimestamp")
            ]
            if len(pods) != wanted:
                return None
            if any(not p["spec"].get("nodeName") for p in pods):
                return None
            # no pod still being deleted gracefully
            if suspended and self.pods_owned_by("Job", namespace, job):
                return None
            return (pods,)  # a tuple: an empty list of pods is an answer too

        try:
            (pods,) = self.wait_for(settled, f"the pods of Job {namespace}/{job} to settle")
            return pods
        except AssertionError as error:
            seen = [
                (
                    p["metadata"]["name"],
                    p["status"].get("phase"),
                    p["spec"].get("nodeName"),
                    bool(p["metadata"].get("deletionTimestamp")),
                    p["metadata"].get("finalizers"),
                )
                for p in self.pods_owned_by("Job", namespace, job)
            ]
            raise AssertionError(f"{error}; wanted {wanted} running, saw {seen}") from None

    def finish_pod(self, namespace: str, name: str, *, failed: bool = False) -> None:
        """End a pod's containers as its kubelet would (KWOK plays the rest)."""
        pod = self.get_object("Pod", namespace, name)
        assert pod is not None
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state = {
            "terminated": {
                "exitCode": 1 if failed else 0,
                "reason": "Error" if failed else "Completed",
                "startedAt": pod["status"].get("startTime", now),
                "finishedAt": now,
            }
        }
        statuses = [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": copy.deepcopy(state),
            }
            for c in pod["spec"]["containers"]
        ]
        self.patch_status(
            "Pod",
            namespace,
            name,
            {"phase": "Failed" if failed else "Succeeded", "containerStatuses": statuses},
        )

    # --- waiting -----------------------------------------------------------------------------

    @staticmethod
    def wait_for(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
        return wait_until(check, what, timeout_s)

    # --- the audit log -----------------------------------------------------------------------

    def audit_events(self, user: str) -> list[dict[str, Any]]:
        log = Path(self.plane.audit_log)
        if not log.exists():
            return []
        events = []
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete":
                continue
            if event.get("user", {}).get("username") == user:
                events.append(event)
        return events

    def refused_requests_of(self, user: str) -> list[dict[str, Any]]:
        """The requests of ``user`` the API server answered 403, from the audit log."""
        return [
            e for e in self.audit_events(user) if e.get("responseStatus", {}).get("code") == 403
        ]

    def writes_by(self, user: str) -> int:
        """Write requests (create, update, patch, delete) ``user`` made, from the audit log."""
        writes = ("create", "update", "patch", "delete", "deletecollection")
        return sum(1 for e in self.audit_events(user) if e.get("verb") in writes)
