"""What every workload integration reads from and writes to its kind's objects.

An integration turns one kind of Kubernetes object (a Job, a JobSet, a PyTorchJob, ...)
into what the queue needs - its pod sets with their GPU requests and which counts are
elastic, whether it is suspended, finished or failed - and builds the object as it must
look once admitted, stopped, restored or scaled. Everything here works on the object's
JSON (plain dicts) and never touches the network or the database; the gateways send
what it builds and the sync (workloads/integration_sync.py) decides when.

Bad input never raises out of :meth:`Integration.read`: an object Tidegate cannot
queue (no GPU request, ``min-pods`` above the count, two GPU resources in one pod)
comes back with ``problem`` set to a sentence its owner can act on, and the sync
records the workload as rejected with that sentence.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from i18n.wording import gettext_noop, wording
from scheduler_bridge.dra.demand import pod_claims
from scheduler_bridge.dra.objects import DraError
from scheduler_bridge.gateways import manifests
from scheduler_bridge.gateways.base import (
    GPU_RESOURCE,
    ORIGINAL_SCHEDULING_ANNOTATION,
    KindRef,
    Toleration,
)
from scheduler_bridge.gateways.pod_resources import gpu_requests
from scheduler_bridge.integrations.shares import ShareError, ShareRead, share_of

MIN_PODS_ANNOTATION = "tidegate.io/min-pods"
# when a preemption was announced: the time (RFC 3339) the object will be suspended
PREEMPT_AT_ANNOTATION = "tidegate.io/preempt-at"
PRODUCT_LABEL = "nvidia.com/gpu.product"


class IntegrationError(ValueError):
    """An object of a supported kind that Tidegate cannot queue; the message says why
    and what to change (a Wording: English, and said again in the reader's language
    where the refusal is shown)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class PodSetRead:
    """One group of identical pods of an object: ``count`` pods at most, of which the
    first ``min_count`` are its core (None: all of them, nothing elastic). Each pod asks
    for ``gpus_per_pod`` of ``resource`` (``nvidia.com/gpu`` or a MIG resource);
    ``product`` is the GPU product label its own node selector names, if any."""

    name: str
    count: int
    gpus_per_pod: int
    resource: str
    min_count: int | None = None
    product: str | None = None
    # a share of one GPU per pod (HAMi resources or fraction annotations), if asked
    share: ShareRead | None = None
    # GPUs asked through DRA instead: each pod's (claim name, ResourceClaimTemplate name),
    # and the ResourceClaims its pods share with others ((claim name, ResourceClaim
    # name), counted once per workload); ``resource`` is then empty and the flavours come
    # from the claims (docs/dra.md)
    claims: tuple[tuple[str, str], ...] = ()
    shared_claims: tuple[tuple[str, str], ...] = ()

    @property
    def mig_profile(self) -> str | None:
        if self.resource == GPU_RESOURCE:
            return None
        return self.resource.removeprefix("nvidia.com/mig-").replace(".me", "+me")


@dataclass(frozen=True)
class ObjectRead:
    """What the queue needs to know about one object."""

    kind: str
    namespace: str
    name: str
    uid: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    suspended: bool = True
    admitted: bool = False  # carries Tidegate's original-scheduling annotation
    finished: bool = False
    failed: bool = False
    pod_sets: tuple[PodSetRead, ...] = ()
    problem: str | None = None
    priority_class_name: str | None = None
    # pods whose GPUs can go back while it runs (completed pods of a batch/v1 Job)
    reclaimable_pods: int = 0


class KindFacts(Protocol):
    """What the sync, the life cycle and the reconciler ask of a workload kind, whether an
    integration (its object is suspended through its spec) or the pod groups
    (integrations/pods.py: pods held by a scheduling gate)."""

    @property
    def kind(self) -> str: ...

    # its work waits behind Tidegate's scheduling gate on each pod, not a suspend field
    @property
    def held_by_gate(self) -> bool: ...

    # its pods' controller or autoscaler changes how many pods it has while it runs; the
    # workload follows
    @property
    def follows_pod_count(self) -> bool: ...

    # one object stands for it: its owner is told through Kubernetes Events on it, and it
    # ends when that object does (a pod group ends when its pods are gone)
    @property
    def has_one_object(self) -> bool: ...


class Integration(abc.ABC):
    """One kind of workload object. Subclasses say where its pod templates are, how it
    is suspended and how it ends; this class builds the admitted, stopped and restored
    objects the same way for every kind."""

    ref: ClassVar[KindRef]
    # whether stopping the object and putting its templates back may be one write (a
    # Job's template may change only once it is suspended: two writes)
    restore_with_stop: ClassVar[bool] = True
    # whether its pod templates may be pinned to nodes (required node affinity) while
    # suspended; a JobSet's webhook allows only selectors and tolerations
    pins_nodes: ClassVar[bool] = True
    # the label its controller puts on its pods naming the object (None: the pods' owner
    # reference names it)
    pod_name_label: ClassVar[str | None] = None
    # kinds of the objects it makes and owns its pods through (a JobSet's Jobs): its pods
    # carry their labels too, so its own label is read first (naming.WORKLOAD_NAME_LABELS)
    makes: ClassVar[tuple[str, ...]] = ()
    # where its owner sets suspend (named when an object is created running)
    suspend_field: ClassVar[str] = "spec.suspend"
    # what Tidegate's service account may do with the kind: read, watch, resume, suspend
    # and scale by replace (platform/rbac.yaml grants exactly these; a test checks)
    verbs: ClassVar[tuple[str, ...]] = ("get", "list", "watch", "update")
    # the facts every kind answers (KindFacts), as an object suspended by its spec has them
    held_by_gate: ClassVar[bool] = False
    follows_pod_count: ClassVar[bool] = False
    has_one_object: ClassVar[bool] = True

    @property
    def pod_owner_kinds(self) -> tuple[str, ...]:
        """Kinds whose pods its own suspend holds: its own and those it makes."""
        return (self.kind, *self.makes)

    def rbac_rules(self) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        """(API group, resource, verbs) Tidegate needs for this kind."""
        return ((self.ref.group, self.ref.plural, self.verbs),)

    @property
    def kind(self) -> str:
        return self.ref.kind

    # --- what subclasses say ---------------------------------------------------------

    @abc.abstractmethod
    def templates(self, obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        """(pod set name, the pod template in ``obj`` itself) for every pod set, GPU or
        not; edits to a template edit ``obj``."""

    @abc.abstractmethod
    def counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """Pods each pod set runs at once."""

    def min_counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """The framework's own minimum per pod set (elastic ones only)."""
        return {}

    def elastic_pod_set(self, obj: Mapping[str, Any]) -> str | None:
        """The pod set the ``tidegate.io/min-pods`` annotation applies to (None: the
        kind cannot change a pod count while it runs)."""
        return None

    @abc.abstractmethod
    def is_suspended(self, obj: Mapping[str, Any]) -> bool: ...

    @abc.abstractmethod
    def set_suspended(self, obj: dict[str, Any], suspended: bool) -> None: ...

    @abc.abstractmethod
    def outcome(self, obj: Mapping[str, Any]) -> tuple[bool, bool]:
        """(finished, failed); failed implies finished."""

    def set_count(self, obj: dict[str, Any], pod_set: str, count: int) -> None:
        raise IntegrationError(
            wording(
                gettext_noop("a %(kind)s's pod counts cannot change while it runs"),
                kind=self.kind,
            )
        )

    def priority_class_name(self, obj: dict[str, Any]) -> str | None:
        for _, template in self.templates(obj):
            name = (template.get("spec") or {}).get("priorityClassName")
            if name:
                return str(name)
        return None

    def reclaimable_pods(self, obj: Mapping[str, Any]) -> int:
        return 0

    # --- reading ---------------------------------------------------------------------

    def read(self, obj: dict[str, Any]) -> ObjectRead:
        meta = obj.get("metadata") or {}
        annotations = dict(meta.get("annotations") or {})
        finished, failed = self.outcome(obj)
        problem = None
        pod_sets: tuple[PodSetRead, ...] = ()
        try:
            pod_sets = self.pod_sets(obj)
        except IntegrationError as error:
            problem = error.message
        return ObjectRead(
            kind=self.kind,
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            labels=dict(meta.get("labels") or {}),
            annotations=annotations,
            suspended=self.is_suspended(obj),
            admitted=ORIGINAL_SCHEDULING_ANNOTATION in annotations,
            finished=finished,
            failed=failed,
            pod_sets=pod_sets,
            problem=problem,
            priority_class_name=self.priority_class_name(obj),
            reclaimable_pods=self.reclaimable_pods(obj),
        )

    def pod_sets(self, obj: dict[str, Any]) -> tuple[PodSetRead, ...]:
        """The pod sets that ask for GPUs (pods that ask for none need no admission:
        they start with the rest). IntegrationError when none does, or one is
        unreadable."""
        counts = self.counts(obj)
        minimums = dict(self.min_counts(obj))
        annotated = _min_pods(obj)
        if annotated is not None:
            target = self.elastic_pod_set(obj)
            if target is None:
                raise IntegrationError(
                    wording(
                        gettext_noop(
                            "annotation %(annotation)s is set, but a %(kind)s cannot change "
                            "how many pods it runs; remove the annotation"
                        ),
                        annotation=MIN_PODS_ANNOTATION,
                        kind=self.kind,
                    )
                )
            minimums[target] = annotated
        found = []
        for name, template in self.templates(obj):
            request = gpu_request(template, f"pod set {name!r}")
            share = _share(template, f"pod set {name!r}", request)
            claims, shared_claims = claim_entries(template, f"pod set {name!r}", request or share)
            if request is None and share is None and not claims and not shared_claims:
                continue
            asks_claims = bool(claims or shared_claims)
            resource, amount = ("", 0) if asks_claims else (request or (GPU_RESOURCE, 1))
            count = counts.get(name, 0)
            if count <= 0:
                continue
            minimum = minimums.get(name)
            if minimum is not None and not 1 <= minimum <= count:
                raise IntegrationError(
                    wording(
                        gettext_noop(
                            "pod set %(name)s asks for at least %(minimum)s of %(count)s pods; "
                            "the minimum must be between 1 and %(count)s"
                        ),
                        name=repr(name),
                        minimum=minimum,
                        count=count,
                    )
                )
            node_selector = (template.get("spec") or {}).get("nodeSelector") or {}
            found.append(
                PodSetRead(
                    name=name,
                    count=count,
                    gpus_per_pod=amount,
                    resource=resource,
                    min_count=minimum if minimum is not None and minimum < count else None,
                    product=node_selector.get(PRODUCT_LABEL),
                    share=share,
                    claims=claims,
                    shared_claims=shared_claims,
                )
            )
        if not found:
            raise IntegrationError(
                wording(
                    gettext_noop(
                        "no pod of this %(kind)s requests a GPU (nvidia.com/gpu, one "
                        "nvidia.com/mig-* resource or a ResourceClaim); only GPU work queues"
                    ),
                    kind=self.kind,
                )
            )
        products = {ps.product for ps in found}
        if len(products) > 1:
            raise IntegrationError(
                wording(
                    gettext_noop(
                        "pod sets name different GPU products in their node selectors "
                        "(%(products)s); a workload runs on one flavour"
                    ),
                    products=", ".join(sorted(p or "none" for p in products)),
                )
            )
        return tuple(found)

    # --- writing ---------------------------------------------------------------------

    def admitted(
        self,
        obj: Mapping[str, Any],
        node_selector: Mapping[str, str],
        tolerations: Sequence[Toleration],
        node_names: Sequence[str] | None = None,
        counts: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """``obj`` as it must look once admitted on a flavour: every pod template gets
        the flavour's node selector and tolerations (pinned to ``node_names`` if
        given), the originals are kept in the original-scheduling annotation, elastic
        pod sets are set to ``counts``, and the object is resumed. ValueError when the
        object's own selector contradicts the flavour."""
        if node_names and not self.pins_nodes:
            raise ValueError(
                f"a {self.kind}'s pods cannot be pinned to nodes (its pod templates' "
                "node affinity may not change)"
            )
        result = copy.deepcopy(dict(obj))
        originals = self._originals(result)
        for name, template in self.templates(result):
            manifests.schedule_template(
                template,
                originals.get(name, {}),
                node_selector,
                tolerations,
                node_names,
                owner=self.kind,
            )
        manifests.record_scheduling(result, originals)
        for name, count in (counts or {}).items():
            self.set_count(result, name, count)
        self.set_suspended(result, False)
        return result

    def stopped(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """``obj`` suspended (its controller then deletes its pods); with
        ``restore_with_stop`` its templates are put back in the same write."""
        result = copy.deepcopy(dict(obj))
        self.set_suspended(result, True)
        return self.restored(result) if self.restore_with_stop else result

    def restored(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """``obj`` with its templates' scheduling fields put back from the annotation
        and the annotation removed; ``obj`` itself when there is nothing to restore."""
        result = copy.deepcopy(dict(obj))
        if manifests.recorded_scheduling(result) is None:
            return result
        originals = self._originals(result)
        for name, template in self.templates(result):
            manifests.restore_template(template, originals.get(name, {}))
        manifests.forget_scheduling(result)
        return result

    def scaled(self, obj: Mapping[str, Any], counts: Mapping[str, int]) -> dict[str, Any]:
        result = copy.deepcopy(dict(obj))
        for name, count in counts.items():
            self.set_count(result, name, count)
        return result

    def _originals(self, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Each template's scheduling fields before Tidegate touched them."""
        recorded = manifests.recorded_scheduling(obj)
        if recorded is None:
            return {
                name: manifests.template_scheduling(template)
                for name, template in self.templates(obj)
            }
        if not isinstance(recorded, Mapping):
            raise ValueError(
                f"annotation {ORIGINAL_SCHEDULING_ANNOTATION} does not name pod sets; "
                f"restore the {self.kind}'s pod templates by hand and remove the annotation"
            )
        return {
            str(name): manifests.only_scheduling_fields(fields) for name, fields in recorded.items()
        }


def _share(
    template: Mapping[str, Any], where: str, request: tuple[str, int] | None
) -> ShareRead | None:
    """The share of one GPU each pod asks for (integrations/shares.py), checked against
    its GPU request: HAMi counts GPUs with nvidia.com/gpu, fractions ask for none."""
    try:
        share = share_of(template)
    except ShareError as error:
        raise IntegrationError(
            wording(gettext_noop("%(where)s: %(error)s"), where=where, error=error.reason)
        ) from error
    if share is None:
        return None
    if share.style == "hami" and (request is None or request[0] != GPU_RESOURCE):
        raise IntegrationError(
            wording(
                gettext_noop(
                    "%(where)s asks for HAMi's per-GPU resources without nvidia.com/gpu; "
                    "HAMi counts the GPUs with nvidia.com/gpu: add it (1 for one share)"
                ),
                where=where,
            )
        )
    if share.style == "fraction" and request is not None:
        raise IntegrationError(
            wording(
                gettext_noop(
                    "%(where)s has a gpu-fraction or gpu-memory annotation and also requests "
                    "%(resource)s; a fraction asks for no GPU resource: remove one of them"
                ),
                where=where,
                resource=request[0],
            )
        )
    return share


ClaimEntries = tuple[tuple[str, str], ...]


def claim_entries(
    template: Mapping[str, Any], where: str, also: object
) -> tuple[ClaimEntries, ClaimEntries]:
    """The pod's own claims (from ResourceClaimTemplates) and the ResourceClaims it
    shares, when it asks for no GPU as a resource (``also``; then its claims are for
    other devices, left to Kubernetes). IntegrationError for a malformed entry."""
    if also is not None:
        return (), ()
    try:
        claims = pod_claims(template.get("spec") or {})
    except DraError as error:
        raise IntegrationError(
            wording(gettext_noop("%(where)s: %(error)s"), where=where, error=str(error))
        ) from error
    return claims.per_pod, claims.shared


def gpu_request(template: Mapping[str, Any], where: str) -> tuple[str, int] | None:
    """The one GPU resource and amount each pod of ``template`` asks for (summed as
    the scheduler does, init containers included); None when it asks for none.
    IntegrationError for two GPU resources in one pod."""
    try:
        totals = gpu_requests(template.get("spec") or {})
    except (TypeError, ValueError, AttributeError) as error:
        raise IntegrationError(
            wording(
                gettext_noop("%(where)s: unreadable resources (%(error)s)"),
                where=where,
                error=str(error),
            )
        ) from error
    if not totals:
        return None
    if len(totals) > 1:
        raise IntegrationError(
            wording(
                gettext_noop(
                    "%(where)s: each pod must request exactly one GPU resource "
                    "(nvidia.com/gpu or one nvidia.com/mig-*), found: %(found)s"
                ),
                where=where,
                found=str(sorted(totals)),
            )
        )
    return next(iter(totals.items()))


def _min_pods(obj: Mapping[str, Any]) -> int | None:
    return min_pods((obj.get("metadata") or {}).get("annotations") or {})


def min_pods(annotations: Mapping[str, str]) -> int | None:
    """The ``tidegate.io/min-pods`` annotation as a number of pods (None when absent).
    IntegrationError saying what to write for anything but a whole number from 1."""
    raw = annotations.get(MIN_PODS_ANNOTATION)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise IntegrationError(
            wording(
                gettext_noop(
                    "annotation %(annotation)s is %(value)s; it must be a whole number of "
                    "pods, 1 or more"
                ),
                annotation=MIN_PODS_ANNOTATION,
                value=repr(raw),
            )
        )
    return value


class SuspendedBySpec:
    """Kinds suspended through ``spec.suspend`` (Job, JobSet, RayCluster, RayJob)."""

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool(child(obj, "spec", "suspend"))

    def set_suspended(self, obj: dict[str, Any], suspended: bool) -> None:
        obj.setdefault("spec", {})["suspend"] = suspended


def ended_by_conditions(obj: Mapping[str, Any], done: str) -> tuple[bool, bool]:
    """(finished, failed) from status conditions: ``done`` or ``Failed`` true."""
    found = conditions(obj)
    failed = found.get("Failed", False)
    return failed or found.get(done, False), failed


def child(obj: Mapping[str, Any], *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, or None where a step is missing or not an object."""
    node: Any = obj
    for step in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(step)
    return node


def whole(value: Any, default: int) -> int:
    """An integer field of an object, ``default`` when absent or unreadable."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    return default


def conditions(obj: Mapping[str, Any]) -> dict[str, bool]:
    """status.conditions as type -> True/False."""
    found = {}
    for condition in child(obj, "status", "conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type"):
            found[str(condition["type"])] = condition.get("status") == "True"
    return found
