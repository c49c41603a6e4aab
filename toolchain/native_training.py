"""The run a profile-guided build of the admission engine learns from (toolchain/native.py).

The build first compiles the engine with counters in every branch, runs this module with
that build loaded, and compiles again, laying the code out for the branches this run took.
What it runs is what the engine spends its time on in production:

- the deep queue of ``benchmarks/admission.py`` (50,000 pending workloads of 2,000 tenants
  on 10,000 GPUs), rigid and with a third of the work elastic: a full cycle, the follow-up
  that admits the reclaimers, and an incremental cycle after one finish;
- a replay of the shipped Philly slice's first jobs under fair share with elastic jobs:
  thousands of small cycles, as a cluster's own steady state.

The profile changes how fast the engine runs, never what it decides: the same C code is
compiled both times, only its layout differs.

    python -m toolchain.native_training    # (run by the build; exits 1 unless compiled)
"""

from __future__ import annotations

import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
REPLAY_JOBS = 3000


def main() -> int:
    sys.path.insert(0, str(REPOSITORY))
    from scheduler_bridge.admission import _native

    if not _native.active:
        print("the instrumented engine did not load; nothing to learn from", file=sys.stderr)
        return 1
    from benchmarks.admission import deep_queue

    deep_queue(elastic=False)
    deep_queue(elastic=True)
    _replay()
    return 0


def _replay() -> None:
    from scheduler_bridge.replay.cluster import one_product, proportional_quotas
    from scheduler_bridge.replay.policies import replay
    from scheduler_bridge.replay.trace import (
        PHILLY_JOBS,
        PHILLY_VC_NODES,
        read_jobs,
        read_vc_nodes,
    )

    jobs = read_jobs(PHILLY_JOBS)[:REPLAY_JOBS]
    cluster = one_product(320)
    tenants = sorted({j.tenant for j in jobs})
    quotas = proportional_quotas(tenants, read_vc_nodes(PHILLY_VC_NODES), cluster)
    replay("fair-share-elastic", jobs, cluster, quotas)


if __name__ == "__main__":
    raise SystemExit(main())
