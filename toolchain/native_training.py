"""The run a profile-guided build of the admission engine learns from (toolchain/native.py).

The build first compiles the engine with counters in every branch, runs this module with
that build loaded, and compiles again, laying the code out for the branches this run took.
What it runs is what the engine spends its time on in production:

- the deep queue of ``benchmarks/admission.py`` (50,000 pending workloads of 2,000 tenants
  on 10,000 GPUs), rigid and with a third of the work elastic: a full cycle, the follow-up
  that admits the reclaimers, and an incremental cycle after one finish;
- replays of the shipped traces' first jobs (``data/traces/``): Philly's under fair share
  with elastic jobs, thousands of small cycles as a cluster's own steady state, and
  openb's shares of one GPU on a cut of its node list.

Every compiled module is imported, so that each has a profile (gcc refuses a
profile-guided build with one missing). The profile changes how fast the engine runs,
never what it decides: the same C code is compiled both times, only its layout differs.

    python -m toolchain.native_training    # (run by the build; exits 1 unless compiled)
"""

from __future__ import annotations

import importlib
import sys

PHILLY_JOBS_REPLAYED = 3000
OPENB_JOBS_REPLAYED = 1500
OPENB_CAPACITY = 48


def main() -> int:
    from scheduler_bridge.admission import _native

    if not _native.active:
        print("the instrumented engine did not load; nothing to learn from", file=sys.stderr)
        return 1
    for name in _native.compiled_modules():
        importlib.import_module(f"scheduler_bridge.admission.{name}")
    from benchmarks.admission import deep_queue

    deep_queue(elastic=False, repeats=1)
    deep_queue(elastic=True, repeats=1)
    _replay_philly()
    _replay_openb()
    return 0


def _replay_philly() -> None:
    from scheduler_bridge.replay.cluster import one_product, proportional_quotas
    from scheduler_bridge.replay.policies import replay
    from scheduler_bridge.replay.trace import (
        PHILLY_JOBS,
        PHILLY_VC_NODES,
        read_jobs,
        read_vc_nodes,
    )

    jobs = read_jobs(PHILLY_JOBS, limit=PHILLY_JOBS_REPLAYED)
    cluster = one_product(320)
    tenants = sorted({j.tenant for j in jobs})
    quotas = proportional_quotas(tenants, read_vc_nodes(PHILLY_VC_NODES), cluster)
    replay("fair-share-elastic", jobs, cluster, quotas)


def _replay_openb() -> None:
    from scheduler_bridge.replay.cluster import demand_shares, proportional_quotas
    from scheduler_bridge.replay.openb import (
        openb_cluster,
        openb_jobs,
        read_openb_nodes,
        read_openb_tasks,
    )
    from scheduler_bridge.replay.policies import replay

    cluster = openb_cluster(read_openb_nodes().rows).scaled(OPENB_CAPACITY)
    jobs = openb_jobs(read_openb_tasks().rows, cluster, limit=OPENB_JOBS_REPLAYED)
    tenants = sorted({j.tenant for j in jobs})
    replay("fair-share", jobs, cluster, proportional_quotas(tenants, demand_shares(jobs), cluster))


if __name__ == "__main__":
    raise SystemExit(main())
