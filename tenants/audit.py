"""The audit trail: one call records who changed what, with the state before and after.

Callers run inside the transaction of the change itself, so a change and its audit
record are committed (or rolled back) together.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from django.db import connection, models
from django.utils import timezone, translation
from django.utils.functional import Promise

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


@runtime_checkable
class Worded(Protocol):
    """Text that keeps how it was worded (i18n.wording.Wording):
    its ``to_json()`` is ``{"template": ..., "params": {...}}``."""

    def to_json(self) -> dict[str, Any]: ...


AuditMessage = str | Promise  # plain text, a Wording, or a gettext_lazy template


def message_words(
    message: AuditMessage, params: Mapping[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """The English text of an audit message and how it was worded (stored as
    ``AuditEvent.message_args``, said again in the reader's language by the audit page):
    a Wording keeps its own words; a gettext_lazy template is stored with ``params``
    (its msgid is its English text); plain text has no words ({})."""
    if isinstance(message, Promise):
        values = dict(params or {})
        with translation.override("en"):
            template = str(message)
            english = str(message % values) if values else template
            words = {name: _json_param(value) for name, value in values.items()}
        return english, {"template": template, "params": words}
    if isinstance(message, Worded):
        return str(message), message.to_json()
    return str(message), {}


def _json_param(value: Any) -> Any:
    """A message's value as stored in its words: numbers and text as they are, a lazy
    text (a choice's label) as a template of its own; anything else as text."""
    if isinstance(value, Promise):
        return {"template": str(value), "params": {}}
    if isinstance(value, Worded):
        return value.to_json()
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        return value
    return str(value)


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
    message: AuditMessage = "",
    params: Mapping[str, Any] | None = None,
    tenant: Tenant | None = None,
) -> AuditEvent:
    """One audit event for `instance`, not yet saved: for callers that save many at once
    (``AuditEvent.objects.bulk_create``) in the transaction of their change. ``message``
    may be a Wording or a gettext_lazy template filled with ``params`` (see
    message_words): the audit page then shows it in the reader's language."""
    tenant = tenant or _tenant_of(instance)
    text, words = message_words(message, params)
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
        message=text,
        message_args=words,
    )


def audit_record(
    *,
    actor: Any,
    action: str,
    instance: models.Model,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    source: str = "system",
    message: AuditMessage = "",
    params: Mapping[str, Any] | None = None,
    tenant: Tenant | None = None,
) -> AuditEvent:
    """Append one audit event for `instance`. Call inside the change's transaction.
    ``message`` and ``params`` as for audit_event."""
    event = audit_event(
        actor=actor,
        action=action,
        instance=instance,
        before=before,
        after=after,
        source=source,
        message=message,
        params=params,
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
    "message_args",
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
                    json.dumps(event.message_args or {}),
                )
            )
