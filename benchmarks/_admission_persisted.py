"""The `persisted` scenario of benchmarks/admission.py: one admission cycle end to end on
PostgreSQL (snapshot read, engine, every decision saved in one transaction)."""

from __future__ import annotations

import time
from typing import Any

from benchmarks._support import bench_database, progress

TENANTS = 50
NODES = 500
GPUS_PER_NODE = 8
WORKLOADS = 5000  # 1-GPU each, more than fit: 4,000 GPUs in all


def persisted_scenario() -> dict[str, Any]:
    with bench_database("admission"):
        from django.utils import timezone

        from scheduler_bridge.inventory.models import Cluster, Flavour, Node
        from scheduler_bridge.quotas.models import Quota
        from scheduler_bridge.workloads import cycle as cycle_module
        from scheduler_bridge.workloads.models import Workload
        from tenants.models import Tenant

        progress(f"persisted: {NODES} nodes, {TENANTS} tenants, {WORKLOADS} pending workloads")
        cluster = Cluster.objects.create(name="bench", gateway="simulated")
        flavour = Flavour.objects.create(
            cluster=cluster,
            name="h100-80gb",
            product="H100-80GB",
            resource_name="nvidia.com/gpu",
            capacity=NODES * GPUS_PER_NODE,
        )
        Node.objects.bulk_create(
            Node(
                cluster=cluster,
                name=f"n{i:04d}",
                product="H100-80GB",
                gpu_count=GPUS_PER_NODE,
                allocatable={"nvidia.com/gpu": GPUS_PER_NODE},
                topology_domain=f"d{i // 18}",
            )
            for i in range(NODES)
        )
        org = Tenant.objects.create(slug="org", name="Org")
        org.path = f"/{org.pk}/"
        org.save()
        Quota.objects.create(tenant=org, flavour=flavour, guaranteed=NODES * GPUS_PER_NODE)
        share = NODES * GPUS_PER_NODE // TENANTS
        teams = []
        for t in range(TENANTS):
            team = Tenant.objects.create(slug=f"team-{t}", name=f"Team {t}", parent=org, depth=1)
            team.path = f"{org.path}{team.pk}/"
            team.save(update_fields=["path"])
            Quota.objects.create(tenant=team, flavour=flavour, guaranteed=share)
            teams.append(team)
        now = timezone.now()
        Workload.objects.bulk_create(
            Workload(
                cluster=cluster,
                tenant=teams[i % TENANTS],
                name=f"w{i}",
                submitted_at=now,
                pod_sets=[
                    {"name": "main", "count": 1, "gpus_per_pod": 1, "flavours": ["h100-80gb"]}
                ],
            )
            for i in range(WORKLOADS)
        )
        started = time.perf_counter()
        outcome, _ = cycle_module.decide_and_persist(cluster)
        elapsed = time.perf_counter() - started
        admitted = Workload.objects.filter(state="admitted").count()
        assert admitted == len(outcome.admitted)
        return {
            "bench": "admission",
            "scenario": "persisted",
            "admissions": admitted,
            "pending_explained": outcome.pending,
            "cycle_s": round(elapsed, 3),
            "admissions_per_s": round(admitted / elapsed, 1),
        }


if __name__ == "__main__":
    import json

    print(json.dumps(persisted_scenario()))
