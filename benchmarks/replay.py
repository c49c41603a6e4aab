"""Replay the shipped two-week Philly trace (``data/traces/``; Jeon et al., USENIX ATC
2019) on a simulated 320-GPU cluster under static slices, FIFO, Tidegate's fair share and
fair share with elastic jobs, one JSON line per policy with the figures of docs/replay.md
(bench, scenario, policy, jobs, wall_s, utilization, goodput, wasted_gpu_hours,
borrowed_gpu_hours, wait_mean_s, wait_p50_s, wait_p95_s, wait_p99_s, owner_wait_ratio,
share_fairness, jain_fairness, preemptions, preempted_jobs, ...). One more line,
``fair-share-min-run-30m``, is fair share with borrowed work protected from reclaim for
its first 30 minutes; two more, ``fair-share-reclaim-wait-2m`` and
``fair-share-elastic-reclaim-wait-2m``, let work inside its guarantee wait 2 minutes for
GPUs to free before it preempts.

Scenario ``bursty`` (``--bursty`` runs only it): a trace the engine was not tuned on, of
Tidegate's own generator (scheduler_bridge/replay/synthetic.py ``bursty_trace``): 8,000
jobs of 12 tenants with their own job-size mix, each tenant quiet for days and then in a
burst, on 384 GPUs. One line per policy (``bursty-static``, ``bursty-fair-share``,
``bursty-fair-share-elastic``) and two with a 10-minute reclaim wait
(``bursty-fair-share-reclaim-wait-10m``, ``bursty-fair-share-elastic-reclaim-wait-10m``).
``BENCH_BURSTY_SEED`` (default 1) draws another trace, ``BENCH_BURSTY_RECLAIM_WAIT_S``
(default 600) sets the wait of the last two lines (named by its minutes).

Scenario ``synthetic-100k`` (``--synthetic`` runs only it): 100,000 jobs of 50 tenants drawn
from the slice's job shapes at 80 % offered load on 2,048 GPUs, under fair share; it prints
jobs, jobs_per_s and wall_s. ``BENCH_SYNTHETIC_JOBS`` changes its size."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler_bridge.replay.cluster import (  # noqa: E402
    QuotaPlan,
    ReplayCluster,
    demand_shares,
    one_product,
    proportional_quotas,
)
from scheduler_bridge.replay.policies import (  # noqa: E402
    POLICIES,
    ReplayOptions,
    replay,
    replay_policies,
)
from scheduler_bridge.replay.synthetic import bursty_trace, synthetic_trace  # noqa: E402
from scheduler_bridge.replay.trace import (  # noqa: E402
    PHILLY_ATTRIBUTION,
    PHILLY_JOBS,
    PHILLY_VC_NODES,
    TraceJob,
    read_jobs,
    read_vc_nodes,
)

CAPACITY = 320  # the trace keeps about 262 GPUs busy on average: ~80 % offered load
MIN_RUN_S = 1800.0
RECLAIM_WAIT_S = 120.0
SYNTHETIC_CAPACITY = 2048
BURSTY_JOBS, BURSTY_TENANTS, BURSTY_CAPACITY = 8000, 12, 384
BURSTY_SEED = int(os.environ.get("BENCH_BURSTY_SEED", "1"))
BURSTY_RECLAIM_WAIT_S = float(os.environ.get("BENCH_BURSTY_RECLAIM_WAIT_S", "600"))
BURSTY_SOURCE = f"synthetic bursty trace (Tidegate's generator, seed {BURSTY_SEED})"


def emit(scenario: str, figures: dict[str, object], **extra: object) -> None:
    figures = {k: v for k, v in figures.items() if k != "tenant_waits"}
    line = {"bench": "replay", "scenario": scenario, **figures, **extra}
    print(json.dumps(line), flush=True)


def philly() -> None:
    jobs = read_jobs(PHILLY_JOBS)
    cluster = one_product(CAPACITY)
    quotas = proportional_quotas(
        sorted({j.tenant for j in jobs}), read_vc_nodes(PHILLY_VC_NODES), cluster
    )

    def say(policy: str, done: int) -> None:
        print(f"replaying {len(jobs)} jobs under {policy} ...", file=sys.stderr, flush=True)

    runs = replay_policies(POLICIES, jobs, cluster, quotas, progress=say)
    for run in runs:
        emit(run.figures.policy, run.figures.as_json(), trace_source=PHILLY_ATTRIBUTION)
    static_wait = runs[0].figures.owner_wait_mean_s
    say("fair-share with a 30-minute minimum run", len(runs))
    protected = replay(
        "fair-share",
        jobs,
        cluster,
        quotas,
        ReplayOptions(reclaim_min_run_s=MIN_RUN_S),
        static_owner_wait_s=static_wait,
    )
    emit(
        "fair-share-min-run-30m",
        protected.figures.as_json(),
        reclaim_min_run_s=MIN_RUN_S,
        trace_source=PHILLY_ATTRIBUTION,
    )
    reclaim_waits(
        "",
        jobs,
        cluster,
        quotas,
        wait_s=RECLAIM_WAIT_S,
        static_wait=static_wait,
        source=PHILLY_ATTRIBUTION,
        say=say,
        done=len(runs),
    )


def reclaim_waits(
    prefix: str,
    jobs: list[TraceJob],
    cluster: ReplayCluster,
    quotas: QuotaPlan,
    *,
    wait_s: float,
    static_wait: float,
    source: str,
    say: Callable[[str, int], None],
    done: int,
) -> None:
    """One line each for fair share and fair share with elastic jobs under a reclaim wait
    of ``wait_s`` (scenario ``<prefix><policy>-reclaim-wait-<minutes>m``)."""
    minutes = round(wait_s / 60)
    for policy in ("fair-share", "fair-share-elastic"):
        say(f"{policy} with a {minutes}-minute reclaim wait", done)
        waited = replay(
            policy,
            jobs,
            cluster,
            quotas,
            ReplayOptions(reclaim_wait_s=wait_s),
            static_owner_wait_s=static_wait,
        )
        emit(
            f"{prefix}{policy}-reclaim-wait-{minutes}m",
            waited.figures.as_json(),
            reclaim_wait_s=wait_s,
            trace_source=source,
        )


def bursty() -> None:
    jobs = bursty_trace(
        jobs=BURSTY_JOBS, tenants=BURSTY_TENANTS, capacity=BURSTY_CAPACITY, seed=BURSTY_SEED
    )
    cluster = one_product(BURSTY_CAPACITY)
    quotas = proportional_quotas(sorted({j.tenant for j in jobs}), demand_shares(jobs), cluster)

    def say(policy: str, done: int) -> None:
        print(f"replaying {len(jobs)} bursty jobs under {policy} ...", file=sys.stderr, flush=True)

    runs = replay_policies(
        ("static", "fair-share", "fair-share-elastic"), jobs, cluster, quotas, progress=say
    )
    for run in runs:
        emit(f"bursty-{run.figures.policy}", run.figures.as_json(), trace_source=BURSTY_SOURCE)
    static_wait = runs[0].figures.owner_wait_mean_s
    reclaim_waits(
        "bursty-",
        jobs,
        cluster,
        quotas,
        wait_s=BURSTY_RECLAIM_WAIT_S,
        static_wait=static_wait,
        source=BURSTY_SOURCE,
        say=say,
        done=len(runs),
    )


def synthetic() -> None:
    size = int(os.environ.get("BENCH_SYNTHETIC_JOBS", "100000"))
    jobs = synthetic_trace(
        read_jobs(PHILLY_JOBS), jobs=size, tenants=50, capacity=SYNTHETIC_CAPACITY, seed=1
    )
    cluster = one_product(SYNTHETIC_CAPACITY)
    quotas = proportional_quotas(sorted({j.tenant for j in jobs}), demand_shares(jobs), cluster)
    print(f"replaying {size} synthetic jobs under fair-share ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    run = replay("fair-share", jobs, cluster, quotas, ReplayOptions(seed=1))
    wall = time.perf_counter() - started
    figures = run.figures.as_json()
    figures["wall_s"] = round(wall, 1)
    emit(
        "synthetic-100k",
        figures,
        jobs_per_s=round(size / wall, 1),
        tenants=50,
        trace_source=f"synthetic, job shapes from {PHILLY_ATTRIBUTION}",
    )


if __name__ == "__main__":
    only = {"--synthetic", "--bursty"} & set(sys.argv)
    if not only:
        philly()
    if not only or "--bursty" in only:
        bursty()
    if not only or "--synthetic" in only:
        synthetic()
