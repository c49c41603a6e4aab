"""The workload life cycle: every legal transition does what the table says and leaves
exactly one audit record; every illegal one is refused and changes nothing; the workload
page tells the whole story; the reconciler applies decisions idempotently."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from scheduler_bridge.workloads import lifecycle
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.persist import clear_job_events
from scheduler_bridge.workloads.reconcile import reconcile
from scheduler_bridge.workloads.records import Placement
from tenants.models import AuditEvent, OutboxMessage
from tests.conftest import Cast, client_for
from tests.factories import WorkloadFactory
from tests.tenants.test_portal import logged_in
from tests.workloads.conftest import FakeCluster
from tests.workloads.test_jobs import create_job, events_on, job
from tests.workloads.test_queue import submit

pytestmark = pytest.mark.django_db

State = Workload.State
ALL_STATES = [s.value for s in State]


def audit_count(workload: Workload) -> int:
    return AuditEvent.objects.filter(
        object_type="scheduler_bridge.workload", object_id=str(workload.pk)
    ).count()


def stored(fake: FakeCluster, cast: Cast, state: str, **fields: Any) -> Workload:
    """A workload saved in ``state`` directly (as if earlier transitions had happened)."""
    active = state in (State.ADMITTED, State.RUNNING)
    workload: Workload = WorkloadFactory(
        cluster=fake.cluster,
        tenant=cast.team_a,
        name=f"w-{state}",
        submitted_at=timezone.now() - timedelta(minutes=5),
        state=state,
        admitted_at=timezone.now() - timedelta(minutes=1) if active else None,
        flavour=fake.h100 if active else None,
        placements=[{"node": "h100-1", "flavour": "h100-80gb", "gpus": 2}] if active else [],
        gpus=2 if active else 0,
        **fields,
    )
    return workload


def admit(workload: Workload, fake: FakeCluster) -> AuditEvent:
    return lifecycle.admit(
        workload,
        now=timezone.now(),
        flavour=fake.h100,
        placements=[Placement("h100-1", "h100-80gb", 2)],
        borrowed={},
        gpus=2,
        code="within_guarantee",
        message="within guarantee",
    )


def in_memory(
    run: Callable[[Workload, FakeCluster], AuditEvent],
) -> Callable[[Workload, FakeCluster], Workload]:
    """The cycle's transitions change the row in memory; save both as the cycle does."""

    def apply(workload: Workload, fake: FakeCluster) -> Workload:
        event = run(workload, fake)
        workload.save()
        event.save()
        return workload

    return apply


TRANSITIONS: dict[str, Callable[[Workload, FakeCluster], Workload]] = {
    "admit": in_memory(admit),
    "preempt": in_memory(
        lambda w, _: lifecycle.preempt(w, now=timezone.now(), by="speech", message="reclaim")
    ),
    "start": lambda w, _: lifecycle.start(w),
    "requeue": lambda w, _: lifecycle.requeue(w, "could not start the Job: refused"),
    "finish": lambda w, _: lifecycle.finish(w, "the Job completed"),
    "fail": lambda w, _: lifecycle.fail(w, "the Job failed"),
    "time_out": lambda w, _: lifecycle.time_out(w, "ran past its max run time"),
    "cancel": lambda w, _: lifecycle.cancel(w, "cancelled"),
    "release": lambda w, _: release_one_of_two(w),
}


def release_one_of_two(workload: Workload) -> Workload:
    """Of two one-GPU pods, one completed."""
    workload.pod_sets = [{"name": "main", "count": 2, "gpus_per_pod": 1, "flavours": []}]
    workload.save(update_fields=["pod_sets"])
    return lifecycle.release_pods(workload, pods=1, nodes=["h100-1"])


LEGAL = [
    (name, source)
    for name, (sources, _) in lifecycle.TRANSITIONS.items()
    if name in TRANSITIONS
    for source in sources
]
ILLEGAL = [
    (name, source)
    for name, (sources, _) in lifecycle.TRANSITIONS.items()
    if name in TRANSITIONS
    for source in ALL_STATES
    if source not in sources
]


def test_every_state_of_the_model_is_reached_by_some_transition() -> None:
    reached = {target for _, target in lifecycle.TRANSITIONS.values()}
    assert reached == set(ALL_STATES)


@pytest.mark.parametrize(("transition", "source"), LEGAL)
def test_a_legal_transition_sets_its_state_and_leaves_one_audit_record(
    fake_cluster: FakeCluster, cast: Cast, transition: str, source: str
) -> None:
    workload = stored(fake_cluster, cast, source)
    before = audit_count(workload)
    TRANSITIONS[transition](workload, fake_cluster)
    workload.refresh_from_db()
    assert workload.state == lifecycle.TRANSITIONS[transition][1]
    assert audit_count(workload) == before + 1
    record = AuditEvent.objects.filter(object_id=str(workload.pk)).latest("id")
    after = record.after or {}
    assert (after["transition"], after["state"]) == (transition, workload.state)
    assert record.before == {"state": source}
    if workload.state in (State.ADMITTED, State.RUNNING):
        assert workload.admitted_at is not None and workload.gpus > 0
    if workload.state == State.PENDING:  # back in line: it holds nothing
        assert workload.admitted_at is None and workload.gpus == 0 and workload.placements == []
    if workload.state in (State.FINISHED, State.FAILED, State.TIMED_OUT) or (
        workload.state == State.CANCELLED and source != State.PENDING
    ):
        assert workload.finished_at is not None  # it held GPUs until now: billed until now


@pytest.mark.parametrize(("transition", "source"), ILLEGAL)
def test_an_illegal_transition_is_refused_and_changes_nothing(
    fake_cluster: FakeCluster, cast: Cast, transition: str, source: str
) -> None:
    workload = stored(fake_cluster, cast, source)
    before = audit_count(workload)
    with pytest.raises(lifecycle.IllegalTransition):
        TRANSITIONS[transition](workload, fake_cluster)
    workload.refresh_from_db()
    assert workload.state == source and audit_count(workload) == before


def test_finishing_closed_work_through_the_api_is_a_conflict(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    done = stored(fake_cluster, cast, State.CANCELLED, submitted_by=cast.member)
    response = client_for(cast.member).post(f"/api/v1/workloads/{done.pk}/cancel/")
    assert response.status_code == 409
    assert "already cancelled" in response.json()["detail"]


def test_the_workload_page_tells_submit_admit_start_preempt_and_finish(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    borrower = submit(cast.platform_admin, "speech", 8, name="big").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)  # admitted and started
    owner = submit(cast.lead, "vision", 6, name="owner").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)  # big is preempted
    big = Workload.objects.get(pk=borrower)
    assert big.state == State.PENDING and big.preemptions == 1
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)  # the owner starts
    lifecycle.finish(Workload.objects.get(pk=owner), "finished")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)  # big runs again
    big.refresh_from_db()
    assert big.state == State.RUNNING
    response = client_for(cast.platform_admin).post(f"/api/v1/workloads/{big.pk}/finish/")
    assert response.status_code == 200, response.content
    page = logged_in(cast.platform_admin).get(f"/workloads/{big.pk}/").content.decode()
    history = page[page.index('id="history"') :]
    order = ["finished", "started", "admitted", "preempted", "started", "admitted", "submitted"]
    positions = []
    start = 0
    for label in order:  # newest first
        start = history.index(f"<td>{label}</td>", start) + 1
        positions.append(start)
    assert positions == sorted(positions)


def test_a_job_goes_through_its_whole_life_with_one_event_per_change_its_owner_sees(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from scheduler_bridge.workloads.jobs import jobs_sync

    create_job(fake_cluster, "vision-train", "train", "vision", 2)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="train")
    assert workload.state == State.RUNNING and workload.job_events == []
    fake_cluster.api.run_job("vision-train", "train")
    fake_cluster.api.complete_job("vision-train", "train", failed=True)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    assert workload.state == State.FAILED and workload.reason == "the Job failed"
    assert [e["reason"] for e in events_on(fake_cluster, "vision-train", "train")] == ["Admitted"]


def test_reconciling_twice_with_nothing_changed_writes_nothing(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from scheduler_bridge.workloads.jobs import jobs_sync

    create_job(fake_cluster, "vision-train", "a", "vision", 2)
    create_job(fake_cluster, "speech-train", "b", "speech", 8)
    submit(cast.platform_admin, "vision", 2, name="api-work")
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert job(fake_cluster, "vision-train", "a")["spec"]["suspend"] is False
    fake_cluster.api.reset_counts()
    again = reconcile(fake_cluster.cluster, fake_cluster.gateway)
    assert (again.started, again.suspended, again.events) == ([], [], 0)
    assert fake_cluster.api.write_count() == 0
    assert fake_cluster.api.count() == 1  # one list of the queue's Jobs


def test_a_cancel_suspends_the_running_job_through_the_reconciler(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from scheduler_bridge.workloads.jobs import jobs_sync
    from scheduler_bridge.workloads.services import workload_cancel

    create_job(fake_cluster, "vision-train", "c", "vision", 2)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(job_name="c")
    workload_cancel(actor=cast.lead, workload=workload)
    assert job(fake_cluster, "vision-train", "c")["spec"]["suspend"] is False  # not yet applied
    result = reconcile(fake_cluster.cluster, fake_cluster.gateway)
    assert result.suspended == [workload.pk]
    assert job(fake_cluster, "vision-train", "c")["spec"]["suspend"] is True
    reasons = [e["reason"] for e in events_on(fake_cluster, "vision-train", "c")]
    assert reasons == ["Admitted", "Cancelled"]


def test_a_job_unsuspended_by_hand_while_it_waits_is_suspended_again(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """Work that skips the queue would take GPUs nobody gave it."""
    from scheduler_bridge.workloads.jobs import jobs_sync

    Workload.objects.all().delete()
    create_job(fake_cluster, "vision-train", "huge", "vision", 8, parallelism=2)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(job_name="huge").state == State.PENDING
    fake_cluster.api.edit_object(
        "Job", "vision-train", "huge", lambda j: j["spec"].update(suspend=False)
    )
    result = reconcile(fake_cluster.cluster, fake_cluster.gateway)
    assert result.suspended == [Workload.objects.get(job_name="huge").pk]
    assert job(fake_cluster, "vision-train", "huge")["spec"]["suspend"] is True


def test_closing_many_at_once_closes_each_as_one_would_and_leaves_out_work_that_moved_on(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    running = stored(fake_cluster, cast, State.RUNNING, borrowed={"nvidia.com/gpu": 1})
    pending = stored(fake_cluster, cast, State.PENDING)
    moved_on = stored(fake_cluster, cast, State.RUNNING)
    Workload.objects.filter(pk=moved_on.pk).update(state=State.FINISHED)  # closed meanwhile
    OutboxMessage.objects.all().delete()
    closed = lifecycle.close_many(
        [
            (running, "fail", "its Job failed"),
            (pending, "cancel", "its Job was deleted"),
            (moved_on, "finish", "its Job completed"),
        ]
    )
    assert closed == [running.pk, pending.pk]
    failed, cancelled = (Workload.objects.get(pk=w.pk) for w in (running, pending))
    assert (failed.state, failed.reason, failed.queue_position) == (
        State.FAILED,
        "its Job failed",
        None,
    )
    assert failed.finished_at is not None and cancelled.finished_at is None
    assert cancelled.state == State.CANCELLED
    assert [audit_count(w) for w in (running, pending, moved_on)] == [1, 1, 0]
    assert Workload.objects.get(pk=moved_on.pk).state == State.FINISHED
    # a cycle for the GPUs freed, and a quota sync to lower the borrower's ceiling
    assert sorted(OutboxMessage.objects.values_list("task", flat=True)) == [
        "scheduler_bridge.tasks.admission_cycle",
        "scheduler_bridge.tasks.quota_sync",
    ]


def test_starting_many_at_once_starts_admitted_work_only(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    admitted = stored(fake_cluster, cast, State.ADMITTED)
    cancelled = stored(fake_cluster, cast, State.ADMITTED)
    Workload.objects.filter(pk=cancelled.pk).update(state=State.CANCELLED)
    assert lifecycle.start_many([admitted, cancelled]) == [admitted.pk]
    started = Workload.objects.get(pk=admitted.pk)
    assert started.state == State.RUNNING and started.started_at is not None
    assert Workload.objects.get(pk=cancelled.pk).state == State.CANCELLED
    assert [audit_count(w) for w in (admitted, cancelled)] == [1, 0]


def test_posted_events_are_cleared_unless_more_were_owed_meanwhile(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    owed = [{"reason": "Admitted", "message": "admitted", "warning": False}]
    quiet = stored(fake_cluster, cast, State.RUNNING, job_events=owed)
    busy = stored(fake_cluster, cast, State.RUNNING, job_events=owed)
    later = [*owed, {"reason": "Preempted", "message": "preempted", "warning": True}]
    Workload.objects.filter(pk=busy.pk).update(job_events=later)  # owed while posting
    clear_job_events([(quiet.pk, owed), (busy.pk, owed)])
    assert Workload.objects.get(pk=quiet.pk).job_events == []
    assert Workload.objects.get(pk=busy.pk).job_events == later


def _columns(workload: Workload) -> dict[str, Any]:
    return {f.attname: getattr(workload, f.attname) for f in Workload._meta.concrete_fields}


def test_the_cycle_saves_every_column_admit_and_resize_write(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """The cycle saves admissions and resizes column by column (lifecycle.ADMIT_WRITES,
    RESIZE_WRITES): a transition that writes a column not listed would lose it."""
    from scheduler_bridge.workloads.records import ElasticPodRecord

    pending = stored(
        fake_cluster,
        cast,
        State.PENDING,
        queue_position=3,
        reason_code="cohort_exhausted",
        held_placements=[{"node": "h100-2", "flavour": "h100-80gb", "gpus": 2}],
        apply_error="earlier",
        apply_attempts=2,
    )
    before = _columns(pending)
    admit(pending, fake_cluster)
    after = _columns(pending)
    written = {column for column in after if after[column] != before[column]}
    assert written <= set(lifecycle.ADMIT_WRITES)
    running = stored(fake_cluster, cast, State.RUNNING)
    now = timezone.now()
    grown = ElasticPodRecord("worker", 0, "h100-1", "h100-80gb", 1, now.timestamp())
    later = now + timedelta(minutes=5)
    for change, shown in (
        (dict(now=now, grow=[grown], shrink=[]), {"placements", "gpus", "elastic_pods"}),
        (dict(now=later, grow=[], shrink=[("worker", 0)]), {"placements", "past_runs"}),
    ):
        before = _columns(running)
        lifecycle.resize(running, message="resized", **change)  # type: ignore[arg-type]
        after = _columns(running)
        written = {column for column in after if after[column] != before[column]}
        assert shown <= written <= set(lifecycle.RESIZE_WRITES)
