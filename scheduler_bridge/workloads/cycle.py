"""One admission cycle of a cluster: decide with the engine and save the decisions.

Only one cycle runs per cluster at a time: the cycle holds the cluster's admission lock
(locks.py, a PostgreSQL advisory lock) for its whole read-decide-persist transaction, so
a second cycle waits and then sees the first one's admissions (two workers can never
admit against the same free GPUs). Every decision is a life-cycle transition
(lifecycle.admit, lifecycle.preempt), saved with its audit record in that one
transaction. Nothing here talks to the cluster: the reconciler (reconcile.py) makes the
cluster match the saved decisions afterwards, and a failure there never loses one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduler_bridge import admission as engine
from scheduler_bridge import metrics
from scheduler_bridge.admission import reasons
from scheduler_bridge.admission.elastic import SEPARATOR, parse_pod_id
from scheduler_bridge.gateways import ClusterGateway
from scheduler_bridge.integrations import ObjectRead
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.workloads import lifecycle
from scheduler_bridge.workloads.budget_gate import budget_gate_for
from scheduler_bridge.workloads.locks import hold_admission_lock
from scheduler_bridge.workloads.models import Workload, dump_reason
from scheduler_bridge.workloads.persist import COLUMN_TYPES, save_workloads, update_workloads
from scheduler_bridge.workloads.reconcile import reconcile
from scheduler_bridge.workloads.records import ElasticPodRecord, Placement, dump_placements
from scheduler_bridge.workloads.services import stop_overrunning
from scheduler_bridge.workloads.snapshot import build_snapshot, pending_of
from tenants.audit import audit_save_many
from tenants.models import AuditEvent, Tenant

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
    resized: list[int] = field(default_factory=list)  # elastic work that grew or shrank
    announced: list[int] = field(default_factory=list)  # told it is preempted after a grace
    shrunk: list[int] = field(default_factory=list)  # elastic work that gave back pods

    def then(self, later: CycleOutcome) -> CycleOutcome:
        """This decision followed by ``later``'s, as one cycle's outcome."""
        return CycleOutcome(
            admitted=self.admitted + later.admitted,
            preempted=self.preempted + later.preempted,
            pending=later.pending,
            apply_errors=self.apply_errors | later.apply_errors,
            rebalanced=self.rebalanced + later.rebalanced,
            resized=self.resized + later.resized,
            announced=self.announced + later.announced,
            shrunk=self.shrunk + later.shrunk,
        )


def engine_config() -> engine.EngineConfig:
    return engine.EngineConfig(
        reclaim_min_run_s=settings.TIDEGATE["RECLAIM_MIN_RUN_S"],
        reclaim_wait_s=settings.TIDEGATE["RECLAIM_WAIT_S"],
        share_packing=settings.TIDEGATE["SHARE_PACKING"],
        priority_preemption=settings.TIDEGATE.get("PRIORITY_PREEMPTION", False),
    )


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
        logger.info(
            "admission engine for cluster %s: %s",
            cluster.name,
            "compiled"
            if engine._native.active
            else "interpreted (python -m toolchain.native compiles it)",
        )
    current.budget_gate = gate
    return current


class _Withdrawn(Exception):
    """Work the cycle decided about was cancelled while it decided (cancels do not wait
    for the admission lock); the decision is dropped whole and made again."""

    def __init__(self, workload_ids: list[int]) -> None:
        super().__init__(f"withdrawn while deciding: {workload_ids}")
        self.workload_ids = workload_ids


# A cycle whose work keeps being cancelled under it decides again this many times.
DECIDE_ATTEMPTS = 5


def decide_and_persist(
    cluster: Cluster, keep_reasons_of: frozenset[int] = frozenset()
) -> tuple[CycleOutcome, engine.CycleResult]:
    """Lock the cluster, decide one cycle and save every decision, in one transaction;
    decide again when work it decided about was cancelled meanwhile. Waiting work in
    ``keep_reasons_of`` keeps its reason (it was preempted a moment ago)."""
    for attempt in range(1, DECIDE_ATTEMPTS + 1):
        try:
            return _decide_and_persist_once(cluster, keep_reasons_of)
        except _Withdrawn as withdrawn:
            _engines.pop(cluster.pk, None)  # its cache saw decisions that were rolled back
            if attempt == DECIDE_ATTEMPTS:
                raise
            logger.info("admission cycle of %s: %s; deciding again", cluster.name, withdrawn)
    raise AssertionError("unreachable")


def _decide_and_persist_once(
    cluster: Cluster, keep_reasons_of: frozenset[int]
) -> tuple[CycleOutcome, engine.CycleResult]:
    outcome = CycleOutcome()
    with transaction.atomic():
        hold_admission_lock(cluster.pk)
        now = timezone.now()
        graced = _preempt_after_grace(cluster, now)
        snapshot = build_snapshot(cluster, now)
        admission_engine = engine_for(cluster)
        decided = admission_engine.run_cycle(snapshot)
        # decisions about elastic pods, one change per workload; the rest speak of
        # whole workloads
        resizes = engine.elastic_changes(snapshot, decided)
        result = engine.without_elastic_pods(snapshot, decided)
        flavours = {f.name: f for f in Flavour.objects.filter(cluster=cluster)}
        workloads = _decided_about(result, resizes)
        events = _admit(result, workloads, flavours, now, outcome)
        events += _preempt(result, workloads, now, outcome)
        waiting = _waiting_pods(decided, result)
        events += _resize(resizes, workloads, waiting, now, outcome)
        audit_save_many(events)
        save_workloads([workloads[pk] for pk in outcome.admitted], lifecycle.ADMIT_WRITES)
        victims = [workloads[pk] for pk in [*outcome.preempted, *outcome.announced]]
        save_workloads(victims, list(COLUMN_TYPES))
        save_workloads([workloads[pk] for pk in outcome.resized], lifecycle.RESIZE_WRITES)
        _reword_elastic(snapshot, waiting, set(outcome.resized))
        _save_waiting(result.pending, keep_reasons_of)
        outcome.pending = len(result.pending)
        outcome.preempted += graced
        borrowing = _per_workload(admission_engine.borrowing_after(snapshot, decided))
        outcome.rebalanced = _rebalance_borrowing(cluster, borrowing, flavours, set(workloads))
    return outcome, result


def _decided_about(
    result: engine.CycleResult, resizes: Mapping[str, engine.ElasticChange]
) -> dict[int, Workload]:
    """The workloads the cycle admitted, preempted or resized, locked, each with its
    tenant (the audit records name it: one query, not one per workload). _Withdrawn when
    one of them was cancelled while the cycle decided."""
    changed = {int(a.workload_id) for a in result.admissions}
    changed |= {int(p.victim_id) for p in result.preemptions}
    changed |= {int(wid) for wid in resizes}
    workloads = (
        Workload.objects.select_for_update(of=("self",))
        .select_related("flavour", "priority_class")
        .in_bulk(changed)
    )
    withdrawn = [pk for pk, w in workloads.items() if w.state not in Workload.OPEN_STATES]
    if withdrawn:
        raise _Withdrawn(withdrawn)
    tenants = Tenant.objects.in_bulk({w.tenant_id for w in workloads.values()})
    for workload in workloads.values():
        workload.tenant = tenants[workload.tenant_id]
    return workloads


def _admit(
    result: engine.CycleResult,
    workloads: Mapping[int, Workload],
    flavours: Mapping[str, Flavour],
    now: datetime,
    outcome: CycleOutcome,
) -> list[AuditEvent]:
    events = []
    for admission in result.admissions:
        workload = workloads[int(admission.workload_id)]
        events.append(
            lifecycle.admit(
                workload,
                now=now,
                flavour=flavours[admission.flavour],
                placements=[
                    Placement(p.node, p.flavour, p.gpus, p.gpu) for p in admission.placements
                ],
                borrowed={
                    flavours[name].resource_name: amount
                    for name, amount in admission.borrowed.items()
                },
                gpus=admission.gpus,
                code=admission.code.value,
                message=admission.message,
            )
        )
        outcome.admitted.append(workload.pk)
    return events


def _preempt(
    result: engine.CycleResult,
    workloads: Mapping[int, Workload],
    now: datetime,
    outcome: CycleOutcome,
) -> list[AuditEvent]:
    """Preempt the victims; running work with a grace is told first (announced)."""
    events = []
    for preemption in result.preemptions:
        victim = workloads[int(preemption.victim_id)]
        grace = lifecycle.grace_of(victim)
        if victim.state == Workload.State.RUNNING and grace > 0:
            events.append(
                lifecycle.announce_preemption(
                    victim,
                    now=now,
                    by=preemption.preemptor_id,
                    message=preemption.message,
                    grace_s=grace,
                )
            )
            outcome.announced.append(victim.pk)
            continue
        events.append(
            lifecycle.preempt(
                victim, now=now, by=preemption.preemptor_id, message=preemption.message
            )
        )
        outcome.preempted.append(victim.pk)
    return events


def _resize(
    resizes: Mapping[str, engine.ElasticChange],
    workloads: Mapping[int, Workload],
    waiting: Mapping[str, list[engine.PendingDecision]],
    now: datetime,
    outcome: CycleOutcome,
) -> list[AuditEvent]:
    """Start and stop elastic pods of admitted and running work."""
    events = []
    for wid, change in resizes.items():
        workload = workloads[int(wid)]
        if workload.state not in Workload.ACTIVE_STATES:
            continue  # preempted whole in this very cycle
        grow = [
            ElasticPodRecord(pod_set, index, p.node, p.flavour, p.gpus, now.timestamp())
            for pod_set, index, p in change.grow
        ]
        shrink = list(change.shrink)
        after = len(workload.elastic_pod_records) + len(grow) - len(shrink)
        events.append(
            lifecycle.resize(
                workload,
                now=now,
                grow=grow,
                shrink=shrink,
                message=_elastic_reason(workload, after, waiting.get(wid, [])),
            )
        )
        outcome.resized.append(workload.pk)
        if shrink:
            outcome.shrunk.append(workload.pk)
    return events


def _save_waiting(
    pending: tuple[engine.PendingDecision, ...], keep_reasons_of: frozenset[int]
) -> None:
    """Waiting work only changes its place and its reason; work preempted a moment ago
    (the first pass of this cycle) keeps saying so. A cancel does not wait for the
    cycle: work withdrawn meanwhile keeps its words."""
    rows = [
        {
            "id": int(d.workload_id),
            "queue_position": d.position,
            "reason_code": d.code.value,
            "reason": d.message,
            "reason_args": dump_reason(d.message),
            "held_placements": dump_placements(
                Placement(p.node, p.flavour, p.gpus, p.gpu) for p in d.held
            ),
        }
        for d in pending
    ]
    placed = ["queue_position", "held_placements"]
    for kept, columns in (
        (False, [*placed, "reason_code", "reason", "reason_args"]),
        (True, placed),
    ):
        update_workloads(
            [row for row in rows if (row["id"] in keep_reasons_of) == kept],
            columns,
            only_in_state=Workload.State.PENDING,
        )


def _preempt_after_grace(cluster: Cluster, now: datetime) -> list[int]:
    """Preempt work whose announced grace has ended (its GPUs are free from now on)."""
    due = list(
        Workload.objects.select_for_update(of=("self",))
        .filter(cluster=cluster, state__in=Workload.ACTIVE_STATES, preempt_at__lte=now)
        .select_related("flavour", "tenant")
    )
    events = []
    for workload in due:
        # why it was preempted, as the announcement worded it (English text otherwise)
        worded = workload.reason_wording
        said = worded.params.get("reason") if worded is not None else None
        message = said if isinstance(said, str) else workload.reason.split(": ", 1)[-1]
        events.append(lifecycle.preempt(workload, now=now, by="grace", message=message))
    audit_save_many(events)
    save_workloads(due, list(COLUMN_TYPES))
    return [w.pk for w in due]


def _waiting_pods(
    decided: engine.CycleResult, whole: engine.CycleResult
) -> dict[str, list[engine.PendingDecision]]:
    """The pending decisions about elastic pods, by the workload they belong to."""
    kept = {d.workload_id for d in whole.pending}
    waiting: dict[str, list[engine.PendingDecision]] = {}
    for decision in decided.pending:
        if decision.workload_id not in kept:
            workload_id, _, _ = parse_pod_id(decision.workload_id)
            waiting.setdefault(workload_id, []).append(decision)
    return waiting


def _elastic_reason(
    workload: Workload, elastic_pods: int, waiting: list[engine.PendingDecision]
) -> str:
    core = sum(ps.core for ps in workload.pod_set_records)
    return engine.elastic_reason(pending_of(workload), core + elastic_pods, waiting)


def _reword_elastic(
    snapshot: engine.ClusterSnapshot,
    waiting: dict[str, list[engine.PendingDecision]],
    resized: set[int],
) -> None:
    """Running elastic work that did not change says why it is not larger now."""
    ids = {int(run.id) for run in snapshot.running if run.elastic_of is None}
    ids &= {int(w) for w in waiting} - resized
    rows = []
    for workload in Workload.objects.filter(pk__in=ids, state__in=Workload.ACTIVE_STATES):
        reason = _elastic_reason(
            workload, len(workload.elastic_pod_records), waiting.get(str(workload.pk), [])
        )
        if reason != workload.reason or dump_reason(reason) != workload.reason_args:
            rows.append(
                {
                    "id": workload.pk,
                    "reason_code": "elastic",
                    "reason": reason,
                    "reason_args": dump_reason(reason),
                }
            )
    update_workloads(rows, ["reason_code", "reason", "reason_args"])


def _per_workload(borrowing: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Borrowing by engine id, with each elastic pod's added to its workload's."""
    folded: dict[str, dict[str, int]] = {}
    for engine_id, by_flavour in borrowing.items():
        workload_id = parse_pod_id(engine_id)[0] if SEPARATOR in engine_id else engine_id
        into = folded.setdefault(workload_id, {})
        for flavour, amount in by_flavour.items():
            into[flavour] = into.get(flavour, 0) + amount
    return folded


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
        reason = reasons.borrowing_now(total, gpus) if total else reasons.within_guarantee_now()
        rows_reworded.append(
            {
                "id": pk,
                "reason_code": "borrowing" if total else "within_guarantee",
                "reason": reason,
                "reason_args": dump_reason(reason),
            }
        )
    update_workloads(rows, ["borrowed"])
    update_workloads(rows_reworded, ["reason_code", "reason", "reason_args"])
    return changed


# admission reasons that speak of borrowing, and so are rewritten when it changes
REWORDED_CODES = {"borrowing", "within_guarantee"}


def admission_cycle(
    cluster: Cluster,
    gateway: ClusterGateway | None = None,
    listed: Mapping[str, list[ObjectRead]] | None = None,
) -> CycleOutcome:
    """Decide, then apply: stop work past its time limit, run and save one cycle (and a
    second one right after it when the first preempted), then reconcile the cluster with
    what was saved. A failure to apply (the cluster refusing
    or not answering) never undoes a decision: it is retried by the next reconcile."""
    started = time.monotonic()
    stop_overrunning(cluster)  # frees their GPUs for this very cycle
    outcome, _ = decide_and_persist(cluster)
    if outcome.preempted:
        # the victims gave their GPUs back just now: decide once more, so that the work
        # that preempted them starts in this same pass instead of at the next change
        again, _ = decide_and_persist(cluster, frozenset(outcome.preempted))
        outcome = outcome.then(again)
    changed = bool(
        outcome.admitted
        or outcome.preempted
        or outcome.rebalanced
        or outcome.resized
        or outcome.announced
    )
    applied = reconcile(cluster, gateway, sync_quotas=changed, listed=listed)
    outcome.apply_errors = dict(applied.start_errors)
    metrics.cycle_counted(
        cluster.name,
        seconds=time.monotonic() - started,
        admitted=len(outcome.admitted),
        preempted=len(outcome.preempted),
        shrunk=len(outcome.shrunk),
    )
    return outcome
