"""Pod sets that ask for GPUs through ResourceClaims, resolved against one cluster.

A queued object's pod templates name ResourceClaimTemplates and ResourceClaims they share
(integrations read only the object); this module reads, once per sync and only when some
object needs them, the cluster's templates, claims, DeviceClasses and published devices,
and turns each pod set into the flavour alternatives and per-pod amount the queue admits
on, a shared claim into a pod set of its own (``dra/demand.py``; docs/dra.md#queueing).
What Tidegate cannot serve is refused with the reason, as other pod sets' problems are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from i18n.wording import Wording, gettext_noop, wording
from scheduler_bridge.dra.demand import Alternative, Inventory, device_class_counts, pod_need
from scheduler_bridge.dra.objects import (
    DraError,
    claim_spec,
)
from scheduler_bridge.gateways import ClusterGateway
from scheduler_bridge.integrations import PodSetRead
from scheduler_bridge.workloads.services import DRA, PodSetSpec
from tenants.errors import ValidationFailed


class ClaimResolver:
    """One sync's reading of the cluster's DRA objects, made on first need."""

    def __init__(self, reader: ClusterGateway) -> None:
        self.reader = reader
        self._inventory: Inventory | None = None
        self._templates: dict[tuple[str, str], dict[str, Any]] | None = None
        self._claims: dict[tuple[str, str], dict[str, Any]] | None = None

    def pod_sets(
        self, namespace: str, reads: Sequence[PodSetRead], specs: Sequence[PodSetSpec]
    ) -> list[PodSetSpec]:
        """The object's pod sets with the flavours and amounts their claims ask for:
        each pod set whose pods have claims of their own, then one pod set of one "pod"
        per ResourceClaim its pods share, counted once however many pods name it (its
        devices are allocated once, on one node; the pods that share it run there)."""
        found: list[PodSetSpec] = []
        shared: dict[str, str] = {}  # ResourceClaim name -> the pod set that named it first
        for read, spec in zip(reads, specs, strict=True):
            if read.claims:
                found.append(self._own(namespace, read, spec))
            elif not read.shared_claims:
                found.append(spec)  # GPUs asked as resources
            for _, claim_name in read.shared_claims:
                shared.setdefault(claim_name, read.name)
        for claim_name, first in shared.items():
            where = f"pod set {first!r}"
            claim = self._claim(namespace, claim_name, where)
            need = self._need(where, [(claim_name, claim.get("spec") or {})])
            found.append(
                replace(_asked(need), count=1, name=f"claim-{claim_name}", shared_claim=claim_name)
            )
        return found

    def _own(self, namespace: str, read: PodSetRead, spec: PodSetSpec) -> PodSetSpec:
        """``spec`` with the flavours and amount its pods' own claims ask for."""
        where = f"pod set {read.name!r}"
        specs = []
        for claim, template_name in read.claims:
            template = self._template(namespace, template_name, where)
            specs.append((claim, (template.get("spec") or {}).get("spec") or {}))
        need = self._need(where, specs)
        # (the specs parsed in _need, so they parse here)
        charged = device_class_counts(claim_spec(raw, where) for _, raw in specs)
        return replace(
            _asked(need),
            count=spec.count,
            name=spec.name,
            min_count=spec.min_count,
            claim_devices=tuple(sorted(charged.items())),
        )

    def _need(self, where: str, specs: list[tuple[str, dict[str, Any]]]) -> tuple[Alternative, ...]:
        """The flavour alternatives the claim ``specs`` (their JSON) ask for together,
        one amount for all."""
        try:
            inventory = self._devices()
            demands = [
                inventory.request_demand(claim, request)
                for claim, raw in specs
                for request in claim_spec(raw, where).requests
            ]
            need = pod_need(demands, where)
        except DraError as error:
            reason = error.args[0] if error.args else str(error)
            raise _refused(reason if isinstance(reason, str) else str(error)) from error
        if not need:
            raise _refused(
                wording(gettext_noop("%(where)s: its claims ask for no device"), where=where)
            )
        return need

    def _claim(self, namespace: str, name: str, where: str) -> dict[str, Any]:
        if self._claims is None:
            self._claims = _by_name(self.reader.list_resource_claims())
        return _named(self._claims, "ResourceClaim", namespace, name, where)

    def _template(self, namespace: str, name: str, where: str) -> dict[str, Any]:
        if self._templates is None:
            self._templates = _by_name(self.reader.list_resource_claim_templates())
        return _named(self._templates, "ResourceClaimTemplate", namespace, name, where)

    def _devices(self) -> Inventory:
        if self._inventory is None:
            self._inventory = Inventory.published(
                self.reader.list_resource_slices() or [],
                self.reader.list_device_classes() or [],
                self.reader.dra_flavours,
            )
        return self._inventory


def _asked(need: tuple[Alternative, ...]) -> PodSetSpec:
    """One pod's ask: ``need`` devices of its flavours, or (consumable capacity) the
    thousandths of one GPU its claims take; each alternative at its own amount ("two
    H100s, or else four MIG slices"; "36Gi of an L40S, or else 20Gi of an A100"; "a
    whole H100, or else 20Gi of an A100")."""
    flavours = tuple(a.flavour for a in need)
    amounts = tuple(a.amount for a in need)
    if len({a.shared for a in need}) > 1:
        # "a whole H100, or else a quarter of an A100": each in its flavour's unit
        return PodSetSpec(
            count=1,
            gpus_per_pod=amounts[0],
            share_style=DRA,
            flavours=flavours,
            per_flavour=amounts,
            share_flavours=tuple(a.flavour for a in need if a.shared),
        )
    if need[0].shared:
        return PodSetSpec(
            count=1,
            gpus_per_pod=1,
            gpu_milli=amounts[0],
            share_style=DRA,
            flavours=flavours,
            per_flavour=amounts if len(set(amounts)) > 1 else (),
        )
    return PodSetSpec(
        count=1,
        gpus_per_pod=amounts[0],
        flavours=flavours,
        # (each alternative at its own amount: "two H100s, or else four MIG slices")
        per_flavour=amounts if len(set(amounts)) > 1 else (),
    )


def _by_name(listed: list[dict[str, Any]] | None) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in listed or []}


def _named(
    found: dict[tuple[str, str], dict[str, Any]], kind: str, namespace: str, name: str, where: str
) -> dict[str, Any]:
    obj = found.get((namespace, name))
    if obj is None:
        raise _refused(
            wording(
                gettext_noop(
                    "%(where)s: %(kind)s %(name)s does not exist in namespace %(namespace)s; "
                    "create it, then the workload again"
                ),
                where=where,
                kind=kind,
                name=name,
                namespace=namespace,
            )
        )
    return obj


def _refused(reason: str) -> ValidationFailed:
    """The refusal of a pod set, worded in the reader's language where ``reason`` is a
    Wording (DRA's reasons are; an object's own text is English)."""
    if not isinstance(reason, Wording):
        reason = wording(gettext_noop("%(reason)s"), reason=reason)
    return ValidationFailed(reason, field="pod_sets")
