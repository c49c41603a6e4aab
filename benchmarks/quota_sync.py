"""ResourceQuota sync of 1,000 bound namespaces through the real Kubernetes client against
the local API server: the first sync's time, then a second sync that must write nothing.

Prints one JSON line: bench, scenario, namespaces, first_sync_s, second_sync_s,
second_sync_writes.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._support import (  # noqa: E402
    bench_database,
    emit,
    progress,
    teams_under_one_org,
)

NAMESPACES = 1000
TEAMS = 100


def main() -> None:
    with bench_database("quota_sync"):
        from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
        from scheduler_bridge.inventory.models import Cluster, Flavour
        from scheduler_bridge.quotas.models import Quota
        from scheduler_bridge.quotas.sync import quota_sync
        from scheduler_bridge.workloads.selectors import queue_holdings
        from tenants.models import NamespaceBinding
        from tests.kube_fake.fixtures import write_kubeconfig
        from tests.kube_fake.server import FakeKubeApi

        with FakeKubeApi() as api, tempfile.TemporaryDirectory() as tmp:
            path, context = write_kubeconfig(Path(tmp), api.url)
            cluster = Cluster.objects.create(name="bench", kubeconfig_path=str(path))
            flavour = Flavour.objects.create(
                cluster=cluster,
                name="h100-80gb",
                product="H100-80GB",
                resource_name="nvidia.com/gpu",
                capacity=8 * TEAMS,
            )
            mig = Flavour.objects.create(
                cluster=cluster,
                name="h100-80gb-mig-1g.10gb",
                product="H100-80GB",
                resource_name="nvidia.com/mig-1g.10gb",
                mig_profile="1g.10gb",
                capacity=7 * TEAMS,
            )
            per_team = NAMESPACES // TEAMS
            for t, team in enumerate(teams_under_one_org(TEAMS, description="tenants")):
                Quota.objects.create(tenant=team, flavour=flavour, guaranteed=8)
                Quota.objects.create(tenant=team, flavour=mig, guaranteed=7)
                for n in range(per_team):
                    namespace = f"team-{t}-ns-{n}"
                    api.add_namespace(namespace)
                    NamespaceBinding.objects.create(
                        tenant=team, cluster_name="bench", namespace=namespace
                    )
            gateway = KubernetesGateway.from_kubeconfig(
                str(path), context, retry=RetryPolicy(attempts=3, base_delay=0.05)
            )
            progress(f"first sync of {NAMESPACES} namespaces ...")
            started = time.perf_counter()
            first = quota_sync(cluster, gateway, queue=queue_holdings(cluster))
            first_s = time.perf_counter() - started
            api.reset_counts()
            progress("second sync (nothing changed) ...")
            started = time.perf_counter()
            second = quota_sync(cluster, gateway, queue=queue_holdings(cluster))
            second_s = time.perf_counter() - started
            assert first.created == NAMESPACES, first
            emit(
                bench="quota_sync",
                scenario="sync",
                namespaces=NAMESPACES,
                first_sync_s=round(first_s, 3),
                second_sync_s=round(second_s, 3),
                second_sync_writes=api.write_count(),
                second_sync_unchanged=second.unchanged,
            )
            gateway.close()


if __name__ == "__main__":
    main()
