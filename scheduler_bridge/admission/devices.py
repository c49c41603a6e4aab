"""Shared flavours, seen by the engine one GPU at a time.

A shared flavour (time-slicing, MPS, HAMi, fractions) is counted in thousandths of a GPU
throughout the snapshot: quotas, pod sets (``gpus_per_pod`` is the share of one GPU each
pod holds, 1..1000), placements, and node capacity (GPUs x 1000). A share must fit on one
GPU, so before a cycle every GPU of a shared flavour becomes a node of its own holding
1000 thousandths (a *device*), in the topology domain of its node: best fit then packs
shares onto the fullest GPU that still holds them, gangs and reclaim work unchanged, and
a share can never span GPUs or over-commit one. After the cycle, placements on devices
are folded back to their node with the GPU's index (``Placement.gpu``).

Pods of a shared flavour that want their pods on one node (``Topology.ONE_NODE``) are
kept on one node's GPUs (the device domain); NVLink domains do not apply to shares.
What pods Tidegate does not manage hold on each GPU comes in ``Node.device_used``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from .model import (
    Admission,
    ClusterSnapshot,
    CycleResult,
    Node,
    PendingDecision,
    PendingWorkload,
    Placement,
    Reservation,
    RunningWorkload,
    Topology,
)

MILLI: Final = 1000  # thousandths of one GPU


@dataclass(frozen=True, slots=True)
class DeviceMap:
    """Device node name -> (node, GPU index), for the shared flavours of one snapshot."""

    devices: Mapping[str, tuple[str, int]]
    shared: frozenset[str]

    def fold(self, placement: Placement) -> Placement:
        """A placement on a device, as a placement on its node naming the GPU."""
        found = self.devices.get(placement.node)
        if found is None or placement.flavour not in self.shared:
            return placement
        return Placement(
            node=found[0], flavour=placement.flavour, gpus=placement.gpus, gpu=found[1]
        )


def device_name(node: str, index: int) -> str:
    return f"{node}/gpu{index}"


def to_devices(snapshot: ClusterSnapshot) -> tuple[ClusterSnapshot, DeviceMap | None]:
    """``snapshot`` with each GPU of a shared flavour as a node of its own (None: it has
    no shared flavour, and is returned as it is)."""
    shared = frozenset(f.name for f in snapshot.flavours if f.shared)
    if not shared:
        return snapshot, None
    devices: dict[str, tuple[str, int]] = {}
    held = _held_per_device(snapshot.running, shared)
    nodes: list[Node] = []
    for node in snapshot.nodes:
        rest = {name: total for name, total in node.capacity.items() if name not in shared}
        if rest:
            free = None if node.free is None else {n: v for n, v in node.free.items() if n in rest}
            nodes.append(replace(node, capacity=rest, free=free, device_used={}))
        for flavour in sorted(shared.intersection(node.capacity)):
            gpus = node.capacity[flavour] // MILLI
            foreign = tuple(node.device_used.get(flavour, ())) or (0,) * gpus
            for index in range(gpus):
                name = device_name(node.name, index)
                devices[name] = (node.name, index)
                used = foreign[index] if index < len(foreign) else 0
                nodes.append(
                    Node(
                        name=name,
                        capacity={flavour: MILLI},
                        free={flavour: max(0, MILLI - used - held.get((name, flavour), 0))},
                        domain=f"node {node.name}",
                    )
                )
    mapping = DeviceMap(devices=devices, shared=shared)
    return (
        replace(
            snapshot,
            nodes=tuple(nodes),
            running=tuple(_running_on_devices(w, shared) for w in snapshot.running),
            pending=tuple(_pending_on_devices(w, shared) for w in snapshot.pending),
        ),
        mapping,
    )


def from_devices(result: CycleResult, mapping: DeviceMap | None) -> CycleResult:
    """``result`` with placements on devices folded back to their nodes."""
    if mapping is None:
        return result
    return replace(
        result,
        admissions=tuple(_admission(a, mapping) for a in result.admissions),
        pending=tuple(_pending_decision(d, mapping) for d in result.pending),
        reservations=tuple(_reservation(r, mapping) for r in result.reservations),
    )


def _held_per_device(
    running: tuple[RunningWorkload, ...], shared: frozenset[str]
) -> dict[tuple[str, str], int]:
    held: dict[tuple[str, str], int] = {}
    for workload in running:
        for p in workload.placements:
            if p.flavour in shared:
                key = (device_name(p.node, p.gpu or 0), p.flavour)
                held[key] = held.get(key, 0) + p.gpus
    return held


def _unfold(placements: tuple[Placement, ...], shared: frozenset[str]) -> tuple[Placement, ...]:
    return tuple(
        replace(p, node=device_name(p.node, p.gpu or 0), gpu=None) if p.flavour in shared else p
        for p in placements
    )


def _uses_shared(workload: PendingWorkload, shared: frozenset[str]) -> bool:
    return any(set(ps.flavours) & shared for ps in workload.pod_sets)


def _pending_on_devices(workload: PendingWorkload, shared: frozenset[str]) -> PendingWorkload:
    if not _uses_shared(workload, shared):
        return workload
    topology = Topology.ONE_DOMAIN if workload.topology is Topology.ONE_NODE else workload.topology
    return replace(workload, topology=topology, held=_unfold(workload.held, shared))


def _running_on_devices(workload: RunningWorkload, shared: frozenset[str]) -> RunningWorkload:
    if not any(p.flavour in shared for p in workload.placements):
        return workload
    request = workload.request
    return replace(
        workload,
        placements=_unfold(workload.placements, shared),
        request=None if request is None else _pending_on_devices(request, shared),
    )


def _admission(admission: Admission, mapping: DeviceMap) -> Admission:
    return replace(admission, placements=tuple(mapping.fold(p) for p in admission.placements))


def _pending_decision(decision: PendingDecision, mapping: DeviceMap) -> PendingDecision:
    if not decision.held:
        return decision
    return replace(decision, held=tuple(mapping.fold(p) for p in decision.held))


def _reservation(reservation: Reservation, mapping: DeviceMap) -> Reservation:
    return replace(
        reservation,
        placements=tuple(mapping.fold(p) for p in reservation.placements),
        blocked=tuple(mapping.fold(p) for p in reservation.blocked),
    )
