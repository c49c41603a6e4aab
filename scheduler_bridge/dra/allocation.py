"""What a pod holds through its ResourceClaims, once the scheduler allocated them.

A claim's ``status.allocation.devices.results`` names each device it got (driver, pool,
device); the pod that owns the claim (a claim made from the pod's template is owned by
the pod) holds those devices for as long as it runs. Counted as the extended resource the
same GPUs have (``DeviceFlavour.resource_name``), a pod's claimed GPUs join what it asks
as resources, so inventory's busy GPUs, quota usage and the ledger treat them alike
(docs/dra.md#metering). Part of a GPU several claims share (consumable capacity) is
counted in thousandths, by the capacity the allocation consumed. A claim several pods
share (owned by none of them) is not counted per pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from scheduler_bridge.quantity import InvalidQuantity, parse_quantity

from .demand import MILLI, thousandths
from .flavours import flavour_of
from .objects import Device, DraError, devices_of_slices


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    namespace: str
    name: str
    owner_uid: str | None  # the pod that owns it, if a pod does
    devices: tuple[tuple[str, str, str], ...]  # (driver, pool, device) allocated
    # per device (in the same order), the capacity its claim takes of it where several
    # claims share it (consumable capacity; ``consumedCapacity``), by capacity name
    consumed: tuple[Mapping[str, Decimal], ...] = ()


def claim_allocation(claim: Mapping[str, Any]) -> ClaimAllocation:
    """A ResourceClaim's owner and allocated devices (none before it is allocated)."""
    meta = claim.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"]
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return ClaimAllocation(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        owner_uid=str(owners[0].get("uid")) if owners else None,
        devices=tuple(
            (str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results
        ),
        consumed=tuple(_consumed(r.get("consumedCapacity") or {}) for r in results),
    )


def _consumed(raw: Mapping[str, Any]) -> dict[str, Decimal]:
    found = {}
    for key, value in raw.items():
        try:
            found[str(key).rpartition("/")[2]] = parse_quantity(str(value))
        except InvalidQuantity:
            continue  # the API server validated it; nothing Tidegate can do better
    return found


class ClaimedGpus:
    """Resources each pod holds through the claims it owns, from the cluster's claims and
    the devices its slices publish."""

    def __init__(
        self,
        claims: Iterable[ClaimAllocation],
        resource_slices: Iterable[Mapping[str, Any]],
        mapped: Mapping[str, str] | None = None,
    ) -> None:
        devices = {d.key: d for d in devices_of_slices(resource_slices)[0]}
        self._by_owner: dict[str, dict[str, int]] = {}
        self._shares_by_owner: dict[str, dict[str, int]] = {}
        for claim in claims:
            if claim.owner_uid is None:
                continue
            consumed = claim.consumed or ({},) * len(claim.devices)
            for key, taken in zip(claim.devices, consumed, strict=False):
                device = devices.get(key)
                flavour = flavour_of(device, mapped) if device is not None else None
                if flavour is None or device is None:
                    continue
                resource = flavour.resource_name
                if flavour.shared:
                    shares = self._shares_by_owner.setdefault(claim.owner_uid, {})
                    shares[resource] = shares.get(resource, 0) + share_taken(taken, device)
                else:
                    held = self._by_owner.setdefault(claim.owner_uid, {})
                    held[resource] = held.get(resource, 0) + 1

    def of_pod(self, uid: str) -> dict[str, int]:
        """Resource name -> devices the pod ``uid`` holds through its own claims."""
        return dict(self._by_owner.get(uid, {}))

    def shares_of_pod(self, uid: str) -> dict[str, int]:
        """Resource name -> thousandths of shared GPUs the pod ``uid`` holds through its
        own claims (consumable capacity)."""
        return dict(self._shares_by_owner.get(uid, {}))


def share_taken(consumed: Mapping[str, Decimal], device: Device) -> int:
    """Thousandths of a shared ``device`` a claim holds, by what its allocation consumed,
    as admission prices the same request (demand.thousandths); all of it where the
    allocation names capacities the device does not publish."""
    try:
        return thousandths(consumed, device)
    except DraError:
        return MILLI
