"""Runs of a workload that ended (``Workload.past_runs``): written once, when the cycle
preempts it, or when a running Job's completed pods give their GPUs back (the part of
the run they held, ``ended_by`` ``pods_completed``); read by billing, the fair-share
history and the portal. They held GPUs, so they count like the current run."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.records import Placement, parse_borrowed, parse_placements

logger = logging.getLogger(__name__)

# How a past run ended
PREEMPTED = "preempted"
PODS_COMPLETED = "pods_completed"  # completed pods gave their GPUs back; the run went on


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


def close_run(workload: Workload, ended_at: datetime) -> None:
    """Keep the record of the run that held GPUs until ``ended_at``; call before the
    workload's admission fields are cleared (cycle.requeue)."""
    _keep(
        workload,
        ended_at,
        placements=workload.placements,
        borrowed=workload.borrowed,
        gpus=workload.gpus,
        ended_by=PREEMPTED,
    )


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
