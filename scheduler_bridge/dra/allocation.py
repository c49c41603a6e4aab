"""What a pod holds through its ResourceClaims, once the scheduler allocated them.

A claim's ``status.allocation.devices.results`` names each device it got (driver, pool,
device); the pod that owns the claim (a claim made from the pod's template is owned by
the pod) holds those devices for as long as it runs. Counted as the extended resource the
same GPUs have (``DeviceFlavour.resource_name``), a pod's claimed GPUs join what it asks
as resources, so inventory's busy GPUs, quota usage and the ledger treat them alike
(docs/dra.md#metering). A claim several pods share (owned by none of them) is not
counted per pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .flavours import flavour_of
from .objects import devices_of_slices


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    namespace: str
    name: str
    owner_uid: str | None  # the pod that owns it, if a pod does
    devices: tuple[tuple[str, str, str], ...]  # (driver, pool, device) allocated


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
    )


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
        for claim in claims:
            if claim.owner_uid is None:
                continue
            held = self._by_owner.setdefault(claim.owner_uid, {})
            for key in claim.devices:
                device = devices.get(key)
                flavour = flavour_of(device, mapped) if device is not None else None
                if flavour is not None and not flavour.shared:  # (shares: not yet)
                    held[flavour.resource_name] = held.get(flavour.resource_name, 0) + 1

    def of_pod(self, uid: str) -> dict[str, int]:
        """Resource name -> devices the pod ``uid`` holds through its own claims."""
        return dict(self._by_owner.get(uid, {}))
