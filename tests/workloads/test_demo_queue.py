"""The demo shows ordinary waiting: work that fits its team's quota stands in line, with
a position and a reason naming the GPUs it waits for, and keeps waiting through the
demo's queue ticks while the cluster stays full."""

from __future__ import annotations

import pytest

from scheduler_bridge.gateways import simulated
from scheduler_bridge.management.commands.serve_demo import QueueTicker
from scheduler_bridge.workloads.models import Workload
from tenants.demo import seed_demo

pytestmark = pytest.mark.django_db


def waiting_in_line() -> list[Workload]:
    return list(
        Workload.objects.filter(cluster__name="demo", state="pending", queue_position__isnull=False)
        .select_related("tenant")
        .order_by("queue_position")
    )


def test_after_seeding_and_queue_ticks_two_workloads_wait_in_line_for_borrowed_h100s() -> None:
    simulated.reset()
    seed_demo()
    assert QueueTicker(every_s=60).tick() == 1  # what serve_demo does every 15 s
    assert QueueTicker(every_s=60).tick() == 1
    line = waiting_in_line()
    assert [(w.queue_position, w.tenant.slug, w.name) for w in line] == [
        (1, "speech", "whisper-eval"),
        (2, "search", "ranker-refresh"),
    ]
    for workload in line:
        assert workload.reason_code == "cohort_exhausted"
        assert "h100-80gb" in workload.reason and "nothing to lend" in workload.reason
    # the H100s they wait for are all held by running work
    h100_running = Workload.objects.filter(
        cluster__name="demo", state="running", flavour__name="h100-80gb"
    )
    assert sum(w.gpus for w in h100_running) == 32


def test_seeding_again_adds_no_second_queue() -> None:
    simulated.reset()
    seed_demo()
    names = sorted(Workload.objects.values_list("name", flat=True))
    seed_demo()
    assert sorted(Workload.objects.values_list("name", flat=True)) == names
    assert [w.name for w in waiting_in_line()] == ["whisper-eval", "ranker-refresh"]
