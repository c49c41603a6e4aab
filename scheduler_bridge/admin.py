"""Django admin for every scheduler-bridge model; changes are audited. Clusters and
quotas are saved through their services, so an admin edit syncs ResourceQuotas and runs
an admission cycle exactly as an API edit does."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.http import HttpRequest

from scheduler_bridge.dra.flavours import mapping_problems
from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.inventory.services import cluster_delete, cluster_save
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from scheduler_bridge.quotas.rules import quota_violations
from scheduler_bridge.quotas.services import (
    quota_context,
    quota_delete,
    quota_upsert,
)
from tenants import access
from tenants.admin import AuditedAdmin
from tenants.errors import TidegateError


class PrometheusAddress(forms.URLField):
    """A Prometheus address as people type it: ``prometheus.monitoring.svc:9090`` is read
    as ``http://prometheus.monitoring.svc:9090``, plain http being an in-cluster
    Prometheus service's scheme. (Django's URLField would take the host for a scheme and
    refuse the address, and Django 6 puts https in front of one without a port.)"""

    def __init__(self, **kwargs: Any) -> None:
        # (to_python puts the scheme in first; said here too, or Django warns that its
        # own default changes in Django 6)
        super().__init__(**{**kwargs, "assume_scheme": "http"})

    def to_python(self, value: Any) -> str:
        if isinstance(value, str) and value.strip() and "://" not in value:
            value = f"http://{value.strip()}"
        return str(super().to_python(value))


class ClusterForm(forms.ModelForm):
    """A cluster's settings (the admin picks the fields); its driver-to-flavour map
    checked as the API checks it."""

    def clean_dra_flavours(self) -> dict[str, str]:
        mapped = self.cleaned_data.get("dra_flavours") or {}  # (an emptied box: none)
        problems = mapping_problems(mapped)
        if problems:
            raise forms.ValidationError(problems)
        return dict(mapped)


@admin.register(Cluster)
class ClusterAdmin(AuditedAdmin):
    form = ClusterForm
    list_display = ["name", "gateway", "status", "last_synced_at"]
    list_filter = ["gateway", "status"]
    search_fields = ["name", "display_name"]
    readonly_fields = ["status", "status_message", "last_synced_at"]
    formfield_overrides = {models.URLField: {"form_class": PrometheusAddress}}

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        cluster_save(actor=request.user, cluster=obj, source="admin")

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        try:
            cluster_delete(actor=request.user, cluster=obj, source="admin")
        except TidegateError as error:
            messages.error(request, error.message)


@admin.register(Node)
class NodeAdmin(AuditedAdmin):
    list_display = [
        "name",
        "cluster",
        "product",
        "gpu_count",
        "mig_config",
        "mig_config_state",
        "present",
    ]
    list_filter = ["cluster", "product", "mig_config_state", "present"]
    search_fields = ["name"]


@admin.register(Flavour)
class FlavourAdmin(AuditedAdmin):
    list_display = ["name", "cluster", "resource_name", "gpu_equivalent", "capacity"]
    list_filter = ["cluster", "product"]


class QuotaAdminForm(forms.ModelForm):  # type: ignore[type-arg]
    """The same quota rules as the API, shown as form errors."""

    class Meta:
        model = Quota
        fields = [
            "tenant",
            "flavour",
            "guaranteed",
            "borrow_limit",
            "lend_limit",
            "overcommit_allowed",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        tenant, flavour = data.get("tenant"), data.get("flavour")
        if tenant is not None and flavour is not None and data.get("guaranteed") is not None:
            violations = quota_violations(
                quota_context(tenant, flavour),
                guaranteed=data["guaranteed"],
                lend_limit=data.get("lend_limit"),
                overcommit_allowed=bool(data.get("overcommit_allowed")),
            )
            for violation in violations:
                self.add_error(violation.field, violation.message)
        return data


@admin.register(Quota)
class QuotaAdmin(AuditedAdmin):
    form = QuotaAdminForm
    list_display = [
        "tenant",
        "flavour",
        "guaranteed",
        "borrow_limit",
        "lend_limit",
        "overcommit_allowed",
    ]
    list_filter = ["flavour__cluster", "overcommit_allowed"]
    search_fields = ["tenant__slug", "flavour__name"]
    autocomplete_fields = ["tenant"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        data = form.cleaned_data
        overcommit = (
            data.get("overcommit_allowed") if access.is_platform_admin(request.user) else None
        )
        saved, _ = quota_upsert(
            actor=request.user,
            tenant=data["tenant"],
            flavour=data["flavour"],
            guaranteed=data["guaranteed"],
            borrow_limit=data.get("borrow_limit"),
            lend_limit=data.get("lend_limit"),
            overcommit_allowed=overcommit,
            source="admin",
        )
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        try:
            quota_delete(actor=request.user, quota=obj, source="admin")
        except TidegateError as error:
            messages.error(request, error.message)


@admin.register(QuotaRequest)
class QuotaRequestAdmin(AuditedAdmin):
    list_display = ["tenant", "flavour", "guaranteed", "state", "requested_by", "created_at"]
    list_filter = ["state"]
