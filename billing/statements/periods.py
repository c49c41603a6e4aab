"""Closing and re-opening billing periods; adjustments that correct closed statements.

Closing writes one frozen Statement (with its lines) per tenant, plus the platform's
``__idle__`` statement when idle capacity is shown as a line. It is:

* held as a lease (open -> closing, with a token, its holder and an expiry), so two closes
  at once make one set of statements: the second is told the period is being closed and
  until when. The closer renews the lease at every step; times are the database's clock,
  so web and worker hosts whose clocks differ agree on when a lease ran out;
* chunked: tenants are written a chunk per transaction, each renewing the lease, so a
  crash loses at most one chunk's work. Once a dead closer's lease expired (after
  CLOSE_LEASE_SECONDS) the next close resumes where it stopped: the statements already
  written are kept, the rest priced from the same frozen settings, so the totals are
  those of an uninterrupted close. ``periods_resume_closes`` (every minute) does so
  unattended;
* aggregated in SQL (one GROUP BY over the period's ledger rows) and priced in
  :mod:`billing.charging.pricing`.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from billing.charging import pricing
from billing.charging.charges import PricingContext, billing_currency, busy_warnings, price_period
from billing.charging.history import PeriodSettings, period_settings
from billing.conf import billing_setting
from billing.errors import CurrencyMismatch, ExchangeRateMissing, PeriodBusy, PeriodClosed
from billing.models import Adjustment, BillingPeriod, Statement, StatementLine, UsageRecord
from billing.months import month_name
from billing.permissions import can_manage_platform_billing, can_reopen_periods, can_write_billing
from billing.statements.close_lease import (
    closes_abandoned,
    lease_held,
    lease_owner,
    lease_release,
    lease_renew,
)
from billing.statements.statement_changes import (
    LineFigures,
    LineIdentity,
    line_identities,
    previous_lines,
    statement_changes,
)
from billing.usage.ledger import period_create
from i18n.wording import gettext_noop, wording
from tenants.audit import audit_record, snapshot
from tenants.errors import PermissionDenied, ValidationFailed
from tenants.models import Tenant

logger = logging.getLogger(__name__)

State = BillingPeriod.State

# a period's state as a word inside a sentence ("is open, not closed")
STATE_WORDS = {
    State.OPEN: pgettext_lazy("billing period state in a sentence", "open"),
    State.CLOSING: pgettext_lazy("billing period state in a sentence", "closing"),
    State.CLOSED: pgettext_lazy("billing period state in a sentence", "closed"),
}


def period_current(now: datetime | None = None) -> BillingPeriod:
    """The period of the current month (created open if needed)."""
    return period_create(now or timezone.now())


def period_close(
    *, actor: Any, period: BillingPeriod, source: str = "api", now: datetime | None = None
) -> BillingPeriod:
    """Close ``period``: price it, write and freeze one statement per tenant.

    Raises PermissionDenied without the right to close periods, PeriodClosed (409) if it
    is already closed or has not ended yet, PeriodBusy (409) while another worker is
    closing it, ExchangeRateMissing (409) when charges need converting with a rate not
    recorded (nothing is written and the period is open again). A close interrupted by a
    crash is resumed by calling this again once its claim went stale (or at once by the
    worker that held it): at once when its lease expired, else PeriodBusy says until when.
    """
    if actor is not None and not can_manage_platform_billing(actor):
        raise PermissionDenied(
            _(
                "Closing a billing period needs the platform admin role, or finance on every "
                "top-level tenant."
            )
        )
    now = now or timezone.now()
    token = str(uuid.uuid4())
    with transaction.atomic():
        period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
        if period.state == State.CLOSED:
            raise PeriodClosed(
                _(
                    "Billing period %(period)s is already closed (on %(closed_at)s UTC); its "
                    "statements are frozen. Record corrections as adjustments in an open "
                    "period."
                ),
                params={"period": period.name, "closed_at": f"{period.closed_at:%Y-%m-%d %H:%M}"},
            )
        if period.end > now:
            raise PeriodClosed(
                _(
                    "Billing period %(period)s runs until %(end)s; it can be closed once it "
                    "has ended."
                ),
                params={"period": period.name, "end": f"{period.end:%Y-%m-%d}"},
            )
        if period.state == State.CLOSING and lease_held(period):
            raise PeriodBusy(
                _(
                    "Billing period %(period)s is being closed by %(owner)s; its lease runs "
                    "until %(expires)s UTC. If that closer stopped, close again after that "
                    "and the close resumes where it stopped."
                ),
                params={
                    "period": period.name,
                    "owner": period.close_owner or _("another worker"),
                    "expires": f"{period.close_lease_expires_at:%H:%M:%S}",
                },
            )
        before = snapshot(period)
        resumed = period.state == State.CLOSING
        period.state = State.CLOSING
        period.close_token = token
        period.close_owner = lease_owner()
        period.save(update_fields=["state", "close_token", "close_owner"])
        lease_renew(period, token)
        period.refresh_from_db(fields=["close_heartbeat_at", "close_lease_expires_at"])
        audit_record(
            actor=actor,
            action="action",
            instance=period,
            before=before,
            after=snapshot(period),
            source=source,
            message=wording(gettext_noop("close resumed"))
            if resumed
            else wording(gettext_noop("close started")),
        )
    try:
        _write_statements(period, token)
    except pricing.MissingExchangeRates as error:
        lease_release(period, token)
        raise _missing_rates(error) from error
    return _finish_close(period, token, actor, source)


def _missing_rates(error: pricing.MissingExchangeRates) -> ExchangeRateMissing:
    pairs = ", ".join(f"{src} → {dst} ({month})" for month, src, dst in error.missing)
    return ExchangeRateMissing(
        _(
            "No exchange rate recorded for %(pairs)s: charges priced in one currency cannot "
            "be billed in the other without it, and nothing was written. Add the rate for "
            "that month under Billing → Exchange rates (or POST "
            "/api/v1/billing/exchange-rates/), then close again."
        ),
        params={"pairs": pairs},
    )


def _write_statements(period: BillingPeriod, token: str) -> None:
    context = PricingContext.load()
    # The first close freezes what was in force; a re-close prices with that same copy.
    # Priced in the same transaction: a close refused (a missing exchange rate) freezes
    # nothing, so the close after the rate was added sees it.
    with transaction.atomic():
        lease_renew(period, token)
        settings = period_settings(
            period,
            freeze=True,
            cards=context.cards,
            multipliers=context.multipliers,
            rates={key: rate for key, rate in context.rates.items() if key[0] <= period.name},
            fresh=period.reprice,
        )
        priced = price_period(period, context=context, settings=settings)
    run = _close_run(period, context, settings, priced.lines)
    chunk = int(billing_setting("CLOSE_CHUNK"))
    for i in range(0, len(run.order), chunk):
        ids = run.order[i : i + chunk]
        with transaction.atomic():
            lease_renew(period, token)
            written = _written(period, ids)
            _insert_statements(run, [t for t in ids if t not in written])


@dataclass(frozen=True)
class CloseRun:
    """What a close writes statements from, worked out once before the chunks: the
    priced lines per tenant (None: the platform's idle lines), in statement order, with
    what each statement needs besides its lines."""

    period: BillingPeriod
    context: PricingContext
    settings: PeriodSettings
    lines_by_tenant: Mapping[int | None, list[pricing.ChargeLine]]
    tenants: Mapping[int, Tenant]
    order: list[int | None]
    # the currency of the first line, or the platform's (a period without lines)
    currency: str
    # (tenant, period name) -> the current statement that late usage corrects
    corrections: Mapping[tuple[int | None, str], int]
    # a re-close: the lines of the revision before (None on a first close)
    previous: Mapping[int | None, dict[LineIdentity, LineFigures]] | None
    # tenant id -> warnings about busy time that could not be measured
    busy: Mapping[int, set[str]]


def _close_run(
    period: BillingPeriod,
    context: PricingContext,
    settings: PeriodSettings,
    lines: list[pricing.ChargeLine],
) -> CloseRun:
    lines_by_tenant: dict[int | None, list[pricing.ChargeLine]] = defaultdict(list)
    for line in lines:
        lines_by_tenant[line.tenant_id].append(line)
    tenants = {
        t.pk: t
        for t in Tenant.objects.filter(is_active=True)
        | Tenant.objects.filter(pk__in=[k for k in lines_by_tenant if k is not None])
    }
    order: list[int | None] = [pk for pk in sorted(tenants, key=lambda pk: tenants[pk].path)]
    if None in lines_by_tenant:
        order.append(None)
    return CloseRun(
        period=period,
        context=context,
        settings=settings,
        lines_by_tenant=lines_by_tenant,
        tenants=tenants,
        order=order,
        currency=next((line.currency for line in lines), context.currency_at(period.start)),
        corrections=_statements_corrected(period, lines),
        previous=previous_lines(period),
        busy=busy_warnings(UsageRecord.objects.filter(period=period), context.flavours),
    )


def _written(period: BillingPeriod, ids: list[int | None]) -> set[int | None]:
    """Tenants of ``ids`` whose statement of this revision is written already (a close
    resumed after a worker died)."""
    done: set[int | None] = set(
        Statement.objects.filter(period=period, revision=period.revision)
        .filter(tenant_id__in=[t for t in ids if t is not None])
        .values_list("tenant_id", flat=True)
    )
    if (
        None in ids
        and Statement.objects.filter(
            period=period, revision=period.revision, tenant__isnull=True
        ).exists()
    ):
        done.add(None)
    return done


def _statements_corrected(
    period: BillingPeriod, lines: list[pricing.ChargeLine]
) -> dict[tuple[int | None, str], int]:
    """(tenant, period name) -> the current statement that late usage corrects."""
    names = {line.usage_period for line in lines if line.usage_period}
    found = Statement.objects.filter(period__name__in=names).order_by("revision")
    return {(s.tenant_id, s.period.name): s.pk for s in found.select_related("period")}


def _insert_statements(run: CloseRun, tenant_ids: list[int | None]) -> None:
    """Write the statements of ``tenant_ids`` and their lines (one chunk of a close)."""
    if not tenant_ids:
        return
    statements = [_statement(run, tenant_id) for tenant_id in tenant_ids]
    try:
        with transaction.atomic():
            created = Statement.objects.bulk_create(statements)
    except IntegrityError as error:  # the unique key caught a duplicate: one set only
        raise PeriodBusy(
            _("Statements of %(period)s were written by another worker"),
            params={"period": run.period.name},
        ) from error
    StatementLine.objects.bulk_create(_statement_lines(run, created), batch_size=1000)


def _statement(run: CloseRun, tenant_id: int | None) -> Statement:
    period, settings, context = run.period, run.settings, run.context
    lines = run.lines_by_tenant.get(tenant_id, [])
    tenant = run.tenants.get(tenant_id) if tenant_id is not None else None
    mode = (
        settings.attribution_at(tenant_id, period.end - timedelta(seconds=1)).mode
        if tenant_id is not None
        else pricing.PLATFORM_COST
    )
    # the tenant's billing currency (one for the whole period); idle: the platform's
    own_currency = (
        settings.attribution_at(tenant_id, period.start).currency
        if tenant_id is not None
        else settings.default_currency
    )
    changes = (
        statement_changes(run.previous.get(tenant_id, {}), line_identities(lines, context))
        if run.previous is not None and period.revision > 1
        else []
    )
    return Statement(
        period=period,
        revision=period.revision,
        tenant=tenant,
        tenant_slug=tenant.slug if tenant else pricing.IDLE_TENANT,
        tenant_name=tenant.name if tenant else "Idle capacity",
        cost_center=tenant.cost_center if tenant else "",
        mode=mode,
        currency=own_currency or next((line.currency for line in lines), run.currency),
        total=sum((line.amount for line in lines), Decimal("0.00")),
        gpu_hours=sum((line.gpu_hours for line in lines if _is_usage(line)), Decimal(0)),
        gpu_hours_busy=sum((line.gpu_hours_busy or Decimal(0) for line in lines), Decimal(0)),
        warnings=sorted(
            {
                f"no rate card covers {context.flavours[line.flavour_id].name}; "
                "its usage is shown at a rate of 0"
                for line in lines
                if line.rate_card_id is None and line.flavour_id in context.flavours
            }
            | run.busy.get(tenant_id or 0, set())
        ),
        changes=changes,
    )


def _statement_lines(run: CloseRun, created: list[Statement]) -> list[StatementLine]:
    context = run.context
    adjustments = {
        a.pk: a for a in Adjustment.objects.filter(period=run.period).only("pk", "corrects_id")
    }
    rows = []
    for statement in created:
        for line in run.lines_by_tenant.get(statement.tenant_id, []):
            flavour = context.flavours.get(line.flavour_id) if line.flavour_id else None
            corrects = None
            if line.adjustment_id is not None and line.adjustment_id in adjustments:
                corrects = adjustments[line.adjustment_id].corrects_id
            elif line.usage_period:
                corrects = run.corrections.get((statement.tenant_id, line.usage_period))
            rows.append(
                StatementLine(
                    statement=statement,
                    kind=line.kind.value,
                    flavour_id=line.flavour_id,
                    flavour_name=flavour.name if flavour else "",
                    cluster_name=context.cluster_names.get(flavour.cluster_id or 0, "")
                    if flavour
                    else "",
                    priority_class=line.priority_class,
                    gpu_hours=line.gpu_hours,
                    gpu_hours_busy=line.gpu_hours_busy,
                    rate=line.rate,
                    multiplier=line.multiplier,
                    amount=line.amount,
                    currency=line.currency,
                    source_currency=line.source_currency,
                    source_amount=line.source_amount,
                    exchange_rate=line.exchange_rate,
                    exchange_month=line.exchange_month,
                    rate_card_id=line.rate_card_id,
                    usage_period=line.usage_period or "",
                    corrects_id=corrects,
                    adjustment_id=line.adjustment_id,
                    note=line.note[:300],
                    tenant_path=line.attribution.path,
                    cost_center=line.attribution.cost_center,
                    mode=line.attribution.mode if statement.tenant_id is not None else "",
                )
            )
    return rows


def _is_usage(line: pricing.ChargeLine) -> bool:
    return pricing.KIND_FACTS[pricing.Kind(line.kind)].usage


def _finish_close(period: BillingPeriod, token: str, actor: Any, source: str) -> BillingPeriod:
    with transaction.atomic():
        lease_renew(period, token)
        period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
        before = snapshot(period)
        period.state = State.CLOSED
        period.closed_at = timezone.now()
        period.closed_by = actor if getattr(actor, "is_authenticated", False) else None
        period.close_token = ""
        period.close_lease_expires_at = None
        period.save(
            update_fields=[
                "state",
                "closed_at",
                "closed_by",
                "close_token",
                "close_lease_expires_at",
            ]
        )
        count = Statement.objects.filter(period=period, revision=period.revision).count()
        audit_record(
            actor=actor,
            action="action",
            instance=period,
            before=before,
            after=snapshot(period),
            source=source,
            message=wording(
                gettext_noop("closed: %(count)s statement(s), revision %(revision)s"),
                count=count,
                revision=period.revision,
            ),
        )
    logger.info("billing period %s closed (%s statements)", period.name, count)
    return period


def period_reopen(
    *, actor: Any, period: BillingPeriod, reason: str, reprice: bool = False, source: str = "api"
) -> BillingPeriod:
    """Re-open the latest closed period (platform admins; audited with ``reason``).

    Its statements stay as they were, superseded: the next close writes revision + 1,
    priced with the settings the last close froze, unless ``reprice`` asks for the
    settings (rate cards, quotas, tree, billing settings) the history holds now.
    Raises PermissionDenied, ValidationFailed without a reason, PeriodClosed (409) if
    the period is not closed or a later period is already closed.
    """
    if not can_reopen_periods(actor):
        raise PermissionDenied(_("Re-opening a billing period is for platform administrators."))
    if not reason.strip():
        raise ValidationFailed(
            _("Say why the period is re-opened (it is audited)."), field="reason"
        )
    with transaction.atomic():
        period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
        if period.state != State.CLOSED:
            raise PeriodClosed(
                _("Billing period %(period)s is %(state)s, not closed."),
                params={"period": period.name, "state": STATE_WORDS[State(period.state)]},
            )
        later = BillingPeriod.objects.filter(start__gt=period.start, state=State.CLOSED).first()
        if later is not None:
            raise PeriodClosed(
                _(
                    "Billing period %(later)s after %(period)s is closed; re-open the latest "
                    "closed period only."
                ),
                params={"later": later.name, "period": period.name},
            )
        before = snapshot(period)
        period.state = State.OPEN
        period.revision += 1
        period.reprice = reprice
        period.closed_at = None
        period.save(update_fields=["state", "revision", "reprice", "closed_at"])
        audit_record(
            actor=actor,
            action="action",
            instance=period,
            before=before,
            after=snapshot(period),
            source=source,
            message=wording(
                gettext_noop("re-opened to re-price with today's settings: %(reason)s")
                if reprice
                else gettext_noop("re-opened: %(reason)s"),
                reason=reason.strip(),
            ),
        )
    return period


def adjustment_create(
    *,
    actor: Any,
    tenant: Tenant,
    period: BillingPeriod,
    amount: Decimal,
    currency: str,
    reason: str,
    corrects: Statement | None = None,
    source: str = "api",
) -> Adjustment:
    """A correction billed in the open ``period``, pointing at the statement it corrects.

    Raises PermissionDenied without admin or finance on the tenant, ValidationFailed for
    a zero amount, a mismatched currency or a statement of another tenant, PeriodClosed
    (409) when ``period`` is not open.
    """
    if not can_write_billing(actor, tenant):
        raise PermissionDenied(
            _("Adjusting %(tenant)s's bill needs admin or finance on it."),
            params={"tenant": tenant.slug},
        )
    amount = Decimal(amount)
    if amount == 0 or amount != amount.quantize(Decimal("0.01")):
        raise ValidationFailed(
            _("The adjustment amount must be non-zero, in cents (e.g. -12.50)."), field="amount"
        )
    if corrects is not None and corrects.tenant_id != tenant.pk:
        raise ValidationFailed(
            _("Statement %(number)s is not %(tenant)s's."),
            params={"number": corrects.number, "tenant": tenant.slug},
            field="corrects",
        )
    with transaction.atomic():
        period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
        if not period.is_open:
            raise PeriodClosed(
                _(
                    "Billing period %(period)s is %(state)s; adjustments go into an open "
                    "period (e.g. %(open)s)."
                ),
                params={
                    "period": period.name,
                    "state": STATE_WORDS[State(period.state)],
                    "open": month_name(timezone.now()),
                },
            )
        expected = billing_currency(tenant)
        if currency != expected:
            raise CurrencyMismatch(
                _("%(tenant)s is billed in %(expected)s; the adjustment is in %(currency)s."),
                params={"tenant": tenant.slug, "expected": expected, "currency": currency},
            )
        adjustment = Adjustment.objects.create(
            tenant=tenant,
            period=period,
            amount=amount,
            currency=currency,
            reason=reason.strip()[:300],
            corrects=corrects,
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
        )
        audit_record(
            actor=actor,
            action="create",
            instance=adjustment,
            before=None,
            after=snapshot(adjustment),
            source=source,
        )
    return adjustment


def adjustment_delete(*, actor: Any, adjustment: Adjustment, source: str = "api") -> None:
    """Withdraw an adjustment not billed yet (its period still open); else PeriodClosed."""
    if not can_write_billing(actor, adjustment.tenant):
        raise PermissionDenied(
            _("Adjusting %(tenant)s's bill needs admin or finance on it."),
            params={"tenant": adjustment.tenant.slug},
        )
    with transaction.atomic():
        period = BillingPeriod.objects.select_for_update().get(pk=adjustment.period_id)
        if not period.is_open:
            raise PeriodClosed(
                _(
                    "This adjustment was billed when %(period)s closed; it can no longer be "
                    "withdrawn. Record a counter-adjustment instead."
                ),
                params={"period": period.name},
            )
        audit_record(
            actor=actor,
            action="delete",
            instance=adjustment,
            before=snapshot(adjustment),
            after=None,
            source=source,
        )
        adjustment.delete()


def periods_resume_closes(now: datetime | None = None) -> list[str]:
    """Resume every close whose closer died (its lease expired): the names of the periods
    closed. A close still leased, or refused again, is left for the next call."""
    return _close_all(list(closes_abandoned()), now or timezone.now())


def periods_roll(now: datetime | None = None) -> list[str]:
    """Housekeeping: make sure this month's period exists, resume closes whose worker
    died, and close ended months if AUTO_CLOSE_AFTER_DAYS says so. Returns what it did."""
    now = now or timezone.now()
    done = [f"open {period_current(now).name}"]
    due: list[BillingPeriod] = list(closes_abandoned())
    days = billing_setting("AUTO_CLOSE_AFTER_DAYS")
    if days is not None:
        due += list(
            BillingPeriod.objects.filter(
                state=State.OPEN, end__lte=now - timedelta(days=int(days))
            ).order_by("start")
        )
    return done + [f"closed {name}" for name in _close_all(due, now)]


def _close_all(due: list[BillingPeriod], now: datetime) -> list[str]:
    closed = []
    for period in due:
        try:
            period_close(actor=None, period=period, source="system", now=now)
        except (PeriodBusy, PeriodClosed, ExchangeRateMissing) as error:
            logger.info("period %s not closed: %s", period.name, error)
            continue
        closed.append(period.name)
    return closed
