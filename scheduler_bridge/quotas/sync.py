"""ResourceQuota sync: make `tidegate-gpu` in every bound namespace say what the rule says.

The rule itself is pure (`resource_quota.py`); this module gathers its inputs from the
database and the cluster, applies through the gateway, and records what happened.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from i18n.wording import chain, gettext_noop, wording
from scheduler_bridge.dra.allocation import claim_allocation
from scheduler_bridge.dra.demand import Inventory, device_class_counts, device_class_quota_key
from scheduler_bridge.dra.objects import DraError, claim_spec
from scheduler_bridge.gateways import (
    ApplyResult,
    ClusterGateway,
    ClusterUnreachable,
    GatewayError,
    NamespaceMissing,
)
from scheduler_bridge.gateways.base import MANAGED_BY_LABEL, TENANT_LABEL
from scheduler_bridge.inventory.connection import cluster_gateway
from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.inventory.queue_holdings import QueueHoldings
from scheduler_bridge.inventory.sharing import device_units_per_gpu
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.quotas.resource_quota import (
    QUOTA_NAME,
    TenantNamespaces,
    desired_hard_limits,
)
from tenants.audit import audit_record
from tenants.models import NamespaceBinding

logger = logging.getLogger(__name__)

# Tidegate's own ResourceQuotas, found by label (bound or not).
_SELECTOR = f"{MANAGED_BY_LABEL}=tidegate"


@dataclass
class QuotaSyncResult:
    namespaces: int = 0
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    drift_repaired: int = 0
    # namespaces no longer bound whose Tidegate quota was deleted
    removed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def writes(self) -> int:
        return self.created + self.updated


def desired_quotas(
    cluster: Cluster,
    bindings: list[NamespaceBinding],
    used: dict[str, dict[str, int]],
    current: dict[str, dict[str, str]] | None = None,
    device_classes: Mapping[str, GpuDeviceClass] | None = None,
    *,
    lent: Mapping[int, Mapping[int, int]],
) -> dict[str, dict[str, str]]:
    """`spec.hard` per bound namespace of `cluster` (the inputs of the pure rule);
    ``current`` is what Tidegate's quotas say now (kept while they still hold), ``lent``
    what the queue lends each tenant per flavour (QueueHoldings.lent).
    ``device_classes`` maps the DeviceClasses that serve GPUs to the flavours of their
    devices (``gpu_device_classes``): each gets its device-class key, its ceiling the
    tenant's guarantees and loans of those flavours (docs/dra.md#enforcement).

    A flavour's guarantee counts toward the way the cluster offers its GPUs: its
    extended resource where nodes advertise it or a DeviceClass serves it (DRA's
    extended-resource mapping), its device classes where a DRA driver publishes it
    (both where both do), so a tenant cannot spend it twice."""
    flavours = list(Flavour.objects.filter(cluster=cluster))
    through_claims = _published_devices(cluster)
    classes = device_classes or {}
    mapped = {
        (name, c.extended_resource)
        for c in classes.values()
        if c.extended_resource
        for name in c.flavours
    }
    as_resource = {
        f.pk
        for f in flavours
        if f.capacity > through_claims.get(f.name, 0)
        or f.name not in through_claims
        or (f.name, f.resource_name) in mapped
    }
    resources = {f.resource_name for f in flavours if f.capacity > 0 and f.pk in as_resource}
    classes_of: dict[str, list[str]] = defaultdict(list)  # flavour name -> its classes' keys
    for name, served in sorted(classes.items()):
        resources.add(device_class_quota_key(name))
        for flavour_name in served.flavours:
            classes_of[flavour_name].append(device_class_quota_key(name))
    ceiling: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def count(tenant_id: int, flavour: Flavour, amount: int) -> None:
        if flavour.pk in as_resource:
            resources.add(flavour.resource_name)
            ceiling[tenant_id][flavour.resource_name] += amount
        if not flavour.is_shared and flavour.name in through_claims:
            for key in classes_of.get(flavour.name, ()):
                ceiling[tenant_id][key] += amount

    by_pk = {f.pk: f for f in flavours}
    rows = (
        Quota.objects.filter(flavour__cluster=cluster)
        .values("tenant_id", "flavour_id")
        .annotate(total=Sum("guaranteed"))
    )
    # a shared GPU is several units of its resource (replicas, vGPUs) to Kubernetes
    per_gpu = {f.pk: device_units_per_gpu(f) for f in flavours if f.is_shared}
    for row in rows:
        flavour = by_pk[row["flavour_id"]]
        count(row["tenant_id"], flavour, int(row["total"]) * per_gpu.get(flavour.pk, 1))
    for tenant_id, by_flavour in lent.items():
        for flavour_id, amount in by_flavour.items():
            count(tenant_id, by_pk[flavour_id], amount)
    by_tenant: dict[int, list[str]] = defaultdict(list)
    slugs: dict[int, str] = {}
    for binding in bindings:
        by_tenant[binding.tenant_id].append(binding.namespace)
        slugs[binding.tenant_id] = binding.tenant.slug
    tenants = [
        TenantNamespaces(slugs[tid], tuple(namespaces), dict(ceiling.get(tid, {})))
        for tid, namespaces in by_tenant.items()
    ]
    return desired_hard_limits(tenants, used, resources, current)


def _published_devices(cluster: Cluster) -> dict[str, int]:
    """Flavour name -> devices DRA drivers publish of it on the cluster's nodes."""
    found: dict[str, int] = defaultdict(int)
    for devices in (
        Node.objects.filter(cluster=cluster, present=True)
        .exclude(dra_devices={})
        .values_list("dra_devices", flat=True)
    ):
        for name, devices_of_flavour in (devices or {}).items():
            found[name] += int(devices_of_flavour)
    return dict(found)


@dataclass(frozen=True)
class GpuDeviceClass:
    """A DeviceClass that admits published GPUs: the flavours of those it admits (shared
    ones left out: a claim counts one device whatever part it takes), and the extended
    resource it serves pods that ask for it, if any."""

    flavours: frozenset[str]
    extended_resource: str | None = None


def gpu_device_classes(cluster: Cluster, gateway: ClusterGateway) -> dict[str, GpuDeviceClass]:
    """The DeviceClasses that admit GPUs, by name (none, and nothing asked of the
    cluster, where inventory found no GPU published through DRA)."""
    if not _published_devices(cluster):
        return {}
    classes = gateway.list_device_classes()
    if not classes:
        return {}
    inventory = Inventory.published(
        gateway.list_resource_slices() or [], classes, cluster.dra_flavours
    )
    return {
        name: GpuDeviceClass(
            frozenset(f.name for f in served if not f.shared),
            inventory.classes[name].extended_resource_name,
        )
        for name, served in inventory.class_flavours().items()
        if any(not f.shared for f in served)
    }


def used_by_namespace(
    cluster: Cluster, gateway: ClusterGateway, queue: QueueHoldings
) -> dict[str, dict[str, int]]:
    """GPUs in use per namespace, per resource name or device-class key: pods and
    ResourceClaims outside the queue as Kubernetes counts them, and every Job the queue
    admitted at its full size, whether its pods (and their claims) exist yet or not (so
    a Job is never refused by its namespace's quota while it starts)."""
    queue_jobs = queue.jobs
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in queue.admitted:
        if job.resource is None:
            continue
        counted = used[job.namespace]
        for key, devices in job.claimed.items():
            counted[key] += devices
        if job.gpus_as_resource > 0:
            counted[job.resource] += job.gpus_as_resource
    queue_pods = set()
    for pod in gateway.list_gpu_pods():
        if (pod.namespace, pod.job_name) in queue_jobs:
            queue_pods.add(pod.uid)
            continue
        if pod.phase not in ("Pending", "Running"):
            continue
        for resource, amount in pod.resource_requests.items():
            used[pod.namespace][resource] += amount
    if _published_devices(cluster):  # (else no device-class key is written)
        # (a queued Job's pod whose claims are not allocated yet holds no GPU: its
        # claims are still the Job's, counted above)
        queue_pods.update(
            p.uid for p in gateway.list_claiming_pods() if (p.namespace, p.job_name) in queue_jobs
        )
        for namespace, counted in _claims_outside(gateway, queue_pods).items():
            for key, devices in counted.items():
                used[namespace][key] += devices
    return {namespace: dict(counted) for namespace, counted in used.items()}


def _claims_outside(gateway: ClusterGateway, queue_pods: set[str]) -> dict[str, dict[str, int]]:
    """Namespace -> device-class key -> devices Kubernetes counts for the ResourceClaims
    not made for the pods of Jobs the queue admitted (those are counted at their
    Job's full size). A claim whose spec cannot be read is counted as nothing: the API
    server would not have stored it."""
    found: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for claim in gateway.list_resource_claims() or []:
        if claim_allocation(claim).owner_uid in queue_pods:
            continue
        meta = claim.get("metadata") or {}
        try:
            spec = claim_spec(claim.get("spec") or {}, f"ResourceClaim {meta.get('name')}")
        except DraError:
            continue
        for name, devices in device_class_counts([spec]).items():
            found[str(meta.get("namespace") or "")][device_class_quota_key(name)] += devices
    return found


def quota_sync(
    cluster: Cluster, gateway: ClusterGateway | None = None, *, queue: QueueHoldings
) -> QuotaSyncResult:
    """Apply the ResourceQuota of every namespace bound on `cluster`, and delete
    Tidegate's ResourceQuota from namespaces no longer bound (found by its labels, so a
    binding removed while no worker ran is cleaned up too).

    Idempotent: a namespace whose quota already matches costs no write call. A quota
    edited or deleted by hand is restored and an audit event says so. A bound namespace
    missing from the cluster marks its binding instead of failing the run; any other
    error of one namespace is recorded on its binding. Raises ClusterUnreachable (after
    the gateway's retries) when the cluster does not answer at all. ``queue`` is what the
    admission queue holds on the cluster (workloads.selectors.queue_holdings).
    """
    with cluster_gateway(cluster, gateway) as opened:
        return _quota_sync(cluster, opened, queue)


def _quota_sync(cluster: Cluster, gateway: ClusterGateway, queue: QueueHoldings) -> QuotaSyncResult:
    bindings = list(
        NamespaceBinding.objects.filter(cluster_name=cluster.name)
        .select_related("tenant")
        .order_by("namespace")
    )
    existing = gateway.resource_quota_limits(_SELECTOR)
    current = {ns: hard for (ns, name), hard in existing.items() if name == QUOTA_NAME}
    used = used_by_namespace(cluster, gateway, queue)
    classes = gpu_device_classes(cluster, gateway)
    desired = desired_quotas(cluster, bindings, used, current, classes, lent=queue.lent)
    result = QuotaSyncResult(namespaces=len(bindings))
    marks = _Marks(timezone.now())
    _mark = marks.add
    unreachable: ClusterUnreachable | None = None
    for binding, applied in _apply_all(gateway, bindings, desired, current):
        if isinstance(applied, ClusterUnreachable):
            unreachable = unreachable or applied  # the others' outcomes are still kept
            continue
        if isinstance(applied, NamespaceMissing):
            result.missing.append(binding.namespace)
            _mark(
                binding,
                NamespaceBinding.SyncState.NAMESPACE_MISSING,
                f"namespace {binding.namespace} does not exist in cluster {cluster.name}",
            )
            continue
        if isinstance(applied, GatewayError):
            result.errors[binding.namespace] = str(applied)
            _mark(binding, NamespaceBinding.SyncState.ERROR, str(applied))
            continue
        setattr(result, applied.action, getattr(result, applied.action) + 1)
        if applied.drift_repaired:
            result.drift_repaired += 1
            audit_record(
                actor=None,
                action="action",
                instance=binding,
                before=None,
                after={"hard": dict(desired[binding.namespace])},
                source="system",
                message=wording(
                    gettext_noop(
                        "restored ResourceQuota %(namespace)s/%(name)s on %(cluster)s: %(drift)s"
                    ),
                    namespace=binding.namespace,
                    name=QUOTA_NAME,
                    cluster=cluster.name,
                    drift=chain(gettext_noop("%(first)s; %(rest)s"), list(applied.drift)),
                ),
            )
        _mark(binding, NamespaceBinding.SyncState.OK, f"quota {applied.action}")
    marks.write()
    if unreachable is not None:
        raise unreachable  # what was applied before the cluster stopped answering is kept
    _remove_unbound(cluster, gateway, sorted(existing), {b.namespace for b in bindings}, result)
    logger.info("quota sync of %s: %s", cluster.name, result)
    return result


def _apply_all(
    gateway: ClusterGateway,
    bindings: list[NamespaceBinding],
    desired: dict[str, dict[str, str]],
    current: dict[str, dict[str, str]],
) -> Iterator[tuple[NamespaceBinding, ApplyResult | GatewayError]]:
    """Apply each binding's quota; yields in binding order.

    Quotas whose limits change (or that were not applied fine last time) go out up to
    ``gateway.write_concurrency`` at once (a real API server answers many writes in
    parallel; a sync after a busy hour writes hundreds). When the gateway compares
    without a request, the rest are applied one after the other: they almost always
    match already, and a thread per such check costs more than the check. Once the cluster
    stops answering, the bindings not yet applied are skipped (a ClusterUnreachable is
    yielded for each), while applies already under way finish and yield what they did.
    """
    unreachable = threading.Event()

    def apply(binding: NamespaceBinding) -> ApplyResult | GatewayError:
        if unreachable.is_set():
            return ClusterUnreachable("skipped: the cluster stopped answering")
        try:
            return gateway.apply_resource_quota(
                binding.namespace,
                QUOTA_NAME,
                desired[binding.namespace],
                {MANAGED_BY_LABEL: "tidegate", TENANT_LABEL: binding.tenant.slug},
                expect_existing=binding.sync_state == NamespaceBinding.SyncState.OK,
            )
        except ClusterUnreachable as error:
            unreachable.set()
            return error
        except GatewayError as error:
            return error

    changing = [
        b
        for b in bindings
        if not gateway.compares_locally
        or current.get(b.namespace) != desired[b.namespace]
        or b.sync_state != NamespaceBinding.SyncState.OK
    ]
    done: dict[int, ApplyResult | GatewayError] = {}
    workers = min(gateway.write_concurrency, len(changing))
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="quota-apply") as pool:
            done = dict(zip((b.pk for b in changing), pool.map(apply, changing), strict=True))
    for binding in bindings:
        yield binding, done[binding.pk] if binding.pk in done else apply(binding)


def _remove_unbound(
    cluster: Cluster,
    gateway: ClusterGateway,
    existing: list[tuple[str, str]],
    bound: set[str],
    result: QuotaSyncResult,
) -> None:
    """Delete Tidegate's quota from every namespace that has one (``existing``, as
    listed before the sync) but no binding: an unbound namespace is no tenant's, and a
    stale limit would keep throttling it."""
    for namespace, name in existing:
        if name != QUOTA_NAME or namespace in bound:
            continue
        try:
            removed = gateway.delete_resource_quota(namespace, name)
        except ClusterUnreachable:
            raise
        except GatewayError as error:
            result.errors[namespace] = str(error)
            continue
        if removed:
            result.removed.append(namespace)
            audit_record(
                actor=None,
                action="action",
                instance=cluster,
                before={"namespace": namespace, "resource_quota": name},
                after=None,
                source="system",
                message=wording(
                    gettext_noop(
                        "deleted ResourceQuota %(namespace)s/%(name)s on %(cluster)s: the "
                        "namespace is no longer bound to a tenant"
                    ),
                    namespace=namespace,
                    name=name,
                    cluster=cluster.name,
                ),
            )


class _Marks:
    """Each binding's sync outcome, written together: one UPDATE per distinct outcome
    (a steady sync of a thousand namespaces is a few statements, not a thousand)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.outcomes: dict[tuple[str, str], list[int]] = defaultdict(list)

    def add(self, binding: NamespaceBinding, state: str, message: str) -> None:
        self.outcomes[(state, message[:2000])].append(binding.pk)
        binding.sync_state = state

    def write(self) -> None:
        with transaction.atomic():
            for (state, message), pks in self.outcomes.items():
                NamespaceBinding.objects.filter(pk__in=pks).update(
                    sync_state=state, sync_message=message, synced_at=self.now
                )
        self.outcomes.clear()
