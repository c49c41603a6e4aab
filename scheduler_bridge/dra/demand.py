"""What a workload asking through ResourceClaims needs, per flavour.

A pod names its claims in ``spec.resourceClaims``: each entry either a
ResourceClaimTemplate (every pod gets a claim of its own) or a ResourceClaim (one claim
shared by every pod that names it, so counted once per workload). Each request of a
claim is served by devices of a DeviceClass that meet the class's and the request's
selectors; ``firstAvailable`` lists ways to serve it in order of preference. Tidegate
turns that into the flavour alternatives its queue already understands:

* a request's devices are grouped by flavour (``flavours.flavour_of``); each flavour that
  some node can serve it from is an alternative, a prioritized list's in its order;
* ``ExactCount`` needs ``count`` devices; ``All`` needs every matching device of the node
  it lands on (the most any node has, the worst case);
* on a shared GPU (consumable capacity) a request needs the part of one GPU its capacity
  requests take, in thousandths (the largest share of any capacity it asks for);
* a pod's requests must agree on one flavour per alternative (a pod runs on one flavour),
  and its need is their sum.

Kubernetes' ResourceQuota counts devices per device class (``device_class_counts``) by the
rules of its resource-claim evaluator: ``count`` for ExactCount, 32 for All (its most
allocation results), and for a prioritized list the largest count per class.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any

from i18n.wording import Wording, chain, gettext_noop, wording

from .flavours import DeviceFlavour, flavour_of
from .objects import (
    ALL,
    EXACT_COUNT,
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceRequest,
    DraError,
    device_class,
    devices_of_slices,
)
from .selectors import SelectorError, check, evaluate, matches

MILLI = 1000
# Kubernetes' quota evaluator counts an All request at the most results a claim can hold
# (resource.k8s.io/v1 AllocationResultsMaxSize)
ALL_QUOTA_COUNT = 32
DEVICE_CLASS_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"

FlavourOf = Callable[[Device], DeviceFlavour | None]


@dataclass(frozen=True, slots=True)
class Alternative:
    flavour: str
    amount: int  # devices, or thousandths of one GPU on a shared flavour
    shared: bool = False


@dataclass(frozen=True, slots=True)
class RequestDemand:
    claim: str  # the pod's name for the claim (spec.resourceClaims[].name)
    request: str
    alternatives: tuple[Alternative, ...]  # in order of preference


@dataclass(frozen=True, slots=True)
class PodClaims:
    """A pod template's claims: per-pod (from templates) and shared (named claims)."""

    per_pod: tuple[tuple[str, str], ...]  # (claim entry name, ResourceClaimTemplate name)
    shared: tuple[tuple[str, str], ...]  # (claim entry name, ResourceClaim name)


def pod_claims(pod_spec: Mapping[str, Any]) -> PodClaims:
    """The claims a pod spec names, each entry with a template or a claim."""
    per_pod: list[tuple[str, str]] = []
    shared: list[tuple[str, str]] = []
    for entry in pod_spec.get("resourceClaims") or []:
        name = str(entry.get("name") or "")
        template, claim = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
        if not name or bool(template) == bool(claim):
            raise DraError(
                f"resourceClaims entry {name or '?'}: give a name and exactly one of "
                "resourceClaimTemplateName and resourceClaimName"
            )
        (per_pod if template else shared).append((name, str(template or claim)))
    return PodClaims(tuple(per_pod), tuple(shared))


class Inventory:
    """The devices published in a cluster and the classes that select among them, with
    each request's matching devices worked out once."""

    def __init__(
        self,
        devices: Iterable[Device],
        classes: Iterable[DeviceClass],
        flavour_of: FlavourOf,
    ) -> None:
        self.devices = tuple(devices)
        self.classes = {c.name: c for c in classes}
        self._flavours = {d.key: flavour_of(d) for d in self.devices}

    @classmethod
    def published(
        cls,
        resource_slices: Iterable[Mapping[str, Any]],
        device_classes: Iterable[Mapping[str, Any]],
        mapped: Mapping[str, str] | None = None,
    ) -> Inventory:
        """From a cluster's ResourceSlices and DeviceClasses as its API server returns
        them (slices that cannot be read left out): NVIDIA's devices are the flavours
        their attributes name, other drivers' the flavour ``mapped`` gives them."""
        devices, _ = devices_of_slices(resource_slices)
        return cls(devices, map(device_class, device_classes), partial(flavour_of, mapped=mapped))

    def flavour(self, device: Device) -> DeviceFlavour | None:
        return self._flavours.get(device.key)

    def class_flavours(self) -> dict[str, frozenset[DeviceFlavour]]:
        """Per device class, the flavours of the published devices its own selectors
        admit (classes that admit no device of a known flavour are left out). A device
        whose selector cannot be evaluated counts as not admitted."""
        found: dict[str, frozenset[DeviceFlavour]] = {}
        for name, selecting in sorted(self.classes.items()):
            try:
                check(selecting.selectors)
            except SelectorError:
                continue  # a class no claim can be served from admits nothing
            flavours = {
                flavour
                for device in self.devices
                if (flavour := self.flavour(device)) is not None
                and matches(selecting.selectors, device)
            }
            if flavours:
                found[name] = frozenset(flavours)
        return found

    def request_demand(self, claim: str, request: DeviceRequest) -> RequestDemand:
        """The flavour alternatives of one request, in order; DraError saying why when
        no published device could ever serve it."""
        alternatives: list[Alternative] = []
        problems: list[Wording] = []
        for sub in request.options:
            found, problem = self._serve(sub)
            alternatives.extend(a for a in found if a not in alternatives)
            if problem:
                problems.append(problem)
        if not alternatives:
            raise DraError(
                wording(
                    gettext_noop("claim %(claim)s request %(request)s: %(problems)s"),
                    claim=claim,
                    request=request.name,
                    problems=chain(gettext_noop("%(first)s; %(rest)s"), problems),
                )
            )
        return RequestDemand(claim, request.name, tuple(alternatives))

    def _serve(self, sub: Any) -> tuple[list[Alternative], Wording | None]:
        device_class = self.classes.get(sub.device_class)
        if device_class is None:
            return [], wording(
                gettext_noop("device class '%(name)s' does not exist (the cluster's: %(known)s)"),
                name=sub.device_class,
                known=", ".join(sorted(self.classes)) or "-",
            )
        selectors = (*device_class.selectors, *sub.selectors)
        check(selectors)
        matching: list[Device] = []
        errors: list[str] = []
        for device in self.devices:
            verdicts = [evaluate(expression, device) for expression in selectors]
            if all(v is True for v in verdicts):
                matching.append(device)
            else:
                errors.extend(v for v in verdicts if isinstance(v, str))
        if not matching:
            template = (
                gettext_noop(
                    "no published device meets device class '%(name)s' and the request's selectors"
                )
                if sub.selectors
                else gettext_noop("no published device meets device class '%(name)s'")
            )
            found_none = wording(template, name=sub.device_class)
            if errors:
                found_none = wording(
                    gettext_noop("%(reason)s (selector error: %(error)s)"),
                    reason=found_none,
                    error=errors[0],
                )
            return [], found_none
        per_node: dict[tuple[str, str | None], list[Device]] = {}
        unmapped = 0
        for device in matching:
            flavour = self.flavour(device)
            if flavour is None:
                unmapped += 1
                continue
            per_node.setdefault((flavour.name, device.node), []).append(device)
        if not per_node:
            return [], wording(
                gettext_noop(
                    "the %(count)s devices that meet device class '%(name)s' are of no "
                    "flavour Tidegate knows; map their driver to a flavour"
                ),
                count=unmapped,
                name=sub.device_class,
            )
        most: dict[str, list[Device]] = {}  # per flavour, the node with the most
        for (name, _), devices in sorted(
            per_node.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))
        ):
            if len(devices) > len(most.get(name, [])):
                most[name] = devices
        found: list[Alternative] = []
        short: list[Wording] = []
        for name, devices in most.items():
            flavour = self.flavour(devices[0])
            assert flavour is not None
            if flavour.shared:
                found.append(Alternative(name, thousandths(sub.capacity, devices[0]), shared=True))
            elif sub.mode == ALL:
                found.append(Alternative(name, len(devices)))
            elif sub.count <= len(devices):
                found.append(Alternative(name, sub.count))
            else:
                short.append(
                    wording(
                        gettext_noop("%(flavour)s: at most %(most)s on a node"),
                        flavour=name,
                        most=len(devices),
                    )
                )
        if not found:
            return [], wording(
                gettext_noop(
                    "asks for %(count)s devices of class '%(name)s' on one node; %(short)s"
                ),
                count=sub.count,
                name=sub.device_class,
                short=chain(gettext_noop("%(first)s, %(rest)s"), short),
            )
        return found, None


def thousandths(requests: Mapping[str, Decimal], device: Device) -> int:
    """Thousandths of ``device`` a shared request takes (or an allocation consumed): the
    largest share of any capacity it names, all of it when it names none. DraError for
    a capacity the device does not publish, or more than it has."""
    if not requests:
        return MILLI
    share = Decimal(0)
    for name, amount in requests.items():
        total = device.capacity_of(name)
        if not total:
            raise DraError(
                wording(
                    gettext_noop(
                        "asks for %(capacity)s capacity, which device %(device)s does not publish"
                    ),
                    capacity=name,
                    device=device.name,
                )
            )
        share = max(share, amount / total)
    if share > 1:
        raise DraError(
            wording(
                gettext_noop("asks for more capacity than device %(device)s has"),
                device=device.name,
            )
        )
    return max(1, math.ceil(share * MILLI))


def pod_need(demands: Sequence[RequestDemand], where: str) -> tuple[Alternative, ...]:
    """One pod's need from its own claims: per flavour alternative (in the first
    request's order) the sum over its requests. DraError when the requests share no
    flavour: a pod runs on the GPUs of one flavour."""
    if not demands:
        return ()
    common = [a.flavour for a in demands[0].alternatives]
    for demand in demands[1:]:
        theirs = {a.flavour for a in demand.alternatives}
        common = [f for f in common if f in theirs]
    if not common:
        listed = "; ".join(
            f"{d.claim}/{d.request}: {', '.join(a.flavour for a in d.alternatives)}"
            for d in demands
        )
        raise DraError(
            wording(
                gettext_noop(
                    "%(where)s: its claims ask for devices of different flavours (%(listed)s); "
                    "a pod runs on one flavour: ask for one kind of GPU per pod"
                ),
                where=where,
                listed=listed,
            )
        )
    need = []
    for name in common:
        parts = [next(a for a in d.alternatives if a.flavour == name) for d in demands]
        need.append(Alternative(name, sum(p.amount for p in parts), shared=parts[0].shared))
    return tuple(need)


def device_class_counts(specs: Iterable[ClaimSpec]) -> dict[str, int]:
    """What Kubernetes' ResourceQuota charges ``specs`` per device class."""
    counts: dict[str, int] = {}
    for spec in specs:
        for request in spec.requests:
            largest: dict[str, int] = {}
            for sub in request.options:
                count = sub.count if sub.mode == EXACT_COUNT else ALL_QUOTA_COUNT
                largest[sub.device_class] = max(largest.get(sub.device_class, 0), count)
            for name, count in largest.items():
                counts[name] = counts.get(name, 0) + count
    return counts


def device_class_quota_key(device_class: str) -> str:
    """The ResourceQuota key Kubernetes counts a device class's devices under."""
    return f"{device_class}{DEVICE_CLASS_QUOTA_SUFFIX}"
