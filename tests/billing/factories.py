"""Helpers that write billing data the way the collector does (through the ledger)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from billing.usage.ledger import LedgerRow, ledger_append
from scheduler_bridge.inventory.models import Flavour
from tenants.models import Tenant


def record_usage(
    tenant: Tenant,
    flavour: Flavour,
    start: datetime,
    *,
    hours: int = 1,
    devices: int = 1,
    seconds: int = 3600,
    busy_ratio: Decimal | str | None = None,
    borrowed: int = 0,
    pod: str = "pod-1",
    namespace: str | None = None,
    priority: str = "",
    job: str = "",
    workload_id: int | None = None,
) -> int:
    """``hours`` consecutive ledger rows of one pod from ``start``; returns rows inserted."""
    rows = []
    for h in range(hours):
        busy = None
        if busy_ratio is not None:
            busy = (Decimal(busy_ratio) * devices * seconds).quantize(Decimal("0.001"))
        rows.append(
            LedgerRow(
                tenant_id=tenant.pk,
                cluster_id=flavour.cluster_id,
                flavour_id=flavour.pk,
                namespace=namespace or f"{tenant.slug}-train",
                pod_uid=f"uid-{pod}",
                pod_name=pod,
                job_name=job,
                workload_id=workload_id,
                priority_class=priority,
                interval_start=start + timedelta(hours=h),
                devices=devices,
                gpu_seconds_allocated=devices * seconds,
                gpu_seconds_busy=busy,
                gpu_seconds_borrowed=borrowed * seconds,
            )
        )
    return ledger_append(rows)
