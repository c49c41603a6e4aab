"""Usage ledger ingest: hourly rows written the way the collector writes them
(`billing.usage.ledger.ledger_append`: COPY into a staging table, then one INSERT ... ON CONFLICT
DO NOTHING), in batches of a catch-up run's size. Then the same rows again, which must all
be skipped (idempotency), timed as well.

Prints one JSON line: bench, scenario, rows, rows_per_s (plus duplicate_rows_per_s).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._support import bench_database, emit, progress  # noqa: E402

ROWS = int(__import__("os").environ.get("BENCH_ROWS", 1_000_000))
BATCH = 100_000
TENANTS = 200
START = datetime(2026, 2, 1, tzinfo=UTC)


def main() -> None:
    with bench_database("ingest"):
        from decimal import Decimal

        from django.db import connection

        from billing.models import UsageRecord
        from billing.usage.ledger import LedgerRow, ledger_append
        from scheduler_bridge.inventory.models import Cluster, Flavour
        from tenants.models import Tenant

        cluster = Cluster.objects.create(name="bench", gateway="simulated")
        flavours = [
            Flavour.objects.create(
                cluster=cluster,
                name=name,
                product="H100-80GB",
                resource_name=resource,
                mig_profile=profile,
                capacity=1000,
            )
            for name, resource, profile in [
                ("h100-80gb", "nvidia.com/gpu", ""),
                ("h100-80gb-mig-1g.10gb", "nvidia.com/mig-1g.10gb", "1g.10gb"),
            ]
        ]
        tenants = Tenant.objects.bulk_create(
            [Tenant(slug=f"team-{i}", name=f"Team {i}", path="") for i in range(TENANTS)]
        )
        hours = 28 * 24
        pods = ROWS // hours + 1
        progress(f"building {ROWS} rows ({pods} pods x {hours} hours)")
        rows = []
        for i in range(ROWS):
            pod, hour = divmod(i, hours)
            devices = 1 + pod % 8
            rows.append(
                LedgerRow(
                    tenant_id=tenants[pod % TENANTS].pk,
                    cluster_id=cluster.pk,
                    flavour_id=flavours[pod % 2].pk,
                    namespace=f"team-{pod % TENANTS}-train",
                    pod_uid=f"00000000-0000-4000-8000-{pod:012d}",
                    pod_name=f"job-{pod}-worker-0",
                    job_name=f"job-{pod}",
                    priority_class="standard",
                    interval_start=START + timedelta(hours=hour),
                    devices=devices,
                    gpu_seconds_allocated=devices * 3600,
                    gpu_seconds_busy=Decimal(devices * 1800),
                    gpu_seconds_borrowed=0,
                )
            )
        progress("ingesting")
        started = time.perf_counter()
        inserted = 0
        for offset in range(0, ROWS, BATCH):
            batch_started = time.perf_counter()
            inserted += ledger_append(rows[offset : offset + BATCH])
            progress(f"  batch {offset // BATCH}: {time.perf_counter() - batch_started:.2f} s")
        elapsed = time.perf_counter() - started
        progress(f"{inserted} rows in {elapsed:.2f} s; ingesting the same rows again")
        started = time.perf_counter()
        again = sum(ledger_append(rows[o : o + BATCH]) for o in range(0, ROWS, BATCH))
        duplicate_elapsed = time.perf_counter() - started
        assert inserted == ROWS and again == 0 and UsageRecord.objects.count() == ROWS
        connection.close()
        emit(
            bench="ingest",
            scenario="ledger",
            rows=ROWS,
            rows_per_s=round(ROWS / elapsed),
            duplicate_rows_per_s=round(ROWS / duplicate_elapsed),
        )


if __name__ == "__main__":
    main()
