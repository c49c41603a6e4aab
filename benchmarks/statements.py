"""Period close: 1,000 tenants and 5,000,000 hourly ledger rows in one month, priced into
frozen statements by `billing.periods.period_close` (one GROUP BY over the ledger, pricing
in Python over the sums, statements written a chunk of tenants per transaction).

The rows are generated in SQL with generate_series (writing them is not what is measured).
Prints one JSON line: bench, scenario, tenants, rows, close_s (plus statements, lines).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._support import bench_database, emit, progress  # noqa: E402

TENANTS = 1000
ROWS = int(os.environ.get("BENCH_ROWS", 5_000_000))
HOURS = 28 * 24  # February 2026
START = datetime(2026, 2, 1, tzinfo=UTC)


def main() -> None:
    with bench_database("statements"):
        from decimal import Decimal

        from django.db import connection

        from billing.ledger import period_create
        from billing.models import RateCard, Statement, StatementLine
        from billing.periods import period_close
        from scheduler_bridge.inventory.models import Cluster, Flavour
        from scheduler_bridge.quotas.models import Quota
        from tenants.models import Tenant

        cluster = Cluster.objects.create(name="bench", gateway="simulated")
        flavours = [
            Flavour.objects.create(
                cluster=cluster,
                name=name,
                product=product,
                resource_name=resource,
                mig_profile=profile,
                capacity=capacity,
            )
            for name, product, resource, profile, capacity in [
                ("h100-80gb", "H100-80GB", "nvidia.com/gpu", "", 4000),
                ("a100-80gb", "A100-SXM4-80GB", "nvidia.com/gpu", "", 4000),
                ("h100-80gb-mig-1g.10gb", "H100-80GB", "nvidia.com/mig-1g.10gb", "1g.10gb", 7000),
                ("h100-80gb-mig-3g.40gb", "H100-80GB", "nvidia.com/mig-3g.40gb", "3g.40gb", 2000),
            ]
        ]
        for product, reserved in [("H100-80GB", "2.50"), ("A100-SXM4-80GB", "1.60")]:
            RateCard.objects.create(
                name=product,
                product=product,
                currency="USD",
                reserved_price=Decimal(reserved),
                on_demand_price=Decimal(reserved) * 2,
                priority_multipliers={"spot": "0.6"},
                valid_from=date(2026, 1, 1),
            )
        org = Tenant.objects.create(slug="org", name="Org", cost_center="CC-1")
        org.path = f"/{org.pk}/"
        org.save()
        departments = []
        for d in range(10):
            dept = Tenant.objects.create(
                slug=f"dept-{d}", name=f"Dept {d}", parent=org, cost_center=f"CC-{d}"
            )
            dept.path, dept.depth = f"{org.path}{dept.pk}/", 1
            dept.save()
            departments.append(dept)
        teams = Tenant.objects.bulk_create(
            [
                Tenant(
                    slug=f"team-{t}",
                    name=f"Team {t}",
                    parent=departments[t % 10],
                    cost_center=f"CC-{t % 10}",
                    depth=2,
                )
                for t in range(TENANTS - 11)
            ]
        )
        for team in teams:
            team.path = f"{departments[teams.index(team) % 10].path}{team.pk}/"
        Tenant.objects.bulk_update(teams, ["path"])
        Quota.objects.bulk_create(
            [Quota(tenant=team, flavour=flavours[0], guaranteed=2) for team in teams[:500]]
        )
        period = period_create(START)
        tenant_ids = [org.pk, *[d.pk for d in departments], *[t.pk for t in teams]]
        progress(f"generating {ROWS} ledger rows in SQL")
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO billing_usagerecord (
                    tenant_id, cluster_id, flavour_id, period_id, namespace, pod_uid, pod_name,
                    workload_id, job_name, priority_class, source, interval_start, interval_end,
                    devices, gpu_seconds_allocated, gpu_seconds_busy, gpu_seconds_borrowed,
                    created_at)
                SELECT t.ids[1 + (i / %(hours)s) %% %(tenants)s],
                       %(cluster)s,
                       f.ids[1 + (i / %(hours)s) %% 4],
                       %(period)s,
                       'ns-' || ((i / %(hours)s) %% %(tenants)s),
                       'pod-' || (i / %(hours)s),
                       'pod-' || (i / %(hours)s),
                       NULL, 'job-' || (i / %(hours)s),
                       CASE WHEN (i / %(hours)s) %% 5 = 0 THEN 'spot' ELSE 'standard' END,
                       'pod',
                       %(start)s + make_interval(hours => (i %% %(hours)s)::int),
                       %(start)s + make_interval(hours => (i %% %(hours)s)::int + 1),
                       1 + (i / %(hours)s) %% 4,
                       (1 + (i / %(hours)s) %% 4) * 3600,
                       ((1 + (i / %(hours)s) %% 4) * 3600 * ((i %% 97) / 97.0))::numeric(16, 3),
                       CASE WHEN i %% 7 = 0 THEN 3600 ELSE 0 END,
                       now()
                FROM generate_series(0, %(rows)s - 1) AS i,
                     (SELECT %(tenant_ids)s::bigint[] AS ids) AS t,
                     (SELECT %(flavour_ids)s::bigint[] AS ids) AS f
                """,
                {
                    "hours": HOURS,
                    "tenants": TENANTS,
                    "cluster": cluster.pk,
                    "period": period.pk,
                    "start": START,
                    "rows": ROWS,
                    "tenant_ids": tenant_ids,
                    "flavour_ids": [f.pk for f in flavours],
                },
            )
            cursor.execute("ANALYZE billing_usagerecord")
        progress(f"rows written in {time.perf_counter() - started:.1f} s; closing 2026-02")
        started = time.perf_counter()
        period_close(actor=None, period=period, source="system")
        close_s = time.perf_counter() - started
        statements = Statement.objects.filter(period=period).count()
        lines = StatementLine.objects.filter(statement__period=period).count()
        progress(f"closed in {close_s:.2f} s: {statements} statements, {lines} lines")
        connection.close()
        emit(
            bench="statements",
            scenario="close",
            tenants=TENANTS,
            rows=ROWS,
            close_s=round(close_s, 3),
            statements=statements,
            lines=lines,
        )


if __name__ == "__main__":
    main()
