"""Ledger rows given their borrowed seconds by the hourly rule (:mod:`billing.usage.borrowing`).

The collector and the demo's generator pass every row through :func:`with_borrowed`
before it is written: the rule's inputs (each tenant's net guarantee as the recorded
history says it was, the priority classes, and what the ledger already holds for the
same hours) are read here, the split itself is pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from django.db.models import Sum

from billing.models import UsageRecord
from billing.usage.borrowing import (
    FIRST_TAKEN_BACK,
    OUTSIDE_THE_QUEUE,
    Held,
    HourKey,
    borrowed_seconds,
)
from billing.usage.ledger import LedgerRow
from scheduler_bridge.inventory.models import SHARE_UNITS_PER_GPU, Flavour
from scheduler_bridge.workloads.models import PriorityClass

HOUR = timedelta(hours=1)


class GuaranteeSeconds:
    """Each tenant's net guarantee of a flavour, in device-seconds of one hour, from the
    recorded history (the guarantee the statements reserve): a change inside the hour
    counts for the part of the hour it was in force."""

    def __init__(self, start: datetime, end: datetime) -> None:
        from billing.charging.history import resolve_period_settings

        settings = resolve_period_settings(start, end)
        self._pieces: dict[tuple[int, int], list[tuple[datetime, datetime, int]]] = defaultdict(
            list
        )
        for piece in settings.guarantees:
            if piece.tenant_id is not None:
                self._pieces[(piece.tenant_id, piece.flavour_id)].append(
                    (piece.start, piece.end, piece.units)
                )
        shared = Flavour.objects.exclude(sharing="").values_list("pk", flat=True)
        self._units_per_gpu = dict.fromkeys(shared, SHARE_UNITS_PER_GPU)

    def __call__(self, tenant_id: int, flavour_id: int, hour: datetime) -> int:
        end = hour + HOUR
        seconds = 0
        for lo, hi, units in self._pieces.get((tenant_id, flavour_id), ()):
            overlap = (min(hi, end) - max(lo, hour)).total_seconds()
            if overlap > 0:
                seconds += units * int(overlap)
        return seconds * self._units_per_gpu.get(flavour_id, 1)


def with_borrowed(
    rows: Sequence[LedgerRow], admitted: Mapping[str, datetime] | None = None
) -> list[LedgerRow]:
    """``rows`` with ``gpu_seconds_borrowed`` set by the hourly rule.

    ``admitted`` maps a row's ``pod_uid`` to when its run was admitted (the reclaim
    order takes the most recent first); rows of a workload missing there fall back to
    their key's order. Rows whose key is already in the ledger are left as they are (the
    insert skips them)."""
    if not rows:
        return []
    admitted = admitted or {}
    start = min(row.interval_start for row in rows)
    end = max(row.interval_start for row in rows) + HOUR
    cluster_ids = {row.cluster_id for row in rows}
    in_ledger = UsageRecord.objects.filter(
        cluster_id__in=cluster_ids, interval_start__gte=start, interval_start__lt=end
    )
    known = set(in_ledger.values_list("pod_uid", "flavour_id", "interval_start"))
    already: dict[HourKey, tuple[int, int]] = {
        (row["tenant_id"], row["flavour_id"], row["interval_start"]): (
            int(row["held"] or 0),
            int(row["borrowed"] or 0),
        )
        for row in in_ledger.values("tenant_id", "flavour_id", "interval_start").annotate(
            held=Sum("gpu_seconds_allocated"), borrowed=Sum("gpu_seconds_borrowed")
        )
    }
    classes = _reclaim_classes()
    fresh = [
        index
        for index, row in enumerate(rows)
        if (row.pod_uid, row.flavour_id, row.interval_start) not in known
    ]
    held = [_held(rows[index], classes, admitted) for index in fresh]
    split = borrowed_seconds(held, GuaranteeSeconds(start, end), already)
    out = list(rows)
    for index, borrowed in zip(fresh, split, strict=True):
        out[index] = replace(rows[index], gpu_seconds_borrowed=borrowed)
    return out


def _reclaim_classes() -> dict[str, tuple[int, bool]]:
    """Priority class name -> (its place in the reclaim order, preemptible)."""
    return {
        name: (FIRST_TAKEN_BACK if fills_idle else value, preemptible)
        for name, value, fills_idle, preemptible in PriorityClass.objects.values_list(
            "name", "value", "fills_idle", "preemptible"
        )
    }


def _held_row(
    *,
    tenant_id: int,
    flavour_id: int,
    hour: datetime,
    device_seconds: int,
    workload_id: int | None,
    priority_class: str,
    key: str,
    admitted_epoch: float,
    classes: Mapping[str, tuple[int, bool]],
) -> Held:
    """A ledger row as the rule sees it (queued work by its class; a row of neither a
    workload nor a class ran outside the queue and is never reclaimed)."""
    priority, preemptible = classes.get(priority_class, (0, True))
    if workload_id is None and not priority_class:
        priority, preemptible = OUTSIDE_THE_QUEUE, False
    return Held(
        tenant_id=tenant_id,
        flavour_id=flavour_id,
        hour=hour,
        device_seconds=device_seconds,
        priority=priority,
        admitted_epoch=admitted_epoch,
        key=key,
        preemptible=preemptible,
    )


def _held(
    row: LedgerRow, classes: Mapping[str, tuple[int, bool]], admitted: Mapping[str, datetime]
) -> Held:
    moment = admitted.get(row.pod_uid)
    return _held_row(
        tenant_id=row.tenant_id,
        flavour_id=row.flavour_id,
        hour=row.interval_start,
        device_seconds=row.gpu_seconds_allocated,
        workload_id=row.workload_id,
        priority_class=row.priority_class,
        key=row.pod_uid,
        admitted_epoch=moment.timestamp() if moment is not None else 0.0,
        classes=classes,
    )


def rederive_borrowed(start: datetime, end: datetime) -> int:
    """Give the ledger rows of the hours in [start, end) the borrowed seconds the hourly
    rule gives them (rows written before the rule carried their workload's share at
    admission). One transaction; returns the rows changed. Held seconds, tenants and
    hours are untouched: only this derived column is corrected, so a period closed under
    the old rule gets a new revision when it is closed again."""
    from django.db import connection, transaction

    from scheduler_bridge.workloads.models import Workload

    with transaction.atomic():
        records = list(
            UsageRecord.objects.filter(interval_start__gte=start, interval_start__lt=end)
            .order_by("id")
            .values_list(
                "id",
                "tenant_id",
                "flavour_id",
                "interval_start",
                "gpu_seconds_allocated",
                "gpu_seconds_borrowed",
                "workload_id",
                "priority_class",
                "pod_uid",
            )
        )
        if not records:
            return 0
        admitted_now = dict(
            Workload.objects.filter(
                pk__in={r[6] for r in records if r[6] is not None}, admitted_at__isnull=False
            ).values_list("pk", "admitted_at")
        )
        classes = _reclaim_classes()
        held = [
            _held_row(
                tenant_id=tenant,
                flavour_id=flavour,
                hour=hour,
                device_seconds=seconds,
                workload_id=workload,
                priority_class=priority_class,
                key=key,
                admitted_epoch=_admitted_epoch(key, admitted_now.get(workload)),
                classes=classes,
            )
            for _id, tenant, flavour, hour, seconds, _old, workload, priority_class, key in records
        ]
        split = borrowed_seconds(held, GuaranteeSeconds(start, end))
        changed = [
            (record[0], borrowed)
            for record, borrowed in zip(records, split, strict=True)
            if record[5] != borrowed
        ]
        with connection.cursor() as cursor:
            for offset in range(0, len(changed), 5000):
                chunk = changed[offset : offset + 5000]
                placeholders = ", ".join(["(%s, %s)"] * len(chunk))  # constants only
                cursor.execute(
                    "UPDATE billing_usagerecord AS u SET gpu_seconds_borrowed = v.borrowed "  # noqa: S608
                    f"FROM (VALUES {placeholders}) AS v(id, borrowed) WHERE u.id = v.id",
                    [value for pair in chunk for value in pair],
                )
        return len(changed)


def _admitted_epoch(key: str, admitted: datetime | None) -> float:
    """When a row's run was admitted: a workload row's key says it
    (``workload:<id>:<epoch>``); a pod row takes its workload's current admission."""
    parts = key.split(":")
    if len(parts) == 3 and parts[0] == "workload" and parts[2].isdigit():
        return float(parts[2])
    return admitted.timestamp() if admitted is not None else 0.0
