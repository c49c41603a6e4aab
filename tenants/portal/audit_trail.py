"""Reading the audit trail from the portal: what each kind of object is called, the
filtered selection an administrator asked for, where each object's portal page is, and
the CSV of a selection.

The portal pages of objects owned by higher apps (workloads, quota requests, statements)
are found by URL name and model label, so this module imports none of those apps.
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy

from tenants import access
from tenants.models import AuditEvent, Tenant

# What each audited kind of object is called, by its stored model label.
OBJECT_LABELS = {
    "tenants.tenant": gettext_lazy("tenant"),
    "tenants.membership": gettext_lazy("membership"),
    "tenants.namespacebinding": gettext_lazy("namespace binding"),
    "scheduler_bridge.cluster": gettext_lazy("cluster"),
    "scheduler_bridge.node": gettext_lazy("node"),
    "scheduler_bridge.flavour": gettext_lazy("GPU flavour"),
    "scheduler_bridge.quota": gettext_lazy("quota"),
    "scheduler_bridge.quotarequest": gettext_lazy("quota request"),
    "scheduler_bridge.priorityclass": gettext_lazy("priority class"),
    "scheduler_bridge.workload": gettext_lazy("workload"),
    "billing.budget": gettext_lazy("budget"),
    "billing.billingperiod": gettext_lazy("billing period"),
    "billing.statement": gettext_lazy("statement"),
    "billing.adjustment": gettext_lazy("adjustment"),
    "billing.ratecard": gettext_lazy("rate card"),
    "billing.tenantbillingsettings": gettext_lazy("billing settings"),
    "billing.billingpolicy": gettext_lazy("billing policy"),
}

# Columns of the CSV download: machine names, stable for scripts in every language.
CSV_COLUMNS = [
    "created_at",
    "actor",
    "source",
    "action",
    "object_type",
    "object_id",
    "object_repr",
    "tenant",
    "message",
]


def object_label(object_type: str) -> str:
    """What an audited object is, in the reader's language ("workload", "工作负载"),
    from its stored model label ("scheduler_bridge.workload")."""
    label = OBJECT_LABELS.get(object_type)
    if label is not None:
        return str(label)
    try:
        return str(apps.get_model(object_type)._meta.verbose_name)
    except (LookupError, ValueError):
        return object_type


@dataclass(frozen=True, kw_only=True)
class AuditFilters:
    """What the reader asked for; every field optional. Dates are whole days in the
    reader's time zone, both ends included."""

    tenant: Tenant | None = None
    object_type: str = ""
    action: str = ""
    actor: str = ""
    date_from: dt.date | None = None
    date_to: dt.date | None = None
    text: str = ""


def _day_start(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


def audit_events_filtered(*, user: Any, filters: AuditFilters) -> QuerySet[AuditEvent]:
    """The events `user` may read that match `filters`, newest first (the order of the
    `created_at` index, ties broken by id), with tenant and actor loaded."""
    events = access.audit_events_visible_to(user)
    if filters.tenant is not None:
        # the tenant's subtree, as a role on it covers the subtree
        events = events.filter(tenant_path__startswith=filters.tenant.path)
    if filters.object_type:
        events = events.filter(object_type=filters.object_type)
    if filters.action:
        events = events.filter(action=filters.action)
    if filters.actor:
        events = events.filter(actor_repr__iexact=filters.actor)
    if filters.date_from is not None:
        events = events.filter(created_at__gte=_day_start(filters.date_from))
    if filters.date_to is not None:
        events = events.filter(created_at__lt=_day_start(filters.date_to + dt.timedelta(days=1)))
    if filters.text:
        events = events.filter(
            Q(message__icontains=filters.text) | Q(object_repr__icontains=filters.text)
        )
    return events.select_related("tenant", "actor").order_by("-created_at", "-id")


# Portal pages of audited objects outside the tenants app: model label -> URL name
# taking the object's primary key.
_PAGES_BY_PK = {
    "scheduler_bridge.workload": "portal-workload",
    "billing.statement": "billing-statement",
}


def _existing(object_type: str, ids: set[str]) -> dict[str, Any]:
    """Of `ids`, those whose object still exists, each with its row (one query)."""
    try:
        model = apps.get_model(object_type)
    except (LookupError, ValueError):
        return {}
    keys = [int(i) for i in ids if i.isdigit()]
    return {str(obj.pk): obj for obj in model._default_manager.filter(pk__in=keys)}


def attach_object_links(events: Iterable[AuditEvent]) -> None:
    """Set `object_url` on each event whose object has a portal page and still exists,
    and `object_label` on all; one query per kind of linked object, whatever the count."""
    events = list(events)
    wanted: dict[str, set[str]] = {}
    for event in events:
        event.object_label = object_label(event.object_type)  # type: ignore[attr-defined]
        event.object_url = ""  # type: ignore[attr-defined]
        if event.object_type in _PAGES_BY_PK or event.object_type in {
            "tenants.tenant",
            "scheduler_bridge.quotarequest",
        }:
            wanted.setdefault(event.object_type, set()).add(event.object_id)
    found = {kind: _existing(kind, ids) for kind, ids in wanted.items()}
    for event in events:
        obj = found.get(event.object_type, {}).get(event.object_id)
        if obj is not None:
            event.object_url = _page_of(event.object_type, obj)  # type: ignore[attr-defined]


def _page_of(object_type: str, obj: Any) -> str:
    if object_type == "tenants.tenant":
        return reverse("portal-tenant", args=[obj.slug])
    if object_type == "scheduler_bridge.quotarequest":
        # a pending request waits in the inbox; a decided one is in the history
        if obj.state == "pending":
            return reverse("portal-quota-requests") + f"#request-{obj.pk}"
        return reverse("portal-quota-request-history")
    return reverse(_PAGES_BY_PK[object_type], args=[obj.pk])


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_rows(events: QuerySet[AuditEvent]) -> Iterator[str]:
    """The CSV text of `events`, line by line (header first), read in chunks so a long
    trail never sits in memory. Times are ISO 8601 in UTC."""
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    for event in events.iterator(chunk_size=2000):
        yield writer.writerow(
            [
                event.created_at.astimezone(dt.UTC).isoformat(),
                event.actor_repr,
                event.source,
                event.action,
                event.object_type,
                event.object_id,
                event.object_repr,
                event.tenant.slug if event.tenant else "",
                event.message,
            ]
        )
