"""Each node's GPUs drawn with their MIG slices and what runs on each.

Kubernetes does not say which GPU (or which MIG instance) a pod got, only how many of
each resource it uses on a node. The map therefore fills a node's slots of each kind
(whole GPUs, MIG instances of a profile) in a stable order: admitted work by name first,
then pods outside the queue; the rest is idle. Counts per node and kind are exact, the
slot a workload is drawn on is not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_bridge.gateways.base import GPU_RESOURCE
from scheduler_bridge.inventory.catalogue import mig_profile_name_from_resource
from scheduler_bridge.inventory.models import Flavour, Node
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.records import parse_placements

WHOLE_GPU = ""  # the slot kind of a GPU with MIG disabled


@dataclass
class Slot:
    """A whole GPU or one MIG instance, and whoever holds it."""

    profile: str  # MIG profile ("3g.40gb"), or WHOLE_GPU
    workload: Workload | None = None
    may_open: bool = False  # the reader may open the workload's page
    outside_queue: bool = False

    @property
    def idle(self) -> bool:
        return self.workload is None and not self.outside_queue

    @property
    def compute_slices(self) -> int:
        """How wide to draw a MIG instance: its compute slices (the '3' of 3g.40gb)."""
        head = self.profile.split("g.", 1)[0]
        return int(head) if head.isdigit() else 1


@dataclass
class GpuBox:
    index: int
    slots: list[Slot] = field(default_factory=list)

    @property
    def mig(self) -> bool:
        return any(slot.profile != WHOLE_GPU for slot in self.slots) or not self.slots

    @property
    def idle(self) -> bool:
        return all(slot.idle for slot in self.slots)


@dataclass
class NodeMap:
    node: Node
    gpus: list[GpuBox]

    @property
    def idle_slots(self) -> int:
        return sum(slot.idle for gpu in self.gpus for slot in gpu.slots)


def _gpu_boxes(node: Node) -> list[GpuBox]:
    layouts: list[Any] = list(node.gpu_layouts or [])
    layouts += [None] * max(node.gpu_count - len(layouts), 0)
    boxes = []
    for index, layout in enumerate(layouts):
        if layout is None:
            boxes.append(GpuBox(index, [Slot(WHOLE_GPU)]))
            continue
        instances = sorted(
            (int(start), str(profile))
            for profile, start in (entry for entry in layout if len(entry) == 2)
        )
        boxes.append(GpuBox(index, [Slot(profile) for _, profile in instances]))
    return boxes


def _take(boxes: list[GpuBox], profile: str, count: int) -> Iterable[Slot]:
    """The next `count` free slots of a kind, GPU by GPU."""
    taken = 0
    for box in boxes:
        for slot in box.slots:
            if taken == count:
                return
            if slot.profile == profile and slot.idle:
                taken += 1
                yield slot


def node_maps(
    nodes: Iterable[Node],
    flavours: Iterable[Flavour],
    active: Iterable[Workload],
    readable_tenant_ids: set[int],
) -> list[NodeMap]:
    """The map of each node from rows already read (no queries): its stored GPU layouts,
    the cluster's flavours, the admitted and running workloads, and the tenants whose
    workload pages the reader may open."""
    profile_of: Mapping[str, str] = {f.name: f.mig_profile or WHOLE_GPU for f in flavours}
    maps = {node.name: NodeMap(node, _gpu_boxes(node)) for node in nodes}
    for workload in sorted(active, key=lambda w: (w.name, w.pk)):
        for placement in parse_placements(workload.placements):
            node_map = maps.get(placement.node)
            if node_map is None:
                continue
            profile = profile_of.get(placement.flavour, WHOLE_GPU)
            for slot in _take(node_map.gpus, profile, placement.gpus):
                slot.workload = workload
                slot.may_open = workload.tenant_id in readable_tenant_ids
    for node_map in maps.values():
        for resource, count in sorted((node_map.node.busy_foreign or {}).items()):
            kind = (
                WHOLE_GPU if resource == GPU_RESOURCE else mig_profile_name_from_resource(resource)
            )
            if kind is None:
                continue
            for slot in _take(node_map.gpus, kind, int(count)):
                slot.outside_queue = True
    return list(maps.values())
