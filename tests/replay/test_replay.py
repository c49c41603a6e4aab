"""Trace replay: the trace is read faithfully and each policy does what it claims."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler_bridge.replay.policies import guarantees, jain, replay
from scheduler_bridge.replay.trace import (
    PHILLY_ATTRIBUTION,
    PHILLY_JOBS,
    PHILLY_VC_NODES,
    TraceJob,
    read_jobs,
    read_vc_nodes,
)


def test_the_shipped_philly_slice_is_whole_and_reads_in_submit_order() -> None:
    every = read_jobs(PHILLY_JOBS)
    assert len(every) == 9376
    assert len({job.tenant for job in every}) == 12
    assert round(sum(job.run_time_s * job.gpus for job in every) / 3600) == 88165
    jobs = read_jobs(PHILLY_JOBS, limit=200)
    assert len(jobs) == 200
    assert jobs[0].tenant == "11cb48" and jobs[0].gpus == 1 and jobs[0].run_time_s == 67.0
    assert all(a.submitted_at <= b.submitted_at for a, b in zip(jobs, jobs[1:], strict=False))


def test_the_shipped_node_counts_give_eleven_virtual_clusters_352_nodes() -> None:
    nodes = read_vc_nodes(PHILLY_VC_NODES)
    assert len(nodes) == 11 and sum(nodes.values()) == 352
    assert "51b7ef" not in nodes  # the twelfth tenant of the slice has no guarantee


def test_guarantees_split_capacity_by_node_count_exactly() -> None:
    shares = guarantees(["a", "b", "c"], {"a": 2, "b": 1}, 10)
    assert shares == {"a": 7, "b": 3, "c": 0}
    assert sum(shares.values()) == 10


def test_jain_index_is_one_when_everyone_is_treated_alike() -> None:
    assert jain([2.0, 2.0, 2.0]) == 1.0
    assert jain([1.0, 0.0]) == 0.5


def burst() -> list[TraceJob]:
    """Team b floods the cluster; team a (the owner of most of it) arrives later."""
    jobs = [TraceJob(f"b{i}", "b", float(i), 3600.0, 8) for i in range(8)]
    jobs.append(TraceJob("a0", "a", 600.0, 600.0, 8))
    return jobs


def test_static_quotas_leave_gpus_idle_while_work_waits() -> None:
    static = replay("static", burst(), {"a": 3, "b": 1}, nodes=4)
    shared = replay("fair-share", burst(), {"a": 3, "b": 1}, nodes=4)
    assert static.utilization < shared.utilization


def test_fair_share_gives_the_owner_its_guarantee_back_at_once() -> None:
    fifo = replay("fifo", burst(), {"a": 3, "b": 1}, nodes=4)
    shared = replay("fair-share", burst(), {"a": 3, "b": 1}, nodes=4)
    # one borrower of b is preempted so a starts at once instead of queueing behind b's
    # burst: both teams then see about the same slowdown
    assert shared.preemptions == 1 and fifo.preemptions == 0
    assert shared.jain_fairness > 0.95 > fifo.jain_fairness


def test_a_minimum_run_lets_young_borrowed_work_finish_before_the_owner_reclaims() -> None:
    """b's jobs started at 0..7 s; a arrives at 600 s. With a 2-hour minimum run b's
    one-hour jobs all finish: no preemption, and a waits until one does."""
    protected = replay("fair-share", burst(), {"a": 3, "b": 1}, nodes=4, reclaim_min_run_s=7200)
    assert protected.preemptions == 0
    at_once = replay("fair-share", burst(), {"a": 3, "b": 1}, nodes=4)
    assert protected.wait_mean_s > at_once.wait_mean_s


def test_elastic_jobs_shrink_instead_of_being_preempted_and_waste_less() -> None:
    """b's burst borrows a's guarantee; when a arrives, fair share preempts one of b's
    jobs and throws its progress away, while with elastic jobs b's borrowers shrink
    (and keep their checkpointed progress), so less GPU time is wasted."""
    # four 8-GPU jobs of b fill the 32 GPUs (elastic: cores of 4 that grow to 8)
    jobs = [TraceJob(f"b{i}", "b", float(i), 3600.0, 8) for i in range(4)]
    jobs.append(TraceJob("a0", "a", 600.0, 600.0, 8))
    shared = replay("fair-share", jobs, {"a": 3, "b": 1}, nodes=4)
    elastic = replay("fair-share-elastic", jobs, {"a": 3, "b": 1}, nodes=4)
    assert shared.preemptions >= 1 and shared.wasted_gpu_hours > 0
    assert elastic.shrinks >= 1 and elastic.preemptions == 0
    assert elastic.wasted_gpu_hours < shared.wasted_gpu_hours
    assert elastic.goodput >= shared.goodput


@pytest.mark.django_db
def test_the_replay_command_prints_json_lines_and_refuses_bad_arguments() -> None:
    out = StringIO()
    call_command("replay", "--limit", "300", "--nodes", "8", "--json", stdout=out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["policy"] for line in lines] == [
        "static",
        "fifo",
        "fair-share",
        "fair-share-elastic",
    ]
    assert all({"goodput", "wasted_gpu_hours"} <= line.keys() for line in lines)
    assert all(line["jobs"] == 300 and line["trace_source"] == PHILLY_ATTRIBUTION for line in lines)
    with pytest.raises(CommandError, match="does not exist"):
        call_command("replay", "--trace", "/nonexistent.csv")
    with pytest.raises(CommandError, match="--reclaim-min-run must be 0 or more seconds"):
        call_command("replay", "--reclaim-min-run", "-5")
