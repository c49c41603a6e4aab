"""Django admin for every scheduler-bridge model; changes are audited."""

from typing import Any

from django import forms
from django.contrib import admin

from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from scheduler_bridge.quotas.rules import quota_violations
from scheduler_bridge.quotas.services import quota_context
from tenants.admin import AuditedAdmin


@admin.register(Cluster)
class ClusterAdmin(AuditedAdmin):
    list_display = ["name", "gateway", "status", "last_synced_at"]
    list_filter = ["gateway", "status"]
    search_fields = ["name", "display_name"]
    readonly_fields = ["status", "status_message", "last_synced_at"]


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


@admin.register(QuotaRequest)
class QuotaRequestAdmin(AuditedAdmin):
    list_display = ["tenant", "flavour", "guaranteed", "state", "requested_by", "created_at"]
    list_filter = ["state"]
