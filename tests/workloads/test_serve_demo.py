"""The demo's in-process queue tick finishes what an earlier cycle started."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler_bridge.management.commands.serve_demo import QueueTicker
from scheduler_bridge.workloads.cycle import admission_cycle, decide_and_persist
from scheduler_bridge.workloads.models import Workload
from tests.conftest import Cast
from tests.workloads.conftest import FakeCluster
from tests.workloads.test_queue import submit

pytestmark = pytest.mark.django_db


def test_a_tick_admits_the_reclaimer_once_its_victims_stopped(
    fake_cluster: FakeCluster, cast: Cast, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "scheduler_bridge.inventory.connection.gateway_for_cluster",
        lambda cluster: fake_cluster.gateway,
    )
    submit(cast.platform_admin, "speech", 8, name="big")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    owner = submit(cast.lead, "vision", 6, name="owner").json()["id"]
    decide_and_persist(fake_cluster.cluster)  # decides to preempt "big"; nothing applied
    assert Workload.objects.get(pk=owner).reason_code == "preempting"
    assert QueueTicker(every_s=60).tick() == 1  # nobody clicked anything
    assert Workload.objects.get(pk=owner).state == "running"


def test_a_broken_cluster_does_not_stop_the_tick(
    fake_cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(cluster_id: int) -> None:
        raise RuntimeError("cluster gone")

    monkeypatch.setattr("scheduler_bridge.tasks.jobs_sync", unreachable)
    assert QueueTicker(every_s=60).tick() == 0


def test_the_tick_period_must_be_positive() -> None:
    with pytest.raises(CommandError, match="--tick must be a positive number of seconds"):
        call_command("serve_demo", "--tick", "0")
