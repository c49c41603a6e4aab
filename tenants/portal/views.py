"""Portal pages for leads and members: their tenants, members, namespaces and sub-teams.

Pages load tenants only through `tenants.access`, so a tenant outside the user's subtrees
is a 404. Writes go through `tenants.services`; their errors become form errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.apps import apps
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from tenants import access, services
from tenants.errors import TidegateError
from tenants.models import Tenant
from tenants.portal.forms import AddBindingForm, AddMemberForm

# Higher apps add panels to the tenant page: callables (request, tenant) -> a dict with
# "template" and that template's context, or None when the panel does not apply.
TenantPanel = Callable[[HttpRequest, Tenant], dict[str, Any] | None]
TENANT_PANELS: list[TenantPanel] = []


def register_tenant_panel(panel: TenantPanel) -> None:
    if panel not in TENANT_PANELS:
        TENANT_PANELS.append(panel)


def visible_tenant_or_404(request: HttpRequest, slug: str) -> Tenant:
    return get_object_or_404(access.tenants_visible_to(request.user), slug=slug)


@login_required
def home(request: HttpRequest) -> HttpResponse:
    tenants = access.tenants_visible_to(request.user).select_related("parent")
    rows = [{"tenant": t, "role": access.role_on(request.user, t)} for t in tenants]
    return render(request, "tenants/home.html", {"rows": rows})


def _detail_context(request: HttpRequest, tenant: Tenant, **forms_: forms.Form) -> dict[str, Any]:
    user = request.user
    visible = access.tenants_visible_to(user)
    ancestor_ids = tenant.ancestor_ids()[:-1]
    return {
        "tenant": tenant,
        "role": access.role_on(user, tenant),
        "ancestors": visible.filter(pk__in=ancestor_ids).order_by("depth"),
        "children": tenant.children.order_by("slug"),
        "memberships": tenant.memberships.select_related("user").order_by("user__username"),
        "inherited": access.memberships_visible_to(user)
        .filter(tenant__pk__in=ancestor_ids)
        .order_by("tenant__depth", "user__username"),
        "bindings": tenant.bindings.order_by("cluster_name", "namespace"),
        "can_manage_members": access.can_manage_members(user, tenant),
        "can_manage_bindings": access.can_manage_bindings(user, tenant),
        "member_form": forms_.get("member_form") or AddMemberForm(),
        "binding_form": forms_.get("binding_form") or AddBindingForm(),
        "panels": [panel for build in TENANT_PANELS if (panel := build(request, tenant))],
    }


@login_required
def tenant_detail(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = visible_tenant_or_404(request, slug)
    return render(request, "tenants/tenant_detail.html", _detail_context(request, tenant))


def _rerender_with_errors(
    request: HttpRequest, tenant: Tenant, form_name: str, form: forms.Form
) -> HttpResponse:
    context = _detail_context(request, tenant, **{form_name: form})
    return render(request, "tenants/tenant_detail.html", context, status=400)


@login_required
@require_POST
def member_add(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = visible_tenant_or_404(request, slug)
    if not access.can_manage_members(request.user, tenant):
        raise PermissionDenied
    form = AddMemberForm(request.POST)
    if form.is_valid():
        try:
            user = services.user_by_username(form.cleaned_data["username"])
            services.membership_create(
                actor=request.user,
                tenant=tenant,
                user=user,
                role=form.cleaned_data["role"],
                source="portal",
            )
        except TidegateError as error:
            form.add_error("username" if error.field == "user" else None, error.message)
        else:
            messages.success(request, _("Member added."))
            return redirect("portal-tenant", slug=tenant.slug)
    return _rerender_with_errors(request, tenant, "member_form", form)


@login_required
@require_POST
def member_remove(request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
    tenant = visible_tenant_or_404(request, slug)
    membership = get_object_or_404(tenant.memberships, pk=membership_id)
    try:
        services.membership_delete(actor=request.user, membership=membership, source="portal")
    except TidegateError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("Member removed."))
    return redirect("portal-tenant", slug=tenant.slug)


@login_required
@require_POST
def binding_add(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = visible_tenant_or_404(request, slug)
    if not access.can_manage_bindings(request.user, tenant):
        raise PermissionDenied
    form = AddBindingForm(request.POST)
    if form.is_valid():
        try:
            services.binding_create(
                actor=request.user, tenant=tenant, source="portal", **form.cleaned_data
            )
        except TidegateError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        else:
            messages.success(request, _("Namespace bound."))
            return redirect("portal-tenant", slug=tenant.slug)
    return _rerender_with_errors(request, tenant, "binding_form", form)


@login_required
@require_POST
def binding_remove(request: HttpRequest, slug: str, binding_id: int) -> HttpResponse:
    tenant = visible_tenant_or_404(request, slug)
    binding = get_object_or_404(tenant.bindings, pk=binding_id)
    try:
        services.binding_delete(actor=request.user, binding=binding, source="portal")
    except TidegateError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("Binding removed."))
    return redirect("portal-tenant", slug=tenant.slug)


@login_required
def audit_list(request: HttpRequest) -> HttpResponse:
    # the trail is the admins' page: whoever administers nothing gets 404, as for any
    # page that is not theirs
    if not (
        access.is_platform_admin(request.user)
        or access.roles_held(request.user) & set(access.WRITE_ALL_ROLES)
    ):
        raise Http404
    events = access.audit_events_visible_to(request.user).select_related("tenant")
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    for event in page:
        event.object_label = object_label(event.object_type)  # type: ignore[attr-defined]
    return render(request, "tenants/audit_list.html", {"page": page})


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
