"""The cluster gateway interface and the plain data it speaks.

Everything Tidegate does to a cluster goes through :class:`ClusterGateway`. Two
implementations exist: ``kubernetes`` (the official client against a real API server)
and ``simulated`` (an in-process cluster for the demo, tests and trace replay). Callers
only ever see the dataclasses below and the errors in :mod:`.errors`, never client
models, so the two are interchangeable.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType, TracebackType
from typing import Any, Literal, Protocol

from scheduler_bridge.dra.allocation import ClaimedGpus, claim_allocation

from .errors import GatewayError, ObjectMissing

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
FIELD_MANAGER = "tidegate"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
TENANT_LABEL = "tidegate.io/tenant"
# Kept on a Job while Tidegate has admitted it: the pod template's scheduling fields as
# they were before admission, so preemption can put them back exactly.
ORIGINAL_SCHEDULING_ANNOTATION = "tidegate.io/original-scheduling"
# The label that puts an object (or a pod) in a tenant's queue: its value is the tenant.
QUEUE_LABEL = "tidegate.io/queue"
# Kept on objects Tidegate applies: what it last wrote, so a later sync can tell its own
# change of mind from somebody else's hand edit.
LAST_APPLIED_ANNOTATION = "tidegate.io/last-applied"

Toleration = dict[str, Any]
"""A toleration exactly as Kubernetes spells it (``key``, ``operator``, ``value``, ``effect``)."""


def is_gpu_resource(resource: str) -> bool:
    """True for full GPUs and MIG slices (``nvidia.com/gpu``, ``nvidia.com/mig-*``)."""
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class NodeInfo:
    """A node as inventory sees it. Resource amounts are whole base units, rounded down
    (``cpu: 3500m`` reads as 3); GPU and MIG resources are always whole."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True)
class PodInfo:
    """A pod that requests GPUs; ``gpu_requests`` holds only GPU and MIG resources."""

    uid: str
    name: str
    namespace: str
    node_name: str | None
    phase: str
    gpu_requests: dict[str, int] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # the workload object it belongs to (integrations.naming.workload_name): its Job, JobSet,
    # PyTorchJob, Ray cluster or pod group
    job_name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # whether it names ResourceClaims: what they hold is added to ``gpu_requests`` once
    # allocated (ClusterGateway.list_gpu_pods), and kept apart in ``claimed_gpus`` too
    has_claims: bool = False
    # (None, not an empty dict, for the many pods without claims: no object per pod)
    claimed_gpus: Mapping[str, int] | None = None
    # thousandths of shared GPUs its own claims hold (consumable capacity), per resource
    # name; kept out of ``gpu_requests``, which count devices
    claimed_shares: Mapping[str, int] | None = None

    @property
    def resource_requests(self) -> dict[str, int]:
        """GPUs its containers request as extended resources (what Kubernetes'
        ResourceQuota counts under ``requests.<resource>``), without its claims'."""
        if not self.claimed_gpus:
            return self.gpu_requests
        left = {r: n - self.claimed_gpus.get(r, 0) for r, n in self.gpu_requests.items()}
        return {r: n for r, n in left.items() if n > 0}


@dataclass(frozen=True)
class KindRef:
    """Where the API server serves a kind: ``/apis/<group>/<version>/<plural>``."""

    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


# Dynamic Resource Allocation objects Tidegate reads (docs/dra.md)
RESOURCE_SLICE_KIND = KindRef("resource.k8s.io", "v1", "ResourceSlice", "resourceslices")
DEVICE_CLASS_KIND = KindRef("resource.k8s.io", "v1", "DeviceClass", "deviceclasses")
RESOURCE_CLAIM_TEMPLATE_KIND = KindRef(
    "resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates"
)
RESOURCE_CLAIM_KIND = KindRef("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims")


def changed(
    kind: KindRef,
    namespace: str,
    name: str,
    change: Callable[[dict[str, Any]], dict[str, Any]],
    live: dict[str, Any],
) -> dict[str, Any]:
    """What ``change`` makes of a copy of ``live`` (update_object's builder), a
    ValueError it raises turned into a GatewayError naming the object."""
    try:
        return change(copy.deepcopy(live))
    except ValueError as exc:
        raise GatewayError(f"{kind.kind} {namespace}/{name}: {exc}") from exc


JOB_KIND = KindRef("batch", "v1", "Job", "jobs")
POD_KIND = KindRef("", "v1", "Pod", "pods")
# the controllers of gated pods whose replicas Tidegate reads (never writes)
REPLICA_SET_KIND = KindRef("apps", "v1", "ReplicaSet", "replicasets")
STATEFUL_SET_KIND = KindRef("apps", "v1", "StatefulSet", "statefulsets")


@dataclass(frozen=True)
class JobRef:
    """Which workload object (a Job unless said otherwise) an Event is about."""

    namespace: str
    name: str
    uid: str
    kind: str = "Job"
    api_version: str = "batch/v1"


@dataclass(frozen=True)
class JobInfo:
    """A batch/v1 Job. ``requests_per_pod`` holds the GPU and MIG resources one pod asks
    for; ``admitted`` is true while Tidegate's original-scheduling annotation is on it."""

    namespace: str
    name: str
    uid: str
    suspended: bool
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    requests_per_pod: dict[str, int] = field(default_factory=dict)
    parallelism: int = 1
    completions: int | None = 1
    succeeded: int = 0  # pods that completed (status.succeeded)
    priority_class_name: str | None = None
    created_at: datetime | None = None
    finished: bool = False
    failed: bool = False
    admitted: bool = False
    resource_version: str = ""


@dataclass(frozen=True)
class ApplyResult:
    """What an idempotent apply did.

    ``action`` is ``created``, ``updated`` or ``unchanged`` (no write call was made).
    ``drift`` lists, in words, changes somebody made outside Tidegate that this apply
    undid (a hand edit, an added key, a deleted object); ``drift_repaired`` is true when
    there were any.
    """

    action: Literal["created", "updated", "unchanged"]
    drift: tuple[str, ...] = ()

    @property
    def created(self) -> bool:
        return self.action == "created"

    @property
    def updated(self) -> bool:
        return self.action == "updated"

    @property
    def unchanged(self) -> bool:
        return self.action == "unchanged"

    @property
    def drift_repaired(self) -> bool:
        return bool(self.drift)


class Watching(Protocol):
    """Watches a gateway keeps open (:meth:`ClusterGateway.watch_labelled`)."""

    def health(self) -> dict[str, dict[str, Any]]: ...

    def stop(self) -> None: ...


class ClusterGateway(abc.ABC):
    """Everything Tidegate reads from or writes to one cluster.

    All methods are synchronous and safe to call again after a failure (writes are
    idempotent). Every method may raise :class:`~.errors.ClusterUnreachable` when the
    cluster does not answer after bounded retries; other errors are listed per method.
    Use as a context manager or call :meth:`close` to release connections.

    ``write_concurrency``: how many writes callers may have in flight at once from
    threads (1: the gateway is not thread-safe).

    ``compares_locally``: an apply that changes nothing costs no request (the gateway
    compares with a copy it holds), so there is nothing to gain from running such
    applies in parallel.
    """

    write_concurrency: int = 1
    compares_locally: bool = True
    # the cluster's DRA drivers mapped to flavours (Cluster.dra_flavours), set by
    # inventory.connection for every gateway of a cluster
    dra_flavours: Mapping[str, str] = MappingProxyType({})

    @abc.abstractmethod
    def list_nodes(self) -> list[NodeInfo]:
        """All nodes with labels, allocatable/capacity, taints; sorted by name."""

    @abc.abstractmethod
    def list_gpu_pods(self) -> list[PodInfo]:
        """Pods in every namespace that request a GPU or a MIG slice, in any phase;
        sorted by namespace then name."""

    def list_claiming_pods(self) -> list[PodInfo]:
        """Pods that name ResourceClaims, whether their claims hold anything yet or not
        (none where the cluster serves no DRA)."""
        return []

    @abc.abstractmethod
    def list_namespaces(self) -> list[str]:
        """Names of all namespaces, sorted."""

    @abc.abstractmethod
    def apply_resource_quota(
        self,
        namespace: str,
        name: str,
        hard: Mapping[str, str],
        labels: Mapping[str, str],
        *,
        expect_existing: bool = False,
    ) -> ApplyResult:
        """Make ResourceQuota ``namespace/name`` have exactly ``hard`` as ``spec.hard``
        and carry ``labels`` (other labels are left alone).

        Reads first and writes nothing when the object already matches. Otherwise it
        server-side applies as field manager ``tidegate`` with force, taking fields back
        from whoever edited them, and removes ``spec.hard`` keys nobody asked for. Set
        ``expect_existing`` when Tidegate's records say it applied this object before:
        a missing object is then reported as drift (deleted outside Tidegate).

        Raises NamespaceMissing if the namespace does not exist, GatewayError if the API
        rejects the object (e.g. a value that is not a quantity).
        """

    @abc.abstractmethod
    def delete_resource_quota(self, namespace: str, name: str) -> bool:
        """Delete the ResourceQuota; False when it (or its namespace) was already gone."""

    @abc.abstractmethod
    def resource_quota_limits(self, label_selector: str) -> dict[tuple[str, str], dict[str, str]]:
        """``spec.hard`` of each ResourceQuota in every namespace that matches
        ``label_selector``, by (namespace, name)."""

    def list_resource_quotas(self, label_selector: str) -> list[tuple[str, str]]:
        """(namespace, name) of the ResourceQuotas in every namespace that match
        ``label_selector``, sorted."""
        return sorted(self.resource_quota_limits(label_selector))

    @abc.abstractmethod
    def apply_config_map(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, str],
        labels: Mapping[str, str],
        *,
        expect_existing: bool = False,
    ) -> ApplyResult:
        """Make ConfigMap ``namespace/name`` hold exactly ``data`` and carry ``labels``.
        Same idempotency, drift reporting and errors as :meth:`apply_resource_quota`."""

    @abc.abstractmethod
    def set_node_labels(self, node: str, labels: Mapping[str, str | None]) -> bool:
        """Set (or, for ``None`` values, remove) labels on a node. Writes only when
        something differs; returns whether it wrote. Raises ObjectMissing for an unknown
        node, GatewayError for an invalid label."""

    @abc.abstractmethod
    def list_jobs(
        self, label_selector: str | None = None, *, namespace: str | None = None
    ) -> list[JobInfo]:
        """Jobs matching a Kubernetes label selector (``a=b,c!=d``), in one namespace or
        all; sorted by namespace then name."""

    @abc.abstractmethod
    def admit_job(
        self,
        namespace: str,
        name: str,
        node_selector: Mapping[str, str],
        tolerations: Sequence[Toleration],
        node_names: Sequence[str] | None = None,
    ) -> JobInfo:
        """Start a suspended Job on the chosen flavour (and nodes).

        Adds ``node_selector`` and ``tolerations`` to the pod template, pins the pods to
        ``node_names`` with required node affinity when given, records the template's
        original scheduling fields in the ``tidegate.io/original-scheduling`` annotation
        and sets ``spec.suspend`` to false, in one write. Calling it again for a Job that
        is already admitted with the same placement writes nothing.

        Raises ObjectMissing if the Job does not exist, ObjectConflict if it is running
        without having been admitted by Tidegate or admitted with another placement.
        """

    @abc.abstractmethod
    def suspend_job(self, namespace: str, name: str) -> JobInfo:
        """Stop an admitted Job (preemption): set ``spec.suspend`` to true (Kubernetes
        deletes its running pods), then restore the pod template from the annotation and
        drop the annotation. Idempotent. Raises ObjectMissing if the Job does not exist.
        """

    def serves(self, kind: KindRef) -> bool:
        """Whether the cluster serves ``kind`` (its CRD is installed). Gateways that
        serve nothing but built-in kinds answer for batch/v1 Jobs only."""
        return kind == JOB_KIND

    def watch_labelled(
        self,
        kinds: Sequence[KindRef],
        label_selector: str,
        project: Callable[[KindRef, Mapping[str, Any]], Any],
        on_change: Callable[[], None],
    ) -> Watching | None:
        """Follow the objects of ``kinds`` carrying ``label_selector`` from now on,
        calling ``on_change`` (from another thread) when what ``project(kind, obj)``
        keeps of them changed: an object added or deleted, or its projection changed.
        None where the gateway cannot watch (it is then read on timers alone)."""
        return None

    def list_objects(self, kind: KindRef, label_selector: str) -> list[dict[str, Any]]:
        """Objects of ``kind`` in every namespace matching ``label_selector``, as the
        API's JSON, sorted by namespace then name. ObjectMissing when the kind is not
        served."""
        raise ObjectMissing(kind.kind, kind.plural)

    def list_resource_slices(self) -> list[dict[str, Any]] | None:
        """The devices drivers publish (ResourceSlices), as the API's JSON; None where
        the cluster serves no ``resource.k8s.io/v1`` (before Kubernetes 1.34)."""
        return self._list_if_served(RESOURCE_SLICE_KIND)

    def list_device_classes(self) -> list[dict[str, Any]] | None:
        """The DeviceClasses that select among published devices; None as above."""
        return self._list_if_served(DEVICE_CLASS_KIND)

    def list_resource_claim_templates(self) -> list[dict[str, Any]] | None:
        """Every namespace's ResourceClaimTemplates (what queued pods' claims ask for);
        None as above."""
        return self._list_if_served(RESOURCE_CLAIM_TEMPLATE_KIND)

    def list_resource_claims(self) -> list[dict[str, Any]] | None:
        """Every namespace's ResourceClaims (with their allocations); None as above."""
        return self._list_if_served(RESOURCE_CLAIM_KIND)

    def _with_claimed_gpus(self, pods: list[PodInfo]) -> list[PodInfo]:
        """``pods`` with what their own allocated claims hold added to their requests,
        and without those that then hold no GPU (docs/dra.md#metering)."""
        if any(p.has_claims for p in pods):
            claimed = ClaimedGpus(
                (claim_allocation(c) for c in self.list_resource_claims() or []),
                self.list_resource_slices() or [],
                self.dra_flavours,
            )
            pods = [
                _add_claimed(p, claimed.of_pod(p.uid), claimed.shares_of_pod(p.uid))
                if p.has_claims
                else p
                for p in pods
            ]
        return [p for p in pods if p.gpu_requests or p.claimed_shares]

    def _list_if_served(self, kind: KindRef) -> list[dict[str, Any]] | None:
        if not self.serves(kind):
            return None
        try:
            return self.list_objects(kind, "")
        except ObjectMissing:
            return None

    def update_object(
        self,
        kind: KindRef,
        namespace: str,
        name: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        """Read the object, let ``change`` build it as it must be and write that back
        (a replace guarded by the resourceVersion that was read; a conflict re-reads
        and builds again). Writes nothing when ``change`` returns it unchanged. Returns
        the object as stored. ObjectMissing if it does not exist, GatewayError if the
        API refuses the new object (the message says why), ValueError from ``change``
        as GatewayError."""
        raise ObjectMissing(kind.kind, name, namespace)

    def delete_pod(self, namespace: str, name: str, grace_s: int | None = None) -> bool:
        """Delete a pod, giving its containers ``grace_s`` seconds to stop (None: the
        pod's own terminationGracePeriodSeconds); False when it was already gone."""
        raise ObjectMissing("Pod", name, namespace)

    @abc.abstractmethod
    def record_job_event(
        self, job: JobRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """Post a core/v1 Event on the Job (what `kubectl describe job` shows): why it
        was admitted, preempted or refused. Callers treat a failure as a log line."""

    def close(self) -> None:  # noqa: B027 - optional hook, most gateways hold nothing
        """Release connections; the gateway must not be used afterwards."""

    def __enter__(self) -> ClusterGateway:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _add_claimed(pod: PodInfo, held: Mapping[str, int], shares: Mapping[str, int]) -> PodInfo:
    if not held and not shares:
        return pod
    requests = dict(pod.gpu_requests)
    for resource, devices in held.items():
        requests[resource] = requests.get(resource, 0) + devices
    return dataclasses.replace(
        pod,
        gpu_requests=requests,
        claimed_gpus=dict(held) if held else None,
        claimed_shares=dict(shares) if shares else None,
    )
