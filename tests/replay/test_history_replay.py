"""``manage.py replay --format history``: the cluster's own finished work, replayed under
the quotas it ran with, waits as long as the database recorded (within one cycle)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from scheduler_bridge.replay.policies import ReplayOptions, replay
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.history_trace import history_trace
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.services import workload_finish
from tests.conftest import Cast
from tests.workloads.conftest import FakeCluster
from tests.workloads.test_queue import submit

pytestmark = pytest.mark.django_db

CYCLE_S = 60.0


class Clock:
    """The time every ``timezone.now()`` of the product reads, moved by the test."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    clock = Clock(timezone.now().replace(microsecond=0) - timedelta(days=2))
    monkeypatch.setattr(timezone, "now", clock)
    yield clock


def busy_day(fake_cluster: FakeCluster, cast: Cast, clock: Clock) -> dict[str, int]:
    """Research's cohort holds 12 of the 16 H100s (globex the other 4). Vision's 8-GPU run
    borrows 2 and leaves speech's 8-GPU run nothing to borrow: speech waits an hour, until
    vision's run finishes, while a small vision job still fits beside it."""
    cluster, gateway = fake_cluster.cluster, fake_cluster.gateway
    ids = {
        "vision-big": submit(cast.member, "vision", 8, name="vision-big").json()["id"],
        "speech-big": submit(cast.platform_admin, "speech", 8, name="speech-big").json()["id"],
    }
    clock.advance(seconds=5)
    admission_cycle(cluster, gateway)
    clock.advance(minutes=10)
    ids["vision-late"] = submit(cast.member, "vision", 4, name="vision-late").json()["id"]
    clock.advance(seconds=20)
    admission_cycle(cluster, gateway)
    states = {name: Workload.objects.get(pk=pk).state for name, pk in ids.items()}
    assert states == {"vision-big": "running", "speech-big": "pending", "vision-late": "running"}
    clock.advance(minutes=50)
    workload_finish(actor=cast.member, workload=Workload.objects.get(pk=ids["vision-big"]))
    clock.advance(seconds=30)
    admission_cycle(cluster, gateway)
    assert Workload.objects.get(pk=ids["speech-big"]).state == "running"
    clock.advance(hours=2)
    for name in ("speech-big", "vision-late"):
        workload_finish(actor=cast.platform_admin, workload=Workload.objects.get(pk=ids[name]))
    clock.advance(minutes=5)
    return ids


def test_a_history_replay_waits_as_long_as_the_cluster_did(
    fake_cluster: FakeCluster, cast: Cast, clock: Clock, priorities: Any
) -> None:
    ids = busy_day(fake_cluster, cast, clock)
    trace = history_trace(cluster=fake_cluster.cluster, days=30)
    assert sorted(j.id for j in trace.jobs) == sorted(f"w{pk}" for pk in ids.values())
    assert trace.cluster.capacity == 16 + 56  # sixteen H100s and the A100's 1g.5gb slices
    assert trace.quotas.guaranteed[("vision", "h100-80gb")] == 6
    recorded = trace.recorded_waits
    speech = f"w{ids['speech-big']}"
    assert recorded[speech] == 5 + 600 + 20 + 3000 + 30
    run = replay("fair-share", trace.jobs, trace.cluster, trace.quotas, ReplayOptions())
    replayed = run.tenant_wait_samples
    assert sorted(replayed) == ["speech", "vision"]
    assert replayed["speech"][0] == pytest.approx(recorded[speech], abs=CYCLE_S)
    assert max(replayed["vision"]) <= CYCLE_S  # both of vision's jobs started at once
    assert run.figures.borrowed_gpu_hours > 0  # vision's borrowed run


def test_the_command_replays_the_history_of_a_named_cluster(
    fake_cluster: FakeCluster, cast: Cast, clock: Clock, priorities: Any
) -> None:
    busy_day(fake_cluster, cast, clock)
    out = StringIO()
    call_command(
        "replay",
        "--format",
        "history",
        "--cluster",
        "gpu-east",
        "--policy",
        "fair-share",
        "--json",
        stdout=out,
        stderr=StringIO(),
    )
    (line,) = [json.loads(text) for text in out.getvalue().splitlines()]
    assert line["jobs"] == 3 and line["jobs_completed"] == 3
    assert line["tenant_waits"]["vision"]["jobs"] == 2
    assert line["trace_source"] == "Trace: the history of cluster gpu-east"


def test_a_cluster_without_finished_work_says_so(fake_cluster: FakeCluster) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no finished workloads in the last 7 days"):
        call_command("replay", "--format", "history", "--cluster", "gpu-east", "--days", "7")
