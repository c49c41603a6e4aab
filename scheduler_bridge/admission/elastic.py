"""Elastic workloads in the admission cycle: a core, and pods above it one by one.

A pod set with ``min_count < count`` is elastic. The engine sees such a workload in
two parts, built here from what the caller keeps:

* the **core**: the workload with every pod set at its ``min_count``
  (:func:`core_of`). It queues, borrows, reclaims and is preempted like any rigid
  workload;
* its **elastic pods**, once the core runs: one engine workload per pod above the core
  (:func:`elastic_parts`), the running ones as ``RunningWorkload`` and the missing ones
  as ``PendingWorkload``, both with ``elastic_of`` set to the workload's id. An elastic
  pod asks for the flavour its pod set runs on, one pod at a time.

The engine's rules for them (engine.py, preemption.py, state.py):

* pending elastic pods queue after all other work (guarantee class 2), in fair-share
  order between tenants, so a workload **grows** only into GPUs nobody else waits for;
  they never preempt and never hold a reservation;
* running elastic pods are the first thing any preemptor inside its guarantee takes
  back, whichever tenant of the tree they belong to (their own tenant's rigid work
  included), the most-borrowing tenant first: reclaim **shrinks before it preempts**;
* they do not count against their tenant's guarantee when its rigid work asks whether
  it fits there, so elastic growth never keeps a tenant's own rigid work waiting.

This is the idea of Kueue's workload slices (elastic jobs, KEP-77) and of KAI
Scheduler's elastic workloads (``minMember``): the core is a gang, the rest is
opportunistic. :func:`elastic_changes` folds a cycle's decisions about elastic pods back
into one change per workload (pods to add where, pods to stop), and
:func:`elastic_reason` words why a workload is not larger.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from i18n.wording import Wording, gettext_noop, wording

from .model import (
    ClusterSnapshot,
    CycleResult,
    PendingDecision,
    PendingWorkload,
    Placement,
    PodSet,
    RunningWorkload,
    Topology,
)

# Engine id of an elastic pod: "<workload id>~<pod set>~<index above the core>".
SEPARATOR: Final = "~"


def is_elastic(workload: PendingWorkload) -> bool:
    return any(ps.elastic for ps in workload.pod_sets)


def core_of(workload: PendingWorkload) -> PendingWorkload:
    """``workload`` with every pod set at its core (itself when nothing is elastic)."""
    if not is_elastic(workload):
        return workload
    pod_sets = tuple(replace(ps, count=ps.core, min_count=None) for ps in workload.pod_sets)
    return replace(workload, pod_sets=pod_sets)


def pod_id(workload_id: str, pod_set: str, index: int) -> str:
    return SEPARATOR.join((workload_id, pod_set, str(index)))


@dataclass(frozen=True, slots=True)
class ElasticPod:
    """A running pod above the core: the ``index``-th (from 0) of ``pod_set``;
    ``stopping`` once a shrink told it to stop and it still holds its GPUs."""

    pod_set: str
    index: int
    placement: Placement
    started_at: float
    stopping: bool = False


def elastic_parts(
    core: RunningWorkload,
    request: PendingWorkload,
    flavours: Mapping[str, str],
    pods: Sequence[ElasticPod] = (),
) -> tuple[tuple[RunningWorkload, ...], tuple[PendingWorkload, ...]]:
    """The engine's view of running workload ``core``'s elastic pods: those running
    (``pods``) and one pending workload per pod still missing up to each pod set's
    count. ``request`` is the whole workload (with its elastic pod sets), ``flavours``
    the flavour each pod set's core runs on. Raises ValueError for a pod beyond its pod
    set's elastic range or listed twice."""
    by_name = {ps.name: ps for ps in request.pod_sets}
    taken: dict[str, set[int]] = {}
    running: list[RunningWorkload] = []
    for pod in sorted(pods, key=lambda p: (p.pod_set, p.index)):
        ps = by_name.get(pod.pod_set)
        if ps is None or not 0 <= pod.index < ps.count - ps.core:
            raise ValueError(
                f"workload {core.id}: elastic pod {pod.index} of pod set {pod.pod_set} "
                "is outside what the pod set may grow to"
            )
        if pod.index in taken.setdefault(pod.pod_set, set()):
            raise ValueError(f"workload {core.id}: elastic pod {pod.index} listed twice")
        taken[pod.pod_set].add(pod.index)
        running.append(
            RunningWorkload(
                id=pod_id(core.id, pod.pod_set, pod.index),
                tenant_id=core.tenant_id,
                placements=(pod.placement,),
                priority=core.priority,
                admitted_at=pod.started_at,
                preemptible=True,
                max_run_time_s=core.max_run_time_s,
                evicting=core.evicting or pod.stopping,
                elastic_of=core.id,
            )
        )
    pending: list[PendingWorkload] = []
    if not core.evicting:
        for ps in request.pod_sets:
            flavour = flavours.get(ps.name)
            if not ps.elastic or flavour is None:
                continue
            for index in range(ps.count - ps.core):
                if index in taken.get(ps.name, set()):
                    continue
                pending.append(
                    PendingWorkload(
                        id=pod_id(core.id, ps.name, index),
                        tenant_id=core.tenant_id,
                        pod_sets=(PodSet(1, ps.per_pod(flavour), (flavour,), name=ps.name),),
                        priority=core.priority,
                        submitted_at=request.submitted_at,
                        gang=False,
                        topology=Topology.NONE,
                        max_run_time_s=request.max_run_time_s,
                        preemptible=True,
                        elastic_of=core.id,
                    )
                )
    return tuple(running), tuple(pending)


@dataclass(frozen=True, slots=True)
class ElasticChange:
    """What a cycle decided about one workload's elastic pods: pods to start (pod set,
    index, where) and running ones to stop (pod set, index)."""

    workload_id: str
    grow: tuple[tuple[str, int, Placement], ...] = ()
    shrink: tuple[tuple[str, int], ...] = ()


def parse_pod_id(engine_id: str) -> tuple[str, str, int]:
    """(workload id, pod set, index) of an elastic pod's engine id (see pod_id)."""
    workload_id, pod_set, index = engine_id.rsplit(SEPARATOR, 2)
    return workload_id, pod_set, int(index)


def _elastic_ids(snapshot: ClusterSnapshot) -> set[str]:
    ids = {wl.id for wl in snapshot.pending if wl.elastic_of is not None}
    ids.update(run.id for run in snapshot.running if run.elastic_of is not None)
    return ids


def elastic_changes(snapshot: ClusterSnapshot, result: CycleResult) -> dict[str, ElasticChange]:
    """One change per workload whose elastic pods the cycle starts or stops."""
    elastic = _elastic_ids(snapshot)
    grow: dict[str, list[tuple[str, int, Placement]]] = {}
    shrink: dict[str, list[tuple[str, int]]] = {}
    for admission in result.admissions:
        if admission.workload_id in elastic:
            workload_id, pod_set, index = parse_pod_id(admission.workload_id)
            placement = admission.placements[0]
            grow.setdefault(workload_id, []).append((pod_set, index, placement))
    for preemption in result.preemptions:
        if preemption.victim_id in elastic:
            workload_id, pod_set, index = parse_pod_id(preemption.victim_id)
            shrink.setdefault(workload_id, []).append((pod_set, index))
    return {
        wid: ElasticChange(
            wid, tuple(sorted(grow.get(wid, ()))), tuple(sorted(shrink.get(wid, ())))
        )
        for wid in sorted(set(grow) | set(shrink))
    }


def without_elastic_pods(snapshot: ClusterSnapshot, result: CycleResult) -> CycleResult:
    """``result`` with the decisions about elastic pods left out (see elastic_changes):
    what is left speaks of whole workloads only."""
    elastic = _elastic_ids(snapshot)
    return replace(
        result,
        admissions=tuple(a for a in result.admissions if a.workload_id not in elastic),
        preemptions=tuple(p for p in result.preemptions if p.victim_id not in elastic),
        pending=tuple(d for d in result.pending if d.workload_id not in elastic),
    )


def elastic_reason(
    request: PendingWorkload, running_pods: int, waiting: Iterable[PendingDecision]
) -> Wording:
    """Why a running elastic workload is not larger, e.g. "running 6 of 8 pods: 2 wait
    for GPUs nobody else needs (...)"."""
    total = sum(ps.count for ps in request.pod_sets)
    core = sum(ps.core for ps in request.pod_sets)
    decisions = list(waiting)
    if running_pods >= total:
        return wording(
            gettext_noop("running %(running)s of %(total)s pods: at its maximum"),
            running=running_pods,
            total=total,
        )
    missing = total - running_pods
    running = wording(
        gettext_noop("running %(running)s of %(total)s pods (at least %(core)s)"),
        running=running_pods,
        total=total,
        core=core,
    )
    if not decisions:
        return wording(
            gettext_noop("%(running)s: %(missing)s more start once their GPUs are free"),
            running=running,
            missing=missing,
        )
    return wording(
        gettext_noop("%(running)s: %(missing)s wait for GPUs nobody else needs (%(first)s)"),
        running=running,
        missing=missing,
        first=decisions[0].message,
    )
