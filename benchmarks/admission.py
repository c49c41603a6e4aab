"""Admission engine benchmarks; one JSON line per scenario on stdout (docs/benchmarks.md).

``kueue-baseline`` - Kueue's scheduler performance test "baseline" in Tidegate's terms:
30 tenants in 5 cohorts of 6, each guaranteed 20 GPUs with a borrowing limit of 100; per
tenant 350 small (1 GPU), 100 medium (5 GPUs) and 50 large (20 GPUs) workloads, 15,000
in all, on 75 nodes of 8 GPUs (600 GPUs, exactly the guarantees). Kueue's test uses
sub-second fake run times; Tidegate replays minutes-scale GPU jobs in virtual time
instead: run times are log-normal (sigma 0.5) with medians of 4, 10 and 20 minutes for
small, medium and large, clipped to 30 s .. 2 h, from ``random.Random(20250101)``; each
job declares a max run time of twice its run time rounded up to 10 minutes (what a user
would type; it enables backfill around reservations). Submissions are spread over the
first 10 minutes. Medium jobs are gangs of 5 x 1 GPU, large ones gangs of 5 x 4 GPUs.
A cycle runs at most every 10 s of virtual time when something changed, and every cycle
also explains every pending workload (position and reason), as the product does.

``deep-queue`` - one cluster, 2,000 teams in 20 departments, 50,000 pending workloads
of mixed shapes (1-8 GPUs, one-node and NVLink-domain gangs, H100 or A100 or either)
on a busy cluster (filled by the engine, then 15 % of the running work ends): a full
cycle with a fresh engine; the follow-up cycle (reclaimers start once their victims have
stopped) and one more to let the queue settle; then, after one running workload
finishes, an incremental cycle with the warm engine. That round runs five times
(``BENCH_ADMISSION_REPEATS``), each with a fresh engine; each round's incremental cycle
follows another workload finishing (the first round's is the same as with one round).
``full_cycle_s``, ``follow_up_cycle_s`` and ``incremental_cycle_s`` are the medians of
the rounds' wall-clock times: one timing on a busy machine says little. Beside them, for
the full and the incremental cycle, the minimum (``*_min_s``) and the median of the
process's CPU time (``*_cpu_s``). Every round's full and follow-up cycles must admit and
preempt the same workloads, or the scenario fails. For the first round's incremental
cycle it reports
``tries_incremental`` (workloads tried in the main pass, each standing for its group),
``groups_failed_at_start_incremental`` (groups the freed GPUs cannot help, refused
before the main pass) and ``groups_skipped_incremental`` (remembered failures).

``elastic`` - the ``deep-queue`` shape with a third of the workloads elastic: a third
of the running work grows up to 2 elastic pods above its core before the measured
cycle, and a third of the pending workloads may grow by up to 3 pods above what they
ask for (their core). Same figures as ``deep-queue`` plus ``shrinks`` and ``grows``
(elastic pods taken back and started in the full cycle).

``persisted`` needs PostgreSQL; see ``persisted`` below.

Each line says which ``engine`` it timed: ``compiled`` (mypyc's build of the current
sources, ``make native``) or ``interpreted`` (none built, or ``TIDEGATE_ENGINE=python``).

Figures are measured, never asserted. ``decisions_per_s`` counts one decision per
workload per cycle - admitted, preempted, or left pending with an explained position and
reason - divided by the engine's own time on one core.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scheduler_bridge.admission import (  # noqa: E402
    AdmissionEngine,
    ClusterSnapshot,
    CycleResult,
    ElasticPod,
    Flavour,
    Node,
    PendingWorkload,
    PodSet,
    Quota,
    Tenant,
    Topology,
    _native,
    core_of,
    elastic_changes,
    elastic_parts,
)
from scheduler_bridge.admission.elastic import parse_pod_id  # noqa: E402
from scheduler_bridge.admission.simulator import SimJob, Simulator, apply_result  # noqa: E402

SEED = 20250101
REPEATS_VARIABLE = "BENCH_ADMISSION_REPEATS"  # rounds of the deep-queue scenarios (5)


def repeats_from_environment() -> int:
    raw = os.environ.get(REPEATS_VARIABLE, "").strip() or "5"
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise SystemExit(
            f"{REPEATS_VARIABLE} must be a whole number of rounds, 1 or more; got {raw!r}"
        )
    return int(raw)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def emit(figures: dict[str, Any]) -> None:
    # which engine was timed: mypyc's build of these sources, or the interpreter
    figures["engine"] = "compiled" if _native.active else "interpreted"
    print(json.dumps(figures), flush=True)


# ---------------------------------------------------------------------- kueue-baseline
SIZES = {  # class: (count per tenant, pods, GPUs per pod, median run time in minutes)
    "small": (350, 1, 1, 4.0),
    "medium": (100, 5, 1, 10.0),
    "large": (50, 5, 4, 20.0),
}


def _baseline_jobs(tenants: list[str], rng: random.Random) -> tuple[list[SimJob], dict[str, str]]:
    jobs: list[SimJob] = []
    size_of: dict[str, str] = {}
    for tenant in tenants:
        for size, (count, pods, per_pod, median_min) in SIZES.items():
            for i in range(count):
                run = rng.lognormvariate(math.log(median_min * 60), 0.5)
                run = min(max(run, 30.0), 7200.0)
                wid = f"{tenant}-{size}-{i:03d}"
                size_of[wid] = size
                workload = PendingWorkload(
                    id=wid,
                    tenant_id=tenant,
                    pod_sets=(PodSet(pods, per_pod, ("gpu",)),),
                    submitted_at=rng.uniform(0.0, 600.0),
                    gang=pods > 1,
                    max_run_time_s=math.ceil(2 * run / 600.0) * 600.0,
                )
                jobs.append(SimJob(workload=workload, run_time_s=run))
    return jobs, size_of


def kueue_baseline() -> dict[str, Any]:
    rng = random.Random(SEED)
    tenants = [Tenant(f"cohort-{c}") for c in range(5)]
    teams = [f"cohort-{c}-cq-{q}" for c in range(5) for q in range(6)]
    tenants += [Tenant(t, t.rsplit("-cq-", 1)[0]) for t in teams]
    quotas = [Quota(t, "gpu", 20, borrow_limit=100) for t in teams]
    nodes = [Node(f"node-{i:03d}", {"gpu": 8}) for i in range(75)]
    jobs, size_of = _baseline_jobs(teams, rng)
    progress(f"kueue-baseline: {len(jobs)} workloads, {len(teams)} tenants, 600 GPUs")
    started = time.perf_counter()
    result = Simulator(
        tenants=tenants,
        flavours=[Flavour("gpu")],
        quotas=quotas,
        nodes=nodes,
        jobs=jobs,
        cycle_interval_s=10.0,
        explain_pending=True,
    ).run()
    wall = time.perf_counter() - started
    waits: dict[str, list[float]] = {size: [] for size in SIZES}
    for job in result.jobs:
        if job.wait_s is not None:
            waits[size_of[job.id]].append(job.wait_s)
    busy = [s.utilization for s in result.samples if s.pending > 0]
    progress(
        f"kueue-baseline: {result.cycles} cycles, engine {result.engine_s:.1f} s, "
        f"wall {wall:.1f} s, {result.preemptions} preemptions"
    )
    return {
        "bench": "admission",
        "scenario": "kueue-baseline",
        "workloads": len(jobs),
        "tenants": len(teams),
        "decisions_per_s": round(result.decisions / result.engine_s),
        "admit_wait_s_small": round(sum(waits["small"]) / len(waits["small"]), 1),
        "admit_wait_s_medium": round(sum(waits["medium"]) / len(waits["medium"]), 1),
        "admit_wait_s_large": round(sum(waits["large"]) / len(waits["large"]), 1),
        "min_utilization_while_pending": round(min(busy), 4) if busy else 1.0,
        "p05_utilization_while_pending": round(sorted(busy)[len(busy) // 20], 4) if busy else 1.0,
        "mean_utilization_while_pending": round(sum(busy) / len(busy), 4) if busy else 1.0,
        "admissions": result.admissions,
        "preemptions": result.preemptions,
        "cycles": result.cycles,
        "engine_s": round(result.engine_s, 2),
        "admissions_per_engine_s": round(result.admissions / result.engine_s),
        "makespan_s": round(result.end_time - result.start_time),
        "wall_s": round(wall, 1),
    }


# -------------------------------------------------------------------------- deep-queue
DEPARTMENTS = 20
TEAMS_PER_DEPARTMENT = 100
PENDING = 50_000


def _deep_world(rng: random.Random) -> tuple[list[Tenant], list[Quota], list[Node], list[Flavour]]:
    tenants = [Tenant("org")]
    quotas = [Quota("org", "H100", 8000), Quota("org", "A100", 2000)]
    for d in range(DEPARTMENTS):
        dept = f"dept-{d:02d}"
        tenants.append(Tenant(dept, "org"))
        for t in range(TEAMS_PER_DEPARTMENT):
            team = f"{dept}-team-{t:03d}"
            tenants.append(Tenant(team, dept, rng.choice([1.0, 1.0, 2.0])))
            limit = rng.choice([None, 0, 4, 8, 16])
            quotas.append(
                Quota(team, "H100", 4, borrow_limit=limit, lend_limit=rng.choice([None, 2]))
            )
            if t % 2 == 0:
                quotas.append(Quota(team, "A100", 2, borrow_limit=rng.choice([None, 4])))
    nodes = [Node(f"h100-{i:04d}", {"H100": 8}, None, f"nvl-{i // 4:03d}") for i in range(1000)]
    nodes += [Node(f"a100-{i:04d}", {"A100": 8}) for i in range(250)]
    return tenants, quotas, nodes, [Flavour("H100"), Flavour("A100", 0.6)]


def _random_workload(wid: str, team: str, rng: random.Random, now: float) -> PendingWorkload:
    roll = rng.random()
    if roll < 0.4:
        pods, per_pod, topology = 1, 1, Topology.NONE
    elif roll < 0.6:
        pods, per_pod, topology = 1, 2, Topology.NONE
    elif roll < 0.75:
        pods, per_pod, topology = 1, 4, Topology.ONE_NODE
    elif roll < 0.9:
        pods, per_pod, topology = 1, 8, Topology.ONE_NODE
    else:
        pods, per_pod, topology = 2, 8, Topology.ONE_DOMAIN
    flavours = rng.choice([("H100",), ("H100",), ("A100",), ("H100", "A100")])
    return PendingWorkload(
        id=wid,
        tenant_id=team,
        pod_sets=(PodSet(pods, per_pod, flavours),),
        priority=rng.choice([0, 0, 0, 50, 100]),
        submitted_at=now - rng.uniform(0, 2 * 86400.0),
        topology=topology,
        gang=pods > 1,
        max_run_time_s=rng.choice([None, 3600.0, 14400.0]),
    )


def _elastic(wl: PendingWorkload, extra: int) -> PendingWorkload:
    """``wl`` able to grow by ``extra`` pods above what it asks for."""
    ps = wl.pod_sets[0]
    return replace(wl, pod_sets=(replace(ps, count=ps.count + extra, min_count=ps.count),))


def _elastic_pods(
    snapshot: ClusterSnapshot, requests: dict[str, PendingWorkload]
) -> tuple[PendingWorkload, ...]:
    """The missing elastic pods of the running elastic workloads of ``snapshot``."""
    grown: dict[str, list[ElasticPod]] = {}
    for run in snapshot.running:
        if run.elastic_of is not None:
            _, pod_set, index = parse_pod_id(run.id)
            pod = ElasticPod(pod_set, index, run.placements[0], run.admitted_at)
            grown.setdefault(run.elastic_of, []).append(pod)
    out: list[PendingWorkload] = []
    for run in snapshot.running:
        request = requests.get(run.id)
        if request is not None and run.elastic_of is None:
            flavours = {request.pod_sets[0].name: run.flavour}
            out.extend(elastic_parts(run, request, flavours, grown.get(run.id, []))[1])
    return tuple(out)


@dataclass(frozen=True)
class _Timing:
    """Wall-clock and CPU seconds of one round's cycles."""

    full_s: float
    full_cpu_s: float
    follow_up_s: float
    incremental_s: float
    incremental_cpu_s: float


@dataclass(frozen=True)
class _Round:
    """One fresh engine over the deep queue: its full cycle, the follow-up cycle, and the
    incremental cycle after ``finished`` ended; ``decided`` is what the first two
    admitted and preempted, which every round must repeat."""

    first: CycleResult
    follow: CycleResult
    second: CycleResult
    finished: str
    decided: tuple[list[str], list[str], list[str], list[str]]
    timing: _Timing


def _timed(engine: AdmissionEngine, snapshot: ClusterSnapshot) -> tuple[CycleResult, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = engine.run_cycle(snapshot)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _round(snapshot: ClusterSnapshot, n: int) -> _Round:
    """Round ``n``: the follow-up cycle admits the reclaimers whose victims have now
    stopped; after one more the cluster is quiet, and the ``n``-th running workload
    (not an elastic pod) finishing is the incremental case."""
    engine = AdmissionEngine()
    first, full, full_cpu = _timed(engine, snapshot)
    after = apply_result(snapshot, first)
    follow, follow_up, _ = _timed(engine, after)
    after = apply_result(after, follow)
    after = apply_result(after, engine.run_cycle(after))
    candidates = [r for r in after.running if r.id.startswith("r") and r.elastic_of is None]
    finished = candidates[n % len(candidates)]
    one_finish = replace(
        after,
        running=tuple(
            r for r in after.running if r is not finished and r.elastic_of != finished.id
        ),
    )
    second, incremental, incremental_cpu = _timed(engine, one_finish)
    decided = (
        [a.workload_id for a in first.admissions],
        [p.victim_id for p in first.preemptions],
        [a.workload_id for a in follow.admissions],
        [p.victim_id for p in follow.preemptions],
    )
    timing = _Timing(full, full_cpu, follow_up, incremental, incremental_cpu)
    return _Round(first, follow, second, finished.id, decided, timing)


def deep_queue(elastic: bool = False, repeats: int | None = None) -> dict[str, Any]:
    name = "elastic" if elastic else "deep-queue"
    repeats = repeats if repeats is not None else repeats_from_environment()
    rng = random.Random(SEED)
    tenants, quotas, nodes, flavours = _deep_world(rng)
    teams = [t.id for t in tenants if "-team-" in t.id]
    now = 10 * 86400.0
    base = ClusterSnapshot(
        now=now,
        tenants=tuple(tenants),
        flavours=tuple(flavours),
        quotas=tuple(quotas),
        nodes=tuple(nodes),
        usage_history={t: rng.uniform(0, 500) for t in teams},
    )
    progress(f"{name}: filling {len(nodes)} nodes with running work")
    # every team asks for some work first, so the cluster is busy the way fair share
    # leaves it: most teams near their guarantee, some borrowing
    fill = [
        replace(_random_workload(f"r{i:05d}", team, rng, now), priority=0, max_run_time_s=None)
        for i, team in enumerate(t for t in teams for _ in range(3))
    ]
    warmup = replace(base, now=now - 3600.0, pending=tuple(fill))
    busy = apply_result(warmup, AdmissionEngine().run_cycle(warmup, explain_pending=False))
    requests: dict[str, PendingWorkload] = {}
    if elastic:  # a third of the running work grows by up to 2 pods above its core
        for run in busy.running:
            if run.request is not None and rng.random() < 1 / 3:
                requests[run.id] = _elastic(run.request, 2)
        grow = replace(busy, pending=_elastic_pods(busy, requests))
        busy = apply_result(grow, AdmissionEngine().run_cycle(grow, explain_pending=False))
        busy = replace(busy, pending=())
    # then some of that work ends, as it does between two cycles of a busy cluster
    ended = {r.id for r in busy.running if r.elastic_of is None and rng.random() <= 0.15}
    busy = replace(
        busy,
        running=tuple(r for r in busy.running if r.id not in ended and r.elastic_of not in ended),
    )
    pending: tuple[PendingWorkload, ...] = tuple(
        _random_workload(f"w{i:05d}", teams[i % len(teams)], rng, now) for i in range(PENDING)
    )
    if elastic:  # a third of the queue may grow by up to 3 pods once its core runs
        pending = tuple(
            core_of(_elastic(wl, rng.randint(1, 3))) if i % 3 == 0 else wl
            for i, wl in enumerate(pending)
        )
        pending += _elastic_pods(busy, requests)
    snapshot = replace(busy, now=now, pending=pending)
    used = sum(p.gpus for r in snapshot.running for p in r.placements)
    progress(
        f"{name}: {len(snapshot.running)} running ({used} GPUs of 10,000), {len(pending)} pending"
    )
    # each round: a fresh engine's full cycle, the follow-up and settling cycles, then
    # one running workload (a different one each round) finishes: the incremental cycle
    if repeats < 1:
        raise ValueError(f"{name}: repeats must be 1 or more, got {repeats}")
    head = _round(snapshot, 0)
    first, follow, second = head.first, head.follow, head.second
    rounds = [head.timing]
    for n in range(1, repeats):  # the engine is deterministic: every round decides alike
        other = _round(snapshot, n)
        if other.decided != head.decided:
            raise RuntimeError(f"{name}: a fresh engine decided differently on the same queue")
        rounds.append(other.timing)
    full = median(r.full_s for r in rounds)
    follow_up = median(r.follow_up_s for r in rounds)
    incremental = median(r.incremental_s for r in rounds)
    stats = second.stats
    progress(
        f"{name}: full cycle {full:.3f} s (median of {repeats}): {len(first.admissions)} "
        f"admitted, {len(first.preemptions)} preempted, {len(first.pending)} explained"
    )
    progress(
        f"{name}: follow-up cycle {follow_up:.3f} s ({len(follow.admissions)} admitted); "
        f"incremental cycle {incremental:.3f} s (median of {repeats}); after "
        f"{head.finished} finished: {len(second.admissions)} admitted, "
        f"{stats.groups_evaluated if stats else '?'} tries, "
        f"{stats.groups_failed_at_start if stats else '?'} groups refused at the start, "
        f"{stats.groups_skipped if stats else '?'} skipped as remembered"
    )
    changes = elastic_changes(snapshot, first).values()
    figures: dict[str, Any] = {
        "bench": "admission",
        "scenario": name,
        "pending": len(pending),
        "tenants": len(teams),
        "full_cycle_s": round(full, 3),
        "incremental_cycle_s": round(incremental, 3),
        "repeats": repeats,
        "full_cycle_min_s": round(min(r.full_s for r in rounds), 3),
        "incremental_cycle_min_s": round(min(r.incremental_s for r in rounds), 3),
        "full_cycle_cpu_s": round(median(r.full_cpu_s for r in rounds), 3),
        "incremental_cycle_cpu_s": round(median(r.incremental_cpu_s for r in rounds), 3),
        "decisions_per_s": round(len(pending) / full),
        "admitted_full_cycle": len(first.admissions),
        "preempted_full_cycle": len(first.preemptions),
        "follow_up_cycle_s": round(follow_up, 3),
        "tries_incremental": stats.groups_evaluated if stats else None,
        "groups_skipped_incremental": stats.groups_skipped if stats else None,
        "groups_failed_at_start_incremental": stats.groups_failed_at_start if stats else None,
    }
    if elastic:
        figures["shrinks"] = sum(len(c.shrink) for c in changes)
        figures["grows"] = sum(len(c.grow) for c in changes)
    return figures


# --------------------------------------------------------------------------- persisted
def persisted() -> dict[str, Any] | None:
    """One cycle end to end on PostgreSQL (snapshot read, engine, every decision saved in
    one transaction): ``admissions``, ``admissions_per_s``. See _admission_persisted.py."""
    from benchmarks._admission_persisted import persisted_scenario

    return persisted_scenario()


def elastic() -> dict[str, Any]:
    return deep_queue(elastic=True)


SCENARIOS: dict[str, Callable[[], dict[str, Any] | None]] = {
    "kueue-baseline": kueue_baseline,
    "deep-queue": deep_queue,
    "elastic": elastic,
    "persisted": persisted,
}


def main(argv: list[str]) -> None:
    chosen = argv or list(SCENARIOS)
    for name in chosen:
        figures = SCENARIOS[name]()
        if figures is not None:
            emit(figures)


if __name__ == "__main__":
    main(sys.argv[1:])
