"""The admission engine's budget gate: hard budgets hold new work back.

The scheduler bridge asks through its BudgetGate protocol (it may not import billing);
billing registers :func:`budget_gate_for_cluster` from its AppConfig. The factory runs once
per admission cycle and loads everything in four queries; ``may_start`` then answers from
memory. Within one cycle, each allowed workload's estimated cost is taken off what is
left, so a cycle cannot admit a budget's worth of work several times over. Same state,
same order: same answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.utils import timezone

from billing import pricing
from billing.budgets import budget_window
from billing.charges import load_cards
from billing.models import Budget
from scheduler_bridge.admission.model import PendingWorkload
from scheduler_bridge.admission.wording import gettext_noop, wording
from scheduler_bridge.inventory.models import Cluster, Flavour
from tenants.models import Tenant


@dataclass
class HardBudget:
    tenant_slug: str
    period_name: str
    currency: str
    left: Fraction

    def reason_exhausted(self) -> str:
        return wording(
            gettext_noop("%(tenant)s budget for %(period)s exhausted (hard)"),
            tenant=self.tenant_slug,
            period=self.period_name,
        )

    def reason_too_expensive(self, cost: Fraction) -> str:
        return wording(
            gettext_noop(
                "%(tenant)s budget for %(period)s: this workload would cost about "
                "%(cost)s %(currency)s, %(left)s left (hard)"
            ),
            tenant=self.tenant_slug,
            period=self.period_name,
            cost=str(pricing.round_half_even(cost)),
            currency=self.currency,
            left=str(pricing.round_half_even(max(self.left, Fraction(0)))),
        )


class BillingBudgetGate:
    """Refuses work of a tenant whose own or an ancestor's hard budget is spent, or would
    be by this workload (its GPUs x price per hour x declared run time, one hour if none)."""

    def __init__(
        self,
        budgets: dict[int, list[HardBudget]],
        chains: dict[str, list[int]],
        hourly_price: dict[str, Fraction],
    ) -> None:
        self.budgets = budgets
        self.chains = chains
        self.hourly_price = hourly_price

    def estimate(self, workload: PendingWorkload) -> Fraction:
        hours = Fraction(int(workload.max_run_time_s or 3600), 3600)
        cost = Fraction(0)
        for pod_set in workload.pod_sets:
            prices = [self.hourly_price.get(name, Fraction(0)) for name in pod_set.flavours]
            cost += pod_set.gpus * min(prices, default=Fraction(0)) * hours
        return cost

    def may_start(self, tenant_id: str, workload: PendingWorkload) -> tuple[bool, str | None]:
        applicable = [b for pk in self.chains.get(tenant_id, []) for b in self.budgets.get(pk, [])]
        if not applicable:
            return True, None
        for budget in applicable:
            if budget.left <= 0:
                return False, budget.reason_exhausted()
        cost = self.estimate(workload)
        for budget in applicable:
            if cost > budget.left:
                return False, budget.reason_too_expensive(cost)
        for budget in applicable:
            budget.left -= cost
        return True, None


def _hourly_prices(cluster: Cluster, now: datetime) -> dict[str, Fraction]:
    """Reserved price of one device-hour of each flavour of ``cluster`` now."""
    cards = load_cards()
    prices = {}
    for flavour in Flavour.objects.filter(cluster=cluster):
        ref = pricing.Flavour(
            id=flavour.pk,
            name=flavour.name,
            product=flavour.product,
            mig_profile=flavour.mig_profile,
            gpu_equivalent=flavour.gpu_equivalent,
            cluster_id=flavour.cluster_id,
        )
        card = pricing.resolve_card(cards, ref, now)
        if card is None:
            continue
        if card.per_instance(ref):
            prices[flavour.name] = Fraction(card.reserved_price)
        else:
            prices[flavour.name] = Fraction(card.reserved_price) * ref.fraction
    return prices


def _admitted_since(
    tenant: Tenant, since: datetime, prices: dict[int, dict[str, Fraction]], now: datetime
) -> Fraction:
    """Estimated cost of work of `tenant`'s subtree admitted after `since`."""
    from scheduler_bridge.workloads.models import Workload

    cost = Fraction(0)
    recent = Workload.objects.filter(
        tenant__path__startswith=tenant.path, admitted_at__gt=since, flavour__isnull=False
    ).select_related("flavour", "cluster")
    for workload in recent:
        assert workload.flavour is not None
        if workload.cluster_id not in prices:
            prices[workload.cluster_id] = _hourly_prices(workload.cluster, now)
        price = prices[workload.cluster_id].get(workload.flavour.name, Fraction(0))
        hours = Fraction(int(workload.max_run_time_s or 3600), 3600)
        cost += workload.gpus * price * hours
    return cost


def budget_gate_for_cluster(cluster: Cluster, now: datetime | None = None) -> BillingBudgetGate:
    """The gate for one admission cycle on ``cluster``."""
    now = now or timezone.now()
    budgets: dict[int, list[HardBudget]] = {}
    hard = Budget.objects.filter(is_active=True, enforcement=Budget.Enforcement.HARD)
    prices: dict[int, dict[str, Fraction]] = {}
    for budget in hard.select_related("tenant", "status"):
        name, start, _end = budget_window(budget.cadence, now)
        status = getattr(budget, "status", None)
        spent = Decimal(0)
        since = start
        if status is not None and status.period_name == name:
            hours = Fraction(int(max((now - status.evaluated_at).total_seconds(), 0)), 3600)
            # Work kept running since the last evaluation: count what it cost meanwhile.
            spent_now = Fraction(status.spent) + Fraction(status.running_per_hour) * hours
            spent = Decimal(str(pricing.round_half_even(spent_now)))
            since = status.evaluated_at
        # Work admitted since then (by earlier cycles, on any cluster) is promised money
        # the last evaluation could not see yet.
        spent += Decimal(
            str(pricing.round_half_even(_admitted_since(budget.tenant, since, prices, now)))
        )
        budgets.setdefault(budget.tenant_id, []).append(
            HardBudget(
                tenant_slug=budget.tenant.slug,
                period_name=name,
                currency=budget.currency,
                left=Fraction(budget.amount) - Fraction(spent),
            )
        )
    # The engine names tenants by slug; each maps to the pks of itself and its ancestors.
    chains = {
        slug: [int(part) for part in path.strip("/").split("/") if part]
        for slug, path in Tenant.objects.values_list("slug", "path")
    }
    return BillingBudgetGate(budgets, chains, _hourly_prices(cluster, now) if budgets else {})
