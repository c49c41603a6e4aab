"""Replaying the GPU-sharing trace (openb): its nodes become shared products, its tasks keep
their shares, a share never over-commits a GPU, and `manage.py replay --format openb` says
what it ran on."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler_bridge.replay.cluster import (
    Product,
    QuotaPlan,
    ReplayCluster,
    ReplayNode,
    node_list_cluster,
    proportional_quotas,
)
from scheduler_bridge.replay.openb import (
    OPENB_ATTRIBUTION,
    openb_cluster,
    openb_jobs,
    read_openb_nodes,
    read_openb_tasks,
)
from scheduler_bridge.replay.policies import ReplayInputError, ReplayOptions, replay
from scheduler_bridge.replay.trace import TraceJob

HOUR = 3600.0
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def shared_cluster(*gpus_per_node: int) -> ReplayCluster:
    return node_list_cluster(
        (ReplayNode(f"n{i}", "T4", gpus) for i, gpus in enumerate(gpus_per_node)), shared=True
    )


def share(id: str, milli: int, at: float = 0.0, hours: float = 1.0, tenant: str = "a") -> TraceJob:
    return TraceJob(id, tenant, at, hours * HOUR, 1, gpu_milli=milli)


def test_the_shipped_node_list_becomes_one_shared_product_per_gpu_model() -> None:
    cluster = openb_cluster(read_openb_nodes(strict=True).rows)
    assert cluster.capacity == 6212 and len(cluster.nodes) == 1213
    assert all(product.shared for product in cluster.products)
    by_model = {p.flavor: p.gpus for p in cluster.products}
    assert by_model["G2"] == 4392 and by_model["A10"] == 2
    assert [p.flavor for p in cluster.products][0] == "G2"  # the most GPUs first
    assert cluster.largest_node("T4") == 4 and cluster.largest_node("P100") == 2


def test_a_cut_node_list_keeps_real_node_shapes_and_the_asked_capacity() -> None:
    full = openb_cluster(read_openb_nodes().rows)
    cut = full.scaled(48)
    assert cut.capacity == 48 == sum(node.gpus for node in cut.nodes)
    original = {node.name: node for node in full.nodes}
    for node in cut.nodes:
        assert node.gpus <= original[node.name].gpus
        assert node.flavor == original[node.name].flavor
    for product in cut.products:
        assert product.shared
        assert product.gpus == sum(n.gpus for n in cut.nodes if n.flavor == product.flavor)


def test_tasks_become_jobs_that_keep_their_share_and_their_qos_as_tenant() -> None:
    cluster = openb_cluster(read_openb_nodes().rows)
    jobs = {job.id: job for job in openb_jobs(read_openb_tasks().rows, cluster)}
    assert len(jobs) == 3528  # the GPU tasks, less the one that ran for no time
    first = jobs["openb-pod-0001"]
    assert (first.tenant, first.gpus, first.gpu_milli, first.gpu_equivalents) == (
        "LS",
        1,
        460,
        0.46,
    )
    eight = next(job for job in jobs.values() if job.gpus == 8)
    assert eight.gpu_milli is None and eight.gpu_equivalents == 8.0
    assert first.flavors == tuple(p.flavor for p in cluster.products)  # any model


def test_a_task_naming_gpu_models_runs_only_on_them(tmp_path: Path) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text(
        HEADER
        + "p1,1,1,1,300,V100M16|T4,BE,Running,10,70,10\n"
        + "p2,1,1,1,300,,BE,Running,10,10,10\n"  # ran for no time: left out
    )
    cluster = openb_cluster(read_openb_nodes().rows)
    (job,) = openb_jobs(read_openb_tasks(pods, strict=True).rows, cluster)
    assert job.flavors == ("T4", "V100M16")  # in the cluster's order: more GPUs first
    assert (job.tenant, job.run_time_s) == ("BE", 60.0)


def test_shares_of_one_gpu_run_together_and_never_over_commit_it() -> None:
    cluster = shared_cluster(1)
    jobs = [share("j1", 500), share("j2", 500), share("j3", 500)]
    quotas = proportional_quotas(["a"], {"a": 1}, cluster)
    run = replay("fair-share", jobs, cluster, quotas, ReplayOptions())
    figures = run.figures
    # two halves fill the GPU at once; the third waits for one to finish
    assert figures.jobs_completed == 3
    assert figures.wait_p50_s == 0.0 and figures.tenant_waits["a"].jobs == 3
    assert HOUR <= max(run.tenant_wait_samples["a"]) <= HOUR + 120
    assert figures.allocated_gpu_hours == 1.5  # three half-GPU hours
    assert figures.peak_utilization == 1.0


def test_whole_gpus_of_a_shared_product_stay_on_one_node() -> None:
    cluster = shared_cluster(2, 2)
    quotas = proportional_quotas(["a"], {"a": 1}, cluster)
    two = TraceJob("pair", "a", 0.0, HOUR, 2)
    figures = replay("fair-share", [two], cluster, quotas).figures
    assert figures.jobs_completed == 1 and figures.allocated_gpu_hours == 2.0
    four = TraceJob("four", "a", 0.0, HOUR, 4)
    with pytest.raises(ReplayInputError, match=r"one node of 2 T4 GPUs .* \(four, 4 GPUs\)"):
        replay("fair-share", [four], cluster, quotas)


def test_a_share_on_a_product_that_is_not_shared_is_refused() -> None:
    cluster = ReplayCluster((Product("gpu", 8),))
    with pytest.raises(ReplayInputError, match="500 thousandths of a GPU, but gpu is not shared"):
        replay("fifo", [share("j1", 500)], cluster, QuotaPlan({}))


def test_a_guarantee_of_shares_is_reclaimed_from_a_borrower() -> None:
    cluster = shared_cluster(1)
    quotas = QuotaPlan({("owner", "T4"): 1, ("borrower", "T4"): 0})
    jobs = [
        share("b1", 600, at=0.0, hours=10, tenant="borrower"),
        share("o1", 800, at=600.0, hours=1, tenant="owner"),
    ]
    run = replay("fair-share", jobs, cluster, quotas, ReplayOptions())
    assert run.figures.preemptions == 1
    assert max(run.tenant_wait_samples["owner"]) <= 120  # within a cycle or two
    static = replay("static", jobs, cluster, quotas, ReplayOptions())
    assert static.figures.never_started == 1  # the borrower may not borrow at all


def test_the_same_trace_replays_to_the_same_figures() -> None:
    cluster = openb_cluster(read_openb_nodes().rows).scaled(24)
    jobs = openb_jobs(read_openb_tasks().rows, cluster, limit=400)
    quotas = proportional_quotas(sorted({j.tenant for j in jobs}), {"LS": 2, "BE": 1}, cluster)
    for packing in ("fgd", "best-fit"):
        options = ReplayOptions(share_packing=packing)
        first = replay("fair-share", jobs, cluster, quotas, options).figures.as_json()
        again = replay("fair-share", jobs, cluster, quotas, options).figures.as_json()
        first.pop("wall_s"), again.pop("wall_s")
        assert first == again


def test_the_replay_command_runs_the_shipped_sharing_trace() -> None:
    out = StringIO()
    call_command(
        "replay",
        "--format",
        "openb",
        "--capacity",
        "32",
        "--limit",
        "300",
        "--policy",
        "fair-share",
        "--json",
        stdout=out,
        stderr=StringIO(),
    )
    (line,) = out.getvalue().splitlines()
    figures = json.loads(line)
    assert figures["scenario"] == "fair-share" and figures["trace_source"] == OPENB_ATTRIBUTION
    assert figures["jobs"] == 300 and figures["capacity_gpus"] == 32
    assert figures["jobs_completed"] + figures["never_started"] <= 300
    assert set(figures["tenant_waits"]) <= {"LS", "BE", "Burstable", "Guaranteed"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--products", "p.csv"], "takes its products from the node list"),
        (["--nodes", "/nonexistent.csv"], "/nonexistent.csv: no such file"),
        (["--capacity", "4", "--limit", "4000"], "smaller than the largest job"),
    ],
)
def test_the_openb_replay_refuses_bad_arguments_with_a_clear_message(
    arguments: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        call_command(
            "replay", "--format", "openb", *arguments, stdout=StringIO(), stderr=StringIO()
        )


def test_best_effort_shares_fill_idle_gpus_and_are_taken_back_first() -> None:
    cluster = openb_cluster(read_openb_nodes().rows)
    jobs = openb_jobs(read_openb_tasks().rows, cluster)
    assert all(j.fills_idle == (j.tenant == "BE" and j.gpu_milli is not None) for j in jobs)
    assert any(j.fills_idle for j in jobs)
    # on one GPU, the owner's own work may take back its best-effort share at once
    one = shared_cluster(1)
    quotas = QuotaPlan({("LS", "T4"): 1})
    filler = TraceJob("be", "LS", 0.0, 10 * HOUR, 1, gpu_milli=500, fills_idle=True)
    whole = TraceJob("ls", "LS", 600.0, HOUR, 1)
    run = replay("fair-share", [filler, whole], one, quotas)
    assert run.figures.preemptions == 1
    assert max(run.tenant_wait_samples["LS"]) <= 120  # the whole GPU started within a cycle or two
