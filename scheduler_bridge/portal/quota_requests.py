"""The quota panel of a tenant page and the quota change request its leads send from it.

The form shows, per flavour, what the tenant holds and the most it could ask for now;
blank numbers keep the current ones. It carries the numbers it showed (``seen``), so a
quota changed by someone else meanwhile is refused with the new numbers instead of being
overwritten by a request built on old ones. Bad input re-renders the tenant page (400)
with the errors at their fields and what was typed kept.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from scheduler_bridge import selectors
from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.portal.quota_book import FlavourAsk, QuotaBook
from scheduler_bridge.quotas import services as quota_services
from scheduler_bridge.quotas.models import TEXT_MAX_LENGTH, Quota, QuotaRequest
from scheduler_bridge.quotas.services import QuotaSeen
from scheduler_bridge.workloads.selectors import holdings_by_tenant_and_flavour
from tenants import access
from tenants.deletion import Description, said
from tenants.errors import TidegateError
from tenants.models import Role, Tenant
from tenants.portal.views import _rerender_with_errors, visible_tenant_or_404

ASK_ROLES = (Role.LEAD, Role.ADMIN)
# the tenant page is rendered again with this form (errors, what was typed) when a
# request is refused; the panel picks it up from the request
SUBMITTED_FORM_ATTRIBUTE = "tidegate_quota_request_form"


def quota_deletion_blocker(tenant: Tenant) -> Description | None:
    count = Quota.objects.filter(tenant=tenant).count()
    return said(lambda: _("%(count)s quota(s)") % {"count": count}) if count else None


def _or_keep(value: int | None, keep: str) -> str:
    return keep if value is None else str(value)


def ask_label(ask: FlavourAsk) -> str:
    """'h100-80gb (gpu-east): now 6, at most 8' in the reader's language."""
    if ask.current.guaranteed is None:
        now = _("no quota yet")
    else:
        now = _("now %(guaranteed)s") % {"guaranteed": ask.current.guaranteed}
    most = (
        _("no ceiling (overcommit allowed)")
        if ask.largest is None
        else _("at most %(largest)s") % {"largest": ask.largest}
    )
    return _("%(flavour)s (%(cluster)s): %(now)s, %(most)s") % {
        "flavour": ask.flavour.name,
        "cluster": ask.flavour.cluster.name,
        "now": now,
        "most": most,
    }


def encode_seen(asks: dict[int, FlavourAsk]) -> str:
    return json.dumps(
        {
            str(pk): [a.current.guaranteed, a.current.borrow_limit, a.current.lend_limit]
            for pk, a in asks.items()
        },
        separators=(",", ":"),
    )


def decode_seen(raw: str, flavour_id: int) -> QuotaSeen | None:
    """The numbers the form showed for a flavour; None when it did not carry them
    (nothing to compare: the request is checked against the rules only)."""
    try:
        values = json.loads(raw or "{}")[str(flavour_id)]
        guaranteed, borrow, lend = (None if v is None else int(v) for v in values)
    except (KeyError, TypeError, ValueError):
        return None
    return QuotaSeen(guaranteed, borrow, lend)


class FlavourAskField(forms.ModelChoiceField):  # type: ignore[type-arg]
    """Flavours named with what the tenant holds and the most it can ask for."""

    asks: dict[int, FlavourAsk] = {}

    def label_from_instance(self, obj: Any) -> str:
        ask = self.asks.get(obj.pk)
        return ask_label(ask) if ask is not None else str(obj.name)


class QuotaRequestForm(forms.Form):
    flavour = FlavourAskField(queryset=Flavour.objects.none(), label=gettext_lazy("Flavour"))
    guaranteed = forms.IntegerField(
        min_value=0,
        required=False,
        label=gettext_lazy("Guaranteed GPUs"),
    )
    borrow_limit = forms.IntegerField(
        min_value=0, required=False, label=gettext_lazy("Borrow limit")
    )
    lend_limit = forms.IntegerField(min_value=0, required=False, label=gettext_lazy("Lend limit"))
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        label=gettext_lazy("Why"),
        max_length=TEXT_MAX_LENGTH,
    )
    seen = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, asks: dict[int, FlavourAsk], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["flavour"]
        assert isinstance(field, FlavourAskField)
        field.asks = asks
        field.queryset = Flavour.objects.filter(pk__in=asks).select_related("cluster")
        for name in ("guaranteed", "borrow_limit", "lend_limit"):
            self.fields[name].widget.attrs["placeholder"] = _("keep current")
        if not self.is_bound:
            self.initial["seen"] = encode_seen(asks)


def flavour_asks(user: Any, tenant: Tenant) -> dict[int, FlavourAsk]:
    """Flavour id -> what `tenant` holds and could ask for, for every flavour with
    capacity on the clusters `user` sees (a constant number of queries)."""
    flavours = list(selectors.flavours_visible_to(user).offered().order_by("cluster__name", "name"))
    book = QuotaBook(f.pk for f in flavours)
    parent_slug = tenant.parent.slug if tenant.parent else None
    return {f.pk: book.ask(tenant, f, parent_slug) for f in flavours}


def _prefill(request: HttpRequest) -> dict[str, Any]:
    """A quota request form prefilled from a link (``?flavour=<id>&guaranteed=<n>``, as
    the page of work that cannot run as asked links here); unreadable values are left out."""
    initial: dict[str, Any] = {}
    for key in ("flavour", "guaranteed"):
        value = request.GET.get(key, "")
        if value.isdigit():
            initial[key] = int(value)
    return initial


def quota_panel(request: HttpRequest, tenant: Tenant) -> dict[str, Any] | None:
    """The tenant page's quota panel: quotas with what is held now, the latest requests,
    and the request form for leads and admins."""
    quotas = list(Quota.objects.filter(tenant=tenant).select_related("flavour", "flavour__cluster"))
    requests = QuotaRequest.objects.filter(tenant=tenant).select_related(
        "flavour", "requested_by", "decided_by"
    )[:10]
    may_ask = access.has_role(request.user, tenant, ASK_ROLES)
    overcommitted = selectors.overcommitted_flavour_ids([q.flavour_id for q in quotas])
    held = holdings_by_tenant_and_flavour()
    for quota in quotas:
        core, elastic = held.get((tenant.pk, quota.flavour_id), (0, 0))
        quota.held_core, quota.held_elastic = core, elastic  # type: ignore[attr-defined]
    form = None
    asks: dict[int, FlavourAsk] = {}
    if may_ask:
        asks = flavour_asks(request.user, tenant)
        form = getattr(request, SUBMITTED_FORM_ATTRIBUTE, None) or QuotaRequestForm(
            asks=asks, initial=_prefill(request)
        )
    return {
        "template": "scheduler_bridge/quota_panel.html",
        "quotas": quotas,
        "requests": requests,
        "overcommitted": overcommitted if tenant.parent_id is None else set(),
        "may_ask": may_ask,
        "may_decide": quota_services.can_set_quota(request.user, tenant),
        "asks": list(asks.values()),
        "user_id": request.user.pk,
        "form": form,
        "tenant": tenant,
    }


@login_required
@require_POST
def quota_request_add(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = visible_tenant_or_404(request, slug)
    if not access.has_role(request.user, tenant, ASK_ROLES):
        raise Http404
    asks = flavour_asks(request.user, tenant)
    form = QuotaRequestForm(request.POST, asks=asks)
    if form.is_valid():
        data = form.cleaned_data
        try:
            quota_services.quota_request_create(
                actor=request.user,
                tenant=tenant,
                flavour=data["flavour"],
                guaranteed=data["guaranteed"],
                borrow_limit=data["borrow_limit"],
                lend_limit=data["lend_limit"],
                justification=data["justification"],
                seen=decode_seen(data["seen"], data["flavour"].pk),
                source="portal",
            )
        except quota_services.AlreadyRequested as error:
            messages.info(request, error.message)
            return redirect(reverse("portal-tenant", args=[tenant.slug]) + "#quotas")
        except TidegateError as error:
            _add_errors(form, error)
        else:
            messages.success(
                request, _("Quota request sent; the admins above your team will decide it.")
            )
            return redirect(reverse("portal-tenant", args=[tenant.slug]) + "#quotas")
    # the form goes back with the numbers of now, so sending it again is not refused as stale
    fresh = request.POST.copy()
    fresh["seen"] = encode_seen(flavour_asks(request.user, tenant))
    form.data = fresh
    setattr(request, SUBMITTED_FORM_ATTRIBUTE, form)
    return _rerender_with_errors(request, tenant, "quota_request_form", form)


def _add_errors(form: QuotaRequestForm, error: TidegateError) -> None:
    placed = False
    for field, errors in error.as_dict().items():
        target = field if field in form.fields and field != "seen" else None
        for message in errors:
            form.add_error(target, message)
            placed = True
    if not placed:
        form.add_error(None, error.message)


@login_required
@require_POST
def quota_request_withdraw(request: HttpRequest, request_id: int) -> HttpResponse:
    """The requester takes back a request still waiting for a decision (anyone else: 404)."""
    quota_request = get_object_or_404(
        selectors.quota_requests_visible_to(request.user).filter(
            requested_by_id=request.user.pk, state=QuotaRequest.State.PENDING
        ),
        pk=request_id,
    )
    try:
        quota_services.quota_request_cancel(
            actor=request.user, request=quota_request, source="portal"
        )
    except TidegateError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("Quota request withdrawn."))
    return redirect(reverse("portal-tenant", args=[quota_request.tenant.slug]) + "#quotas")
