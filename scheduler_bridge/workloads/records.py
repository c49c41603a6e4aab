"""Typed records of the workload's JSON fields, with one parse and one dump each.

``Workload.pod_sets``, ``placements`` and ``borrowed`` are read by admission, the
reconciler, quota sync, inventory, billing and the portal; they all go through these
records instead of indexing raw dicts. (Past runs have theirs in runs.py.)

    pod_sets    [{"name": "main", "count": 2, "gpus_per_pod": 4, "flavours": ["h100-80gb"]}]
                (elastic ones add "min_count": the core; pods asking through
                ResourceClaimTemplates add "claim_devices": {"gpu.nvidia.com": 4}, what
                Kubernetes' ResourceQuota charges each pod's claims per device class; a
                prioritized list whose alternatives ask for different amounts adds
                "per_flavour": [2, 4], a pod's amount on each of its flavours)
    placements  [{"node": "h100-1", "flavour": "h100-80gb", "gpus": 8}]   (elastic pods
                included)
    elastic_pods [{"pod_set": "Worker", "index": 0, "node": "h100-1", "flavour": "h100-80gb",
                  "gpus": 1, "started_at": 1764633600.0}]   (pods above the core)
    borrowed    {"nvidia.com/gpu": 4}   (Kubernetes resource name -> GPUs held above the
                                        tenant's guarantee)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class PodSetRecord:
    """One group of identical pods: how many at most, GPUs each, acceptable flavours
    best first; with ``min_count`` (below ``count``) the first ``min_count`` pods are
    its core and the rest elastic."""

    name: str
    count: int
    gpus_per_pod: int
    flavours: tuple[str, ...]
    min_count: int | None = None
    # per pod, the devices Kubernetes' ResourceQuota counts its claims under, per device
    # class (dra/demand.py device_class_counts), sorted by class
    claim_devices: tuple[tuple[str, int], ...] = ()
    # the ResourceClaim its one "pod" stands for, shared by the workload's pods
    # (Kubernetes counts that claim from its creation, not the pod set)
    shared_claim: str | None = None
    # what a pod needs on each of ``flavours`` when that differs (a prioritized list of
    # claims: "two H100s, or else four MIG slices"); empty: gpus_per_pod on each
    per_flavour: tuple[int, ...] = ()

    def per_pod_on(self, flavour: str | None) -> int:
        """What one pod needs on ``flavour`` (the one it was admitted on)."""
        if self.per_flavour and flavour in self.flavours:
            return self.per_flavour[self.flavours.index(flavour)]
        return self.gpus_per_pod

    @property
    def asks_through_claims(self) -> bool:
        return bool(self.claim_devices) or self.shared_claim is not None

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_pod

    @property
    def core(self) -> int:
        return self.min_count if self.min_count is not None else self.count

    @property
    def core_record(self) -> PodSetRecord:
        return replace(self, count=self.core, min_count=None)

    def dump(self) -> dict[str, Any]:
        dumped: dict[str, Any] = {
            "name": self.name,
            "count": self.count,
            "gpus_per_pod": self.gpus_per_pod,
            "flavours": list(self.flavours),
        }
        if self.min_count is not None:
            dumped["min_count"] = self.min_count
        if self.claim_devices:
            dumped["claim_devices"] = dict(self.claim_devices)
        if self.shared_claim is not None:
            dumped["shared_claim"] = self.shared_claim
        if self.per_flavour:
            dumped["per_flavour"] = list(self.per_flavour)
        return dumped


@dataclass(frozen=True, slots=True)
class Placement:
    """GPUs of one flavour that admission gave a workload on one node; on a shared
    flavour, ``gpus`` thousandths of GPU number ``gpu`` of the node."""

    node: str
    flavour: str
    gpus: int
    gpu: int | None = None

    @property
    def where(self) -> tuple[str, str, int | None]:
        """What entries are merged by: node, flavour and, for a share, the GPU."""
        return (self.node, self.flavour, self.gpu)

    def dump(self) -> dict[str, Any]:
        found: dict[str, Any] = {"node": self.node, "flavour": self.flavour, "gpus": self.gpus}
        if self.gpu is not None:
            found["gpu"] = self.gpu
        return found


@dataclass(frozen=True, slots=True)
class ElasticPodRecord:
    """A running pod above its pod set's core: the ``index``-th (from 0) of
    ``pod_set``, holding ``gpus`` GPUs of ``flavour`` on ``node`` since ``started_at``
    (epoch seconds)."""

    pod_set: str
    index: int
    node: str
    flavour: str
    gpus: int
    started_at: float

    @property
    def placement(self) -> Placement:
        return Placement(self.node, self.flavour, self.gpus)

    def dump(self) -> dict[str, Any]:
        return {
            "pod_set": self.pod_set,
            "index": self.index,
            "node": self.node,
            "flavour": self.flavour,
            "gpus": self.gpus,
            "started_at": self.started_at,
        }


def parse_elastic_pods(raw: Any) -> list[ElasticPodRecord]:
    """The stored elastic pods; entries that are not pods are skipped."""
    found = []
    for item in raw or []:
        if not isinstance(item, Mapping):
            continue
        try:
            found.append(
                ElasticPodRecord(
                    str(item["pod_set"]),
                    int(item["index"]),
                    str(item["node"]),
                    str(item["flavour"]),
                    int(item["gpus"]),
                    float(item["started_at"]),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return found


def dump_elastic_pods(records: Iterable[ElasticPodRecord]) -> list[dict[str, Any]]:
    return [r.dump() for r in sorted(records, key=lambda r: (r.pod_set, r.index))]


def without_placements(
    placements: Iterable[Placement], taken: Iterable[Placement]
) -> list[Placement]:
    """``placements`` less the GPUs of ``taken`` (per node and flavour); nodes left
    with none are dropped."""
    held: dict[tuple[str, str, int | None], int] = {}
    for p in placements:
        held[p.where] = held.get(p.where, 0) + p.gpus
    for p in taken:
        held[p.where] = held.get(p.where, 0) - p.gpus
    return [
        Placement(node, flavour, gpus, gpu)
        for (node, flavour, gpu), gpus in sorted(held.items(), key=_by_place)
        if gpus > 0
    ]


def with_placements(placements: Iterable[Placement], added: Iterable[Placement]) -> list[Placement]:
    """``placements`` plus the GPUs of ``added``, one entry per node and flavour."""
    held: dict[tuple[str, str, int | None], int] = {}
    for p in [*placements, *added]:
        held[p.where] = held.get(p.where, 0) + p.gpus
    return [
        Placement(node, flavour, gpus, gpu)
        for (node, flavour, gpu), gpus in sorted(held.items(), key=_by_place)
    ]


def _by_place(item: tuple[tuple[str, str, int | None], int]) -> tuple[str, str, int]:
    node, flavour, gpu = item[0]
    return (node, flavour, -1 if gpu is None else gpu)


def parse_pod_sets(raw: Any) -> list[PodSetRecord]:
    """The stored pod sets; ValueError naming the bad entry when one is damaged."""
    records = []
    for index, item in enumerate(raw or []):
        try:
            records.append(
                PodSetRecord(
                    name=str(item.get("name") or f"set-{index}"),
                    count=int(item["count"]),
                    gpus_per_pod=int(item["gpus_per_pod"]),
                    flavours=tuple(str(f) for f in item["flavours"]),
                    min_count=int(item["min_count"]) if item.get("min_count") else None,
                    claim_devices=tuple(
                        sorted(
                            (str(c), int(n)) for c, n in (item.get("claim_devices") or {}).items()
                        )
                    ),
                    shared_claim=str(item["shared_claim"]) if item.get("shared_claim") else None,
                    per_flavour=tuple(int(n) for n in item.get("per_flavour") or ()),
                )
            )
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise ValueError(f"pod set {index} is unreadable ({item!r}): {error}") from error
    return records


def dump_pod_sets(records: Iterable[PodSetRecord]) -> list[dict[str, Any]]:
    return [record.dump() for record in records]


def parse_placements(raw: Any) -> list[Placement]:
    """The stored placements; entries that are not placements are skipped (they hold
    nothing anyone can find on a node)."""
    found = []
    for item in raw or []:
        if not isinstance(item, Mapping):
            continue
        try:
            gpu = item.get("gpu")
            found.append(
                Placement(
                    str(item["node"]),
                    str(item["flavour"]),
                    int(item["gpus"]),
                    None if gpu is None else int(gpu),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return found


def dump_placements(records: Iterable[Placement]) -> list[dict[str, Any]]:
    return [record.dump() for record in records]


def split_placements(
    placements: Iterable[Placement], gpus: int, gpus_per_pod: int, nodes: Iterable[str]
) -> tuple[list[Placement], list[Placement]]:
    """(kept, released): ``gpus`` GPUs taken out of ``placements``, ``gpus_per_pod`` at
    a time from each of ``nodes`` first (where the pods that completed ran, one entry a
    pod), then from the last placements."""
    kept = list(placements)
    released: dict[tuple[str, str, int | None], int] = {}

    def take(index: int, amount: int) -> int:
        placement = kept[index]
        taken = min(amount, placement.gpus)
        kept[index] = replace(placement, gpus=placement.gpus - taken)
        released[placement.where] = released.get(placement.where, 0) + taken
        return taken

    left = gpus
    for node in nodes:
        at = next((i for i, p in enumerate(kept) if p.node == node and p.gpus), None)
        if left and at is not None:
            left -= take(at, min(gpus_per_pod, left))
    for index in range(len(kept) - 1, -1, -1):
        if left:
            left -= take(index, left)
    return (
        [p for p in kept if p.gpus],
        [Placement(node, flavour, n, gpu) for (node, flavour, gpu), n in released.items() if n],
    )


def placement_nodes(raw: Any) -> list[str]:
    """The nodes a workload was placed on, sorted, each once."""
    return sorted({p.node for p in parse_placements(raw)})


def parse_borrowed(raw: Any) -> dict[str, int]:
    """Resource name -> GPUs borrowed; anything that is not a whole number counts 0."""
    borrowed: dict[str, int] = {}
    if not isinstance(raw, Mapping):
        return borrowed
    for resource, amount in raw.items():
        try:
            borrowed[str(resource)] = int(amount)
        except (TypeError, ValueError):
            borrowed[str(resource)] = 0
    return borrowed
