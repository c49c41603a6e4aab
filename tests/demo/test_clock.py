"""The living demo: after seeding, the virtual clock brings the trace's work to the demo
cluster through the real services, work finishes after its run time, teams borrow and
reclaim, and every virtual hour's GPUs reach the ledger dated in the real present."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from billing.models import UsageRecord
from billing.usage.capacity_check import hours_over_capacity
from scheduler_bridge.demo.clock import (
    METER_SLICE_S,
    DemoClock,
    demo_clock_start,
    demo_clock_step,
    virtual,
)
from scheduler_bridge.demo.trace import DemoJob, DemoTrace, VirtualClock, monday_before
from scheduler_bridge.gateways import simulated
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.management.commands.serve_demo import QueueTicker
from scheduler_bridge.workloads.models import Workload
from tenants.demo import seed_demo
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

QUARTER = 900.0  # one step of the demo's ticker at the default speed: 15 simulated minutes


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    simulated.reset()
    seed_demo()
    yield Cluster.objects.get(name="demo")
    simulated.reset()


def run_hours(clock: DemoClock, hours: int, watch: Any = None) -> None:
    for _ in range(hours * 4):
        demo_clock_step(clock, QUARTER)
        if watch is not None:
            watch()


def api_states(username: str) -> dict[str, str]:
    """Every demo workload's state as ``username`` reads it, page after page."""
    user = get_user_model().objects.get(username=username)
    client = client_for(user)
    states: dict[str, str] = {}
    page: str | None = "/api/v1/workloads/?cluster__name=demo"
    while page:
        response = client.get(page)
        assert response.status_code == 200
        body = response.json()
        rows = body["results"] if isinstance(body, dict) else body
        states.update((row["name"], row["state"]) for row in rows)
        page = body.get("next") if isinstance(body, dict) else None
    return states


def test_simulated_hours_submit_trace_work_that_is_admitted_runs_and_finishes(
    cluster: Cluster,
) -> None:
    # from the next Monday morning: the trace keeps its weekdays, and its weekends are
    # quiet (a few jobs an hour, nobody borrows), so a start at the test's own hour would
    # make what it sees depend on the day it runs
    clock = demo_clock_start(cluster)
    monday = monday_before(timezone.now()) + timedelta(days=7, hours=9)
    clock.clock.now = max(clock.clock.now, virtual(monday))
    before = set(Workload.objects.values_list("name", flat=True))
    borrowers: set[str] = set()

    def note_borrowers() -> None:
        borrowers.update(
            Workload.objects.filter(name__startswith="philly-", state="running")
            .exclude(borrowed={})
            .values_list("tenant__slug", flat=True)
        )

    run_hours(clock, 8, note_borrowers)
    trace_work = Workload.objects.filter(name__startswith="philly-")
    assert trace_work.count() > 10 and not before & set(trace_work.values_list("name", flat=True))
    assert (
        trace_work.filter(admitted_at__isnull=False).exists()
        or trace_work.filter(state="finished").exists()
    )
    assert trace_work.filter(state="finished").count() > 3
    # the seeded work ends after its hours too: resnet-sweep ran 3 simulated hours
    assert Workload.objects.get(name="resnet-sweep").state == "finished"
    assert borrowers  # some team ran trace work on guarantee lent by others
    # what the admin sees through the API is what happened
    states = api_states("admin")
    assert states["resnet-sweep"] == "finished"
    assert {n: s for n, s in states.items() if n.startswith("philly-")} == dict(
        trace_work.values_list("name", "state")
    )


def test_a_lead_sees_only_their_teams_demo_work_through_the_api(cluster: Cluster) -> None:
    run_hours(demo_clock_start(cluster), 2)
    seen = api_states("vision-lead")
    vision = set(Workload.objects.filter(tenant__slug="vision").values_list("name", flat=True))
    assert seen and set(seen) <= vision


def test_borrowed_work_is_reclaimed_when_the_owners_trace_work_arrives(cluster: Cluster) -> None:
    clock = demo_clock_start(cluster)
    borrowed = Workload.objects.filter(state="running", flavour__name="h100-80gb").exclude(
        borrowed={}
    )
    assert borrowed.exists()  # after seeding, vision runs on H100s lent by others
    lenders = ["nlp", "speech", "search", "recsys", "ads", "infra", "data"]
    holding = {
        w.tenant.slug: w.gpus
        for w in Workload.objects.filter(state="running", flavour__name="h100-80gb")
    }
    # an owner with guarantee it does not use: its work fits inside it
    owner = next(team for team in lenders if holding.get(team, 0) < 2)
    start = clock.now
    arrival = DemoJob(
        trace_id="j-owner",
        team=owner,
        flavour="h100-80gb",
        count=1,
        gpus_per_pod=2,
        offset_s=start + 600.0,  # ten simulated minutes from now (lap 0 of a long trace)
        run_time_s=7200.0,
        trace_gpus=2,
    )
    owners = DemoClock(cluster, DemoTrace((arrival,), span_s=2 * start), VirtualClock(start))
    demo_clock_step(owners, QUARTER)
    demo_clock_step(owners, QUARTER)  # a reclaim started in one cycle finishes in the next
    (mine,) = Workload.objects.filter(name__startswith="philly-j-owner")
    assert mine.state == "running" and not mine.borrowed
    reclaimed = Workload.objects.filter(preemptions__gt=0, tenant__slug="vision")
    assert reclaimed.exists()
    assert all(w.state in ("pending", "admitted", "running") for w in reclaimed)


def test_work_is_metered_for_the_real_time_it_held_its_gpus(cluster: Cluster) -> None:
    """At the default speed an hour of virtual work takes a real minute: the ledger gets
    the real minute, in the real hour it fell in, never more than the cluster holds."""
    # the seeded history ends where this hour began: the clock goes on from there, so
    # the few real minutes it runs here are already past
    started = timezone.now().replace(minute=0, second=0, microsecond=0)
    clock = demo_clock_start(cluster, at=started)
    before = UsageRecord.objects.filter(workload__isnull=False).count()
    running_at_start = list(Workload.objects.filter(state="running").values_list("pk", flat=True))
    run_hours(clock, 5)
    rows = UsageRecord.objects.filter(workload__isnull=False)
    assert rows.count() > before
    now = timezone.now()
    for row in rows:
        assert row.interval_start <= now  # never dated in the future
        assert 0 < row.gpu_seconds_allocated <= row.devices * METER_SLICE_S
    # work that ran all along: 5 simulated hours are 5 real minutes at 60 virtual s a
    # second, of which the slices over so far are metered
    metered_s = (5 * 60) // METER_SLICE_S * METER_SLICE_S
    steady = [
        w
        for w in Workload.objects.filter(pk__in=running_at_start, state="running", preemptions=0)
        if not w.elastic
    ]
    assert steady
    for workload in steady:
        held = sum(r.gpu_seconds_allocated for r in rows.filter(workload=workload))
        assert held == workload.gpus * metered_s, workload.name
    assert hours_over_capacity(started - timedelta(days=40), now + timedelta(hours=1)) == []


def test_the_demos_ledger_never_holds_more_than_its_cluster_has(cluster: Cluster) -> None:
    """Per flavour and hour, the seeded month and the living clock's hours together."""
    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    clock = demo_clock_start(cluster, at=this_hour)  # where the seeded history ends
    run_hours(clock, 60)  # an hour of real time at the default speed
    first = UsageRecord.objects.order_by("interval_start").first()
    assert first is not None
    assert hours_over_capacity(first.interval_start, timezone.now() + timedelta(hours=1)) == []


def test_a_restarted_clock_resumes_after_the_last_submitted_work(cluster: Cluster) -> None:
    clock = demo_clock_start(cluster)
    assert clock.now == virtual(timezone.now().replace(minute=0, second=0, microsecond=0))
    run_hours(clock, 2)
    names = sorted(Workload.objects.values_list("name", flat=True))
    again = demo_clock_start(cluster)
    assert again.now <= clock.now
    step = demo_clock_step(again, clock.now - again.now)  # the same stretch once more
    assert step.submitted == []
    assert sorted(Workload.objects.values_list("name", flat=True)) == names


def test_seeding_again_after_the_clock_ran_changes_nothing(cluster: Cluster) -> None:
    run_hours(demo_clock_start(cluster), 1)
    workloads = Workload.objects.count()
    rows = UsageRecord.objects.count()
    seed_demo()
    assert (Workload.objects.count(), UsageRecord.objects.count()) == (workloads, rows)


def test_the_ticker_drives_the_demo_cluster_on_its_clock(cluster: Cluster) -> None:
    ticker = QueueTicker(every_s=15, speed=3600)
    assert ticker.tick() == 1
    assert ticker.clock is not None and ticker.clock.cluster == cluster


def test_the_ticker_makes_up_the_time_of_a_step_that_failed(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick whose step fails (the database is gone for a moment) does not leave the
    demo's clock behind the real one: the next tick plays the time of both."""
    from scheduler_bridge.demo import clock as clock_module

    speed = 60.0
    ticker = QueueTicker(every_s=15, speed=speed)
    ticker._last -= 10.0  # the last tick was ten real seconds ago
    submit_due = clock_module._submit_due

    def fails(*args: Any) -> list[int]:
        raise RuntimeError("connection to the database lost")

    monkeypatch.setattr(clock_module, "_submit_due", fails)
    assert ticker.tick() == 0  # logged, never fatal
    assert ticker.clock is not None
    start = ticker.clock.now
    monkeypatch.setattr(clock_module, "_submit_due", submit_due)
    assert ticker.tick() == 1
    assert ticker.clock.now - start >= 10.0 * speed


def test_a_speed_that_is_not_positive_is_refused_with_what_to_give() -> None:
    with pytest.raises(CommandError, match=r"--speed is 0; give a positive number"):
        call_command("serve_demo", "--speed", "0")


def test_work_a_visitor_submits_finishes_and_is_charged(cluster: Cluster) -> None:
    """Work submitted through the API declares no trace run time: on the demo cluster it
    runs SUBMITTED_RUN_S (virtual), then finishes and has its GPUs charged. (Language's
    lead: Vision's hard budget may run out late in the month, as the demo means it to.)"""
    from scheduler_bridge.demo.clock import SUBMITTED_RUN_S

    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    clock = demo_clock_start(cluster, at=this_hour)
    lead = get_user_model().objects.get(username="nlp-lead")
    response = client_for(lead).post(
        "/api/v1/workloads/",
        {
            "cluster": "demo",
            "tenant": "nlp",
            "name": "visitor-job",
            "pod_sets": [{"count": 1, "gpus_per_pod": 1, "flavour": "h100-80gb"}],
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    job = Workload.objects.get(pk=response.json()["id"])
    hours = 0
    while job.state != "finished" and hours < 24:
        run_hours(clock, 1)
        job.refresh_from_db()
        hours += 1
    assert job.state == "finished", job.reason
    assert job.admitted_at is not None and job.finished_at is not None
    assert hours * 3600 >= SUBMITTED_RUN_S
    rows = UsageRecord.objects.filter(workload=job)
    held = (job.finished_at - job.admitted_at).total_seconds()
    assert rows.exists()
    # charged for the real time it held its GPU (the last slice may still be open)
    assert 0 < sum(r.gpu_seconds_allocated for r in rows) <= held + METER_SLICE_S


# Hours the demo may be seeded at: now; two whose trace is a weekday burst of one-GPU
# jobs on the A100s that filled them before the elastic job came; and the month's last
# evening, when Vision's hard budget is spent and another owner must play its part
# (hours before midnight: the clocks move on with the real time the test takes).
SEEDED_AT = [
    None,
    datetime(2026, 12, 7, 18, 7, tzinfo=UTC),
    datetime(2026, 12, 9, 15, 7, tzinfo=UTC),
    datetime(2026, 12, 31, 20, 10, tzinfo=UTC),
]
MONTH_END = SEEDED_AT[3]


@pytest.fixture(params=SEEDED_AT, ids=["now", "monday-18h", "wednesday-15h", "month-end"])
def cluster_seeded_at(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    """The demo seeded at one of SEEDED_AT, its clocks (real and virtual) moved there."""
    if request.param is not None:
        real_now = timezone.now
        shift = request.param - real_now()
        monkeypatch.setattr(timezone, "now", lambda: real_now() + shift)
    simulated.reset()
    seed_demo()
    yield Cluster.objects.get(name="demo")
    simulated.reset()


def test_within_the_first_minutes_the_queue_visibly_lends_reclaims_and_grows(
    cluster_seeded_at: Cluster,
) -> None:
    """The opening act: five virtual hours (five real minutes at the default speed)
    after seeding, a visitor has seen a reclaim with its reason, work waiting with a
    position, an elastic job grow into idle GPUs and shrink, and spend move - whatever
    hour of the week the demo was seeded at."""
    cluster = cluster_seeded_at
    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    clock = demo_clock_start(cluster, at=this_hour)
    rows_before = UsageRecord.objects.count()
    seen: dict[str, Any] = {"positions": set(), "elastic": []}

    def watch() -> None:
        seen["positions"] |= set(
            Workload.objects.filter(state="pending", queue_position__isnull=False).values_list(
                "name", flat=True
            )
        )
        elastic = Workload.objects.filter(name="elastic-pretrain").first()
        if elastic is not None and elastic.state == "running":
            seen["elastic"].append(elastic.gpus)

    run_hours(clock, 5, watch)
    reclaimed = Workload.objects.filter(preemptions__gt=0)
    assert reclaimed.exists()
    assert "waits-its-turn" in seen["positions"]
    grew = seen["elastic"]
    assert grew and max(grew) > 2, grew
    # it shrank (to no less than its 2 guaranteed pods) when an owner came for its A100s
    assert any(later < grew[i] for i in range(len(grew)) for later in grew[i + 1 :]), grew
    assert min(grew) >= 2
    owner = Workload.objects.get(name="owner-wants-a100s")
    assert owner.started_at is not None and owner.borrowed == {}
    assert UsageRecord.objects.count() > rows_before


@pytest.mark.parametrize("cluster_seeded_at", [MONTH_END], indirect=True)
def test_at_the_months_end_an_owner_whose_budget_allows_takes_back_the_a100s(
    cluster_seeded_at: Cluster,
) -> None:
    """Vision's hard budget is spent on the month's last evening (the demo sizes it on
    last month's bill): the owner that takes back the elastic job's A100s is a team
    that may still start work, and its work starts."""
    from scheduler_bridge.workloads.budget_gate import budget_gate_for

    assert budget_gate_for(cluster_seeded_at).blocked("vision") is not None
    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    run_hours(demo_clock_start(cluster_seeded_at, at=this_hour), 4)
    owner = Workload.objects.select_related("tenant").get(name="owner-wants-a100s")
    assert owner.tenant.slug != "vision"
    assert owner.started_at is not None


@pytest.mark.parametrize("cluster_seeded_at", [SEEDED_AT[2]], indirect=True)
def test_the_trace_work_the_opening_holds_back_is_submitted_at_the_hours_end(
    cluster_seeded_at: Cluster,
) -> None:
    """The A100 work the trace brings in the opening's first hour waits for its end
    (so the elastic job finds idle A100s), then is submitted, none of it lost."""
    from scheduler_bridge.demo.clock import LULL_FLAVOUR, LULL_S

    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    clock = demo_clock_start(cluster_seeded_at, at=this_hour)
    assert clock.opening_at is not None
    held = [
        a.name
        for a in clock.trace.arrivals(clock.opening_at, clock.opening_at + LULL_S)
        if a.job.flavour == LULL_FLAVOUR
    ]
    assert held  # a weekday afternoon brings A100 work in that hour
    for _ in range(3):
        demo_clock_step(clock, QUARTER)
    assert not Workload.objects.filter(name__in=held).exists()
    demo_clock_step(clock, QUARTER)  # the hour's last quarter
    assert set(Workload.objects.filter(name__in=held).values_list("name", flat=True)) == set(held)


def test_a_teams_borrowed_gpus_are_the_same_on_its_workloads_and_its_dashboard(
    cluster: Cluster,
) -> None:
    """One rule for "borrowed now": what a team's running workloads say they borrow adds
    up to what its dashboard says it holds beyond its guarantee ("borrows 15" on a
    workload page beside "Borrowed 12" on the dashboard)."""
    from dashboard.selectors import subtree_holdings
    from tenants.models import Tenant

    clock = demo_clock_start(cluster)
    for _ in range(6):
        run_hours(clock, 1)
        for team in Tenant.objects.filter(children__isnull=True):
            for group in subtree_holdings(team):
                (row,) = [r for r in group.rows if r.is_subtree]
                said = sum(
                    int(w.borrowed_gpus.get(group.flavour.resource_name, 0))
                    for w in Workload.objects.filter(
                        tenant=team, flavour=group.flavour, state__in=Workload.ACTIVE_STATES
                    )
                )
                assert said == row.holding.borrowed, (team.slug, group.flavour.name)


def test_a_step_that_fails_loses_none_of_its_work(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database fails while a step submits the trace's work: nothing of the step is
    stored, the clock stays where it was, and the next step submits that work."""
    from scheduler_bridge.demo import clock as clock_module

    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    clock = demo_clock_start(cluster, at=this_hour)

    def due() -> set[str]:  # what the next step is to submit of the trace's work
        return {a.name for a in clock_module._trace_due(clock, clock.now, clock.now + QUARTER)}

    while not due():
        demo_clock_step(clock, QUARTER)
    expected = due()
    at, real, runs = clock.now, clock.real, dict(clock.runs)
    slices, workloads = copy.deepcopy(clock.slices), Workload.objects.count()
    submit_due = clock_module._submit_due

    def submits_then_fails(*args: Any) -> list[int]:
        assert submit_due(*args)  # the step's work is in the database, not committed
        raise RuntimeError("connection to the database lost")

    monkeypatch.setattr(clock_module, "_submit_due", submits_then_fails)
    with pytest.raises(RuntimeError):
        demo_clock_step(clock, QUARTER)
    assert (clock.now, clock.real, Workload.objects.count()) == (at, real, workloads)
    assert (clock.runs, clock.slices) == (runs, slices)  # no GPU-seconds counted twice
    monkeypatch.setattr(clock_module, "_submit_due", submit_due)
    step = demo_clock_step(clock, QUARTER)
    assert step.start == at
    submitted = Workload.objects.filter(pk__in=step.submitted).values_list("name", flat=True)
    assert expected <= set(submitted)


def test_usage_a_meter_could_not_write_is_written_by_a_later_step(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger is unreachable for the first three virtual hours: the demo goes on,
    and once it is back every slice is written, as if it had never failed."""
    from scheduler_bridge.demo import clock as clock_module

    started = timezone.now().replace(minute=0, second=0, microsecond=0)
    clock = demo_clock_start(cluster, at=started)
    running_at_start = list(Workload.objects.filter(state="running").values_list("pk", flat=True))
    before = UsageRecord.objects.filter(workload__isnull=False).count()
    meters = list(clock_module.DEMO_METERS)

    def unreachable(usage: Any) -> int:
        raise ConnectionError("ledger unreachable")

    monkeypatch.setattr(clock_module, "DEMO_METERS", [unreachable])
    run_hours(clock, 3)
    assert UsageRecord.objects.filter(workload__isnull=False).count() == before
    monkeypatch.setattr(clock_module, "DEMO_METERS", meters)
    run_hours(clock, 2)
    metered_s = (5 * 60) // METER_SLICE_S * METER_SLICE_S
    steady = [
        w
        for w in Workload.objects.filter(pk__in=running_at_start, state="running", preemptions=0)
        if not w.elastic
    ]
    assert steady
    rows = UsageRecord.objects.filter(workload__isnull=False)
    for workload in steady:
        held = sum(r.gpu_seconds_allocated for r in rows.filter(workload=workload))
        assert held == workload.gpus * metered_s, workload.name
