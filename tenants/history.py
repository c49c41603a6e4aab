"""Effective-dated settings: what a quota, a capacity, a tenant's place in the tree or its
billing settings were at any past hour.

Every change is appended to :class:`tenants.models.SettingChange` by
:func:`record_setting` (the post-save hooks of the models concerned call it), so pricing a
past month uses what was in force then, not what is in force today.
:func:`pieces_within` turns a key's changes into constant pieces of a time window (pure).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from tenants.models import SettingChange

Change = tuple[datetime | None, Any]
"""(valid from, value); valid from None: since always."""


_UNSET: Any = object()


def record_setting(
    topic: str,
    key: object,
    value: Any,
    *,
    at: datetime | None = None,
    previous: Any = _UNSET,
) -> bool:
    """Append ``value`` for (topic, key) valid from ``at`` (now if None), unless it is the
    value already in force. The first value of a key is recorded as valid since always
    when ``at`` is None; a first change dated ``at`` needs the value it replaces
    (``previous``), else it would hold since always. Returns whether a change was written."""
    key = str(key)
    with transaction.atomic():
        if (
            previous is not _UNSET
            and not SettingChange.objects.filter(topic=topic, key=key).exists()
        ):
            SettingChange.objects.create(topic=topic, key=key, value=previous, valid_from=None)
        changes = SettingChange.objects.filter(topic=topic, key=key)
        if at is not None:
            changes = changes.filter(Q(valid_from__isnull=True) | Q(valid_from__lte=at))
        latest = changes.order_by(F("valid_from").desc(nulls_last=True), "-id").first()
        if latest is None:
            latest = (
                SettingChange.objects.filter(topic=topic, key=key, valid_from__isnull=True)
                .order_by("-id")
                .first()
            )
        if latest is not None and latest.value == value:
            return False
        first = not SettingChange.objects.filter(topic=topic, key=key).exists()
        valid_from = at if at is not None else (None if first else timezone.now())
        SettingChange.objects.create(topic=topic, key=key, value=value, valid_from=valid_from)
    return True


def settings_history(
    topic: str, *, until: datetime, keys: Iterable[object] | None = None
) -> dict[str, list[Change]]:
    """Every change of ``topic`` valid from before ``until``, per key, oldest first."""
    rows = SettingChange.objects.filter(topic=topic).filter(
        Q(valid_from__isnull=True) | Q(valid_from__lt=until)
    )
    if keys is not None:
        rows = rows.filter(key__in=[str(k) for k in keys])
    out: dict[str, list[Change]] = defaultdict(list)
    for key, valid_from, value in rows.order_by("key", "valid_from", "id").values_list(
        "key", "valid_from", "value"
    ):
        out[key].append((valid_from, value))
    # order_by puts NULL last in PostgreSQL; "since always" goes first
    for key, changes in out.items():
        out[key] = sorted(changes, key=lambda c: (c[0] is not None, c[0] or until))
    return dict(out)


def pieces_within(
    changes: Sequence[Change], start: datetime, end: datetime, current: Any
) -> list[tuple[datetime, datetime, Any]]:
    """The constant pieces of [start, end): (from, to, value), in time order.

    Without recorded changes, ``current`` holds throughout. Before the first change, the
    first change's value holds (history starts with the value known then).
    """
    if not changes:
        return [(start, end, current)]
    value = changes[0][1]
    cuts: list[tuple[datetime, Any]] = []
    for valid_from, new in changes:
        if valid_from is None or valid_from <= start:
            value = new
        elif valid_from < end:
            cuts.append((valid_from, new))
    pieces = []
    lo = start
    for at, new in cuts:
        if at > lo:
            pieces.append((lo, at, value))
        lo, value = at, new
    pieces.append((lo, end, value))
    return [p for p in pieces if p[1] > p[0]]


def tenant_place(tenant: Any) -> dict[str, str]:
    """What billing needs to know of a tenant at an hour: where it sat in the tree and
    which cost centre paid."""
    return {"path": tenant.path, "cost_center": tenant.cost_center}


def track_tenant(sender: type, instance: Any, **kwargs: Any) -> None:
    """post_save of Tenant: record a move or a new cost centre (not a tenant still being
    created, whose path is written by a second save).

    A tenant's first cost centre is recorded as valid since always: until then nobody was
    named to pay, and the hours before it would otherwise be charged to no cost centre.
    Later changes of cost centre take effect when saved."""
    if kwargs.get("raw") or not instance.path:
        return
    place = tenant_place(instance)
    changes = SettingChange.objects.filter(topic="tenant", key=str(instance.pk))
    first_cost_center = (
        place["cost_center"]
        and changes.exists()
        and not changes.exclude(value__cost_center="").exists()
        and not changes.exclude(value__path=place["path"]).exists()
    )
    if first_cost_center:
        SettingChange.objects.create(
            topic="tenant", key=str(instance.pk), value=place, valid_from=None
        )
        return
    record_setting("tenant", instance.pk, place)
