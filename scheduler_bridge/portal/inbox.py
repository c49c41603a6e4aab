"""The quota request inbox: what waits for the reader's decision, and what was decided.

A request is the reader's to decide when they administer the parent of its tenant
(platform admins: every request), as ``quotas.services.can_set_quota`` says. Whoever
administers nothing gets 404 here, as on every page that is not theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from scheduler_bridge.portal.quota_book import FlavourAsk, QuotaBook
from scheduler_bridge.quotas import services as quota_services
from scheduler_bridge.quotas.models import QuotaRequest
from tenants import access
from tenants.errors import Conflict, TidegateError
from tenants.models import Role


def quota_requests_decidable_by(user: Any) -> QuerySet[QuotaRequest]:
    """Requests `user` may approve or reject, in any state: those of tenants whose parent
    they administer (platform admins: all)."""
    return QuotaRequest.objects.filter(
        access.tenant_filter(user, [Role.ADMIN], field="tenant__parent")
    ).select_related(
        "tenant", "tenant__parent", "flavour", "flavour__cluster", "requested_by", "decided_by"
    )


def pending_count(user: Any) -> int:
    """How many requests wait for `user`'s decision (shown in the navigation)."""
    if not may_decide_anything(user):
        return 0
    return quota_requests_decidable_by(user).filter(state=QuotaRequest.State.PENDING).count()


def may_decide_anything(user: Any) -> bool:
    return access.is_platform_admin(user) or Role.ADMIN in access.roles_held(user)


class DecisionForm(forms.Form):
    comment = forms.CharField(
        required=False,
        max_length=2000,
        label=gettext_lazy("Comment"),
        widget=forms.Textarea(attrs={"rows": 2}),
    )

    def __init__(self, *args: Any, decision: str = "approve", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decision = decision

    def clean_comment(self) -> str:
        comment = str(self.cleaned_data.get("comment", "")).strip()
        if self.decision == "reject" and not comment:
            raise forms.ValidationError(
                gettext_lazy("Say why you reject it: the requester reads this comment."),
                code="required",
            )
        return comment


@dataclass
class InboxRow:
    request: QuotaRequest
    ask: FlavourAsk
    form: DecisionForm

    @property
    def fits_now(self) -> bool:
        return self.ask.largest is None or self.request.guaranteed <= self.ask.largest

    @property
    def changes_guarantee(self) -> bool:
        return self.request.guaranteed != self.ask.current.guaranteed


def _inbox_rows(user: Any, forms_: dict[int, DecisionForm]) -> list[InboxRow]:
    pending = list(
        quota_requests_decidable_by(user)
        .filter(state=QuotaRequest.State.PENDING)
        .order_by("created_at", "id")
    )
    book = QuotaBook(r.flavour_id for r in pending)
    return [
        InboxRow(
            request=r,
            ask=book.ask(r.tenant, r.flavour, r.tenant.parent.slug if r.tenant.parent else None),
            form=forms_.get(r.pk) or DecisionForm(auto_id=f"id_%s_{r.pk}"),
        )
        for r in pending
    ]


def _render_inbox(
    request: HttpRequest, forms_: dict[int, DecisionForm] | None = None, status: int = 200
) -> HttpResponse:
    rows = _inbox_rows(request.user, forms_ or {})
    context = {"rows": rows, "states": DECIDED_STATES}
    return render(request, "scheduler_bridge/quota_inbox.html", context, status=status)


@login_required
def quota_inbox(request: HttpRequest) -> HttpResponse:
    if not may_decide_anything(request.user):
        raise Http404
    return _render_inbox(request)


DECIDED_STATES = [
    QuotaRequest.State.APPROVED,
    QuotaRequest.State.REJECTED,
    QuotaRequest.State.CANCELLED,
]


@login_required
def quota_history(request: HttpRequest) -> HttpResponse:
    if not may_decide_anything(request.user):
        raise Http404
    state = request.GET.get("state", "")
    decided = quota_requests_decidable_by(request.user).filter(state__in=DECIDED_STATES)
    if state in DECIDED_STATES:
        decided = decided.filter(state=state)
    else:
        state = ""
    page = Paginator(decided.order_by("-decided_at", "-id"), 50).get_page(request.GET.get("page"))
    context = {"page": page, "state": state, "states": QuotaRequest.State.choices[1:]}
    return render(request, "scheduler_bridge/quota_history.html", context)


DECIDED = {
    "approve": gettext_lazy("Quota request approved."),
    "reject": gettext_lazy("Quota request rejected."),
}


@login_required
@require_POST
def quota_request_decide(request: HttpRequest, request_id: int, decision: str) -> HttpResponse:
    """Approve or reject (with a comment; a rejection needs one), then back to the inbox
    with a message; a refusal re-renders the inbox (400) with the error at the request."""
    quota_request = get_object_or_404(quota_requests_decidable_by(request.user), pk=request_id)
    decide = {
        "approve": quota_services.quota_request_approve,
        "reject": quota_services.quota_request_reject,
    }.get(decision)
    if decide is None:
        raise Http404
    form = DecisionForm(request.POST, decision=decision, auto_id=f"id_%s_{quota_request.pk}")
    if form.is_valid():
        try:
            decide(
                actor=request.user,
                request=quota_request,
                comment=form.cleaned_data["comment"],
                source="portal",
            )
        except Conflict as error:  # decided meanwhile: nothing left to do here
            messages.error(request, error.message)
        except TidegateError as error:
            form.add_error("comment" if error.field == "comment" else None, error.message)
            return _render_inbox(request, {quota_request.pk: form}, status=400)
        else:
            messages.success(request, DECIDED[decision])
        return redirect("portal-quota-requests")
    return _render_inbox(request, {quota_request.pk: form}, status=400)
