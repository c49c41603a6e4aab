"""Benchmark: plan MIG layouts for 1,000 nodes x 8 GPUs with mixed demand.

Run from the repository root: ``.venv/bin/python benchmarks/mig_plan.py``.
Prints one JSON line on stdout; progress goes to stderr. The cluster is
generated from a fixed seed: each node holds one product (A100-40GB,
A100-80GB, H100, H200), about 40% of GPUs are already partitioned, about a
quarter are busy, and 3% of nodes are pinned by an admin.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler_bridge.inventory.catalogue import (  # noqa: E402
    A100_SXM4_40GB,
    A100_SXM4_80GB,
    H100_80GB,
    H200_141GB,
    GpuProduct,
)
from scheduler_bridge.mig.layouts import MigLayout, layout_from_counts, layout_table  # noqa: E402
from scheduler_bridge.mig.planner import (  # noqa: E402
    GpuState,
    MigDemand,
    NodePin,
    plan_mig_layouts,
)

NODES = 1_000
GPUS_PER_NODE = 8
SEED = 20_261_129
PRODUCTS = ((A100_SXM4_40GB, 0.25), (A100_SXM4_80GB, 0.25), (H100_80GB, 0.3), (H200_141GB, 0.2))
# Demand per GPU of the product, by profile position in the catalogue order
# (1g, 1g+me, 1g double memory, 2g, 3g, 4g, 7g): about 6.2 of 7 compute slices
# plus 10% whole GPUs, more than the idle GPUs can hold, so the ratio shows
# how close the planner gets under pressure.
DEMAND_PER_GPU = (1.9, 0.03, 0.3, 0.65, 0.5, 0.15, 0.08)
WHOLE_PER_GPU = 0.1


def _existing_layout(product: GpuProduct, rng: random.Random) -> MigLayout:
    """A layout a cluster might already have: a common shape, or MIG disabled."""
    names = [p.name for p in product.mig_profiles]
    shapes = (
        {names[0]: 2, names[3]: 1, names[4]: 1},  # all-balanced
        {names[0]: 7},
        {names[4]: 2},
        {names[6]: 1},
        {names[5]: 1, names[4]: 1},
        {names[3]: 3},
    )
    if rng.random() < 0.6:
        return MigLayout.disabled()
    return layout_from_counts(product, rng.choice(shapes))


def build_cluster(rng: random.Random) -> tuple[list[GpuState], dict[str, NodePin], MigDemand]:
    gpus: list[GpuState] = []
    pins: dict[str, NodePin] = {}
    products = [product for product, _ in PRODUCTS]
    weights = [share for _, share in PRODUCTS]
    for n in range(NODES):
        node = f"gpu-node-{n:04d}"
        product = rng.choices(products, weights)[0]
        for index in range(GPUS_PER_NODE):
            layout = _existing_layout(product, rng)
            busy = rng.random() < 0.25
            gpus.append(GpuState(node, index, product, layout, busy))
        if rng.random() < 0.03:
            half = product.mig_profiles[4].name  # 3g: two per GPU
            pins[node] = NodePin(layout=layout_from_counts(product, {half: 2}))
    counts: dict[str, int] = {}
    for gpu in gpus:
        counts[gpu.product.name] = counts.get(gpu.product.name, 0) + 1
    instances: dict[tuple[str, str], int] = {}
    whole: dict[str, int] = {}
    for product, _ in PRODUCTS:
        total = counts.get(product.name, 0)
        for profile, share in zip(product.mig_profiles, DEMAND_PER_GPU, strict=True):
            instances[(product.name, profile.name)] = round(total * share)
        whole[product.name] = round(total * WHOLE_PER_GPU)
    return gpus, pins, MigDemand(instances, whole)


def main() -> None:
    rng = random.Random(SEED)
    gpus, pins, demand = build_cluster(rng)
    print(f"cluster: {len(gpus)} GPUs, {len(pins)} pinned nodes", file=sys.stderr)
    started = time.perf_counter()
    for product, _ in PRODUCTS:
        layout_table(product)  # the once-per-process enumeration, timed with the plan
    plan = plan_mig_layouts(gpus, demand, pins)
    elapsed = time.perf_counter() - started
    print(
        f"planned in {elapsed:.3f} s: {len(plan.changed)} GPUs change on "
        f"{len(plan.nodes_to_reconfigure)} nodes, {len(plan.unmet)} profiles short",
        file=sys.stderr,
    )
    for outcome in plan.unmet:
        print(
            f"  {outcome.product} {outcome.profile or 'whole'}: {outcome.reason}", file=sys.stderr
        )
    result = {
        "bench": "mig_plan",
        "scenario": "plan",
        "nodes": NODES,
        "gpus": len(gpus),
        "plan_s": round(elapsed, 4),
        "demand_met_ratio": round(plan.demand_met_ratio, 4),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
