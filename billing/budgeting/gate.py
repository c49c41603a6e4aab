"""The admission engine's budget gate: hard budgets hold new work back.

The scheduler bridge asks through its BudgetGate protocol (it may not import billing);
billing registers :func:`budget_gate_for_cluster` from its AppConfig. The factory runs once
per admission cycle and loads everything in a fixed number of queries (however many
budgets, tenants or workloads there are); ``may_start`` then answers from memory.

A workload is estimated at the price it would really pay: for each pod set, the rate card
of the flavour it would run on (the engine hands the gate each pod set narrowed to that
flavour; otherwise its first choice), the reserved price for the GPUs that fit in what is
left of its tenant's guarantee and the on-demand price for the rest (borrowed), times the
priority multiplier of its class (a card's own multiplier wins over the class's), MIG
instances at their fraction as statements price them, times its declared run time (one
hour if none). Within one cycle each allowed workload's estimate is taken off what is left
and its GPUs count as in use, so a cycle cannot admit a budget's worth of work several
times over. Same state, same order: same answers.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.utils import timezone

from billing.budgeting.budgets import budget_window
from billing.charging import pricing
from billing.charging.charges import default_multipliers, load_cards, load_flavours, load_rates
from billing.models import Budget
from billing.months import month_name
from i18n.wording import Wording, gettext_noop, wording
from scheduler_bridge.admission.model import PendingWorkload
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.models import Workload
from tenants.models import Tenant

logger = logging.getLogger(__name__)

HOUR = Fraction(3600)


def _money(value: Fraction) -> str:
    return str(pricing.round_half_even(value))


@dataclass
class HardBudget:
    tenant_slug: str
    period_name: str
    currency: str
    amount: Fraction
    spent: Fraction  # measured, plus work promised since the measurement (this cycle's too)
    # card currency -> budget currency, this month's exchange rate (None: not recorded,
    # and a workload's estimate cannot be weighed against this budget)
    fx: Fraction | None = Fraction(1)

    @property
    def left(self) -> Fraction:
        return self.amount - self.spent

    def reason_exhausted(self) -> Wording:
        return wording(
            gettext_noop(
                "%(tenant)s budget for %(period)s exhausted (hard): spent %(spent)s of "
                "%(amount)s %(currency)s"
            ),
            tenant=self.tenant_slug,
            period=self.period_name,
            spent=_money(self.spent),
            amount=_money(self.amount),
            currency=self.currency,
        )

    def reason_too_expensive(self, cost: Fraction) -> Wording:
        return wording(
            gettext_noop(
                "%(tenant)s budget for %(period)s: this workload would cost about "
                "%(cost)s %(currency)s, %(left)s %(currency)s left of %(amount)s %(currency)s "
                "allowed (hard)"
            ),
            tenant=self.tenant_slug,
            period=self.period_name,
            cost=_money(cost),
            currency=self.currency,
            left=_money(max(self.left, Fraction(0))),
            amount=_money(self.amount),
        )


@dataclass(frozen=True)
class FlavourPrice:
    """What one device of a flavour costs per hour under its card, before the multiplier."""

    card: pricing.RateCard
    reserved: Fraction
    on_demand: Fraction


def flavour_price(card: pricing.RateCard, flavour: pricing.Flavour) -> FlavourPrice:
    """Per device-hour, as statements price it (a MIG instance at its compute fraction,
    unless the card prices that profile per instance)."""
    reserved, _ = pricing._unit_price(card, flavour, card.reserved_price)
    on_demand, _ = pricing._unit_price(card, flavour, card.on_demand_price)
    return FlavourPrice(card=card, reserved=reserved * HOUR, on_demand=on_demand * HOUR)


@dataclass
class PriceBook:
    """Prices and multipliers valid at one moment, for every flavour that has a card."""

    by_id: dict[int, FlavourPrice]
    multipliers: Mapping[str, Decimal]
    flavours: Mapping[int, pricing.Flavour]

    @classmethod
    def load(cls, now: datetime) -> PriceBook:
        cards = load_cards()
        flavours = load_flavours()
        prices = {}
        for pk, flavour in flavours.items():
            card = pricing.resolve_card(cards, flavour, now)
            if card is not None:
                prices[pk] = flavour_price(card, flavour)
        return cls(prices, default_multipliers(), flavours)

    def flavour_ids(self, cluster_id: int) -> dict[str, int]:
        """Flavour name -> pk, for the flavours of one cluster."""
        return {f.name: pk for pk, f in self.flavours.items() if f.cluster_id == cluster_id}

    def cost(
        self,
        price: FlavourPrice,
        *,
        devices: int,
        borrowed: int,
        priority_class: str,
        run_time_s: float | None,
    ) -> Fraction:
        """``devices`` for the run time (one hour if none), ``borrowed`` of them on demand."""
        borrowed = max(0, min(borrowed, devices))
        hours = Fraction(int(run_time_s or 3600), 3600)
        multiplier = pricing._multiplier(price.card, priority_class, self.multipliers)
        per_hour = (devices - borrowed) * price.reserved + borrowed * price.on_demand
        return per_hour * multiplier * hours


class BillingBudgetGate:
    """Refuses work of a tenant whose own or an ancestor's hard budget is spent, or would
    be by this workload (see the module docstring for the estimate)."""

    def __init__(
        self,
        budgets: dict[int, list[HardBudget]],
        chains: dict[str, list[int]],
        *,
        book: PriceBook,
        flavour_ids: Mapping[str, int],
        guarantees: Mapping[tuple[int, str], int] | None = None,
        in_use: Mapping[tuple[int, str], int] | None = None,
        priority_classes: Mapping[str, str] | None = None,
    ) -> None:
        self.budgets = budgets
        self.chains = chains
        self.book = book
        self.flavour_ids = flavour_ids
        self.guarantees = dict(guarantees or {})
        # (tenant pk, flavour name) -> devices its subtree holds, this cycle's admissions too
        self.in_use: dict[tuple[int, str], int] = defaultdict(int, in_use or {})
        self.priority_classes = dict(priority_classes or {})

    def _needs(self, workload: PendingWorkload) -> dict[str, int]:
        needs: dict[str, int] = defaultdict(int)
        for pod_set in workload.pod_sets:
            needs[pod_set.flavours[0]] += pod_set.gpus
        return needs

    def estimate(self, tenant_id: str, workload: PendingWorkload) -> Fraction:
        """What ``workload`` of ``tenant_id`` would cost over its run time."""
        chain = self.chains.get(tenant_id, [])
        own = chain[-1] if chain else None
        priority_class = self.priority_classes.get(workload.id, "")
        cost = Fraction(0)
        for name, devices in self._needs(workload).items():
            price = self.book.by_id.get(self.flavour_ids.get(name, -1))
            if price is None:
                continue  # no card prices it: statements show it at 0 too
            held = self.in_use[(own, name)] if own is not None else 0
            guarantee = self.guarantees.get((own, name), 0) if own is not None else 0
            cost += self.book.cost(
                price,
                devices=devices,
                borrowed=held + devices - guarantee,
                priority_class=priority_class,
                run_time_s=workload.max_run_time_s,
            )
        return cost

    def blocked(self, tenant_id: str) -> str | None:
        chain = self.chains.get(tenant_id, [])
        for budget in (b for pk in chain for b in self.budgets.get(pk, [])):
            if budget.left <= 0:
                return budget.reason_exhausted()
        return None

    def may_start(self, tenant_id: str, workload: PendingWorkload) -> tuple[bool, str | None]:
        chain = self.chains.get(tenant_id, [])
        applicable = [b for pk in chain for b in self.budgets.get(pk, [])]
        if not applicable:
            return True, None
        for budget in applicable:
            if budget.left <= 0:
                return False, budget.reason_exhausted()
        cost = self.estimate(tenant_id, workload)
        for budget in applicable:
            if budget.fx is not None and cost * budget.fx > budget.left:
                return False, budget.reason_too_expensive(cost * budget.fx)
        for budget in applicable:
            budget.spent += cost * (budget.fx or 0)
        for name, devices in self._needs(workload).items():
            for pk in chain:
                self.in_use[(pk, name)] += devices
        return True, None


def _chain(path: str) -> list[int]:
    return [int(part) for part in path.strip("/").split("/") if part]


def _promised_since(
    budgets: Iterable[tuple[Budget, datetime]], book: PriceBook, paths: Mapping[int, str]
) -> dict[int, Fraction]:
    """Budget pk -> estimated cost of its subtree's work admitted after its ``since``
    (by earlier cycles, on any cluster): money the last evaluation could not see yet.
    One query for all budgets."""
    pairs = list(budgets)
    if not pairs:
        return {}
    earliest = min(since for _budget, since in pairs)
    recent = list(
        Workload.objects.filter(admitted_at__gt=earliest, flavour__isnull=False)
        .select_related("flavour", "priority_class")
        .only(
            "tenant_id",
            "admitted_at",
            "gpus",
            "borrowed",
            "max_run_time_s",
            "flavour__name",
            "flavour__resource_name",
            "priority_class__name",
        )
    )
    out: dict[int, Fraction] = {}
    for budget, since in pairs:
        prefix = paths[budget.tenant_id]
        total = Fraction(0)
        for workload in recent:
            assert workload.flavour is not None
            if workload.admitted_at is None or workload.admitted_at <= since:
                continue
            if not paths.get(workload.tenant_id, "").startswith(prefix):
                continue
            price = book.by_id.get(workload.flavour_id or 0)
            if price is None:
                continue
            lent = workload.borrowed_gpus
            flavour = workload.flavour
            total += book.cost(
                price,
                devices=int(workload.gpus or 0),
                borrowed=int(lent.get(flavour.name, lent.get(flavour.resource_name, 0)) or 0),
                priority_class=workload.priority_class.name if workload.priority_class else "",
                run_time_s=workload.max_run_time_s,
            )
        out[budget.pk] = total
    return out


def _holdings(
    cluster: Cluster, chains: Mapping[int, list[int]]
) -> tuple[dict[tuple[int, str], int], dict[tuple[int, str], int], dict[str, str]]:
    """Guarantees and devices held per (tenant, flavour name) on ``cluster`` (a tenant holds
    what its subtree holds, as its guarantee contains its children's), and the priority
    class of each pending workload by engine id. Three queries."""
    guarantees = {
        (tenant, name): guaranteed
        for tenant, name, guaranteed in Quota.objects.filter(flavour__cluster=cluster).values_list(
            "tenant_id", "flavour__name", "guaranteed"
        )
    }
    in_use: dict[tuple[int, str], int] = defaultdict(int)
    for tenant, name, gpus in Workload.objects.filter(
        cluster=cluster, state__in=Workload.ACTIVE_STATES, flavour__isnull=False
    ).values_list("tenant_id", "flavour__name", "gpus"):
        for pk in chains.get(tenant, [tenant]):
            in_use[(pk, name)] += int(gpus or 0)
    classes = {
        str(pk): name or ""
        for pk, name in Workload.objects.filter(
            cluster=cluster, state=Workload.State.PENDING
        ).values_list("pk", "priority_class__name")
    }
    return guarantees, dict(in_use), classes


def _fx(
    source: str | None, target: str, month: str, rates: Mapping[pricing.RateKey, Decimal]
) -> Fraction | None:
    """How many ``target`` one ``source`` (the cards' currency) is worth in ``month``."""
    if source is None or source == target:
        return Fraction(1)
    rate = rates.get((month, source, target))
    return Fraction(rate) if rate is not None and rate > 0 else None


def budget_gate_for_cluster(cluster: Cluster, now: datetime | None = None) -> BillingBudgetGate:
    """The gate for one admission cycle on ``cluster``."""
    now = now or timezone.now()
    tenants = list(Tenant.objects.values_list("pk", "slug", "path"))
    paths = {pk: path for pk, _slug, path in tenants}
    # The engine names tenants by slug; each maps to the pks of itself and its ancestors.
    chains = {slug: _chain(path) for _pk, slug, path in tenants}
    hard = list(
        Budget.objects.filter(is_active=True, enforcement=Budget.Enforcement.HARD).select_related(
            "tenant", "status"
        )
    )
    if not hard:
        return BillingBudgetGate({}, chains, book=PriceBook({}, {}, {}), flavour_ids={})
    book = PriceBook.load(now)
    measured: list[tuple[Budget, str, Fraction, datetime]] = []
    for budget in hard:
        name, start, _end = budget_window(budget.cadence, now)
        status = getattr(budget, "status", None)
        spent, since = Fraction(0), start
        if status is not None and status.period_name == name:
            hours = Fraction(int(max((now - status.evaluated_at).total_seconds(), 0)), 3600)
            # Work kept running since the last evaluation: count what it cost meanwhile.
            spent = Fraction(status.spent) + Fraction(status.running_per_hour) * hours
            since = status.evaluated_at
        measured.append((budget, name, spent, since))
    promised = _promised_since(((b, since) for b, _n, _s, since in measured), book, paths)
    budgets: dict[int, list[HardBudget]] = {}
    card_currency = next((p.card.currency for p in book.by_id.values()), None)
    rates = load_rates()
    for budget, name, spent, _since in measured:
        fx = _fx(card_currency, budget.currency, month_name(now), rates)
        if fx is None:
            logger.warning(
                "no %s -> %s exchange rate for %s: budget %s checks spend only",
                card_currency,
                budget.currency,
                month_name(now),
                budget.pk,
            )
        budgets.setdefault(budget.tenant_id, []).append(
            HardBudget(
                tenant_slug=budget.tenant.slug,
                period_name=name,
                currency=budget.currency,
                amount=Fraction(budget.amount),
                spent=Fraction(
                    pricing.round_half_even(spent + promised.get(budget.pk, 0) * (fx or 0))
                ),
                fx=fx,
            )
        )
    guarantees, in_use, classes = _holdings(cluster, {pk: _chain(p) for pk, p in paths.items()})
    return BillingBudgetGate(
        budgets,
        chains,
        book=book,
        flavour_ids=book.flavour_ids(cluster.pk),
        guarantees=guarantees,
        in_use=in_use,
        priority_classes=classes,
    )
