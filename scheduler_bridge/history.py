"""Guarantees and flavour capacities recorded as they change (tenants.history), so billing
prices each past hour with the quota and capacity in force then."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tenants.history import record_setting


def quota_key(tenant_id: int, flavour_id: int) -> str:
    return f"{tenant_id}:{flavour_id}"


def track_quota(sender: type, instance: Any, **kwargs: Any) -> None:
    if kwargs.get("raw"):
        return
    record_setting("quota", quota_key(instance.tenant_id, instance.flavour_id), instance.guaranteed)


def track_quota_deleted(sender: type, instance: Any, **kwargs: Any) -> None:
    record_setting("quota", quota_key(instance.tenant_id, instance.flavour_id), 0)


def track_capacity(sender: type, instance: Any, **kwargs: Any) -> None:
    if kwargs.get("raw"):
        return
    record_setting("capacity", instance.pk, instance.capacity)


def record_capacities(flavours: Iterable[tuple[int, int]]) -> None:
    """(flavour id, capacity) pairs changed by a bulk update, which sends no post_save."""
    for flavour_id, capacity in flavours:
        record_setting("capacity", flavour_id, capacity)
