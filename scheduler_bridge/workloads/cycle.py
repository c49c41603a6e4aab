"""One admission cycle of a cluster: decide with the engine, persist, then apply.

Only one cycle runs per cluster at a time: the cycle holds the cluster's admission lock
(locks.py, a PostgreSQL advisory lock) for its whole read-decide-persist transaction, so
a second cycle waits and then sees the first one's admissions (two workers can never
admit against the same free GPUs). Decisions are saved
in that one transaction; applying them to Kubernetes (unsuspending or suspending Jobs)
happens after commit, and a Job that cannot be started goes back to pending with the
error as its reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduler_bridge import admission as engine
from scheduler_bridge.gateways import ClusterGateway, GatewayError
from scheduler_bridge.inventory.connection import gateway_for_cluster
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.workloads.budget_gate import budget_gate_for
from scheduler_bridge.workloads.events import admitted_message, job_event
from scheduler_bridge.workloads.locks import hold_admission_lock
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.persist import COLUMN_TYPES, update_workloads
from scheduler_bridge.workloads.runs import close_run
from scheduler_bridge.workloads.services import stop_overrunning
from scheduler_bridge.workloads.snapshot import build_snapshot
from tenants.audit import audit_record

logger = logging.getLogger(__name__)

# Engines keep a cache of what they may skip next time; one per cluster per process.
_engines: dict[int, engine.AdmissionEngine] = {}


@dataclass
class CycleOutcome:
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    pending: int = 0
    apply_errors: dict[int, str] = field(default_factory=dict)
    rebalanced: list[int] = field(default_factory=list)  # running work whose borrowing changed


def engine_config() -> engine.EngineConfig:
    return engine.EngineConfig(reclaim_min_run_s=settings.TIDEGATE["RECLAIM_MIN_RUN_S"])


def engine_for(cluster: Cluster) -> engine.AdmissionEngine:
    gate = budget_gate_for(cluster)
    config = engine_config()
    current = _engines.get(cluster.pk)
    if (
        current is None
        or current.config != config
        or current.budget_gate.__class__ is not gate.__class__
    ):
        current = engine.AdmissionEngine(config, gate)
        _engines[cluster.pk] = current
    current.budget_gate = gate
    return current


def decide_and_persist(cluster: Cluster) -> tuple[CycleOutcome, engine.CycleResult]:
    """Lock the cluster, decide one cycle and save every decision, in one transaction."""
    outcome = CycleOutcome()
    with transaction.atomic():
        hold_admission_lock(cluster.pk)
        now = timezone.now()
        snapshot = build_snapshot(cluster, now)
        admission_engine = engine_for(cluster)
        result = admission_engine.run_cycle(snapshot)
        flavours = {f.name: f for f in Flavour.objects.filter(cluster=cluster)}
        changed = {int(a.workload_id) for a in result.admissions}
        changed |= {int(p.victim_id) for p in result.preemptions}
        workloads = (
            Workload.objects.select_for_update(of=("self",))
            .select_related("flavour")
            .in_bulk(changed)
        )
        for admission in result.admissions:
            workload = workloads[int(admission.workload_id)]
            workload.state = Workload.State.ADMITTED
            workload.admitted_at = now
            workload.flavour = flavours[admission.flavour]
            workload.placements = [
                {"node": p.node, "flavour": p.flavour, "gpus": p.gpus} for p in admission.placements
            ]
            workload.borrowed = {
                flavours[name].resource_name: amount for name, amount in admission.borrowed.items()
            }
            workload.gpus = admission.gpus
            workload.queue_position = None
            workload.reason_code = admission.code.value
            workload.reason = admission.message
            outcome.admitted.append(workload.pk)
        for preemption in result.preemptions:
            victim = workloads[int(preemption.victim_id)]
            close_run(victim, now)
            requeue(victim, f"preempted: {preemption.message}", "preempted")
            victim.preemptions += 1
            outcome.preempted.append(victim.pk)
            audit_record(
                actor=None,
                action="action",
                instance=victim,
                before=None,
                after={"preempted_by": preemption.preemptor_id},
                message=preemption.message,
            )
        update_workloads(
            [
                {
                    "id": w.pk,
                    "state": w.state,
                    "admitted_at": w.admitted_at,
                    "flavour_id": w.flavour_id,
                    "placements": w.placements,
                    "borrowed": w.borrowed,
                    "gpus": w.gpus,
                    "queue_position": w.queue_position,
                    "reason_code": w.reason_code,
                    "reason": w.reason,
                    "preemptions": w.preemptions,
                    "past_runs": w.past_runs,
                }
                for w in workloads.values()
            ],
            list(COLUMN_TYPES),
        )
        # Waiting work only changes its place and its reason.
        update_workloads(
            [
                {
                    "id": int(d.workload_id),
                    "queue_position": d.position,
                    "reason_code": d.code.value,
                    "reason": d.message,
                }
                for d in result.pending
            ],
            ["queue_position", "reason_code", "reason"],
        )
        outcome.pending = len(result.pending)
        borrowing = admission_engine.borrowing_after(snapshot, result)
        outcome.rebalanced = _rebalance_borrowing(cluster, borrowing, flavours, set(workloads))
    return outcome, result


def _rebalance_borrowing(
    cluster: Cluster,
    borrowing: dict[str, dict[str, int]],
    flavours: dict[str, Flavour],
    decided_now: set[int],
) -> list[int]:
    """Bring the ``borrowed`` of running work up to date (what its tenant holds above its
    guarantee now: its newest preemptible work): it feeds the ResourceQuota ceilings and
    the borrowed GPU-hours of chargeback, so it must not stay frozen at its admission
    value once the tenant's other work has started, ended or been preempted. Work
    decided in this cycle keeps its admission reason; other work whose reason was about
    borrowing gets one that says what it borrows now. Returns the ids whose borrowing
    changed."""
    rows: list[dict[str, Any]] = []
    changed: list[int] = []
    active = Workload.objects.filter(cluster=cluster, state__in=Workload.ACTIVE_STATES)
    rows_reworded: list[dict[str, Any]] = []
    for pk, borrowed, gpus, code in active.values_list("pk", "borrowed", "gpus", "reason_code"):
        fresh = {
            flavours[name].resource_name: amount
            for name, amount in borrowing.get(str(pk), {}).items()
            if name in flavours
        }
        if fresh == (borrowed or {}):
            continue
        changed.append(pk)
        rows.append({"id": pk, "borrowed": fresh})
        if pk in decided_now or code not in REWORDED_CODES:
            continue
        total = sum(fresh.values())
        rows_reworded.append(
            {
                "id": pk,
                "reason_code": "borrowing" if total else "within_guarantee",
                "reason": (
                    f"borrows {total} of its {gpus} GPUs now (its tenant's work changed)"
                    if total
                    else "within its tenant's guarantee now (its tenant's work changed)"
                ),
            }
        )
    update_workloads(rows, ["borrowed"])
    update_workloads(rows_reworded, ["reason_code", "reason"])
    return changed


# admission reasons that speak of borrowing, and so are rewritten when it changes
REWORDED_CODES = {"borrowing", "within_guarantee"}


def requeue(workload: Workload, reason: str, code: str) -> None:
    """Back to the queue, keeping its submit time (and so its place among equals)."""
    workload.state = Workload.State.PENDING
    workload.admitted_at = None
    workload.flavour = None
    workload.placements = []
    workload.borrowed = {}
    workload.gpus = 0
    workload.reason_code = code
    workload.reason = reason


def admission_cycle(cluster: Cluster, gateway: ClusterGateway | None = None) -> CycleOutcome:
    """Decide, persist, then apply: quota first raised for new work, Jobs started or
    suspended, quota lowered again for what stopped."""
    from scheduler_bridge.quotas.sync import quota_sync
    from scheduler_bridge.tasks import job_stop

    stop_overrunning(cluster)  # frees their GPUs for this very cycle
    outcome, _ = decide_and_persist(cluster)
    jobs_admitted = Workload.objects.filter(pk__in=outcome.admitted, source=Workload.Source.JOB)
    jobs_preempted = Workload.objects.filter(pk__in=outcome.preempted, source=Workload.Source.JOB)
    if not (outcome.admitted or outcome.preempted or outcome.rebalanced):
        return outcome
    gateway = gateway or gateway_for_cluster(cluster)
    for workload in jobs_preempted:
        try:
            gateway.suspend_job(workload.namespace, workload.job_name)
            job_event(gateway, workload, "Preempted", workload.reason, warning=True)
        except GatewayError as error:
            # Its GPUs are already promised to the preemptor: keep trying until it stops.
            logger.warning(
                "could not suspend %s/%s: %s", workload.namespace, workload.job_name, error
            )
            job_stop.delay(workload.pk)
    started: set[int] = set()
    try:
        # Raise ResourceQuotas before any Job starts, so its pods are never refused.
        quota_sync(cluster, gateway)
        for workload in jobs_admitted.select_related("flavour"):
            try:
                start_job(gateway, workload)
                started.add(workload.pk)
                job_event(gateway, workload, "Admitted", admitted_message(workload))
            except GatewayError as error:
                outcome.apply_errors[workload.pk] = str(error)
                _back_to_pending(workload.pk, f"could not start the Job: {error}")
                started.add(workload.pk)
    except GatewayError as error:
        # The cluster stopped answering half-way: nothing not yet started may keep
        # holding GPUs it does not use.
        for workload in jobs_admitted:
            if workload.pk not in started:
                outcome.apply_errors[workload.pk] = str(error)
                _back_to_pending(workload.pk, f"could not start the Job: {error}")
        raise
    if outcome.apply_errors or outcome.preempted or outcome.rebalanced:
        quota_sync(cluster, gateway)
    return outcome


def _back_to_pending(workload_id: int, reason: str) -> None:
    with transaction.atomic():
        locked = Workload.objects.select_for_update().get(pk=workload_id)
        if locked.state == Workload.State.ADMITTED:
            requeue(locked, reason, "apply_failed")
            locked.save()


def start_job(gateway: ClusterGateway, workload: Workload) -> None:
    flavour = workload.flavour
    assert flavour is not None
    nodes = None
    if workload.topology != Workload.Topology.NONE:
        nodes = sorted({p["node"] for p in workload.placements})
    gateway.admit_job(
        workload.namespace,
        workload.job_name,
        dict(flavour.node_selector),
        list(flavour.tolerations),
        nodes,
    )
