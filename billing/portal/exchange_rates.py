"""The exchange rates page: the rates per month and currency pair, and recording one
through billing.charging.exchange_rates (validated and audited in one transaction). Finance and
platform billing managers read it; platform billing writes; everyone else gets 404."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from billing import selectors
from billing.charging import exchange_rates
from billing.models import BillingPolicy, ExchangeRate
from billing.months import month_name
from billing.permissions import can_manage_platform_billing, can_read_platform_rates
from tenants.errors import TidegateError

CURRENCY_ERROR = gettext_lazy("Use a three-letter ISO 4217 code in capitals, e.g. USD.")


class ExchangeRateForm(forms.Form):
    month = forms.CharField(
        label=gettext_lazy("Month"),
        max_length=7,
        help_text=gettext_lazy("YYYY-MM: the charges of this month are converted with it."),
    )
    from_currency = forms.CharField(label=gettext_lazy("From currency"), max_length=3)
    to_currency = forms.CharField(label=gettext_lazy("To currency"), max_length=3)
    rate = forms.DecimalField(
        label=gettext_lazy("Rate"),
        max_digits=18,
        decimal_places=8,
        help_text=gettext_lazy("How many of the second currency one of the first is worth."),
    )
    source = forms.CharField(
        label=gettext_lazy("Source"),
        max_length=200,
        required=False,
        help_text=gettext_lazy("Where the rate comes from, e.g. the treasury's month-end rate."),
    )


def _save(request: HttpRequest, form: ExchangeRateForm) -> ExchangeRate | None:
    """Record the rate through the service (a month and pair already recorded is
    replaced); a refusal becomes field errors and nothing is written."""
    data = dict(form.cleaned_data)
    existing = ExchangeRate.objects.filter(
        month=data["month"], from_currency=data["from_currency"], to_currency=data["to_currency"]
    ).first()
    try:
        if existing is not None:
            return exchange_rates.exchange_rate_update(
                actor=request.user, exchange_rate=existing, changes=data, origin="portal"
            )
        return exchange_rates.exchange_rate_create(actor=request.user, fields=data, origin="portal")
    except TidegateError as error:
        found = error.field_errors or {error.field or "__all__": [error.message]}
        for field, texts in found.items():
            for text in texts:
                form.add_error(field if field in form.fields else None, text)
    return None


@login_required
def exchange_rate_list(request: HttpRequest) -> HttpResponse:
    """List the rates; platform billing managers also record one here (POST)."""
    if not can_read_platform_rates(request.user):
        raise Http404
    may_write = can_manage_platform_billing(request.user)
    default = BillingPolicy.current().default_currency
    form = ExchangeRateForm(initial={"from_currency": default})
    status = 200
    if request.method == "POST":
        if not may_write:
            raise Http404
        form = ExchangeRateForm(request.POST)
        if form.is_valid() and (rate := _save(request, form)) is not None:
            messages.success(
                request,
                _("Recorded: 1 %(from)s = %(rate)s %(to)s (%(month)s).")
                % {
                    "from": rate.from_currency,
                    "rate": rate_text(rate.rate),
                    "to": rate.to_currency,
                    "month": rate.month,
                },
            )
            return redirect("billing-exchange-rates")
        status = 400
    context = {
        "rates": selectors.exchange_rates_visible_to(request.user).select_related("created_by"),
        "form": form,
        "may_write": may_write,
        "default_currency": default,
        "example_month": month_name(timezone.now()),
    }
    return render(request, "billing/exchange_rates.html", context, status=status)


def rate_text(rate: Decimal) -> str:
    """A rate without trailing zeros: 7.1234, not 7.12340000."""
    text = f"{rate:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
