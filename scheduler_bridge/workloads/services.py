"""Writes to workloads and priority classes: submission with "can it ever run?" checks,
cancel and finish on a user's behalf, time limits. Who may do what is checked here; the
state changes themselves are life-cycle transitions (lifecycle.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from i18n.wording import Wording, gettext_noop
from scheduler_bridge import admission as engine
from scheduler_bridge.admission.reasons import duration
from scheduler_bridge.inventory.catalogue import (
    UnknownGpuProduct,
    UnknownMigProfile,
    product_by_name,
    profile_by_name,
)
from scheduler_bridge.inventory.models import SHARE_UNITS_PER_GPU, Cluster, Flavour, Node
from scheduler_bridge.inventory.sharing import device_units_per_gpu
from scheduler_bridge.workloads import lifecycle
from scheduler_bridge.workloads import wording as worded
from scheduler_bridge.workloads.models import PriorityClass, Workload
from scheduler_bridge.workloads.records import PodSetRecord, dump_pod_sets
from scheduler_bridge.workloads.snapshot import flavour_index, node_flavours
from tenants import access
from tenants.audit import audit_record, snapshot
from tenants.errors import Conflict, PermissionDenied, ValidationFailed
from tenants.models import Role, Tenant

SUBMIT_ROLES = (Role.MEMBER, Role.LEAD, Role.ADMIN)
MANAGE_ROLES = (Role.LEAD, Role.ADMIN)

# what new work says until a cycle has looked at it
NOT_LOOKED_AT_YET = Wording(gettext_noop("waiting for the next admission cycle"))


# PodSetSpec.share_style of pods whose claims take part of a GPU (consumable capacity)
DRA = "dra"


@dataclass(frozen=True)
class PodSetSpec:
    """One pod set as a user asks for it: a flavour by name, or a product, or a MIG
    profile (optionally of a product); nothing means any whole-GPU flavour."""

    count: int
    gpus_per_pod: int
    name: str = "main"
    flavour: str | None = None
    product: str | None = None
    mig_profile: str | None = None
    # elastic: the first min_count pods are the core, the rest grow into idle GPUs
    min_count: int | None = None
    # a share of one GPU per pod, on a shared flavour: thousandths of its compute and/or
    # MiB of its memory (the larger share of the two is what the pod holds)
    gpu_milli: int | None = None
    gpu_memory_mib: int | None = None
    # how an object on the cluster asked for it: "hami" (resources), "fraction"
    # (annotations) or DRA (claims); None from the API
    share_style: str | None = None
    # the flavours its pods' ResourceClaims can be served from, best first (docs/dra.md)
    flavours: tuple[str, ...] = ()
    # per pod, what Kubernetes' ResourceQuota charges its claims per device class
    claim_devices: tuple[tuple[str, int], ...] = ()
    # the ResourceClaim a pod set of one stands for, shared by the object's pods
    shared_claim: str | None = None
    # with ``flavours``: what a pod needs on each when that differs (gpus_per_pod is then
    # the first), from a prioritized list of claims
    per_flavour: tuple[int, ...] = ()
    # of ``flavours``, those its claims take part of a GPU of (consumable capacity), when
    # its prioritized list mixes them with whole devices: ``per_flavour`` is then in
    # thousandths on these, in devices on the others
    share_flavours: tuple[str, ...] = ()

    @property
    def asks_share(self) -> bool:
        return self.gpu_milli is not None or self.gpu_memory_mib is not None


@dataclass(frozen=True)
class ClusterShape:
    """What a cluster can ever offer per flavour: in all, on one node, in one domain."""

    total: dict[str, int]
    largest_node: dict[str, int]
    largest_domain: dict[str, int]
    nodes: tuple[engine.Node, ...] = ()


def cluster_shape(cluster: Cluster) -> ClusterShape:
    by_key = flavour_index(cluster)
    total: dict[str, int] = defaultdict(int)
    largest_node: dict[str, int] = defaultdict(int)
    domains: dict[tuple[str, str], int] = defaultdict(int)
    nodes = []
    for node in Node.objects.filter(cluster=cluster, present=True).order_by("name"):
        capacity = node_flavours(node, by_key)
        for name, most in node.dra_most.items():  # GPUs split on claim, laid out for it
            capacity[name] = max(capacity.get(name, 0), most)
        if capacity:
            nodes.append(engine.Node(node.name, capacity, None, node.topology_domain or None))
        for name, amount in capacity.items():
            total[name] += amount
            largest_node[name] = max(largest_node[name], amount)
            domains[(name, node.topology_domain or f"node:{node.name}")] += amount
    largest_domain: dict[str, int] = defaultdict(int)
    for (name, _domain), amount in domains.items():
        largest_domain[name] = max(largest_domain[name], amount)
    return ClusterShape(dict(total), dict(largest_node), dict(largest_domain), tuple(nodes))


@dataclass
class ClusterFacts:
    """What every submit to one cluster reads alike (its flavours, its shape, the
    priority classes), read once for many submits: a Job sync queues hundreds at a time.
    A lone submit makes its own."""

    cluster: Cluster

    @cached_property
    def flavours(self) -> list[Flavour]:
        return list(Flavour.objects.filter(cluster=self.cluster).order_by("name"))

    @cached_property
    def offered(self) -> list[Flavour]:
        """Flavours with capacity now or once laid out (FlavourQuerySet.offered)."""
        return list(Flavour.objects.filter(cluster=self.cluster).offered().order_by("name"))

    @cached_property
    def shape(self) -> ClusterShape:
        return cluster_shape(self.cluster)

    @cached_property
    def priority_classes(self) -> dict[str, PriorityClass]:
        return {p.name: p for p in PriorityClass.objects.all()}

    def priority_class(self, name: str | None) -> PriorityClass | None:
        """The class called ``name``, the default one for no name; ValidationFailed
        naming the classes there are for an unknown one."""
        classes = self.priority_classes
        if not name:
            return next((p for p in classes.values() if p.is_default), None)
        if name not in classes:
            raise ValidationFailed(
                _("Unknown priority class '%(name)s'; use one of: %(known)s."),
                params={"name": name, "known": ", ".join(classes) or _("none defined")},
                field="priority_class",
            )
        return classes[name]


def resolve_flavours(
    cluster: Cluster, spec: PodSetSpec, offered: list[Flavour] | None = None
) -> list[str]:
    """Acceptable flavours of a pod set, best first; ValidationFailed naming the valid ones.
    ``offered``: the cluster's offered flavours by name, when the caller has read them."""
    flavours = ClusterFacts(cluster).offered if offered is None else offered
    names = [f.name for f in flavours]
    if spec.flavour:
        if spec.flavour not in names:
            raise ValidationFailed(
                _("Unknown flavour '%(flavour)s' on %(cluster)s; available: %(available)s."),
                params={
                    "flavour": spec.flavour,
                    "cluster": cluster.name,
                    "available": ", ".join(names) or _("none"),
                },
                field="pod_sets",
            )
        return [spec.flavour]
    if spec.flavours:
        missing = [f for f in spec.flavours if f not in names]
        if missing:
            raise ValidationFailed(
                _(
                    "The pods' ResourceClaims can be served by %(flavours)s, which %(cluster)s "
                    "has no capacity of; available: %(available)s."
                ),
                params={
                    "flavours": ", ".join(missing),
                    "cluster": cluster.name,
                    "available": ", ".join(names) or _("none"),
                },
                field="pod_sets",
            )
        return list(spec.flavours)
    candidates = flavours
    if spec.product:
        candidates = [f for f in candidates if f.product.lower() == spec.product.lower()]
        if not candidates:
            products = sorted({f.product for f in flavours})
            raise ValidationFailed(
                _("No %(product)s on %(cluster)s; products there: %(products)s."),
                params={
                    "product": spec.product,
                    "cluster": cluster.name,
                    "products": ", ".join(products),
                },
                field="pod_sets",
            )
    if spec.mig_profile:
        for product_name in sorted({f.product for f in candidates}):
            try:
                profile_by_name(product_by_name(product_name), spec.mig_profile)
            except UnknownMigProfile as error:
                if spec.product:
                    raise ValidationFailed(str(error), field="pod_sets") from error
            except UnknownGpuProduct:
                continue
        mig = [f for f in candidates if f.mig_profile == spec.mig_profile]
        if not mig:
            profiles = sorted({f.mig_profile for f in candidates if f.mig_profile})
            raise ValidationFailed(
                _("No MIG profile %(profile)s on %(cluster)s; profiles there: %(offered)s."),
                params={
                    "profile": spec.mig_profile,
                    "cluster": cluster.name,
                    "offered": ", ".join(profiles) or _("none"),
                },
                field="pod_sets",
            )
        return [f.name for f in mig]
    if spec.asks_share:
        shared = [f.name for f in candidates if f.is_shared]
        if not shared:
            raise ValidationFailed(
                _(
                    "A share of a GPU (gpu_milli, gpu_memory_mib) needs a shared flavour, and "
                    "%(cluster)s has none%(product)s: ask for whole GPUs, or have an "
                    "administrator mark a flavour as shared."
                ),
                params={
                    "cluster": cluster.name,
                    "product": f" of {spec.product}" if spec.product else "",
                },
                field="pod_sets",
            )
        return shared
    # whole GPUs: flavours nobody shares first; a shared one gives whole GPUs too
    whole = [f.name for f in candidates if not f.mig_profile and not f.is_shared]
    whole = whole or [f.name for f in candidates if f.is_shared]
    if not whole:
        raise ValidationFailed(
            _("No whole-GPU flavour on %(cluster)s."),
            params={"cluster": cluster.name},
            field="pod_sets",
        )
    return whole


def units_per_pod(
    cluster: Cluster, spec: PodSetSpec, flavours: list[str], known: list[Flavour] | None = None
) -> int:
    """What one pod asks, in its flavours' unit: GPUs or MIG devices, or on a shared
    flavour thousandths of one GPU (the larger of the compute share and the memory
    share). ValidationFailed, saying what to change, for a share that no GPU can give.
    ``known``: the cluster's flavours, when the caller has read them."""
    known = ClusterFacts(cluster).flavours if known is None else known
    chosen = [f for f in known if f.name in flavours]
    if spec.share_flavours:
        return _mixed_units(spec, chosen)
    shared = [f for f in chosen if f.is_shared]
    if spec.share_style == DRA and any(f.sharing != Flavour.Sharing.DRA for f in chosen):
        raise ValidationFailed(
            _(
                "The pods' claims ask for part of a GPU through consumable capacity, but "
                "%(flavours)s is not shared through DRA (its sharing is %(sharing)s): set "
                "its sharing to 'dra' once its work has finished, or ask for whole GPUs."
            ),
            params={
                "flavours": ", ".join(f.name for f in chosen),
                "sharing": ", ".join(sorted({f.sharing or "none" for f in chosen})),
            },
            field="pod_sets",
        )
    if not spec.asks_share and not shared:
        return spec.gpus_per_pod
    if not shared:
        offered = Flavour.objects.filter(cluster=cluster).exclude(sharing="")
        raise ValidationFailed(
            _(
                "%(flavours)s is not shared: a share of a GPU (gpu_milli, gpu_memory_mib) "
                "needs a shared flavour; shared flavours on %(cluster)s: %(offered)s."
            ),
            params={
                "flavours": ", ".join(flavours),
                "cluster": cluster.name,
                "offered": ", ".join(offered.values_list("name", flat=True)) or _("none"),
            },
            field="pod_sets",
        )
    if len(shared) != len(chosen):
        raise ValidationFailed(
            _(
                "Flavours %(flavours)s mix shared and unshared GPUs; a pod set asks for one "
                "kind: name one flavour."
            ),
            params={"flavours": ", ".join(flavours)},
            field="pod_sets",
        )
    if spec.asks_share and spec.gpus_per_pod != 1:
        raise ValidationFailed(
            _(
                "A share is of one GPU: with gpu_milli or gpu_memory_mib, gpus_per_pod must "
                "be 1 (got %(gpus)s)."
            ),
            params={"gpus": spec.gpus_per_pod},
            field="pod_sets",
        )
    if spec.share_style == "hami" and any(f.sharing != Flavour.Sharing.HAMI for f in shared):
        raise ValidationFailed(
            _(
                "The pods ask for HAMi's per-GPU memory or cores, but %(flavours)s is not "
                "shared by HAMi, so no node enforces them: run HAMi's device plugin there "
                "and mark the flavour 'hami', or ask with a gpu-fraction annotation."
            ),
            params={"flavours": ", ".join(f.name for f in shared)},
            field="pod_sets",
        )
    if not spec.asks_share and all(
        f.sharing in (Flavour.Sharing.TIME_SLICING, Flavour.Sharing.MPS) for f in shared
    ):
        # a replica of a time-sliced (or MPS) GPU: the device plugin's share of one GPU
        replicas = min(device_units_per_gpu(f) for f in shared)
        if spec.gpus_per_pod > replicas:
            raise ValidationFailed(
                _(
                    "A pod asks for %(gpus)s replicas of %(flavours)s; one GPU gives "
                    "%(replicas)s: ask for at most %(replicas)s, or use a flavour that is "
                    "not shared for pods of several GPUs."
                ),
                params={
                    "gpus": spec.gpus_per_pod,
                    "flavours": ", ".join(flavours),
                    "replicas": replicas,
                },
                field="pod_sets",
            )
        return -(-spec.gpus_per_pod * SHARE_UNITS_PER_GPU // replicas)
    if not spec.asks_share:
        if spec.gpus_per_pod != 1:
            raise ValidationFailed(
                _(
                    "On shared flavour %(flavour)s a pod holds at most one GPU (got "
                    "gpus_per_pod %(gpus)s): ask for a share with gpu_milli, or use a flavour "
                    "that is not shared for pods of several GPUs."
                ),
                params={"flavour": shared[0].name, "gpus": spec.gpus_per_pod},
                field="pod_sets",
            )
        return SHARE_UNITS_PER_GPU
    units = spec.gpu_milli or 0
    if spec.gpu_memory_mib is not None:
        memory = (
            Node.objects.filter(
                cluster=cluster, present=True, product__in={f.product for f in shared}
            ).aggregate(largest=Max("gpu_memory_mib"))["largest"]
            or 0
        )
        if not memory:
            raise ValidationFailed(
                _(
                    "No node of %(flavours)s reports its GPU memory (label "
                    "nvidia.com/gpu.memory), so gpu_memory_mib cannot be placed: ask with "
                    "gpu_milli instead."
                ),
                params={"flavours": ", ".join(flavours)},
                field="pod_sets",
            )
        if spec.gpu_memory_mib > memory:
            raise ValidationFailed(
                _(
                    "gpu_memory_mib %(asked)s is more than one GPU of %(flavours)s has "
                    "(%(memory)s MiB): ask for at most %(memory)s, or for whole GPUs."
                ),
                params={
                    "asked": spec.gpu_memory_mib,
                    "flavours": ", ".join(flavours),
                    "memory": memory,
                },
                field="pod_sets",
            )
        units = max(units, -(-spec.gpu_memory_mib * SHARE_UNITS_PER_GPU // memory))
    return max(1, units)


def _mixed_units(spec: PodSetSpec, chosen: list[Flavour]) -> int:
    """A prioritized list of claims mixing whole devices and parts of GPUs: each
    alternative is already in its flavour's unit; ValidationFailed where a flavour's
    sharing says otherwise (an administrator changed it)."""
    wrong = sorted(
        f.name
        for f in chosen
        if (f.name in spec.share_flavours) != (f.sharing == Flavour.Sharing.DRA)
    )
    if wrong:
        raise ValidationFailed(
            _(
                "The pods' claims take part of a GPU of %(shares)s and whole devices of the "
                "other alternatives, but the sharing of %(flavours)s says otherwise: set "
                "'dra' on flavours whose GPUs several claims share (and only on those) once "
                "their work has finished."
            ),
            params={
                "shares": ", ".join(spec.share_flavours),
                "flavours": ", ".join(wrong),
            },
            field="pod_sets",
        )
    return spec.per_flavour[0] if spec.per_flavour else spec.gpus_per_pod


def check_can_ever_run(shape: ClusterShape, pod_sets: list[PodSetRecord], topology: str) -> None:
    """ValidationFailed when no state of the cluster could ever run this workload."""
    for ps in pod_sets:
        needed = ps.gpus

        def need_on(flavour: str, ps: PodSetRecord = ps) -> int:
            return ps.count * ps.per_pod_on(flavour)

        fits = [f for f in ps.flavours if shape.total.get(f, 0) >= need_on(f)]
        best = max(ps.flavours, key=lambda f: shape.total.get(f, 0))
        if not fits:
            raise ValidationFailed(
                _(
                    "Pod set %(pod_set)s needs %(need)s GPUs of %(flavours)s; the cluster has "
                    "%(have)s %(best)s in all."
                ),
                params={
                    "pod_set": ps.name,
                    "need": needed,
                    "flavours": "/".join(ps.flavours),
                    "have": shape.total.get(best, 0),
                    "best": best,
                },
                field="pod_sets",
            )
        if not any(shape.largest_node.get(f, 0) >= ps.per_pod_on(f) for f in ps.flavours):
            raise ValidationFailed(
                _(
                    "A pod of %(pod_set)s needs %(per_pod)s GPUs on one node; the largest "
                    "node offers %(have)s %(best)s."
                ),
                params={
                    "pod_set": ps.name,
                    "per_pod": ps.gpus_per_pod,
                    "have": shape.largest_node.get(best, 0),
                    "best": best,
                },
                field="pod_sets",
            )
        if topology == Workload.Topology.ONE_NODE and not any(
            shape.largest_node.get(f, 0) >= need_on(f) for f in ps.flavours
        ):
            raise ValidationFailed(
                _("Needs %(need)s GPUs on one node; the largest node has %(have)s %(best)s."),
                params={"need": needed, "have": shape.largest_node.get(best, 0), "best": best},
                field="topology",
            )
        if topology == Workload.Topology.ONE_DOMAIN and not any(
            shape.largest_domain.get(f, 0) >= need_on(f) for f in ps.flavours
        ):
            raise ValidationFailed(
                _(
                    "Needs %(need)s GPUs in one NVLink domain; the largest domain has "
                    "%(have)s %(best)s."
                ),
                params={"need": needed, "have": shape.largest_domain.get(best, 0), "best": best},
                field="topology",
            )
    pod_set_specs = [
        engine.PodSet(ps.count, ps.gpus_per_pod, ps.flavours, per_flavour=ps.per_flavour)
        for ps in pod_sets
    ]
    if not engine.fits_when_idle(shape.nodes, pod_set_specs, engine.Topology(topology)):
        raise _not_together(shape, pod_sets, topology)


def _not_together(
    shape: ClusterShape, pod_sets: list[PodSetRecord], topology: str
) -> ValidationFailed:
    """Why pod sets that each fit cannot be placed together (first flavour of each).
    Amounts are "4 h100-80gb": a number and a flavour's name, the same in every language."""
    need: dict[str, int] = defaultdict(int)
    for ps in pod_sets:
        need[ps.flavours[0]] += ps.gpus
    asked = [f"{n} {f}" for f, n in sorted(need.items())]
    if topology == Workload.Topology.ONE_NODE:
        where = ", ".join(f"{shape.largest_node.get(f, 0)} {f}" for f in sorted(need))
        return ValidationFailed(
            _("The pod sets together need %(asked)s on one node; the largest node has %(where)s."),
            params={"asked": _joined(asked), "where": where},
            field="pod_sets",
        )
    if topology == Workload.Topology.ONE_DOMAIN:
        where = ", ".join(f"{shape.largest_domain.get(f, 0)} {f}" for f in sorted(need))
        return ValidationFailed(
            _(
                "The pod sets together need %(asked)s in one NVLink domain; the largest "
                "domain has %(where)s."
            ),
            params={"asked": _joined(asked), "where": where},
            field="pod_sets",
        )
    have = ", ".join(f"{shape.total.get(f, 0)} {f}" for f in sorted(need))
    pods = ", ".join(f"{ps.count} x {ps.gpus_per_pod}" for ps in pod_sets)
    sizes = ", ".join(sorted({str(sum(n.capacity.values())) for n in shape.nodes}))
    return ValidationFailed(
        _(
            "The pods (%(pods)s GPUs) cannot be placed together even with every GPU free: "
            "they need %(asked)s; the cluster has %(have)s in all, on nodes of %(sizes)s GPUs."
        ),
        params={"pods": pods, "asked": _joined(asked), "have": have, "sizes": sizes},
        field="pod_sets",
    )


def _join_now(amounts: list[str]) -> str:
    text = amounts[-1]
    for amount in reversed(amounts[:-1]):
        text = gettext("%(first)s and %(rest)s") % {"first": amount, "rest": text}
    return text


# '4 a100 and 8 h100' in the language of whoever reads the error
_joined = lazy(_join_now, str)


MAX_SECONDS = 2**31 - 1


def workload_submit(
    *,
    actor: Any,
    cluster: Cluster,
    tenant: Tenant,
    name: str,
    pod_sets: list[PodSetSpec],
    gang: bool = True,
    topology: str = Workload.Topology.NONE,
    priority_class: str | None = None,
    max_run_time_s: int | None = None,
    source: str = Workload.Source.API,
    namespace: str = "",
    job_name: str = "",
    job_uid: str = "",
    kind: str = "",
    preemption_grace_s: int | None = None,
    checkpoint_interval_s: int | None = None,
    audit_source: str = "api",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    facts: ClusterFacts | None = None,
) -> Workload:
    """Queue a workload for admission. Raises PermissionDenied for users who may not run
    work for `tenant`, ValidationFailed when the workload could never run on `cluster`.
    ``facts``: the cluster's, shared by a burst of submits (read here otherwise)."""
    facts = facts or ClusterFacts(cluster)
    if actor is not None and not access.has_role(actor, tenant, SUBMIT_ROLES):
        raise PermissionDenied(
            _("Submitting work for %(tenant)s needs a member role on it."),
            params={"tenant": tenant.slug},
        )
    if not pod_sets:
        raise ValidationFailed(_("Give at least one pod set."), field="pod_sets")
    if topology not in Workload.Topology.values:
        raise ValidationFailed(
            _("Unknown topology '%(topology)s'; use one of %(topologies)s."),
            params={"topology": topology, "topologies": ", ".join(Workload.Topology.values)},
            field="topology",
        )
    for field_name, seconds in (
        ("preemption_grace_s", preemption_grace_s),
        ("checkpoint_interval_s", checkpoint_interval_s),
    ):
        if seconds is not None and not 0 <= seconds <= MAX_SECONDS:
            raise ValidationFailed(
                _("%(field)s is %(seconds)s; give a whole number of seconds from 0 to %(max)s."),
                params={"field": field_name, "seconds": seconds, "max": MAX_SECONDS},
                field=field_name,
            )
    stored = []
    for index, spec in enumerate(pod_sets):
        if spec.count < 1 or spec.gpus_per_pod < 1:
            raise ValidationFailed(
                _("Pod set %(index)s: count and gpus_per_pod must be at least 1."),
                params={"index": index},
                field="pod_sets",
            )
        if spec.min_count is not None and not 1 <= spec.min_count <= spec.count:
            raise ValidationFailed(
                _(
                    "Pod set %(index)s: min_count is %(min_count)s; it must be between 1 and "
                    "its count (%(count)s)."
                ),
                params={"index": index, "min_count": spec.min_count, "count": spec.count},
                field="pod_sets",
            )
        flavours = resolve_flavours(cluster, spec, facts.offered)
        stored.append(
            PodSetRecord(
                name=spec.name or f"set-{index}",
                count=spec.count,
                gpus_per_pod=units_per_pod(cluster, spec, flavours, facts.flavours),
                flavours=tuple(flavours),
                min_count=spec.min_count if spec.min_count != spec.count else None,
                claim_devices=spec.claim_devices,
                shared_claim=spec.shared_claim,
                per_flavour=spec.per_flavour,
            )
        )
    # an elastic workload must be able to run its core; what is above it grows when it can
    check_can_ever_run(facts.shape, [ps.core_record for ps in stored], topology)
    pclass = facts.priority_class(priority_class)
    workload = Workload(
        cluster=cluster,
        tenant=tenant,
        name=name,
        source=source,
        namespace=namespace,
        job_name=job_name,
        job_uid=job_uid,
        kind=kind,
        labels=dict(labels or {}),
        annotations=dict(annotations or {}),
        priority_class=pclass,
        priority=pclass.value if pclass else 0,
        preemptible=pclass.preemptible if pclass else True,
        fills_idle=pclass.fills_idle if pclass else False,
        pod_sets=dump_pod_sets(stored),
        elastic=any(ps.min_count is not None for ps in stored),
        gang=gang,
        topology=topology,
        max_run_time_s=max_run_time_s,
        preemption_grace_s=preemption_grace_s,
        checkpoint_interval_s=checkpoint_interval_s,
        submitted_by=actor if getattr(actor, "is_authenticated", False) else None,
        submitted_at=timezone.now(),
        reason=NOT_LOOKED_AT_YET,
        reason_args=NOT_LOOKED_AT_YET.to_json(),
    )
    return lifecycle.submit(workload, actor=actor, source=audit_source)


def may_manage(actor: Any, workload: Workload) -> bool:
    """The submitter, or a lead or admin of the workload's tenant (or above it)."""
    return workload.submitted_by_id == getattr(actor, "pk", None) or access.has_role(
        actor, workload.tenant, MANAGE_ROLES
    )


def workload_cancel(*, actor: Any, workload: Workload, source: str = "api") -> Workload:
    """Withdraw pending or admitted work (the submitter, or the tenant's leads/admins)."""
    if not may_manage(actor, workload):
        raise PermissionDenied(_("Only the submitter or a lead of the tenant may cancel it."))
    return lifecycle.cancel(workload, worded.cancelled(), actor=actor, source=source)


def workload_finish(*, actor: Any, workload: Workload, source: str = "api") -> Workload:
    """Report that API-submitted work has ended, freeing its GPUs."""
    if not may_manage(actor, workload):
        raise PermissionDenied(_("Only the submitter or a lead of the tenant may finish it."))
    if workload.state not in Workload.ACTIVE_STATES:
        raise Conflict(
            _("Workload %(id)s is %(state)s; only running work finishes."),
            params={"id": workload.pk, "state": Workload.State(workload.state).label},
        )
    return lifecycle.finish(workload, worded.finished(), actor=actor, source=source)


def stop_overrunning(cluster: Cluster, now: datetime | None = None) -> list[int]:
    """Stop running work past its declared max run time (state timed_out), as Slurm
    does at a time limit: backfill let work onto GPUs held for a starving gang because it
    promised to end in time, and that promise must hold. Returns the stopped ids."""
    now = now or timezone.now()
    overrunning = [
        workload
        for workload in Workload.objects.filter(
            cluster=cluster, state__in=Workload.ACTIVE_STATES, max_run_time_s__isnull=False
        )
        if workload.admitted_at is not None
        and workload.max_run_time_s is not None
        and workload.admitted_at + timedelta(seconds=workload.max_run_time_s) <= now
    ]
    stopped = []
    for workload in overrunning:
        limit = duration(float(workload.max_run_time_s or 0))
        reason = worded.overran(limit)
        try:
            lifecycle.time_out(workload, reason, still=lambda locked: _overran(locked, now))
        except Conflict:
            continue  # it ended, or was preempted, on its own meanwhile
        stopped.append(workload.pk)
    return stopped


def _overran(workload: Workload, now: datetime) -> bool:
    return (
        workload.state in Workload.ACTIVE_STATES
        and workload.admitted_at is not None
        and workload.max_run_time_s is not None
        and workload.admitted_at + timedelta(seconds=workload.max_run_time_s) <= now
    )


def priority_class_save(
    *, actor: Any, instance: PriorityClass, source: str = "api"
) -> PriorityClass:
    """Create or change a priority class (platform admins); one default at most."""
    if not access.is_platform_admin(actor):
        raise PermissionDenied(_("Only platform administrators manage priority classes."))
    if instance.fills_idle and not instance.preemptible:
        raise ValidationFailed(
            _(
                "A class whose work fills idle GPUs must be preemptible: it is the first work "
                "taken back. Set preemptible to true or fills_idle to false."
            ),
            field="fills_idle",
        )
    with transaction.atomic():
        before = snapshot(PriorityClass.objects.get(pk=instance.pk)) if instance.pk else None
        if instance.is_default:
            PriorityClass.objects.exclude(pk=instance.pk).update(is_default=False)
        instance.save()
        audit_record(
            actor=actor,
            action="update" if before else "create",
            instance=instance,
            before=before,
            after=snapshot(instance),
            source=source,
        )
    return instance


def priority_class_delete(*, actor: Any, instance: PriorityClass, source: str = "api") -> None:
    """Delete a priority class no workload uses (409 otherwise)."""
    if not access.is_platform_admin(actor):
        raise PermissionDenied(_("Only platform administrators manage priority classes."))
    with transaction.atomic():
        in_use = Workload.objects.filter(priority_class=instance).count()
        if in_use:
            raise Conflict(
                ngettext_lazy(
                    "Priority class %(name)s is used by %(count)s workload; keep it, or lower "
                    "its value instead.",
                    "Priority class %(name)s is used by %(count)s workloads; keep it, or lower "
                    "its value instead.",
                    "count",
                ),
                params={"name": instance.name, "count": in_use},
            )
        audit_record(
            actor=actor,
            action="delete",
            instance=instance,
            before=snapshot(instance),
            after=None,
            source=source,
        )
        instance.delete()
