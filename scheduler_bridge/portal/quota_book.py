"""Every quota of some flavours, read in one query, to answer "what could this tenant ask
for now?" for many tenants and flavours at once (the quota panel, the inbox).

The numbers mirror ``quotas.services.quota_context``; the approval reads them again
under the flavour's lock, so this is what a page shows, never what a write trusts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.quotas.rules import QuotaContext, largest_guarantee
from scheduler_bridge.quotas.services import QuotaSeen
from tenants.models import Tenant


@dataclass(frozen=True)
class _Row:
    tenant_id: int
    parent_id: int | None
    flavour_id: int
    guaranteed: int
    borrow_limit: int | None
    lend_limit: int | None
    overcommit_allowed: bool


@dataclass(frozen=True)
class FlavourAsk:
    """What a tenant holds of a flavour and the most it could ask for now (None: no
    ceiling, an allowed overcommit)."""

    flavour: Flavour
    current: QuotaSeen
    largest: int | None


class QuotaBook:
    def __init__(self, flavour_ids: Iterable[int]) -> None:
        rows = Quota.objects.filter(flavour_id__in=set(flavour_ids)).values_list(
            "tenant_id",
            "tenant__parent_id",
            "flavour_id",
            "guaranteed",
            "borrow_limit",
            "lend_limit",
            "overcommit_allowed",
        )
        self.rows = [_Row(*row) for row in rows]
        self.by_key = {(r.tenant_id, r.flavour_id): r for r in self.rows}

    def current(self, tenant: Tenant, flavour: Flavour) -> QuotaSeen:
        row = self.by_key.get((tenant.pk, flavour.pk))
        if row is None:
            return QuotaSeen(None, None, None)
        return QuotaSeen(row.guaranteed, row.borrow_limit, row.lend_limit)

    def _sum(self, flavour: Flavour, *, parent_id: int | None, without: int | None) -> int:
        return sum(
            r.guaranteed
            for r in self.rows
            if r.flavour_id == flavour.pk and r.parent_id == parent_id and r.tenant_id != without
        )

    def context(self, tenant: Tenant, flavour: Flavour, parent_slug: str | None) -> QuotaContext:
        parent_row = self.by_key.get((tenant.parent_id, flavour.pk)) if tenant.parent_id else None
        return QuotaContext(
            tenant=tenant.slug,
            flavour=flavour.name,
            parent=parent_slug,
            parent_guaranteed=parent_row.guaranteed if parent_row else 0,
            siblings_guaranteed=self._sum(flavour, parent_id=tenant.parent_id, without=tenant.pk)
            if tenant.parent_id
            else 0,
            children_guaranteed=self._sum(flavour, parent_id=tenant.pk, without=None),
            capacity=flavour.guarantee_ceiling,
            other_top_level_guaranteed=self._sum(flavour, parent_id=None, without=tenant.pk),
        )

    def ask(self, tenant: Tenant, flavour: Flavour, parent_slug: str | None) -> FlavourAsk:
        row = self.by_key.get((tenant.pk, flavour.pk))
        largest = largest_guarantee(
            self.context(tenant, flavour, parent_slug),
            overcommit_allowed=bool(row and row.overcommit_allowed),
        )
        return FlavourAsk(flavour, self.current(tenant, flavour), largest)
