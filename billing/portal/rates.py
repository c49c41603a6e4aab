"""The rate cards page: current, future and past cards, and creating or changing one
through billing.charging.rates (validated and audited in one transaction). Finance and platform
billing managers only; everyone else gets 404."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from billing import selectors
from billing.charging import rates
from billing.errors import CurrencyMismatch, RateCardOverlap
from billing.models import RateCard
from billing.permissions import can_manage_platform_billing
from billing.portal.common import can_read_rate_cards
from scheduler_bridge.inventory.models import Flavour
from tenants.errors import TidegateError


class RateCardForm(forms.Form):
    name = forms.CharField(label=gettext_lazy("Name"), max_length=120)
    flavour = forms.ModelChoiceField(
        label=gettext_lazy("Flavour"),
        queryset=Flavour.objects.select_related("cluster").order_by("cluster__name", "name"),
        required=False,
        empty_label=gettext_lazy("any flavour (use product below)"),
        help_text=gettext_lazy("A card for one flavour; leave empty to price by GPU product."),
    )
    product = forms.CharField(
        label=gettext_lazy("GPU product"),
        max_length=120,
        required=False,
        help_text=gettext_lazy("e.g. H100-80GB; empty with no flavour prices every GPU."),
    )
    mig_profile = forms.CharField(
        label=gettext_lazy("MIG profile"),
        max_length=40,
        required=False,
        help_text=gettext_lazy("e.g. 1g.10gb: prices one instance-hour of that profile."),
    )
    currency = forms.RegexField(
        label=gettext_lazy("Currency"),
        regex=r"^[A-Z]{3}$",
        max_length=3,
        error_messages={
            "invalid": gettext_lazy("Use a three-letter ISO 4217 code in capitals, e.g. USD.")
        },
    )
    reserved_price = forms.DecimalField(
        label=gettext_lazy("Price per GPU-hour within quota"),
        min_value=Decimal(0),
        max_digits=12,
        decimal_places=4,
    )
    on_demand_price = forms.DecimalField(
        label=gettext_lazy("On-demand price per GPU-hour (borrowed)"),
        min_value=Decimal(0),
        max_digits=12,
        decimal_places=4,
    )
    priority_multipliers = forms.CharField(
        label=gettext_lazy("Priority multipliers"),
        required=False,
        help_text=gettext_lazy("e.g. spot=0.6, batch=0.8 (0.6 means 40 per cent off)."),
    )
    valid_from = forms.DateField(
        label=gettext_lazy("Valid from"),
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text=gettext_lazy("The first day the card applies."),
    )
    valid_to = forms.DateField(
        label=gettext_lazy("Valid until (exclusive)"),
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text=gettext_lazy("The first day it no longer applies; empty for no end."),
    )

    def clean_priority_multipliers(self) -> dict[str, str]:
        text = self.cleaned_data.get("priority_multipliers") or ""
        out: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            try:
                number = Decimal(value.strip())
            except ArithmeticError:
                number = Decimal(-1)
            if not sep or not name.strip() or not number.is_finite() or number < 0:
                raise forms.ValidationError(
                    _("Write class=multiplier pairs, e.g. spot=0.6; “%(part)s” is not one.")
                    % {"part": part}
                )
            out[name.strip()] = str(number)
        return out

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("valid_from"), data.get("valid_to")
        if start and end and end <= start:
            self.add_error(
                "valid_to",
                _(
                    "“Valid until” (%(end)s) must be after “valid from” (%(start)s): it is the "
                    "first day the card no longer applies."
                )
                % {"end": end.isoformat(), "start": start.isoformat()},
            )
        flavour = data.get("flavour")
        if flavour and (data.get("product") or data.get("mig_profile")):
            self.add_error(
                "product",
                _(
                    "A card for a flavour takes its product and MIG profile from the flavour; "
                    "leave both empty."
                ),
            )
        if data.get("mig_profile") and not data.get("product"):
            self.add_error(
                "product",
                _("A MIG profile price needs the product it belongs to (e.g. H100-80GB)."),
            )
        return data


def initial_of(card: RateCard) -> dict[str, Any]:
    return {
        "name": card.name,
        "flavour": card.flavour,
        "product": card.product,
        "mig_profile": card.mig_profile,
        "currency": card.currency,
        "reserved_price": card.reserved_price,
        "on_demand_price": card.on_demand_price,
        "priority_multipliers": ", ".join(
            f"{k}={v}" for k, v in sorted((card.priority_multipliers or {}).items())
        ),
        "valid_from": card.valid_from,
        "valid_to": card.valid_to,
    }


def overlap_message(card: RateCard, wanted_from: date) -> str:
    """What the new card overlaps and how to fix it, in the user's language."""
    if card.valid_to is None:
        return _(
            "Overlaps rate card “%(name)s” (%(scope)s), valid from %(start)s with no end. Two "
            "cards for the same GPUs may not be valid on the same day: first give “%(name)s” a "
            "“valid until” of %(wanted)s (edit it below), or choose a different scope."
        ) % {
            "name": card.name,
            "scope": card.scope_label(),
            "start": card.valid_from.isoformat(),
            "wanted": wanted_from.isoformat(),
        }
    return _(
        "Overlaps rate card “%(name)s” (%(scope)s), valid from %(start)s until %(end)s. Two "
        "cards for the same GPUs may not be valid on the same day: start this card on "
        "%(end)s or later, or end it (“valid until”) on %(start)s or earlier."
    ) % {
        "name": card.name,
        "scope": card.scope_label(),
        "start": card.valid_from.isoformat(),
        "end": card.valid_to.isoformat(),
    }


def _save(request: HttpRequest, form: RateCardForm, card: RateCard | None) -> RateCard | None:
    """Write through the service; a refusal becomes a field error (nothing written)."""
    data = dict(form.cleaned_data)
    try:
        if card is None:
            return rates.rate_card_create(actor=request.user, source="portal", **data)
        return rates.rate_card_update(actor=request.user, card=card, source="portal", **data)
    except RateCardOverlap as error:
        other = error.other
        form.add_error(
            "valid_from",
            overlap_message(other, data["valid_from"]) if other is not None else error.message,
        )
    except CurrencyMismatch as error:
        other = error.other
        text = (
            _(
                "Rate card “%(name)s” is in %(currency)s in the same month; a month is billed "
                "in one currency. Use %(currency)s, or start the new currency on the first day "
                "of a month after “%(name)s” ends."
            )
            % {"name": other.name, "currency": other.currency}
            if other is not None
            else error.message
        )
        form.add_error("currency", text)
    except TidegateError as error:
        field = error.field if error.field in form.fields else None
        form.add_error(field, error.message)
    return None


def _cards_by_time(user: Any) -> dict[str, list[RateCard]]:
    today = timezone.now().date()
    groups: dict[str, list[RateCard]] = {"current": [], "future": [], "past": []}
    for card in selectors.rate_cards_visible_to(user).order_by("-valid_from", "name"):
        if card.valid_from > today:
            groups["future"].append(card)
        elif card.valid_to is not None and card.valid_to <= today:
            groups["past"].append(card)
        else:
            groups["current"].append(card)
    return groups


@login_required
def rate_cards(request: HttpRequest) -> HttpResponse:
    """List the cards; platform billing managers also create one here (POST)."""
    if not can_read_rate_cards(request.user):
        raise Http404
    may_write = can_manage_platform_billing(request.user)
    form = RateCardForm(initial={"currency": _default_currency()})
    status = 200
    if request.method == "POST":
        if not may_write:
            raise Http404
        form = RateCardForm(request.POST)
        if form.is_valid() and (card := _save(request, form, None)) is not None:
            messages.success(request, _("Rate card “%(name)s” created.") % {"name": card.name})
            return redirect("billing-rate-cards")
        status = 400
    context = {"groups": _cards_by_time(request.user), "form": form, "may_write": may_write}
    return render(request, "billing/rate_cards.html", context, status=status)


@login_required
def rate_card_edit(request: HttpRequest, pk: int) -> HttpResponse:
    if not can_manage_platform_billing(request.user):
        raise Http404
    card = get_object_or_404(selectors.rate_cards_visible_to(request.user), pk=pk)
    form = RateCardForm(initial=initial_of(card))
    status = 200
    if request.method == "POST":
        form = RateCardForm(request.POST)
        if form.is_valid() and (saved := _save(request, form, card)) is not None:
            messages.success(request, _("Rate card “%(name)s” saved.") % {"name": saved.name})
            return redirect("billing-rate-cards")
        status = 400
    return render(
        request, "billing/rate_card_edit.html", {"card": card, "form": form}, status=status
    )


def _default_currency() -> str:
    current = RateCard.objects.order_by("-valid_from").values_list("currency", flat=True).first()
    return current or "USD"
