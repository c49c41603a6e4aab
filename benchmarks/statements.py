"""Period close: 1,000 tenants and 5,000,000 hourly ledger rows in one month, priced into
frozen statements by `billing.statements.periods.period_close` (one GROUP BY over the ledger, pricing
in Python over the sums, statements written a chunk of tenants per transaction).

Scenarios (both by default, in one run): ``close`` closes February 2026 with settings that
never change; ``close-history`` closes March 2026 (the same ledger) while 10 % of the
tenants change mid-month: a third get a quota cut, a third move to another department, a
third start paying for their guarantee, and the H100 price changes on the 15th.

The rows are generated in SQL with generate_series (writing them is not what is measured).
Prints one JSON line per scenario: bench, scenario, tenants, rows, close_s (plus
statements, lines).

    python benchmarks/statements.py [close] [close-history]
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._support import bench_database, emit, progress  # noqa: E402

TENANTS = 1000
ROWS = int(os.environ.get("BENCH_ROWS", 5_000_000))
HOURS = 28 * 24  # February 2026 (and the first 28 days of March)
START = datetime(2026, 2, 1, tzinfo=UTC)
MARCH = datetime(2026, 3, 1, tzinfo=UTC)
SCENARIOS = ("close", "close-history")


def main() -> None:
    with bench_database("statements"):
        from decimal import Decimal

        from django.db import connection

        from billing.models import RateCard, Statement, StatementLine
        from billing.statements.periods import period_close
        from billing.usage.ledger import period_create
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
        tenant_ids = [org.pk, *[d.pk for d in departments], *[t.pk for t in teams]]
        wanted = [a for a in sys.argv[1:] if a in SCENARIOS] or list(SCENARIOS)
        for scenario in wanted:
            month = START if scenario == "close" else MARCH
            period = period_create(month)
            generate_ledger(connection, period.pk, month, cluster.pk, tenant_ids, flavours)
            if scenario == "close-history":
                change_mid_month(teams, departments, flavours, month)
            progress(f"closing {period.name} ({scenario})")
            started = time.perf_counter()
            period_close(actor=None, period=period, source="system")
            close_s = time.perf_counter() - started
            statements = Statement.objects.filter(period=period).count()
            lines = StatementLine.objects.filter(statement__period=period).count()
            progress(f"closed in {close_s:.2f} s: {statements} statements, {lines} lines")
            emit(
                bench="statements",
                scenario=scenario,
                tenants=TENANTS,
                rows=ROWS,
                close_s=round(close_s, 3),
                statements=statements,
                lines=lines,
            )
        connection.close()


def generate_ledger(
    connection: Any,
    period_id: int,
    start: datetime,
    cluster_id: int,
    tenant_ids: list[int],
    flavours: list[Any],
) -> None:
    progress(f"generating {ROWS} ledger rows in SQL from {start:%Y-%m-%d}")
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
                "cluster": cluster_id,
                "period": period_id,
                "start": start,
                "rows": ROWS,
                "tenant_ids": tenant_ids,
                "flavour_ids": [f.pk for f in flavours],
            },
        )
        cursor.execute("ANALYZE billing_usagerecord")
    progress(f"rows written in {time.perf_counter() - started:.1f} s")


def change_mid_month(
    teams: list[Any], departments: list[Any], flavours: list[Any], month: datetime
) -> None:
    """10 % of the tenants change during ``month``, each at its own hour; H100 gets a new
    price on the 15th."""
    from decimal import Decimal

    from billing.charging.history import billing_value
    from billing.models import RateCard, TenantBillingSettings
    from scheduler_bridge.history import quota_key
    from tenants.history import record_setting

    changing = teams[: TENANTS // 10]
    third = len(changing) // 3
    for i, team in enumerate(changing):
        at = month + timedelta(days=5, hours=3 * i)
        if i < third:
            record_setting("quota", quota_key(team.pk, flavours[0].pk), 1, at=at, previous=2)
        elif i < 2 * third:
            target = departments[(departments.index(team.parent) + 1) % len(departments)]
            place = {"path": f"{target.path}{team.pk}/", "cost_center": target.cost_center}
            before = {"path": team.path, "cost_center": team.cost_center}
            record_setting("tenant", team.pk, place, at=at, previous=before)
        else:
            settings = TenantBillingSettings(tenant=team, charge_reserved=True)
            record_setting("billing", team.pk, billing_value(settings), at=at, previous=None)
    RateCard.objects.create(
        name="H100 from the 15th",
        product="H100-80GB",
        currency="USD",
        reserved_price=Decimal("2.75"),
        on_demand_price=Decimal("5.50"),
        priority_multipliers={"spot": "0.6"},
        valid_from=(month + timedelta(days=14)).date(),
    )
    progress(f"{len(changing)} tenants change mid-month; H100 price changes on the 15th")


if __name__ == "__main__":
    main()
