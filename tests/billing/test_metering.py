"""The pure metering core: pods and workloads split into hourly allocations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from billing.usage import metering
from billing.usage.metering import BusyReadings, FlavourMap, FlavourRef, NodeRef, WorkloadRef
from billing.usage.prometheus import HourlyBusy, Reading
from scheduler_bridge.gateways.base import PodInfo

T0 = datetime(2026, 3, 10, 10, tzinfo=UTC)
HOURS = [T0 + timedelta(hours=h) for h in range(3)]
WHOLE = FlavourRef(1, "h100-80gb", "H100-80GB", "nvidia.com/gpu")
SINGLE_1G = FlavourRef(2, "a100-80gb-mig-1g.10gb", "A100-SXM4-80GB", "nvidia.com/gpu", "1g.10gb")
SINGLE_3G = FlavourRef(3, "a100-80gb-mig-3g.40gb", "A100-SXM4-80GB", "nvidia.com/gpu", "3g.40gb")
FLAVOURS = FlavourMap(
    [WHOLE, SINGLE_1G, SINGLE_3G],
    [
        NodeRef("h1", "H100-80GB"),
        NodeRef("a1", "A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"),
    ],
)


def pod(**kw: object) -> PodInfo:
    defaults: dict[str, object] = {
        "uid": "u1",
        "name": "p",
        "namespace": "ns",
        "node_name": "h1",
        "phase": "Running",
        "gpu_requests": {"nvidia.com/gpu": 2},
        "started_at": T0 + timedelta(minutes=15),
    }
    return PodInfo(**(defaults | kw))  # type: ignore[arg-type]


def test_a_running_pod_is_split_into_whole_hours() -> None:
    result = metering.pod_allocations([pod()], HOURS, FLAVOURS, {})
    assert [(a.interval_start, a.devices, a.seconds) for a in result.allocations] == [
        (HOURS[0], 2, 2700),
        (HOURS[1], 2, 3600),
        (HOURS[2], 2, 3600),
    ]
    assert result.allocations[0].device_seconds == 5400


def test_a_finished_pod_stops_counting_at_its_end_and_pending_pods_never_count() -> None:
    done = pod(phase="Succeeded", finished_at=T0 + timedelta(hours=1, minutes=6))
    never = pod(uid="u2", phase="Pending", started_at=None)
    result = metering.pod_allocations([done, never], HOURS, FLAVOURS, {})
    assert [(a.key, a.seconds) for a in result.allocations] == [("u1", 2700), ("u1", 360)]


def test_mig_single_strategy_uses_the_nodes_product_label() -> None:
    result = metering.pod_allocations([pod(node_name="a1")], HOURS[:1], FLAVOURS, {})
    assert result.allocations[0].flavour == SINGLE_3G


def test_an_unknown_resource_is_reported_not_guessed() -> None:
    result = metering.pod_allocations([pod(node_name="nowhere")], HOURS, FLAVOURS, {})
    assert not result.allocations and "no flavour" in result.problems[0]


def test_pods_inherit_their_workloads_class_and_run() -> None:
    workload = WorkloadRef(
        id=7,
        tenant_id=1,
        namespace="ns",
        job_name="train",
        priority_class="spot",
        admitted_at=T0,
        end=None,
        placements=(("h1", "h100-80gb", 4),),
    )
    result = metering.pod_allocations(
        [pod(job_name="train", started_at=T0)], HOURS[:1], FLAVOURS, {("ns", "train"): [workload]}
    )
    (allocation,) = result.allocations
    # what of it was borrowed is decided per hour with the tenant's other rows
    # (billing.usage.borrowing), not from the run
    assert (allocation.workload_id, allocation.priority_class) == (7, "spot")
    assert allocation.run_key == workload.run_key


def test_busy_seconds_come_from_activity_times_time_held_and_never_exceed_it() -> None:
    allocations = metering.pod_allocations([pod()], HOURS[:2], FLAVOURS, {}).allocations
    busy = {
        ("ns", "p", "", HOURS[0]): Reading(Decimal("1.5"), 2),
        ("ns", "p", "", HOURS[1]): Reading(Decimal("2.5"), 2),
    }
    out = metering.attach_busy(allocations, BusyReadings(HourlyBusy(active=busy)))
    assert [a.busy_seconds for a in out] == [Decimal("4050.000"), Decimal("7200.000")]
    assert not any(a.busy_partial or a.busy_estimated for a in out)
    assert metering.attach_busy(allocations, BusyReadings())[0].busy_seconds is None


def test_a_name_reused_within_an_hour_is_read_per_run_never_per_name() -> None:
    first = pod(uid="u1", phase="Failed", started_at=T0, finished_at=T0 + timedelta(minutes=20))
    second = pod(uid="u2", started_at=T0 + timedelta(minutes=30))
    allocations = metering.pod_allocations([first, second], HOURS[:1], FLAVOURS, {}).allocations
    windows = metering.run_windows(allocations)
    assert [(w.uid, w.start, w.end) for w in windows] == [
        ("u1", T0, T0 + timedelta(minutes=20)),
        ("u2", T0 + timedelta(minutes=30), T0 + timedelta(hours=1)),
    ]
    # The hourly reading of the name mixes both runs: it is not used for either.
    hourly = HourlyBusy(active={("ns", "p", "", T0): Reading(Decimal("2.6"), 4)})
    only_first = BusyReadings(hourly, run_active={("u1", "", T0): Reading(Decimal("2"), 2)})
    out = metering.attach_busy(allocations, only_first)
    assert [(a.key, a.busy_seconds) for a in out] == [("u1", Decimal("2400.000")), ("u2", None)]


def test_missing_device_series_are_scaled_from_the_reporting_ones_and_flagged() -> None:
    allocations = metering.pod_allocations([pod(started_at=T0)], HOURS[:1], FLAVOURS, {})
    one_of_two = {("ns", "p", "", T0): Reading(Decimal("0.3"), 1)}
    (out,) = metering.attach_busy(allocations.allocations, BusyReadings(HourlyBusy(one_of_two)))
    assert out.busy_partial and out.busy_seconds == Decimal("2160.000")  # 0.3 x 2 GPUs x 1 h


def test_a_pod_counts_for_the_run_it_started_in() -> None:
    def run(admitted: datetime, end: datetime | None) -> WorkloadRef:
        return WorkloadRef(
            id=7,
            tenant_id=1,
            namespace="ns",
            job_name="train",
            priority_class="",
            admitted_at=admitted,
            end=end,
            placements=(("h1", "h100-80gb", 2),),
        )

    preempted = run(T0, T0 + timedelta(minutes=30))
    rerun = run(T0 + timedelta(minutes=40), None)
    runs = metering.runs_by_job([rerun, preempted])
    lingering = pod(
        uid="old",
        job_name="train",
        phase="Failed",
        started_at=T0 + timedelta(minutes=1),
        finished_at=T0 + timedelta(minutes=31),
    )
    fresh = pod(uid="new", job_name="train", started_at=T0 + timedelta(minutes=41))
    result = metering.pod_allocations([lingering, fresh], HOURS[:1], FLAVOURS, runs)
    assert [(a.key, a.run_key) for a in result.allocations] == [
        ("old", preempted.run_key),
        ("new", rerun.run_key),
    ]
    covered = {(a.run_key, a.interval_start) for a in result.allocations}
    by_name = FLAVOURS.by_name
    assert metering.workload_allocations([preempted, rerun], HOURS[:1], by_name, covered) == (
        metering.MeteringResult()
    )
    # Without the lingering pod, the preempted run is still metered from its record.
    only_new = {(rerun.run_key, T0)}
    (row,) = metering.workload_allocations(
        [preempted, rerun], HOURS[:1], by_name, only_new
    ).allocations
    assert (row.key, row.seconds) == (preempted.run_key, 1800)


SHARED = FlavourRef(
    9, "t4-shared", "T4", "nvidia.com/gpu", shared=True, milli_per_unit=250
)  # time-sliced four ways
SHARED_NODES = FlavourMap([SHARED], [NodeRef("t1", "T4")])


def test_a_share_is_metered_from_its_admission_in_thousandths_not_from_its_replicas() -> None:
    workload = WorkloadRef(
        id=8,
        tenant_id=1,
        namespace="ns",
        job_name="notebook",
        priority_class="",
        admitted_at=T0,
        end=T0 + timedelta(minutes=90),
        placements=(("t1", "t4-shared", 470),),
    )
    queued = pod(
        job_name="notebook", node_name="t1", started_at=T0, gpu_requests={"nvidia.com/gpu": 1}
    )
    from_pods = metering.pod_allocations(
        [queued], HOURS[:2], SHARED_NODES, {("ns", "notebook"): [workload]}
    )
    assert from_pods.allocations == [] and from_pods.problems == []
    rows = metering.workload_allocations([workload], HOURS[:2], {"t4-shared": SHARED}, set())
    assert [(a.devices, a.seconds, a.source) for a in rows.allocations] == [
        (470, 3600, "workload"),
        (470, 1800, "workload"),
    ]


def test_a_replica_taken_outside_the_queue_counts_as_its_part_of_a_gpu() -> None:
    outsider = pod(node_name="t1", started_at=T0, gpu_requests={"nvidia.com/gpu": 2})
    (row,) = metering.pod_allocations([outsider], HOURS[:1], SHARED_NODES, {}).allocations
    assert (row.devices, row.seconds) == (500, 3600)  # two quarter-GPU replicas


def test_part_of_a_gpu_a_pods_claims_hold_is_metered_in_thousandths_as_held() -> None:
    """Consumable capacity (DRA): the claims of a pod outside the queue hold 400
    thousandths of a shared GPU; metered as such, never multiplied by replica units."""
    outsider = pod(
        node_name="t1", started_at=T0, gpu_requests={}, claimed_shares={"nvidia.com/gpu": 400}
    )
    (row,) = metering.pod_allocations([outsider], HOURS[:1], SHARED_NODES, {}).allocations
    assert (row.flavour, row.devices, row.seconds) == (SHARED, 400, 3600)
    # a flavour an admin made whole again is not billed 400 GPUs: named as a problem
    whole = FlavourMap([WHOLE], [NodeRef("t1", "H100-80GB")])
    metered = metering.pod_allocations([outsider], HOURS[:1], whole, {})
    assert metered.allocations == []
    assert "not shared; set its sharing to dra" in metered.problems[0]


def readings(hour: datetime, pod_name: str, *, dcgm: str | None = None, hami: str | None = None):
    key = ("ns", pod_name, "", hour)
    hourly = HourlyBusy(
        active={key: Reading(Decimal(dcgm), 1)} if dcgm else {},
        hami={key: Reading(Decimal(hami), 1)} if hami else {},
    )
    return BusyReadings(hourly=hourly)


def test_a_replica_outside_the_queue_is_busy_by_hamis_reading_or_its_part_of_the_gpu() -> None:
    outsider = pod(name="nb", node_name="t1", started_at=T0, gpu_requests={"nvidia.com/gpu": 2})
    (row,) = metering.pod_allocations([outsider], HOURS[:1], SHARED_NODES, {}).allocations
    # DCGM sees the whole GPU 80 % busy: the two quarters it holds are credited 80 % of them
    (split,) = metering.attach_busy([row], readings(T0, "nb", dcgm="0.8"))
    assert (split.busy_seconds, split.busy_estimated) == (Decimal("0.8") * 500 * 3600, True)
    assert not split.busy_partial
    # HAMi measured the pod itself: 30 % of the GPU, counted as measured
    (measured,) = metering.attach_busy([row], readings(T0, "nb", dcgm="0.8", hami="0.3"))
    assert (measured.busy_seconds, measured.busy_estimated) == (Decimal(300 * 3600), False)
    # never more than it holds, even if it ran past its share
    (capped,) = metering.attach_busy([row], readings(T0, "nb", hami="0.9"))
    assert capped.busy_seconds == Decimal(500 * 3600)


def test_an_admitted_share_is_busy_by_its_pods_readings_over_what_it_holds() -> None:
    workload = WorkloadRef(
        id=8,
        tenant_id=1,
        namespace="ns",
        job_name="notebook",
        priority_class="",
        admitted_at=T0,
        end=T0 + timedelta(hours=1),
        placements=(("t1", "t4-shared", 470),),
    )
    queued = pod(
        name="notebook-0",
        job_name="notebook",
        node_name="t1",
        started_at=T0,
        gpu_requests={"nvidia.com/gpu": 1},
    )
    from_pods = metering.pod_allocations(
        [queued], HOURS[:1], SHARED_NODES, {("ns", "notebook"): [workload]}
    )
    assert from_pods.allocations == [] and len(from_pods.share_pods) == 1  # read, not billed
    rows = metering.workload_allocations([workload], HOURS[:1], {"t4-shared": SHARED}, set())
    (estimate,) = metering.attach_busy(
        rows.allocations, readings(T0, "notebook-0", dcgm="0.5"), from_pods.share_pods
    )
    assert (estimate.busy_seconds, estimate.busy_estimated) == (Decimal("0.5") * 470 * 3600, True)
    (measured,) = metering.attach_busy(
        rows.allocations, readings(T0, "notebook-0", dcgm="0.5", hami="0.2"), from_pods.share_pods
    )
    assert (measured.busy_seconds, measured.busy_estimated) == (Decimal(200 * 3600), False)
    (unread,) = metering.attach_busy(rows.allocations, BusyReadings(), from_pods.share_pods)
    assert unread.busy_seconds is None  # nothing measured: not guessed
