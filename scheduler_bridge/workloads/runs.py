"""Runs of a workload that ended (``Workload.past_runs``): written once, when the cycle
preempts it, when a running Job's completed pods give their GPUs back (the part of
the run they held, ``ended_by`` ``pods_completed``) or when an elastic pod is stopped
(from its own start, ``ended_by`` ``shrunk``); read by billing, the fair-share
history and the portal. They held GPUs, so they count like the current run."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.records import (
    ElasticPodRecord,
    Placement,
    parse_borrowed,
    parse_placements,
    without_placements,
)

logger = logging.getLogger(__name__)

# How a past run ended
PREEMPTED = "preempted"
PODS_COMPLETED = "pods_completed"  # completed pods gave their GPUs back; the run went on
SHRUNK = "shrunk"  # an elastic pod was stopped; the run went on with the rest


@dataclass(frozen=True)
class PastRun:
    admitted_at: datetime
    ended_at: datetime
    flavour: str
    gpu_equivalent: float
    gpus: int
    placements: list[Placement] = field(default_factory=list)
    borrowed: dict[str, int] = field(default_factory=dict)
    ended_by: str = PREEMPTED


def close_part_of_run(
    workload: Workload,
    ended_at: datetime,
    placements: list[Placement],
    borrowed: dict[str, int],
) -> None:
    """Keep the record of the GPUs (``placements``) that completed pods held from the
    run's admission until ``ended_at``; the run goes on with the rest."""
    _keep(
        workload,
        ended_at,
        placements=[p.dump() for p in placements],
        borrowed=borrowed,
        gpus=sum(p.gpus for p in placements),
        ended_by=PODS_COMPLETED,
    )


def close_elastic_pod(
    workload: Workload, ended_at: datetime, pod: ElasticPodRecord, borrowed: dict[str, int]
) -> None:
    """Keep the record of an elastic pod from its start until ``ended_at`` (it was
    stopped, or the run ended), ``borrowed`` of its GPUs above the guarantee."""
    _keep(
        workload,
        ended_at,
        admitted_at=datetime.fromtimestamp(pod.started_at, tz=UTC).isoformat(),
        placements=[pod.placement.dump()],
        borrowed=borrowed,
        gpus=pod.gpus,
        ended_by=SHRUNK,
    )


def close_run(workload: Workload, ended_at: datetime) -> None:
    """Keep the record of the run that held GPUs until ``ended_at``; call before the
    workload's admission fields are cleared (cycle.requeue). Its elastic pods are kept
    from their own starts, the core from the admission."""
    pods = workload.elastic_pod_records
    borrowed = dict(workload.borrowed_gpus)
    for pod in pods:
        close_elastic_pod(workload, ended_at, pod, take_borrowed(borrowed, pod.gpus))
    core = without_placements(workload.placement_records, [p.placement for p in pods])
    _keep(
        workload,
        ended_at,
        placements=[p.dump() for p in core],
        borrowed={k: v for k, v in borrowed.items() if v},
        gpus=sum(p.gpus for p in core),
        ended_by=PREEMPTED,
    )


def take_borrowed(borrowed: dict[str, int], gpus: int) -> dict[str, int]:
    """Take up to ``gpus`` out of ``borrowed`` (in place): GPUs that go back are the
    borrowed ones first. Returns what was taken, per resource."""
    taken: dict[str, int] = {}
    for resource, amount in list(borrowed.items()):
        share = min(amount, gpus - sum(taken.values()))
        if share > 0:
            taken[resource] = share
            borrowed[resource] = amount - share
    return taken


def _keep(workload: Workload, ended_at: datetime, **held: Any) -> None:
    if workload.admitted_at is None or workload.flavour is None:
        return
    workload.past_runs = [
        *(workload.past_runs or []),
        {
            "admitted_at": workload.admitted_at.isoformat(),
            "ended_at": ended_at.isoformat(),
            "flavour": workload.flavour.name,
            "gpu_equivalent": float(workload.flavour.gpu_equivalent),
            **held,
        },
    ]


def past_runs(raw: Any, workload_id: int | None = None) -> list[PastRun]:
    """The stored records, parsed; a damaged one is skipped with a log line (it counts
    for nothing rather than stop a cycle, a collection or a page)."""
    runs = []
    for record in raw or []:
        try:
            runs.append(
                PastRun(
                    admitted_at=datetime.fromisoformat(record["admitted_at"]),
                    ended_at=datetime.fromisoformat(record["ended_at"]),
                    flavour=str(record.get("flavour", "")),
                    gpu_equivalent=float(record.get("gpu_equivalent") or 1),
                    gpus=int(record["gpus"]),
                    placements=parse_placements(record.get("placements")),
                    borrowed=parse_borrowed(record.get("borrowed")),
                    ended_by=str(record.get("ended_by") or PREEMPTED),
                )
            )
        except (AttributeError, KeyError, TypeError, ValueError):
            logger.warning("workload %s: unreadable past run %r; left out", workload_id, record)
    return runs
