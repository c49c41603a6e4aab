"""The audit trail: one call records who changed what, with the state before and after.

Callers run inside the transaction of the change itself, so a change and its audit
record are committed (or rolled back) together.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from typing import Any

from django.db import connection, models
from django.utils import timezone

from tenants.models import AuditEvent, Tenant


def snapshot(instance: models.Model) -> dict[str, Any]:
    """A JSON-safe dict of the concrete fields of `instance` (foreign keys as ids)."""
    data: dict[str, Any] = {}
    for field in instance._meta.concrete_fields:
        value = getattr(instance, field.attname)
        if isinstance(value, decimal.Decimal):
            value = str(value)
        elif isinstance(value, (dt.datetime, dt.date)):
            value = value.isoformat()
        elif isinstance(value, uuid.UUID):
            value = str(value)
        data[field.attname] = value
    return data


def _tenant_of(instance: models.Model) -> Tenant | None:
    if isinstance(instance, Tenant):
        return instance
    tenant = getattr(instance, "tenant", None)
    return tenant if isinstance(tenant, Tenant) else None


def audit_event(
    *,
    actor: Any,
    action: str,
    instance: models.Model,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    source: str = "system",
    message: str = "",
    tenant: Tenant | None = None,
) -> AuditEvent:
    """One audit event for `instance`, not yet saved: for callers that save many at once
    (``AuditEvent.objects.bulk_create``) in the transaction of their change."""
    tenant = tenant or _tenant_of(instance)
    user = actor if (actor is not None and getattr(actor, "is_authenticated", False)) else None
    return AuditEvent(
        actor=user,
        actor_repr=user.get_username() if user else (str(actor) if actor else "system"),
        source=source,
        action=action,
        object_type=instance._meta.label_lower,
        object_id=str(instance.pk),
        object_repr=str(instance)[:200],
        tenant=tenant if tenant is not None and tenant.pk else None,
        tenant_path=tenant.path if tenant is not None else "",
        before=before,
        after=after,
        message=message,
    )


def audit_record(
    *,
    actor: Any,
    action: str,
    instance: models.Model,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    source: str = "system",
    message: str = "",
    tenant: Tenant | None = None,
) -> AuditEvent:
    """Append one audit event for `instance`. Call inside the change's transaction."""
    event = audit_event(
        actor=actor,
        action=action,
        instance=instance,
        before=before,
        after=after,
        source=source,
        message=message,
        tenant=tenant,
    )
    event.save()
    return event


# AuditEvent columns written by audit_save_many, in COPY order.
_COPY_COLUMNS = (
    "created_at",
    "actor_id",
    "actor_repr",
    "source",
    "action",
    "object_type",
    "object_id",
    "object_repr",
    "tenant_id",
    "tenant_path",
    "before",
    "after",
    "message",
)


def audit_save_many(events: list[AuditEvent]) -> None:
    """Save many unsaved events (``audit_event``) at once, in the caller's transaction:
    one COPY on PostgreSQL (an admission cycle may record thousands of transitions),
    ``bulk_create`` elsewhere."""
    if not events:
        return
    now = timezone.now()
    for event in events:
        event.created_at = event.created_at or now
    if connection.vendor != "postgresql":
        AuditEvent.objects.bulk_create(events, batch_size=500)
        return
    table = AuditEvent._meta.db_table
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(
            f'COPY "{table}" ({", ".join(_COPY_COLUMNS)}) FROM STDIN'  # noqa: S608 - our names
        ) as copy,
    ):
        for event in events:
            copy.write_row(
                (
                    event.created_at,
                    event.actor_id,
                    event.actor_repr,
                    event.source,
                    event.action,
                    event.object_type,
                    event.object_id,
                    event.object_repr,
                    event.tenant_id,
                    event.tenant_path,
                    None if event.before is None else json.dumps(event.before),
                    None if event.after is None else json.dumps(event.after),
                    event.message,
                )
            )
