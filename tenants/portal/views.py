"""Portal pages for leads and members: their tenants, members, namespaces and sub-teams.

Pages load tenants only through `tenants.access`, so a tenant outside the user's subtrees
is a 404. Writes go through `tenants.services`; their errors become form errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from tenants import access, services
from tenants.errors import TidegateError
from tenants.models import Role, Tenant
from tenants.portal import audit_trail
from tenants.portal.audit_trail import AuditFilters
from tenants.portal.forms import AddBindingForm, AddMemberForm, AuditFilterForm

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
def landing(request: HttpRequest) -> HttpResponse:
    """Where a login lands: the billing home for a finance user (and nothing else: what
    finance comes for), the user's tenants for everybody else."""
    if access.roles_held(request.user) == {Role.FINANCE} and not access.is_platform_admin(
        request.user
    ):
        return redirect("billing-home")
    return redirect("portal-home")


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
        "member_form": forms_.get("member_form")
        or AddMemberForm(roles=access.grantable_roles(user, tenant)),
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
    form = AddMemberForm(request.POST, roles=access.grantable_roles(request.user, tenant))
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


def _audit_reader_or_404(request: HttpRequest) -> None:
    # the trail is the admins' page: whoever administers nothing gets 404, as for any
    # page that is not theirs
    if not (
        access.is_platform_admin(request.user)
        or access.roles_held(request.user) & set(access.WRITE_ALL_ROLES)
    ):
        raise Http404


def _audit_filters(request: HttpRequest) -> tuple[AuditFilterForm, AuditFilters | None]:
    """The reader's filters from the query string; None when they are not valid. An
    untouched page (no parameter but the page number) is unfiltered."""
    data = request.GET if set(request.GET) - {"page"} else None
    form = AuditFilterForm(data, user=request.user)
    if not form.is_bound:
        return form, AuditFilters()
    return form, (form.filters() if form.is_valid() else None)


def _audit_form_errors(request: HttpRequest, form: AuditFilterForm) -> HttpResponse:
    context: dict[str, Any] = {
        "form": form,
        "page": None,
        "filtered": True,
        "zone": timezone.get_current_timezone_name(),
    }
    return render(request, "tenants/audit_list.html", context, status=400)


@login_required
def audit_list(request: HttpRequest) -> HttpResponse:
    """The audit trail an administrator may read, filtered by the GET form; bad filters
    re-render the form with field errors (400) and no events."""
    _audit_reader_or_404(request)
    form, filters = _audit_filters(request)
    if filters is None:
        return _audit_form_errors(request, form)
    events = audit_trail.audit_events_filtered(user=request.user, filters=filters)
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    audit_trail.attach_object_links(page.object_list)
    query = request.GET.copy()
    query.pop("page", None)
    context: dict[str, Any] = {
        "form": form,
        "page": page,
        "filtered": form.is_bound,
        "query": query.urlencode(),
        "zone": timezone.get_current_timezone_name(),
    }
    return render(request, "tenants/audit_list.html", context)


@login_required
def audit_csv(request: HttpRequest) -> HttpResponseBase:
    """The filtered trail as CSV (columns: `audit_trail.CSV_COLUMNS`, machine names in
    every language, times in UTC); bad filters re-render the page's form with errors (400)."""
    _audit_reader_or_404(request)
    form, filters = _audit_filters(request)
    if filters is None:
        return _audit_form_errors(request, form)
    events = audit_trail.audit_events_filtered(user=request.user, filters=filters)
    response = StreamingHttpResponse(
        audit_trail.csv_rows(events), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = 'attachment; filename="audit-trail.csv"'
    return response
