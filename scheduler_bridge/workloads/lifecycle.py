"""The life of a workload: every change of its state is one function in this module.

    transition  from                          to          follow-up
    ----------  ----------------------------  ----------  -----------------------------------
    submit      (new)                         pending     admission cycle
    reject      (new)                         rejected    Event QueueRejected
    admit       pending                       admitted    reconcile starts it
    start       admitted                      running     Event Admitted (where, and why)
    requeue     admitted                      pending     admission cycle; Event NotStarted
    announce    running                       running     reconcile sets tidegate.io/preempt-at; Event Preempting
    preempt     admitted, running             pending     reconcile suspends it; Event Preempted
    finish      admitted, running             finished    admission cycle (which reconciles)
    fail        admitted, running             failed      admission cycle (which reconciles)
    time_out    admitted, running             timed_out   the running cycle reconciles; Event TimedOut
    release     running                       running     admission cycle, quota sync; Event PodsReleased
    resize      admitted, running             (same)      reconcile scales it; Event Scaled
    follow      pending, admitted, running    (same)      admission cycle (its pods were scaled)
    cancel      pending, admitted, running    cancelled   admission cycle (which reconciles)

*Admitted* means the cycle gave the workload its GPUs (they count as held from then on);
*running* means the reconciler told the cluster to run it. Each function checks that the
transition is legal from the current state (``IllegalTransition``, HTTP 409, otherwise),
writes the state and its timestamps, leaves exactly one audit record, owes the Job's
owner the Kubernetes Event named above (``Workload.job_events``, posted by the
reconciler) and queues its follow-up work after commit.

Single transitions lock the cluster's admission lock and then the row, as a cycle does,
so none lands in the middle of a cycle that would overwrite it. ``admit`` and ``preempt``
are called by the cycle, which holds that lock and saves many workloads at once: they
change the row in memory and return the audit record for the caller to save.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.translation import gettext_lazy as _

from scheduler_bridge.admission import reasons
from scheduler_bridge.followups import (
    queue_admission_cycle,
    queue_quota_sync,
    queue_reconcile,
)
from scheduler_bridge.integrations.kinds import kind_facts
from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.workloads import wording as worded
from scheduler_bridge.workloads.locks import hold_admission_lock
from scheduler_bridge.workloads.models import Workload, dump_reason
from scheduler_bridge.workloads.persist import save_workloads
from scheduler_bridge.workloads.records import (
    ElasticPodRecord,
    Placement,
    dump_elastic_pods,
    dump_placements,
    dump_pod_sets,
    placement_nodes,
    split_placements,
    with_placements,
    without_placements,
)
from scheduler_bridge.workloads.runs import (
    close_elastic_pod,
    close_part_of_run,
    close_run,
    take_borrowed,
)
from tenants.audit import audit_event, audit_record, audit_save_many, snapshot
from tenants.errors import Conflict
from tenants.models import AuditEvent

State = Workload.State
ACTIVE = (State.ADMITTED, State.RUNNING)

# transition -> (states it may start from, state it ends in); () = a new workload
TRANSITIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "submit": ((), State.PENDING),
    "reject": ((), State.REJECTED),
    "admit": ((State.PENDING,), State.ADMITTED),
    "start": ((State.ADMITTED,), State.RUNNING),
    "requeue": ((State.ADMITTED,), State.PENDING),
    "announce": ((State.RUNNING,), State.RUNNING),
    "preempt": (ACTIVE, State.PENDING),
    "finish": (ACTIVE, State.FINISHED),
    "fail": (ACTIVE, State.FAILED),
    "time_out": (ACTIVE, State.TIMED_OUT),
    "cancel": ((State.PENDING, *ACTIVE), State.CANCELLED),
    "release": ((State.RUNNING,), State.RUNNING),
}


# Transitions that change a workload but not its state: the states they may run in.
STAYING: dict[str, tuple[str, ...]] = {"follow": (State.PENDING, *ACTIVE)}


# a state as a sentence says it ("cancelled"), in the language of whoever reads it
_state_in_words = lazy(lambda state: str(State(state).label).lower(), str)


class IllegalTransition(Conflict):
    """The workload is not in a state this transition may start from (HTTP 409)."""


def check(workload: Workload, transition: str) -> str:
    """The state `transition` leads to; IllegalTransition when `workload` cannot take it."""
    if transition in STAYING:
        sources, target = STAYING[transition], workload.state
    else:
        sources, target = TRANSITIONS[transition]
    if workload.pk is None and not sources:
        return target
    if workload.state not in sources:
        if workload.state not in Workload.OPEN_STATES:
            raise IllegalTransition(
                _("Workload %(id)s is already %(state)s."),
                params={"id": workload.pk, "state": _state_in_words(workload.state)},
            )
        allowed = ", ".join(str(s) for s in sources) or "a new workload"
        raise IllegalTransition(
            f"Workload {workload.pk} is {workload.state}; it cannot {transition.replace('_', ' ')} "
            f"(only from {allowed})."
        )
    return target


# --- new workloads ---------------------------------------------------------------------


def submit(workload: Workload, *, actor: Any, source: str) -> Workload:
    """Save a new, checked workload as pending and queue an admission cycle."""
    workload.state = check(workload, "submit")
    with transaction.atomic():
        workload.save()
        audit_record(
            actor=actor,
            action="create",
            instance=workload,
            before=None,
            after=snapshot(workload) | {"transition": "submit"},
            source=source,
            message=worded.submitted(workload.gpus_asked),
        )
        queue_admission_cycle(workload.cluster_id)
    return workload


def reject(workload: Workload, reason: str, *, code: str = "rejected") -> Workload:
    """Save a new workload that will never be admitted (its Job is refused), saying why."""
    workload.state = check(workload, "reject")
    workload.reason_code = code
    _say(workload, reason)
    _owe_event(workload, "QueueRejected", reason, warning=True)
    with transaction.atomic():
        workload.save()
        audit_record(
            actor=None,
            action="action",
            instance=workload,
            before=None,
            after={"transition": "reject", "state": workload.state},
            message=worded.rejected(workload.namespace, workload.job_name, reason),
        )
        queue_reconcile(workload.cluster_id)
    return workload


# --- the cycle's transitions (many at once, under the cycle's lock) ---------------------


# The columns each in-memory transition of a cycle writes (the cycle saves exactly these:
# tests/workloads/test_lifecycle.py fails when a transition writes another). A preemption
# also ends a run, counts it and owes an Event, so it writes every column.
ADMIT_WRITES = (
    "state",
    "admitted_at",
    "started_at",
    "flavour_id",
    "placements",
    "borrowed",
    "gpus",
    "queue_position",
    "reason_code",
    "reason",
    "reason_args",
    "apply_error",
    "apply_attempts",
    "held_placements",
)
RESIZE_WRITES = (
    "placements",
    "elastic_pods",
    "gpus",
    "borrowed",
    "reason_code",
    "reason",
    "reason_args",
    "past_runs",
    "job_events",
)


def admit(
    workload: Workload,
    *,
    now: datetime,
    flavour: Flavour,
    placements: Sequence[Placement],
    borrowed: dict[str, int],
    gpus: int,
    code: str,
    message: str,
) -> AuditEvent:
    """Give pending work its GPUs (in memory; the cycle saves the row and the record)."""
    before = workload.state
    workload.state = check(workload, "admit")
    workload.admitted_at = now
    workload.started_at = None
    workload.flavour = flavour
    workload.placements = dump_placements(placements)
    workload.borrowed = dict(borrowed)
    workload.gpus = gpus
    workload.queue_position = None
    workload.reason_code = code
    _say(workload, message)
    workload.apply_error = ""
    workload.apply_attempts = 0
    workload.held_placements = []
    nodes = ", ".join(sorted({p.node for p in placements}))
    return _transition_event(
        workload, "admit", before, worded.admitted(flavour.name, nodes, message)
    )


def grace_of(workload: Workload) -> int:
    """Seconds running work gets between the announcement of its preemption and the
    preemption: what it asked for, capped by its priority class."""
    asked = workload.preemption_grace_s or 0
    cap = workload.priority_class.max_preemption_grace_s if workload.priority_class else asked
    return max(0, min(asked, cap))


def announce_preemption(
    workload: Workload, *, now: datetime, by: str, message: str, grace_s: int
) -> AuditEvent:
    """Tell running work it will be preempted in ``grace_s`` seconds, so it can save a
    checkpoint: it keeps its GPUs until ``preempt_at`` (they count as being freed, not
    free), then the cycle preempts it. In memory, under the cycle's lock."""
    before = workload.state
    workload.state = check(workload, "announce")
    workload.preempt_at = now + timedelta(seconds=grace_s)
    stamp = workload.preempt_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    workload.reason_code = "preempting"
    _say(workload, reasons.preempted_after_grace(stamp, grace_s, message))
    _owe_event(workload, "Preempting", workload.reason, warning=True)
    return _transition_event(
        workload, "announce", before, workload.reason, extra={"preempted_by": by}
    )


def preempt(workload: Workload, *, now: datetime, by: str, message: str) -> AuditEvent:
    """Take running work's GPUs back and queue it again, keeping its submit time (and so
    its place among equals); the run it had is kept (runs.close_run) for billing and the
    fair-share history. In memory; the cycle saves the row and the record."""
    before = workload.state
    target = check(workload, "preempt")
    close_run(workload, now)
    _clear_admission(workload)
    workload.state = target
    workload.preemptions += 1
    workload.reason_code = "preempted"
    _say(workload, reasons.preempted(message))
    _owe_event(workload, "Preempted", workload.reason, warning=True)
    return _transition_event(
        workload, "preempt", before, workload.reason, extra={"preempted_by": by}
    )


def resize(
    workload: Workload,
    *,
    now: datetime,
    grow: Sequence[ElasticPodRecord],
    shrink: Sequence[tuple[str, int]],
    message: str,
) -> AuditEvent:
    """Start (``grow``) and stop (``shrink``: pod set, index) elastic pods of admitted
    or running work: their GPUs join or leave what it holds; each stopped pod's time is
    kept as a past run (billing, the fair-share history). In memory, under the cycle's
    lock; the cycle saves the row and the record, the reconciler scales the object."""
    if workload.state not in ACTIVE:
        raise IllegalTransition(
            f"workload {workload.pk} is {workload.state}; only admitted or running work resizes"
        )
    gone = set(shrink)
    pods = workload.elastic_pod_records
    stopped = [p for p in pods if (p.pod_set, p.index) in gone]
    borrowed = dict(workload.borrowed_gpus)
    for pod in stopped:  # borrowed GPUs go back first
        close_elastic_pod(workload, now, pod, take_borrowed(borrowed, pod.gpus))
    workload.borrowed = {k: v for k, v in borrowed.items() if v}
    kept = [p for p in pods if (p.pod_set, p.index) not in gone]
    placements = without_placements(workload.placement_records, [p.placement for p in stopped])
    placements = with_placements(placements, [p.placement for p in grow])
    workload.placements = dump_placements(placements)
    workload.elastic_pods = dump_elastic_pods([*kept, *grow])
    workload.gpus = sum(p.gpus for p in placements)
    workload.reason_code = "elastic"
    _say(workload, message)
    change = worded.resized(len(grow), len(stopped), message)
    _owe_event(workload, "Scaled", change)
    return _transition_event(
        workload,
        "resize",
        workload.state,
        change,
        extra={"grew": len(grow), "shrank": len(stopped)},
    )


# --- single transitions ------------------------------------------------------------------


def start(workload: Workload, *, now: datetime | None = None) -> Workload:
    """The cluster was told to run admitted work (its Job unsuspended, or nothing to do)."""
    return _single(
        workload,
        "start",
        worded.started(),
        actor=None,
        source="system",
        change=lambda w: _mark_started(w, now or timezone.now()),
    )


def start_many(workloads: Sequence[Workload], *, now: datetime | None = None) -> list[int]:
    """:func:`start` for many workloads of one cluster at once, as a reconcile that just
    told the cluster to run them does: one transaction, their rows locked together,
    one UPDATE and one insert of the audit records. Work no longer admitted (cancelled
    or preempted meanwhile) is left out; the next reconcile suspends its Job. Returns
    the ids started."""
    if not workloads:
        return []
    now = now or timezone.now()
    order = [w.pk for w in workloads]
    with transaction.atomic():
        hold_admission_lock(workloads[0].cluster_id)
        locked = (
            Workload.objects.select_for_update(of=("self",))
            .select_related("flavour", "tenant")
            .in_bulk(order)
        )
        started: list[Workload] = []
        events: list[AuditEvent] = []
        for pk in order:
            workload = locked.get(pk)
            if workload is None or workload.state not in TRANSITIONS["start"][0]:
                continue
            before = workload.state
            _mark_started(workload, now)
            workload.state = check(workload, "start")
            started.append(workload)
            events.append(_transition_event(workload, "start", before, worded.started()))
        save_workloads(started, START_COLUMNS)
        audit_save_many(events)
    return [w.pk for w in started]


# what :func:`_mark_started` and the state change write
START_COLUMNS = ("state", "started_at", "apply_error", "apply_attempts", "job_events")


def release_pods(
    workload: Workload, *, pods: int, nodes: Sequence[str], now: datetime | None = None
) -> Workload:
    """Give back the GPUs of ``pods`` pods of a running Job that completed and will not
    run again (``nodes``: where they ran, one entry a pod), as Kueue releases a Job's
    reclaimable pods: the workload holds, borrows and asks for that many fewer pods from
    now on, and the part of the run they held is kept as a past run (billing, the
    fair-share history). Conflict when another worker released them meanwhile."""
    seen = workload.released_pods
    now = now or timezone.now()

    def release(locked: Workload) -> None:
        pod_set = locked.pod_set_records[0]
        per_pod = pod_set.per_pod_on(locked.flavour.name if locked.flavour else None)
        freed = min(pods * per_pod, locked.gpus)
        kept, released = split_placements(locked.placement_records, freed, per_pod, nodes)
        borrowed = dict(locked.borrowed_gpus)
        given_back = take_borrowed(borrowed, freed)  # borrowed GPUs go back first
        close_part_of_run(locked, now, released, given_back)
        locked.placements = dump_placements(kept)
        locked.borrowed = {k: v for k, v in borrowed.items() if v}
        locked.gpus -= freed
        locked.released_pods += pods
        records = locked.pod_set_records
        first = records[0]
        records[0] = replace(first, count=max(1, first.count - pods))
        locked.pod_sets = dump_pod_sets(records)
        _owe_event(locked, "PodsReleased", message)

    flavour = workload.flavour.name if workload.flavour else None
    message = worded.pods_released(pods, pods * workload.pod_set_records[0].per_pod_on(flavour))
    return _single(
        workload,
        "release",
        message,
        actor=None,
        source="system",
        change=release,
        still=lambda locked: locked.released_pods == seen,
        follow_up=(queue_admission_cycle, queue_quota_sync),
    )


def follow_scale(workload: Workload, count: int, *, now: datetime | None = None) -> Workload:
    """Its pods' controller or autoscaler changed how many pods a pod group has: the
    workload asks for ``count`` pods from now on (its core stays, unless the count
    falls below it); elastic pods beyond the new count are stopped (their time kept as
    past runs). Conflict when it changed meanwhile."""
    now = now or timezone.now()
    seen = workload.pod_sets

    def follow(locked: Workload) -> None:
        first = locked.pod_set_records[0]
        minimum = first.min_count if first.min_count is not None else first.count
        core = min(minimum, count)
        records = [replace(first, count=count, min_count=core if core < count else None)]
        locked.pod_sets = dump_pod_sets(records)
        locked.elastic = core < count or first.min_count is not None
        beyond = [
            (p.pod_set, p.index) for p in locked.elastic_pod_records if p.index >= count - core
        ]
        if beyond and locked.state in ACTIVE:
            resize(
                locked,
                now=now,
                grow=[],
                shrink=beyond,
                message=worded.scaled_to(count),
            ).save()

    return _single(
        workload,
        "follow",
        worded.scaled_to(count),
        actor=None,
        source="system",
        change=follow,
        still=lambda locked: locked.pod_sets == seen,
        follow_up=(queue_admission_cycle,),
    )


def requeue(workload: Workload, reason: str) -> Workload:
    """Admitted work that could not be started goes back to the queue, saying why."""

    def back(locked: Workload) -> None:
        _clear_admission(locked)
        locked.reason_code = "apply_failed"
        _say(locked, reason)
        _owe_event(locked, "NotStarted", reason, warning=True)

    return _single(
        workload,
        "requeue",
        reason,
        actor=None,
        source="system",
        change=back,
        follow_up=(queue_admission_cycle,),
    )


def finish(
    workload: Workload, reason: str, *, actor: Any = None, source: str = "system"
) -> Workload:
    """Work that ended on its own (its Job completed, or its owner says so)."""
    return _close(workload, "finish", reason, actor=actor, source=source)


def fail(workload: Workload, reason: str, *, actor: Any = None, source: str = "system") -> Workload:
    """Work that ended in failure (its Job failed)."""
    return _close(workload, "fail", reason, actor=actor, source=source)


def time_out(
    workload: Workload, reason: str, *, still: Callable[[Workload], bool] | None = None
) -> Workload:
    """Stop running work past its declared max run time. ``still`` re-checks, on the
    locked row, that it still overran (a cycle may have changed it meanwhile)."""
    return _close(
        workload,
        "time_out",
        reason,
        actor=None,
        source="system",
        still=still,
        event=("TimedOut", True),
        queue_cycle=False,
    )


def cancel(
    workload: Workload, reason: str, *, actor: Any = None, source: str = "system"
) -> Workload:
    """Withdraw work, pending or not; running work is stopped by the reconciler. A cancel
    does not wait for a running admission cycle: it locks only the workload's row, and a
    cycle that decided about the workload meanwhile decides again (cycle.py)."""
    return _close(
        workload,
        "cancel",
        reason,
        actor=actor,
        source=source,
        event=("Cancelled", False),
        wait_for_cycle=False,
    )


def note_start_failure(workload: Workload, error: str) -> Workload:
    """Record that starting admitted work failed this time (not a transition: it stays
    admitted, shows the error, and the next reconcile tries again)."""
    with transaction.atomic():
        locked = Workload.objects.select_for_update().get(pk=workload.pk)
        if locked.state != State.ADMITTED:
            return locked
        locked.apply_attempts += 1
        locked.apply_error = f"not yet started: {error}"
        locked.save(update_fields=["apply_attempts", "apply_error"])
    return locked


# --- helpers -----------------------------------------------------------------------------


def _close(
    workload: Workload,
    transition: str,
    reason: str,
    *,
    actor: Any,
    source: str,
    still: Callable[[Workload], bool] | None = None,
    event: tuple[str, bool] | None = None,
    queue_cycle: bool = True,
    wait_for_cycle: bool = True,
) -> Workload:
    def close(locked: Workload) -> None:
        if locked.state in ACTIVE:
            locked.finished_at = timezone.now()
        locked.queue_position = None
        locked.reason_code = str(TRANSITIONS[transition][1])
        _say(locked, reason)
        locked.apply_error = ""
        if event is not None and locked.started_at is not None:
            _owe_event(locked, event[0], reason, warning=event[1])

    # The admission cycle reconciles after deciding, so it also stops the Job; work
    # closed from inside a cycle (time_out) is reconciled by that cycle.
    follow_up: tuple[Callable[[int], None], ...] = (queue_admission_cycle,) if queue_cycle else ()
    return _single(
        workload,
        transition,
        reason,
        actor=actor,
        source=source,
        change=close,
        still=still,
        follow_up=follow_up,
        wait_for_cycle=wait_for_cycle,
    )


def close_many(closing: Sequence[tuple[Workload, str, str]]) -> list[int]:
    """Close many workloads of one cluster at once, as a Job sync that saw their objects
    end does: each ``(workload, transition, reason)`` with ``finish``, ``fail`` or
    ``cancel``, as :func:`finish`, :func:`fail` and :func:`cancel` close one, in one
    transaction (the admission lock once, their rows locked together, one UPDATE, one
    insert of the audit records). Work that changed meanwhile so that it can no longer
    take its transition is left out. Returns the ids closed."""
    if not closing:
        return []
    now = timezone.now()
    with transaction.atomic():
        hold_admission_lock(closing[0][0].cluster_id)
        locked = (
            Workload.objects.select_for_update(of=("self",))
            .select_related("tenant")
            .in_bulk([w.pk for w, _, _ in closing])
        )
        closed: list[Workload] = []
        events: list[AuditEvent] = []
        lowered = False
        for workload, transition, reason in closing:
            row = locked.get(workload.pk)
            if row is None or row.state not in TRANSITIONS[transition][0]:
                continue
            before = row.state
            lowered = lowered or bool(row.borrowed)
            if before in ACTIVE:
                row.finished_at = now
            row.queue_position = None
            row.reason_code = str(TRANSITIONS[transition][1])
            _say(row, reason)
            row.apply_error = ""
            if transition == "cancel" and row.started_at is not None:
                _owe_event(row, "Cancelled", reason)
            row.state = check(row, transition)
            closed.append(row)
            events.append(_transition_event(row, transition, before, reason))
        save_workloads(closed, CLOSE_COLUMNS)
        audit_save_many(events)
        if closed:
            queue_admission_cycle(closed[0].cluster_id)
        if lowered:
            queue_quota_sync(closed[0].cluster_id)  # lower the ceilings their borrowing raised
    return [w.pk for w in closed]


# what closing a workload writes
CLOSE_COLUMNS = (
    "state",
    "finished_at",
    "queue_position",
    "reason_code",
    "reason",
    "reason_args",
    "apply_error",
    "job_events",
)


def _single(
    workload: Workload,
    transition: str,
    message: str,
    *,
    actor: Any,
    source: str,
    change: Callable[[Workload], None],
    still: Callable[[Workload], bool] | None = None,
    follow_up: tuple[Callable[[int], None], ...] = (),
    wait_for_cycle: bool = True,
) -> Workload:
    with transaction.atomic():
        if wait_for_cycle:
            hold_admission_lock(workload.cluster_id)
        locked = Workload.objects.select_for_update().get(pk=workload.pk)
        target = check(locked, transition)
        if still is not None and not still(locked):
            raise Conflict(
                _("Workload %(id)s changed meanwhile; nothing to do."), params={"id": locked.pk}
            )
        before = locked.state
        held_borrowed = bool(locked.borrowed)
        change(locked)
        locked.state = target
        locked.save()
        event = _transition_event(locked, transition, before, message, actor=actor, source=source)
        event.save()
        for queue in follow_up:
            queue(locked.cluster_id)
        if held_borrowed and target not in ACTIVE:
            queue_quota_sync(locked.cluster_id)  # lower the ceiling its borrowing raised
    workload.refresh_from_db()
    return locked


def _mark_started(workload: Workload, now: datetime) -> None:
    workload.started_at = now
    workload.apply_error = ""
    workload.apply_attempts = 0
    flavour = workload.flavour.name if workload.flavour else ""
    nodes = ", ".join(placement_nodes(workload.placements))
    _owe_event(
        workload, "Admitted", f"admitted by Tidegate onto {flavour} ({nodes}): {workload.reason}"
    )


def _clear_admission(workload: Workload) -> None:
    workload.admitted_at = None
    workload.started_at = None
    workload.flavour = None
    workload.placements = []
    workload.elastic_pods = []
    workload.preempt_at = None
    workload.borrowed = {}
    workload.gpus = 0
    workload.apply_error = ""
    workload.apply_attempts = 0


def _say(workload: Workload, reason: str) -> None:
    """Set why the workload is where it is: the English text and its words (dump_reason)."""
    workload.reason = reason
    workload.reason_args = dump_reason(reason)


def _owe_event(workload: Workload, reason: str, message: str, *, warning: bool = False) -> None:
    """Owe the object's owner a Kubernetes Event (only work that has one object: a pod
    group's decisions are shown in Tidegate, its pods come and go)."""
    if workload.source != Workload.Source.JOB or not workload.job_uid:
        return
    if not kind_facts(workload.kind).has_one_object:
        return
    workload.job_events = [
        *(workload.job_events or []),
        {"reason": reason, "message": message[:1000], "warning": warning},
    ]


def _transition_event(
    workload: Workload,
    transition: str,
    before: str,
    message: str,
    *,
    actor: Any = None,
    source: str = "system",
    extra: dict[str, Any] | None = None,
) -> AuditEvent:
    return audit_event(
        actor=actor,
        action="action",
        instance=workload,
        before={"state": before},
        after={"transition": transition, "state": workload.state, **(extra or {})},
        source=source,
        message=message,
    )
