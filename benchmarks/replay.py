"""Replay the shipped two-week Philly trace (``data/traces/``; Jeon et al., USENIX ATC
2019) under static quotas, FIFO, Tidegate's fair share and fair share with elastic jobs
(``fair-share-elastic``: every job of 2 or more GPUs elastic down to half, a checkpoint
every 30 minutes) on a simulated 320-GPU cluster; one JSON line per policy: bench,
scenario, policy, jobs, wall_s, utilization, goodput, wasted_gpu_hours, wait_mean_s,
wait_p95_s, jain_fairness (plus preemptions, shrinks, grows, unfinished jobs and the
trace's attribution).
One more line, ``fair-share-min-run-30m``, is fair share with borrowed work protected from
reclaim for its first 30 minutes (EngineConfig.reclaim_min_run_s)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler_bridge.replay.policies import POLICIES, replay  # noqa: E402
from scheduler_bridge.replay.trace import (  # noqa: E402
    PHILLY_ATTRIBUTION,
    PHILLY_JOBS,
    PHILLY_VC_NODES,
    read_jobs,
    read_vc_nodes,
)

NODES = 40  # the trace keeps about 262 GPUs busy on average: ~80 % offered load
MIN_RUN_S = 1800.0


def main() -> None:
    jobs = read_jobs(PHILLY_JOBS)
    vc_nodes = read_vc_nodes(PHILLY_VC_NODES)
    for policy in POLICIES:
        print(f"replaying {len(jobs)} jobs under {policy} ...", file=sys.stderr, flush=True)
        figures = replay(policy, jobs, vc_nodes, nodes=NODES)
        line = {"bench": "replay", "scenario": policy, **asdict(figures)}
        print(json.dumps({**line, "trace_source": PHILLY_ATTRIBUTION}), flush=True)
    print("replaying fair-share with a 30-minute minimum run ...", file=sys.stderr, flush=True)
    figures = replay("fair-share", jobs, vc_nodes, nodes=NODES, reclaim_min_run_s=MIN_RUN_S)
    line = {"bench": "replay", "scenario": "fair-share-min-run-30m", **asdict(figures)}
    line |= {"reclaim_min_run_s": MIN_RUN_S, "trace_source": PHILLY_ATTRIBUTION}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
