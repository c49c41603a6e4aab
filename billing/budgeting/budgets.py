"""Budgets: writes, evaluation (spend, burn, forecast), and alerts that fire once.

A budget covers its tenant's whole subtree. Evaluation prices the subtree's ledger rows of
the current month or quarter with the same code as statements, adds reserved capacity
accrued so far, and stores the result in BudgetStatus, which the admission gate reads.
The forecast projects exhaustion from one burn rate (:func:`burn_rate`): the average of
the last FORECAST_WINDOW_HOURS of metered spend, or what the work running now costs per
hour when that is more. Pages show that same rate and say which of the two it is.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from billing import metrics
from billing.budgeting.suspension import Spent, budget_suspend_preemptible
from billing.charging import pricing
from billing.charging.charges import PricingContext, billing_currency, price_window
from billing.conf import billing_setting
from billing.errors import CurrencyMismatch
from billing.models import Budget, BudgetAlert, BudgetStatus
from billing.months import month_window, quarter_window
from billing.permissions import can_write_billing
from scheduler_bridge.workloads.models import Workload
from tenants.audit import audit_record, snapshot
from tenants.errors import PermissionDenied, ValidationFailed
from tenants.models import Tenant
from tenants.transactions import queue_after_commit

logger = logging.getLogger(__name__)
BUDGET_FIELDS = (
    "cadence",
    "amount",
    "currency",
    "thresholds",
    "enforcement",
    "on_exhausted",
    "is_active",
)
CENT = Decimal("0.01")


def budget_window(cadence: str, now: datetime) -> tuple[str, datetime, datetime]:
    """(name, start, end) of the budget period containing ``now``."""
    return quarter_window(now) if cadence == Budget.Cadence.QUARTER else month_window(now)


def _clean_thresholds(raw: Any) -> list[int]:
    if raw is None:
        return [50, 80, 100]
    if not isinstance(raw, list | tuple) or not raw:
        raise ValidationFailed(
            "thresholds is a list of percentages, e.g. [50, 80, 100].", field="thresholds"
        )
    try:
        values = sorted({int(v) for v in raw})
    except (TypeError, ValueError) as error:
        raise ValidationFailed(
            "Thresholds must be whole percentages.", field="thresholds"
        ) from error
    if values[0] < 1 or values[-1] > 1000:
        raise ValidationFailed("Thresholds must be between 1 and 1000 %.", field="thresholds")
    return values


def _validate(budget: Budget, now: datetime) -> None:
    try:
        amount = Decimal(budget.amount)
    except (InvalidOperation, TypeError) as error:
        raise ValidationFailed("amount must be a decimal number.", field="amount") from error
    if amount <= 0 or amount != amount.quantize(CENT):
        raise ValidationFailed(
            f"A budget amount must be positive and in cents (got {budget.amount}).",
            field="amount",
        )
    budget.amount = amount
    if budget.cadence not in Budget.Cadence.values:
        raise ValidationFailed("cadence is month or quarter.", field="cadence")
    if budget.enforcement not in Budget.Enforcement.values:
        raise ValidationFailed("enforcement is soft or hard.", field="enforcement")
    if budget.on_exhausted not in Budget.OnExhausted.values:
        raise ValidationFailed(
            "on_exhausted is hold (hold new work back) or suspend (also suspend running "
            "work that may be preempted).",
            field="on_exhausted",
        )
    budget.thresholds = _clean_thresholds(budget.thresholds)
    _name, start, _end = budget_window(budget.cadence, now)
    # Spend is converted to the budget's currency with each month's exchange rate; a
    # budget is kept in the cards' currency or in its tenant's billing currency.
    allowed = {PricingContext.load().currency_at(max(start, now)), billing_currency(budget.tenant)}
    if budget.currency not in allowed:
        expected = " or ".join(sorted(allowed))
        raise CurrencyMismatch(
            f"The rate cards price GPU-hours in, and {budget.tenant.slug} is billed in, "
            f"{expected}; a budget in {budget.currency} could not be compared with the spend. "
            f"Use {expected}."
        )


def budget_create(
    *, actor: Any, tenant: Tenant, source: str = "api", now: datetime | None = None, **fields: Any
) -> Budget:
    """A budget for ``tenant``'s subtree. Raises PermissionDenied (needs admin or finance
    on the tenant), ValidationFailed or CurrencyMismatch (400: nothing is written)."""
    if not can_write_billing(actor, tenant):
        raise PermissionDenied(f"Budgets of {tenant.slug} need admin or finance on it.")
    unknown = set(fields) - set(BUDGET_FIELDS)
    if unknown:
        raise ValidationFailed(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    budget = Budget(tenant=tenant, **fields)
    _validate(budget, now or timezone.now())
    with transaction.atomic():
        if Budget.objects.filter(tenant=tenant, cadence=budget.cadence).exists():
            raise ValidationFailed(
                f"{tenant.slug} already has a {budget.cadence}ly budget; change that one.",
                field="cadence",
            )
        try:
            with transaction.atomic():
                budget.save()
        except IntegrityError as error:
            raise ValidationFailed(
                f"{tenant.slug} already has a {budget.cadence}ly budget; change that one.",
                field="cadence",
            ) from error
        audit_record(
            actor=actor,
            action="create",
            instance=budget,
            before=None,
            after=snapshot(budget),
            source=source,
        )
    return budget


def budget_update(
    *, actor: Any, budget: Budget, source: str = "api", now: datetime | None = None, **changes: Any
) -> Budget:
    if not can_write_billing(actor, budget.tenant):
        raise PermissionDenied(f"Budgets of {budget.tenant.slug} need admin or finance on it.")
    unknown = set(changes) - set(BUDGET_FIELDS)
    if unknown:
        raise ValidationFailed(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        budget = Budget.objects.select_for_update().select_related("tenant").get(pk=budget.pk)
        before = snapshot(budget)
        for name, value in changes.items():
            setattr(budget, name, value)
        _validate(budget, now or timezone.now())
        try:
            with transaction.atomic():
                budget.save()
        except IntegrityError as error:
            raise ValidationFailed(
                f"{budget.tenant.slug} already has a {budget.cadence}ly budget.", field="cadence"
            ) from error
        audit_record(
            actor=actor,
            action="update",
            instance=budget,
            before=before,
            after=snapshot(budget),
            source=source,
        )
    return budget


def budget_delete(*, actor: Any, budget: Budget, source: str = "api") -> None:
    if not can_write_billing(actor, budget.tenant):
        raise PermissionDenied(f"Budgets of {budget.tenant.slug} need admin or finance on it.")
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="delete",
            instance=budget,
            before=snapshot(budget),
            after=None,
            source=source,
        )
        budget.delete()


@dataclass
class EvaluationResult:
    budgets: int = 0
    alerts_fired: int = 0
    suspended: list[int] = field(default_factory=list)  # workloads a spent budget suspended


def _subtrees(budgets: Iterable[Budget], paths: dict[int, str]) -> dict[int, set[int]]:
    """Budget id -> ids of every tenant in its tenant's subtree."""
    out = {}
    for budget in budgets:
        prefix = paths[budget.tenant_id]
        out[budget.pk] = {pk for pk, path in paths.items() if path.startswith(prefix)}
    return out


def running_cost_per_hour(
    tenant_ids: set[int], now: datetime, context: PricingContext, currency: str | None = None
) -> dict[int, Decimal]:
    """What the work admitted and running now costs per hour, per tenant (in
    ``currency``, with this month's exchange rate; None: the cards')."""
    usage = []
    for workload in Workload.objects.filter(
        tenant_id__in=tenant_ids, state__in=Workload.ACTIVE_STATES, flavour__isnull=False
    ).select_related("priority_class", "flavour"):
        assert workload.flavour is not None
        devices = int(workload.gpus or 0)
        if devices <= 0:
            continue
        borrowed = workload.borrowed_gpus
        lent = borrowed.get(workload.flavour.name, borrowed.get(workload.flavour.resource_name, 0))
        usage.append(
            pricing.Usage(
                tenant_id=workload.tenant_id,
                flavour_id=workload.flavour_id or 0,
                segment_start=now,
                device_seconds=devices * 3600,
                borrowed_device_seconds=min(devices, int(lent or 0)) * 3600,
                priority_class=workload.priority_class.name if workload.priority_class else "",
            )
        )
    if not usage:
        return {}
    priced = pricing.price(
        pricing.PricingInput(
            start=now,
            end=now + timedelta(hours=1),
            flavours=context.flavours,
            cards=context.cards,
            usage=usage,
            default_multipliers=context.multipliers,
            exchange_rates=context.rates,
            currency=currency,
            strict_rates=False,
        )
    )
    return _totals_in(priced, currency)


def _totals_in(priced: pricing.PricedPeriod, currency: str | None) -> dict[int, Decimal]:
    """Per tenant, the sum of its lines in ``currency`` (None: all). A line left in its
    card's currency for want of an exchange rate is not added to another currency."""
    totals: dict[int, Decimal] = defaultdict(lambda: Decimal("0.00"))
    skipped = set()
    for line in priced.lines:
        if line.tenant_id is None:
            continue
        if currency is not None and line.currency != currency:
            skipped.add(line.currency)
            continue
        totals[line.tenant_id] += line.amount
    if skipped:
        logger.warning(
            "budget spend in %s leaves out charges in %s: no exchange rate recorded",
            currency,
            ", ".join(sorted(skipped)),
        )
    return dict(totals)


@dataclass(frozen=True)
class BurnRate:
    """The one burn rate a budget is forecast with, and where it comes from.

    ``basis`` is ``"recent"`` (the average of the last ``window_hours`` of metered spend) or
    ``"running"`` (what the work running now costs per hour, when that is more: the ledger
    lags an hour behind, and newly admitted work has not been metered yet).
    """

    per_hour: Decimal
    basis: str
    recent_per_hour: Decimal
    running_per_hour: Decimal
    window_hours: int


def burn_rate(
    *, recent_per_hour: Decimal, running_per_hour: Decimal, window_hours: int
) -> BurnRate:
    """The rate forecasts use: the larger of the recent average and the running cost."""
    running_wins = running_per_hour > recent_per_hour
    return BurnRate(
        per_hour=running_per_hour if running_wins else recent_per_hour,
        basis="running" if running_wins else "recent",
        recent_per_hour=recent_per_hour,
        running_per_hour=running_per_hour,
        window_hours=window_hours,
    )


def status_burn_rate(status: BudgetStatus) -> BurnRate:
    """The burn rate ``status`` was forecast with (from its stored components)."""
    return burn_rate(
        recent_per_hour=status.burn_per_hour,
        running_per_hour=status.running_per_hour,
        window_hours=int(billing_setting("FORECAST_WINDOW_HOURS")),
    )


def forecast_exhaustion(
    *, amount: Decimal, spent: Decimal, per_hour: Decimal, now: datetime, window_end: datetime
) -> datetime | None:
    """When the budget runs out at ``per_hour``: now if spent, None if not before the
    budget period ends (or nothing is burning)."""
    if spent >= amount:
        return now
    if per_hour <= 0:
        return None
    hours = (amount - spent) / per_hour
    moment = now + timedelta(seconds=int(hours * 3600))
    return moment if moment < window_end else None


def budgets_evaluate(*, now: datetime | None = None) -> EvaluationResult:
    """Recompute every active budget's spend, burn and forecast; fire crossed thresholds.

    Each threshold fires once per budget period: the alert row is unique, so a second
    worker evaluating at the same time inserts nothing and sends nothing.
    """
    now = now or timezone.now()
    result = EvaluationResult()
    budgets = list(Budget.objects.filter(is_active=True).select_related("tenant"))
    if not budgets:
        return result
    context = PricingContext.load()
    paths = dict(Tenant.objects.values_list("pk", "path"))
    subtrees = _subtrees(budgets, paths)
    window_hours = int(billing_setting("FORECAST_WINDOW_HOURS"))
    # Spend is converted to each budget's currency: budgets are evaluated per currency.
    by_group: dict[tuple[str, str], list[Budget]] = defaultdict(list)
    for budget in budgets:
        by_group[(budget.currency, budget.cadence)].append(budget)
    running_in: dict[str, dict[int, Decimal]] = {}
    recent_in: dict[str, dict[int, Decimal]] = {}
    for (currency, cadence), group in by_group.items():
        ids = set().union(*(subtrees[b.pk] for b in group))
        if currency not in running_in:
            same = set().union(*(subtrees[b.pk] for b in budgets if b.currency == currency))
            running_in[currency] = running_cost_per_hour(same, now, context, currency)
            recent_in[currency] = _totals_in(
                price_window(
                    tenant_ids=same,
                    start=now - timedelta(hours=window_hours),
                    end=now,
                    as_of=now,
                    context=context,
                    currency=currency,
                ),
                currency,
            )
        running, recent = running_in[currency], recent_in[currency]
        name, start, end = budget_window(cadence, now)
        spent_by_tenant = _totals_in(
            price_window(
                tenant_ids=ids, start=start, end=end, as_of=now, context=context, currency=currency
            ),
            currency,
        )
        for budget in group:
            members = subtrees[budget.pk]
            spent = sum((spent_by_tenant.get(t, Decimal(0)) for t in members), Decimal("0.00"))
            recent_spend = sum((recent.get(t, Decimal(0)) for t in members), Decimal(0))
            rate = burn_rate(
                recent_per_hour=(recent_spend / window_hours).quantize(Decimal("0.0001")),
                running_per_hour=sum(
                    (running.get(t, Decimal(0)) for t in members), Decimal(0)
                ).quantize(Decimal("0.0001")),
                window_hours=window_hours,
            )
            BudgetStatus.objects.update_or_create(
                budget=budget,
                defaults={
                    "period_name": name,
                    "window_start": start,
                    "window_end": end,
                    "spent": spent,
                    "burn_per_hour": rate.recent_per_hour,
                    "running_per_hour": rate.running_per_hour,
                    "forecast_exhausted_at": forecast_exhaustion(
                        amount=budget.amount,
                        spent=spent,
                        per_hour=rate.per_hour,
                        now=now,
                        window_end=end,
                    ),
                    "evaluated_at": now,
                },
            )
            result.budgets += 1
            result.alerts_fired += _fire_alerts(budget, name, spent)
            if budget.suspends_when_spent and spent >= budget.amount:
                result.suspended += budget_suspend_preemptible(
                    budget=budget,
                    spent=Spent(name, spent, budget.amount, budget.currency),
                )
    return result


def _fire_alerts(budget: Budget, period_name: str, spent: Decimal) -> int:
    fired = 0
    for threshold in budget.thresholds:
        if spent * 100 < budget.amount * int(threshold):
            continue
        try:
            with transaction.atomic():
                alert = BudgetAlert.objects.create(
                    budget=budget,
                    period_name=period_name,
                    threshold=int(threshold),
                    spent=spent,
                    amount=budget.amount,
                    currency=budget.currency,
                )
        except IntegrityError:
            continue  # fired before (or by another worker just now)
        fired += 1
        metrics.budget_alert_counted(int(threshold))
        logger.info("budget alert: %s", alert)
        queue_after_commit("billing.tasks.budget_alert_notify", alert.pk)
    return fired
