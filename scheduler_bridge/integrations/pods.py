"""Pods held by Tidegate's scheduling gate: Deployments, StatefulSets, LeaderWorkerSets
and plain pods.

The admission webhook gates every queue-labelled GPU pod that no suspendable kind owns
(``tidegate.io/admission``, gateways/admission_webhook.py). Gated pods wait,
unscheduled, until the queue admits them; their controller (a ReplicaSet, a
StatefulSet) goes on creating and deleting them as its replicas say, and an autoscaler
(HPA, KEDA) goes on setting the replicas: Tidegate replaces neither.

The pods of one **group** are one workload: the pods that carry the label
``tidegate.io/pod-group: <name>`` (set it in the pod template), or else those of one
LeaderWorkerSet (its label ``leaderworkerset.sigs.k8s.io/name``: leader and workers
together), or else those of one controlling owner (one ReplicaSet, one StatefulSet), or
else a pod alone. Its one pod
set counts the group's pods that have not ended; ``tidegate.io/min-pods`` on the pods
makes the first ones its core (a serving workload's minimum replicas) and the rest
elastic, growing into lent GPUs when the autoscaler asks for more and given back first.

A group asks for as many pods as its controller's ``spec.replicas`` says, not only for
the pods that exist: Kubernetes' quota admission counts gated pods, so a ReplicaSet
scaling out beyond its namespace's ``tidegate-gpu`` limit is refused at pod creation
(403, FailedCreate) and the pods it wants never appear. Reading the replicas of the
queue-labelled ReplicaSets (a Deployment's carry its template's labels) and
StatefulSets lets the queue lend the GPUs first; the limit then rises by what was lent
and the controller's next attempt creates the pods, gated, to be released at once.

Admitting a pod removes the gate and adds the flavour's node selector and tolerations,
the changes Kubernetes allows on a gated pod (``ValidatePodUpdate``,
pkg/apis/core/validation/validation.go); taking GPUs back deletes running pods (their
controller creates them again, gated: they wait). A pod cannot be gated again.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from i18n.wording import gettext_noop, wording
from scheduler_bridge.gateways import manifests
from scheduler_bridge.gateways.admission_webhook import GATE
from scheduler_bridge.gateways.base import QUEUE_LABEL, Toleration
from scheduler_bridge.gateways.pod_resources import may_hold_gpus, names_claims

from . import SUSPENDED_AS_A_WHOLE
from .base import (
    IntegrationError,
    ObjectRead,
    PodSetRead,
    claim_entries,
    gpu_request,
    min_pods,
)
from .naming import POD_GROUP_LABEL, workload_name

KIND = "PodGroup"


class PodGroupFacts:
    """The pod groups' answers to KindFacts: gated pods, counted as their controller
    scales them, with no one object to post Events on."""

    kind = KIND
    held_by_gate = True
    follows_pod_count = True
    has_one_object = False


POD_GROUPS = PodGroupFacts()
PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class GroupPod:
    name: str
    created: str
    gated: bool  # carries Tidegate's gate still
    tidegate_gated: bool  # was gated by Tidegate (carries or carried the gate)


@dataclass(frozen=True)
class PodGroup:
    namespace: str
    name: str
    pods: tuple[GroupPod, ...]  # oldest first
    read: ObjectRead

    @property
    def released(self) -> list[GroupPod]:
        """Pods whose gate is gone (admitted), oldest first."""
        return [p for p in self.pods if not p.gated]

    @property
    def waiting(self) -> list[GroupPod]:
        return [p for p in self.pods if p.gated]


def group_uid(namespace: str, name: str) -> str:
    """A stable key for the group (workloads are keyed by their object's uid)."""
    return "podgroup-" + hashlib.sha1(f"{namespace}/{name}".encode()).hexdigest()[:40]  # noqa: S324


def _group_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return workload_name(meta) or str(meta.get("name"))


def _owned_by_a_whole(pod: Mapping[str, Any]) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("controller") and o.get("kind") in SUSPENDED_AS_A_WHOLE for o in owners)


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == GATE for g in gates)


def pod_groups(
    pods: Sequence[Mapping[str, Any]], controllers: Sequence[Mapping[str, Any]] = ()
) -> list[PodGroup]:
    """The groups of the queue-labelled pods listed (ended and terminating pods left
    out, and pods a suspendable kind owns), sorted by namespace and name.

    ``controllers`` are queue-labelled ReplicaSets and StatefulSets: a group asks for
    at least the replicas its controllers want, and a controller whose pods could not
    be created yet (refused by its namespace's quota) is a group of its own."""
    wanted = _wanted_by_controllers(controllers)
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            continue
        if _owned_by_a_whole(pod):
            continue
        key = (str(meta.get("namespace") or ""), _group_name(pod))
        grouped.setdefault(key, []).append(pod)
    found = []
    for key in sorted(set(grouped) | {k for k, (replicas, _) in wanted.items() if replicas}):
        members = grouped.get(key, [])
        members.sort(
            key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"])
        )
        replicas, template = wanted.get(key, (0, None))
        found.append(_group(*key, members, replicas, template))
    return found


def _wanted_by_controllers(
    controllers: Sequence[Mapping[str, Any]],
) -> dict[tuple[str, str], tuple[int, Mapping[str, Any]]]:
    """(namespace, group name) -> (replicas its controllers want, a pod as their
    template would make it)."""
    wanted: dict[tuple[str, str], tuple[int, Mapping[str, Any]]] = {}
    for controller in controllers:
        meta = controller.get("metadata") or {}
        spec = controller.get("spec") or {}
        if meta.get("deletionTimestamp"):
            continue
        template = spec.get("template") or {}
        template_meta = template.get("metadata") or {}
        labels = dict(template_meta.get("labels") or {})
        pod_spec = template.get("spec") or {}
        if QUEUE_LABEL not in labels or not may_hold_gpus(pod_spec):
            continue  # its pods are not queued: nothing to ask for
        pod: dict[str, Any] = {
            "metadata": {
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "labels": labels,
                "annotations": dict(template_meta.get("annotations") or {}),
                "ownerReferences": [
                    {"kind": controller.get("kind"), "name": meta.get("name"), "controller": True}
                ],
            },
            "spec": pod_spec,
        }
        asked = spec.get("replicas", 1)
        replicas = asked if isinstance(asked, int) and asked > 0 else 0
        key = (str(meta.get("namespace") or ""), _group_name(pod))
        before = wanted[key][0] if key in wanted else 0
        wanted[key] = (before + replicas, pod)
    return wanted


def _group(
    namespace: str,
    name: str,
    members: list[Mapping[str, Any]],
    replicas: int = 0,
    template: Mapping[str, Any] | None = None,
) -> PodGroup:
    pods = tuple(
        GroupPod(
            name=str(p["metadata"]["name"]),
            created=str(p["metadata"].get("creationTimestamp") or ""),
            gated=_gated(p),
            tidegate_gated=_gated(p) or GROUP_ADMITTED in (p["metadata"].get("annotations") or {}),
        )
        for p in members
    )
    shape = members or [template or {}]  # a group of no pod yet: its controller's template
    first = shape[0]["metadata"]
    problem = None
    pod_sets: tuple[PodSetRead, ...] = ()
    try:
        pod_sets = (_pod_set(shape, max(len(members), replicas)),)
    except IntegrationError as error:
        problem = error.message
    read = ObjectRead(
        kind=KIND,
        namespace=namespace,
        name=name,
        uid=group_uid(namespace, name),
        labels=dict(first.get("labels") or {}),
        annotations=dict(first.get("annotations") or {}),
        # a group Tidegate never held (created before its webhook, or with the gate
        # stripped) runs outside the queue: it is "created running"
        suspended=all(p.tidegate_gated for p in pods),
        admitted=any(not p.gated for p in pods),
        pod_sets=pod_sets,
        problem=problem,
        priority_class_name=(shape[0].get("spec") or {}).get("priorityClassName"),
    )
    return PodGroup(namespace, name, pods, read)


def _pod_set(members: list[Mapping[str, Any]], count: int) -> PodSetRead:
    # pods asking for GPUs as resources keep their claims for other devices (a NIC), as
    # the other kinds do (base.claim_entries); pods asking for none ask through claims
    if any(
        names_claims(pod.get("spec") or {})
        and gpu_request({"spec": pod.get("spec") or {}}, f"pod {pod['metadata']['name']}") is None
        for pod in members
    ):
        return _claiming_pod_set(members, count)
    requests = set()
    for pod in members:
        found = gpu_request({"spec": pod.get("spec") or {}}, f"pod {pod['metadata']['name']}")
        if found is None:
            raise IntegrationError(
                wording(
                    gettext_noop(
                        "pod %(pod)s carries Tidegate's scheduling gate but requests no GPU; "
                        "remove the gate (or the queue label) from pods that need no GPU"
                    ),
                    pod=pod["metadata"]["name"],
                )
            )
        requests.add(found)
    if len(requests) > 1:
        raise IntegrationError(
            wording(
                gettext_noop(
                    "the pods of one group ask for different GPUs (%(asked)s); give each "
                    "kind of pod its own %(label)s label"
                ),
                asked=", ".join(f"{n} {r}" for r, n in sorted(requests)),
                label=POD_GROUP_LABEL,
            )
        )
    ((resource, amount),) = requests
    minimum = min_pods(members[0]["metadata"].get("annotations") or {})
    selector = (members[0].get("spec") or {}).get("nodeSelector") or {}
    return PodSetRead(
        name="main",
        count=max(count, minimum or 0),
        gpus_per_pod=amount,
        resource=resource,
        min_count=minimum if minimum is not None and minimum < count else None,
        product=selector.get(PRODUCT_LABEL),
    )


def _claiming_pod_set(members: list[Mapping[str, Any]], count: int) -> PodSetRead:
    """The pod set of a group whose pods ask for GPUs through ResourceClaims: they must
    name the same ResourceClaimTemplates and ResourceClaims (as the pods of one
    controller do) and ask for no GPU as a resource besides."""
    asked = set()
    for pod in members:
        name = pod["metadata"]["name"]
        resources = gpu_request({"spec": pod.get("spec") or {}}, f"pod {name}")
        if resources is not None:
            raise IntegrationError(
                wording(
                    gettext_noop(
                        "pod %(pod)s asks for GPUs both as resources and through "
                        "ResourceClaims; ask one way"
                    ),
                    pod=name,
                )
            )
        asked.add(claim_entries(pod, f"pod {name}", None))
    if len(asked) > 1:
        raise IntegrationError(
            wording(
                gettext_noop(
                    "the pods of one group name different ResourceClaims; give each kind of "
                    "pod its own %(label)s label"
                ),
                label=POD_GROUP_LABEL,
            )
        )
    ((claims, shared),) = asked
    minimum = min_pods(members[0]["metadata"].get("annotations") or {})
    return PodSetRead(
        name="main",
        count=max(count, minimum or 0),
        gpus_per_pod=0,
        resource="",
        min_count=minimum if minimum is not None and minimum < count else None,
        claims=claims,
        shared_claims=shared,
    )


# set on a pod when Tidegate removes its gate, so a released pod is still known as queued
GROUP_ADMITTED = "tidegate.io/admitted"


def released(
    pod: Mapping[str, Any],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Toleration],
    node_names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """``pod`` with Tidegate's gate removed, the flavour's node selector and tolerations
    added (only additions: what a gated pod may change), pinned to ``node_names`` if
    given, and marked admitted. ValueError when its own node selector contradicts the
    flavour's, or when it must be pinned but has node affinity of its own (a gated pod's
    required terms may only be narrowed, not multiplied)."""
    result = copy.deepcopy(dict(pod))
    spec = result.setdefault("spec", {})
    if node_names:
        affinity = spec.setdefault("affinity", {})
        if (affinity.get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ):
            raise ValueError(
                "the pod has required node affinity of its own, and its flavour's GPUs "
                "are found by node: remove the affinity or label the nodes"
            )
        affinity["nodeAffinity"] = manifests.pinned_to_nodes(
            affinity.get("nodeAffinity"), node_names
        )
    own = spec.get("nodeSelector") or {}
    clashes = sorted(k for k, v in node_selector.items() if k in own and own[k] != v)
    if clashes:
        raise ValueError(
            "the pod's nodeSelector contradicts the chosen flavour: "
            + ", ".join(f"{k}={own[k]!r} (flavour needs {node_selector[k]!r})" for k in clashes)
        )
    if node_selector:
        spec["nodeSelector"] = {**own, **node_selector}
    merged = list(spec.get("tolerations") or [])
    merged += [t for t in tolerations if t not in merged]
    if merged:
        spec["tolerations"] = merged
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    result.setdefault("metadata", {}).setdefault("annotations", {})[GROUP_ADMITTED] = "true"
    return result
