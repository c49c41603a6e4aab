"""The demo's history: the mapped trace run through the admission simulator on the demo
cluster's own tenants, quotas and nodes, and what every run held, hour by hour.

Pure: no Django. The simulator admits, reclaims and finishes exactly as the live
engine decides (same engine, same configuration); a preempted job restarts from the
beginning, as a suspended Kubernetes Job does. ``HeldRun`` is one stretch of GPUs held
by one job: from its admission to its finish, its preemption or the end of the replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler_bridge.admission import (
    AdmissionEngine,
    ClusterSnapshot,
    CycleResult,
    EngineConfig,
    Flavour,
    Node,
    PendingWorkload,
    PodSet,
    Quota,
    Tenant,
    Topology,
)
from scheduler_bridge.admission.simulator import SimJob, Simulator
from scheduler_bridge.demo.trace import Arrival

CYCLE_INTERVAL_S = 60.0


@dataclass(frozen=True, slots=True)
class HeldRun:
    """GPUs of ``flavour`` held by arrival ``name`` of ``team`` over [start, end)."""

    name: str
    team: str
    flavour: str
    devices: int
    borrowed: int
    start: float
    end: float
    run: int  # 0 for the first run, 1 after one preemption, ...

    def seconds_within(self, lo: float, hi: float) -> float:
        return max(0.0, min(self.end, hi) - max(self.start, lo))


@dataclass(frozen=True)
class ReplayResult:
    runs: tuple[HeldRun, ...]
    admissions: int
    preemptions: int
    start: float
    end: float


def replay(
    arrivals: Sequence[Arrival],
    *,
    anchor: float,
    end: float,
    tenants: Sequence[Tenant],
    flavours: Sequence[Flavour],
    quotas: Sequence[Quota],
    nodes: Sequence[Node],
    config: EngineConfig,
) -> ReplayResult:
    """Run ``arrivals`` (virtual instants, seconds after the epoch instant ``anchor``)
    until the epoch instant ``end``; every run of GPUs held, in epoch seconds."""
    by_name = {a.name: a for a in arrivals}
    jobs = [
        SimJob(
            workload=PendingWorkload(
                id=a.name,
                tenant_id=a.job.team,
                pod_sets=(PodSet(a.job.count, a.job.gpus_per_pod, (a.job.flavour,)),),
                submitted_at=anchor + a.at,
                topology=Topology.NONE,
            ),
            run_time_s=a.job.run_time_s,
        )
        for a in arrivals
        if anchor + a.at < end
    ]
    open_runs: dict[str, HeldRun] = {}
    closed: list[HeldRun] = []
    counts = {"admissions": 0, "preemptions": 0}
    runs_of: dict[str, int] = {}

    def stop(name: str, at: float) -> None:
        run = open_runs.pop(name)
        closed.append(_until(run, at))

    def on_cycle(snapshot: ClusterSnapshot, result: CycleResult) -> None:
        now = snapshot.now
        # runs that ended by themselves since the last cycle
        for name in [n for n, r in open_runs.items() if r.end <= now]:
            closed.append(open_runs.pop(name))
        for preemption in result.preemptions:
            if preemption.victim_id in open_runs:
                stop(preemption.victim_id, now)
                counts["preemptions"] += 1
        for admission in result.admissions:
            arrival = by_name[admission.workload_id]
            runs = runs_of.get(arrival.name, 0)
            runs_of[arrival.name] = runs + 1
            open_runs[arrival.name] = HeldRun(
                name=arrival.name,
                team=arrival.job.team,
                flavour=admission.flavour,
                devices=admission.gpus,
                borrowed=admission.borrowed_gpus,
                start=now,
                end=now + arrival.job.run_time_s,
                run=runs,
            )
            counts["admissions"] += 1

    simulator = Simulator(
        tenants=tenants,
        flavours=flavours,
        quotas=quotas,
        nodes=nodes,
        jobs=jobs,
        engine=AdmissionEngine(config),
        cycle_interval_s=CYCLE_INTERVAL_S,
        on_cycle=on_cycle,
    )
    result = simulator.run(until=end)
    runs = closed + [_until(run, end) for run in open_runs.values()]
    runs.sort(key=lambda r: (r.start, r.name))
    return ReplayResult(
        runs=tuple(r for r in runs if r.end > r.start),
        admissions=counts["admissions"],
        preemptions=counts["preemptions"],
        start=result.start_time,
        end=end,
    )


def _until(run: HeldRun, at: float) -> HeldRun:
    if run.end <= at:
        return run
    return HeldRun(
        run.name, run.team, run.flavour, run.devices, run.borrowed, run.start, at, run.run
    )
