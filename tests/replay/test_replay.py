"""Trace replay: the trace is read faithfully, each policy does what it claims, and the
figures add up (docs/replay.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler_bridge.replay.cluster import (
    QuotaPlan,
    ReplayCluster,
    one_product,
    proportional_quotas,
    read_products,
    read_quotas,
    split,
)
from scheduler_bridge.replay.figures import entitlement, jain, percentile
from scheduler_bridge.replay.policies import (
    POLICIES,
    ReplayFigures,
    ReplayInputError,
    ReplayOptions,
    pod_sets_for,
    replay,
    replay_policies,
)
from scheduler_bridge.replay.trace import (
    PHILLY_ATTRIBUTION,
    PHILLY_JOBS,
    PHILLY_VC_NODES,
    TraceError,
    TraceJob,
    read_jobs,
    read_trace,
    read_vc_nodes,
)


def run(
    policy: str,
    jobs: Sequence[TraceJob],
    shares: dict[str, int],
    gpus: int,
    **options: float,
) -> ReplayFigures:
    cluster = one_product(gpus)
    tenants = sorted({j.tenant for j in jobs})
    quotas = proportional_quotas(tenants, shares, cluster)
    static = None
    if policy != "static":
        static = replay("static", jobs, cluster, quotas, ReplayOptions()).figures
    return replay(
        policy,
        jobs,
        cluster,
        quotas,
        ReplayOptions(**options),  # type: ignore[arg-type]
        static_owner_wait_s=static.owner_wait_mean_s if static else None,
    ).figures


# ------------------------------------------------------------------ the shipped trace
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


# ------------------------------------------------------------------ reading and bad input
def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_generic_csv_reads_optional_columns_and_iso_or_epoch_times(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "t.csv",
        "submit_time,duration_s,gpus,tenant,flavor,priority,min_gpus,checkpoint_s\n"
        "2026-11-01T10:00:00,3600,8,vision,h100,5,4,600\n"
        "1761991200,60,1,nlp,,,,\n",
    )
    jobs = read_trace(path, "csv").jobs
    assert [j.tenant for j in jobs] == ["nlp", "vision"]  # submit order
    vision = jobs[1]
    assert (vision.gpus, vision.flavor, vision.priority) == (8, "h100", 5)
    assert (vision.min_gpus, vision.checkpoint_s) == (4, 600.0)
    assert jobs[0].flavor is None and jobs[0].min_gpus is None


@pytest.mark.parametrize(
    ("row", "field", "words"),
    [
        ("2026-11-01 10:00,,8,vision", "duration_s", "is empty"),
        ("2026-11-01 10:00,-5,8,vision", "duration_s", "must be more than 0"),
        ("2026-11-01 10:00,60,0,vision", "gpus", "must be at least 1"),
        ("yesterday,60,1,vision", "submit_time", "is not a time"),
        ("2026-11-01 10:00,60,1.5,vision", "gpus", "not a whole number"),
        ("2026-11-01 10:00,60,1,", "tenant", "is empty"),
    ],
)
def test_a_bad_row_names_the_file_the_line_and_the_field(
    tmp_path: Path, row: str, field: str, words: str
) -> None:
    path = write(tmp_path, "bad.csv", f"submit_time,duration_s,gpus,tenant\n0,60,1,a\n{row}\n")
    with pytest.raises(TraceError) as raised:
        read_trace(path, "csv", strict=True)
    message = str(raised.value)
    assert str(path) in message and "line 3" in message and f"field '{field}'" in message
    assert words in message
    # without --strict the row is skipped and counted, the good one kept
    read = read_trace(path, "csv")
    assert len(read.jobs) == 1 and len(read.skipped) == 1 and read.skipped[0].line == 3


def test_a_file_without_the_columns_says_which_are_missing(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "when,how_long,gpus\n1,2,3\n")
    with pytest.raises(TraceError, match="lacks submit_time, duration_s, tenant"):
        read_trace(path, "csv")


def test_a_quota_file_naming_an_unknown_tenant_is_refused_before_the_run(tmp_path: Path) -> None:
    path = write(tmp_path, "q.csv", "tenant,guaranteed\nvision,4\nmarketing,4\n")
    with pytest.raises(TraceError, match=r"line 3, field 'tenant': 'marketing' submits nothing"):
        read_quotas(path, one_product(8), ["nlp", "vision"])
    too_much = write(tmp_path, "q2.csv", "tenant,guaranteed\nvision,6\nnlp,6\n")
    with pytest.raises(TraceError, match="add up to 12 GPUs, more than the 8"):
        read_quotas(too_much, one_product(8), ["nlp", "vision"])


def test_quota_and_product_files_set_guarantees_weights_and_flavours(tmp_path: Path) -> None:
    products = read_products(
        write(tmp_path, "p.csv", "flavor,gpus,gpus_per_node\nh100,16,8\na100,8,4\n")
    )
    assert products.capacity == 24 and products.product("a100") is not None
    quotas = read_quotas(
        write(tmp_path, "q.csv", "tenant,guaranteed,flavor,weight\nv,8,h100,2\nv,4,a100,\n"),
        products,
        ["v", "n"],
    )
    assert quotas.guaranteed == {("v", "h100"): 8, ("v", "a100"): 4}
    assert quotas.weights == {"v": 2.0}


def test_a_capacity_smaller_than_the_largest_job_is_refused_before_the_run() -> None:
    jobs = [TraceJob("j1", "a", 0.0, 60.0, 4), TraceJob("j2", "a", 1.0, 60.0, 12)]
    with pytest.raises(ReplayInputError, match=r"smaller than the largest job \(j2, 12 GPUs\)"):
        replay("fifo", jobs, one_product(8), QuotaPlan({}))


# ------------------------------------------------------------------ pieces
def test_a_job_larger_than_a_node_runs_as_the_fewest_pods_holding_exactly_its_gpus() -> None:
    sets = pod_sets_for(12, 8, "gpu")
    assert [(s.count, s.gpus_per_pod) for s in sets] == [(1, 8), (1, 4)]
    assert sum(s.count * s.gpus_per_pod for s in pod_sets_for(24, 8, "gpu")) == 24
    assert len(pod_sets_for(24, 8, "gpu")) == 1  # three full nodes


def test_twelve_gpus_hold_twelve_not_sixteen() -> None:
    jobs = [TraceJob("j1", "a", 0.0, 3600.0, 12), TraceJob("j2", "b", 0.0, 3600.0, 4)]
    figures = run("fifo", jobs, {"a": 1, "b": 1}, 16)
    # both fit side by side on two 8-GPU nodes: 12 + 4 = 16
    assert figures.wait_mean_s == 0.0 and figures.allocated_gpu_hours == 16.0


def test_split_is_exact_and_gives_remainders_to_the_largest_fractions() -> None:
    assert split(10, {"a": 2, "b": 1, "c": 0}) == {"a": 7, "b": 3, "c": 0}
    assert sum(split(320, {str(i): i + 1 for i in range(7)}).values()) == 320


def test_jain_and_percentiles() -> None:
    assert jain([2.0, 2.0, 2.0]) == 1.0
    assert jain([1.0, 0.0]) == 0.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0


def test_entitlement_is_the_guarantee_then_an_even_share_of_what_others_leave() -> None:
    # a owns 6 of 10 but wants 2; b (owns 4) wants 9; c (owns nothing) wants 9
    given = entitlement(10.0, {"a": 2.0, "b": 9.0, "c": 9.0}, {"a": 6.0, "b": 4.0}, {})
    assert given == {"a": 2.0, "b": 6.0, "c": 2.0}
    weighted = entitlement(9.0, {"b": 9.0, "c": 9.0}, {}, {"b": 2.0})
    assert weighted == {"b": 6.0, "c": 3.0}


# ------------------------------------------------------------------ policies
def burst() -> list[TraceJob]:
    """Team b floods the cluster; team a (the owner of most of it) arrives later."""
    jobs = [TraceJob(f"b{i}", "b", float(i), 3600.0, 8) for i in range(8)]
    jobs.append(TraceJob("a0", "a", 600.0, 600.0, 8))
    return jobs


def test_static_quotas_leave_gpus_idle_while_work_waits() -> None:
    static = run("static", burst(), {"a": 3, "b": 1}, 32)
    shared = run("fair-share", burst(), {"a": 3, "b": 1}, 32)
    assert static.utilization < shared.utilization
    assert static.borrowed_gpu_hours == 0.0 and shared.borrowed_gpu_hours > 0


def test_fair_share_gives_the_owner_its_guarantee_back_at_once() -> None:
    fifo = run("fifo", burst(), {"a": 3, "b": 1}, 32)
    shared = run("fair-share", burst(), {"a": 3, "b": 1}, 32)
    # one borrower of b is preempted so a starts at once instead of queueing behind b's burst
    assert shared.preemptions == 1 and fifo.preemptions == 0
    # a starts one cycle (60 s) later, once the borrower is gone; under FIFO it waits for
    # the first of b's one-hour jobs to end
    assert shared.tenant_waits["a"].mean_s <= 60.0
    assert fifo.tenant_waits["a"].mean_s >= 3000.0
    assert shared.owner_wait_ratio is not None and fifo.owner_wait_ratio is not None
    assert shared.owner_wait_ratio < fifo.owner_wait_ratio
    assert shared.share_fairness > fifo.share_fairness


def test_a_minimum_run_lets_young_borrowed_work_finish_before_the_owner_reclaims() -> None:
    """b's jobs started at 0..7 s; a arrives at 600 s. With a 2-hour minimum run b's
    one-hour jobs all finish: no preemption, and a waits until one does."""
    protected = run("fair-share", burst(), {"a": 3, "b": 1}, 32, reclaim_min_run_s=7200)
    assert protected.preemptions == 0
    at_once = run("fair-share", burst(), {"a": 3, "b": 1}, 32)
    assert protected.wait_mean_s > at_once.wait_mean_s


def test_a_job_preempted_twice_counts_twice_as_a_preemption_and_once_as_a_job() -> None:
    """b borrows with four one-hour jobs; each of a's two short jobs takes GPUs back. The
    second finds the same job of b borrowing again (re-admitted when a's first ended, so
    the most recently admitted): two preemptions of one job."""
    jobs = [TraceJob(f"b{i}", "b", float(i), 3600.0, 8) for i in range(4)]
    jobs += [TraceJob("a0", "a", 600.0, 600.0, 8), TraceJob("a1", "a", 1800.0, 600.0, 8)]
    shared = run("fair-share", jobs, {"a": 2, "b": 1}, 32)
    assert shared.preemptions == 2
    assert shared.preempted_jobs == 1 and shared.most_preemptions_of_a_job == 2
    fifo = run("fifo", jobs, {"a": 2, "b": 1}, 32)
    assert (fifo.preemptions, fifo.preempted_jobs, fifo.most_preemptions_of_a_job) == (0, 0, 0)


def test_elastic_jobs_shrink_instead_of_being_preempted_and_waste_less() -> None:
    jobs = [TraceJob(f"b{i}", "b", float(i), 3600.0, 8) for i in range(4)]
    jobs.append(TraceJob("a0", "a", 600.0, 600.0, 8))
    shared = run("fair-share", jobs, {"a": 3, "b": 1}, 32)
    elastic = run("fair-share-elastic", jobs, {"a": 3, "b": 1}, 32)
    assert shared.preemptions >= 1 and shared.wasted_gpu_hours > 0
    assert elastic.shrinks >= 1 and elastic.preemptions == 0
    assert elastic.wasted_gpu_hours < shared.wasted_gpu_hours


# ------------------------------------------------------------------ properties on the trace
@pytest.fixture(scope="module")
def philly_runs() -> dict[str, ReplayFigures]:
    jobs = read_jobs(PHILLY_JOBS, limit=1500)
    cluster = one_product(64)
    quotas = proportional_quotas(
        sorted({j.tenant for j in jobs}), read_vc_nodes(PHILLY_VC_NODES), cluster
    )
    runs = replay_policies(POLICIES, jobs, cluster, quotas)
    return {r.figures.policy: r.figures for r in runs}


def test_goodput_and_waste_add_up_to_what_was_allocated(
    philly_runs: dict[str, ReplayFigures],
) -> None:
    jobs = read_jobs(PHILLY_JOBS, limit=1500)
    trace_gpu_hours = sum(j.gpus * j.run_time_s for j in jobs) / 3600
    for figures in philly_runs.values():
        assert figures.goodput + figures.wasted_gpu_hours == pytest.approx(
            figures.allocated_gpu_hours, abs=0.2
        )
        if figures.policy != "static":  # every job completes; the work served is the trace's
            assert figures.jobs_completed == figures.jobs == 1500
            assert figures.goodput == pytest.approx(trace_gpu_hours, abs=0.2)
    assert philly_runs["fair-share"].wasted_gpu_hours > 0  # reclaim threw work away


def test_no_policy_ever_allocates_more_than_the_capacity(
    philly_runs: dict[str, ReplayFigures],
) -> None:
    for figures in philly_runs.values():
        assert 0 < figures.peak_utilization <= 1.0
    assert philly_runs["fifo"].peak_utilization == 1.0  # the trace does fill the cluster


def test_under_static_slices_nobody_holds_more_than_its_guarantee(
    philly_runs: dict[str, ReplayFigures],
) -> None:
    static = philly_runs["static"]
    assert static.borrowed_gpu_hours == 0.0
    assert static.never_started > 0  # 51b7ef has no guarantee and never runs
    assert philly_runs["fair-share"].borrowed_gpu_hours > 0


def test_fair_share_owners_wait_less_than_with_static_slices(
    philly_runs: dict[str, ReplayFigures],
) -> None:
    ratio = philly_runs["fair-share"].owner_wait_ratio
    assert ratio is not None and ratio < 1.0
    assert philly_runs["static"].owner_wait_ratio == 1.0


def test_the_same_seed_gives_the_same_figures_every_time() -> None:
    jobs = [TraceJob(f"j{i}", "ab"[i % 2], float(i // 4), 900.0, 1 + i % 8) for i in range(120)]
    cluster: ReplayCluster = one_product(16)
    quotas = proportional_quotas(["a", "b"], {"a": 1, "b": 1}, cluster)

    def figures(seed: int) -> list[dict[str, object]]:
        runs = replay_policies(POLICIES, jobs, cluster, quotas, ReplayOptions(seed=seed))
        return [{**r.figures.as_json(), "wall_s": 0} for r in runs]

    assert figures(7) == figures(7)


# ------------------------------------------------------------------ the command
@pytest.mark.django_db
def test_the_replay_command_prints_json_lines_and_a_plot(tmp_path: Path) -> None:
    out = StringIO()
    plot = tmp_path / "replay.html"
    call_command(
        "replay", "--limit", "300", "--capacity", "64", "--json", "--plot", str(plot), stdout=out
    )
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["policy"] for line in lines] == list(POLICIES)
    required = {
        "utilization",
        "goodput",
        "wasted_gpu_hours",
        "borrowed_gpu_hours",
        "wait_mean_s",
        "wait_p50_s",
        "wait_p95_s",
        "wait_p99_s",
        "owner_wait_ratio",
        "share_fairness",
        "preemptions",
        "preempted_jobs",
        "most_preemptions_of_a_job",
        "makespan_h",
        "jobs_completed",
        "tenant_waits",
    }
    assert all(required <= line.keys() for line in lines)
    assert all(line["preempted_jobs"] <= line["preemptions"] for line in lines)
    assert all(line["jobs"] == 300 and line["trace_source"] == PHILLY_ATTRIBUTION for line in lines)
    page = plot.read_text(encoding="utf-8")
    assert "Utilisation over time" in page and "Holdings against guarantee" in page
    # self-contained: plotly.js inlined, nothing fetched from elsewhere
    assert 'src="http' not in page and "Plotly.newPlot" in page and len(page) > 1_000_000
    assert PHILLY_ATTRIBUTION in page


@pytest.mark.django_db
def test_the_replay_command_reads_a_csv_with_its_own_quotas(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "t.csv",
        "submit_time,duration_s,gpus,tenant\n0,3600,8,a\n10,3600,8,b\n20,60,4,a\nnope,1,1,a\n",
    )
    quotas = write(tmp_path, "q.csv", "tenant,guaranteed\na,8\nb,8\n")
    out, err = StringIO(), StringIO()
    call_command(
        "replay",
        "--format",
        "csv",
        "--trace",
        str(trace),
        "--capacity",
        "16",
        "--quotas",
        str(quotas),
        "--policy",
        "fair-share",
        "--json",
        stdout=out,
        stderr=err,
    )
    (line,) = [json.loads(text) for text in out.getvalue().splitlines()]
    assert line["jobs"] == 3 and line["jobs_completed"] == 3
    with pytest.raises(CommandError, match=r"t.csv, line 5, field 'submit_time'"):
        call_command(
            "replay", "--format", "csv", "--trace", str(trace), "--capacity", "16", "--strict"
        )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--trace", "/nonexistent.csv", "--capacity", "8"], "/nonexistent.csv: no such file"),
        (["--reclaim-min-run", "-5", "--capacity", "8"], "--reclaim-min-run must be 0 or more"),
        (["--reclaim-wait", "-1", "--capacity", "8"], "--reclaim-wait must be 0 or more"),
        (["--limit", "50"], "Give --capacity GPUS"),
        (["--capacity", "0"], "--capacity must be at least 1 GPU"),
        (["--format", "csv", "--capacity", "8"], "--format csv needs --trace PATH"),
        (["--capacity", "16", "--limit", "9000"], "smaller than the largest job"),
        (["--format", "history", "--cluster", "nowhere"], "Name the cluster to replay"),
    ],
)
def test_the_replay_command_refuses_bad_arguments_with_a_clear_message(
    arguments: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("replay", *arguments, stdout=StringIO(), stderr=StringIO())


def test_priority_preemption_lets_a_tenants_urgent_job_stop_its_own_batch_job() -> None:
    """a holds the whole cluster with a 2-hour batch job; its urgent job arrives at 600 s.
    With priority preemption (as the queue runs with TIDEGATE_PRIORITY_PREEMPTION) the
    urgent job stops the batch job at once; without, it waits for the batch job to end."""
    jobs = [
        TraceJob("batch", "a", 0.0, 7200.0, 8, priority=0),
        TraceJob("urgent", "a", 600.0, 600.0, 8, priority=10),
    ]
    waiting = run("fair-share", jobs, {"a": 1}, 8)
    preempting = run("fair-share", jobs, {"a": 1}, 8, priority_preemption=True)
    assert waiting.preemptions == 0 and waiting.wait_mean_s >= 3000.0
    assert preempting.preemptions == 1
    assert preempting.tenant_waits["a"].p99_s <= 600.0  # the urgent job within a cycle


@pytest.mark.parametrize(("flag", "preemptions"), [((), 0), (("--priority-preemption",), 1)])
def test_the_replay_command_preempts_by_priority_when_asked(
    tmp_path: Path, flag: tuple[str, ...], preemptions: int
) -> None:
    trace = write(
        tmp_path,
        "t.csv",
        "submit_time,duration_s,gpus,tenant,priority\n0,7200,8,a,0\n600,600,8,a,10\n",
    )
    out = StringIO()
    call_command(
        "replay",
        "--format",
        "csv",
        "--trace",
        str(trace),
        "--capacity",
        "8",
        "--policy",
        "fair-share",
        "--json",
        *flag,
        stdout=out,
        stderr=StringIO(),
    )
    (line,) = [json.loads(text) for text in out.getvalue().splitlines()]
    assert line["preemptions"] == preemptions and line["jobs_completed"] == 2
