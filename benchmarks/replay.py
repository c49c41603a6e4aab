"""Replay the two-week Philly trace (Jeon et al., USENIX ATC 2019) under static quotas,
FIFO and Tidegate's fair share on a simulated 320-GPU cluster; one JSON line per policy:
bench, scenario, policy, jobs, wall_s, utilization, wait_mean_s, wait_p95_s,
jain_fairness (plus preemptions and unfinished jobs)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler_bridge.replay.policies import POLICIES, replay  # noqa: E402
from scheduler_bridge.replay.trace import read_jobs, read_vc_nodes  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
NODES = 40  # the trace keeps about 262 GPUs busy on average: ~80 % offered load


def main() -> None:
    jobs = read_jobs(TRACES / "philly-2w.csv")
    vc_nodes = read_vc_nodes(TRACES / "philly_vc_nodes.csv")
    for policy in POLICIES:
        print(f"replaying {len(jobs)} jobs under {policy} ...", file=sys.stderr, flush=True)
        figures = replay(policy, jobs, vc_nodes, nodes=NODES)
        print(json.dumps({"bench": "replay", "scenario": policy, **asdict(figures)}), flush=True)


if __name__ == "__main__":
    main()
