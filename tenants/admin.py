"""Django admin for every tenants model; every change made here is audited too."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest

from tenants.audit import audit_record, snapshot
from tenants.binding_rules import bindings_changed
from tenants.deletion import deletion_blockers
from tenants.models import ApiToken, AuditEvent, Membership, NamespaceBinding, Tenant
from tenants.portal.password import ResetPasswordForm


class AuditedAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Records an audit event in the same transaction as every admin save and delete."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        with transaction.atomic():
            before = snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
            super().save_model(request, obj, form, change)
            self.after_save(obj)
            audit_record(
                actor=request.user,
                action="update" if change else "create",
                instance=obj,
                before=before,
                after=snapshot(obj),
                source="admin",
            )

    def after_save(self, obj: Any) -> None:
        """Hook for derived fields that must be fixed before the audit snapshot."""

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with transaction.atomic():
            audit_record(
                actor=request.user,
                action="delete",
                instance=obj,
                before=snapshot(obj),
                after=None,
                source="admin",
            )
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)


@admin.register(Tenant)
class TenantAdmin(AuditedAdmin):
    list_display = ["slug", "name", "parent", "cost_center", "weight", "is_active", "depth"]
    list_filter = ["is_active", "depth"]
    search_fields = ["slug", "name", "cost_center"]
    readonly_fields = ["path", "depth"]

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        # Tree edits go through the service: it checks cycles and rewrites subtree paths.
        from tenants import services

        data = {f: form.cleaned_data[f] for f in services.TENANT_FIELDS if f in form.cleaned_data}
        parent = form.cleaned_data.get("parent")
        if change:
            original = Tenant.objects.get(pk=obj.pk)
            services.tenant_update(
                actor=request.user, tenant=original, source="admin", parent=parent, **data
            )
        else:
            created = services.tenant_create(
                actor=request.user, parent=parent, source="admin", **data
            )
            obj.pk = created.pk

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        # Show every deletion blocker (usage, quotas, ...) as a protected object.
        to_delete, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        for obj in objs:
            protected.extend(str(reason) for reason in deletion_blockers(obj))
        return to_delete, counts, perms_needed, protected

    def delete_model(self, request: HttpRequest, obj: Tenant) -> None:
        from tenants import services

        services.tenant_delete(actor=request.user, tenant=obj, source="admin")

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        return _with_tree_validation(form, obj)


def _with_tree_validation(form_class: Any, instance: Tenant | None) -> Any:
    """Show a cycle as a form error on `parent` instead of failing the save."""

    class TreeForm(form_class):  # type: ignore[misc, valid-type]
        def clean_parent(self) -> Tenant | None:
            parent: Tenant | None = self.cleaned_data.get("parent")
            inside_own_subtree = (
                instance is not None
                and instance.pk
                and parent is not None
                and (parent.pk == instance.pk or parent.path.startswith(instance.path))
            )
            if inside_own_subtree:
                assert instance is not None and parent is not None
                raise ValidationError(
                    f"{parent.slug} is {instance.slug} itself or one of its descendants; "
                    "a tenant cannot be moved under its own subtree."
                )
            return parent

    return TreeForm


@admin.register(Membership)
class MembershipAdmin(AuditedAdmin):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["tenant"]


@admin.register(NamespaceBinding)
class NamespaceBindingAdmin(AuditedAdmin):
    list_display = ["cluster_name", "namespace", "tenant", "sync_state", "synced_at"]
    list_filter = ["cluster_name", "sync_state"]
    search_fields = ["namespace", "tenant__slug"]
    autocomplete_fields = ["tenant"]

    def after_save(self, obj: Any) -> None:
        bindings_changed(obj.cluster_name)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with transaction.atomic():
            super().delete_model(request, obj)
            bindings_changed(obj.cluster_name)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["created_at", "actor_repr", "source", "action", "object_type", "object_repr"]
    list_filter = ["action", "source", "object_type"]
    search_fields = ["object_repr", "actor_repr"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """API tokens: platform admins see whose they are and revoke them (delete); tokens
    are made by their owners or `manage.py create_api_token`, as the secret is shown
    only to whoever creates one."""

    list_display = ["name", "user", "token_key", "created", "expiry", "last_used_at"]
    list_filter = ["expiry"]
    search_fields = ["name", "user__username", "token_key"]
    readonly_fields = ["name", "user", "token_key", "created", "expiry", "last_used_at"]
    exclude = ["digest"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class TidegateUserAdmin(UserAdmin):  # type: ignore[type-arg]
    """Django's user admin; setting a user's password here revokes their API tokens."""

    change_password_form = ResetPasswordForm


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), TidegateUserAdmin)
