"""Input and output shapes of the tenants API. Validation of fields lives here and in the
model validators; rules that span rows live in the services."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tenants import access
from tenants.models import ApiToken, AuditEvent, Membership, NamespaceBinding, Role, Tenant


class RejectUnknownFields:
    """Mixin for every serializer that takes input: a field the serializer does not know
    is a 400 naming it (with the closest known name) and listing the fields it takes,
    not silently dropped - a typo like "topolgy" must not submit work with the default
    topology. tests/security/test_unknown_fields.py checks every API serializer has it."""

    fields: Any

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            known = [name for name, field in self.fields.items() if not field.read_only]
            unknown = sorted(set(data) - set(known), key=str)
            if unknown:
                raise serializers.ValidationError(
                    {str(name): [unknown_field_message(str(name), known)] for name in unknown}
                )
        return super().to_internal_value(data)  # type: ignore[misc]


class QueuedSerializer(serializers.Serializer[Any]):
    """202: work queued; ``detail`` says which."""

    detail = serializers.CharField()


class NoInput(RejectUnknownFields, serializers.Serializer[Any]):
    """The body of an action that takes none (cancel, sync, close...): any field in it is
    refused like an unknown field elsewhere, rather than ignored."""

    @classmethod
    def check(cls, data: Any) -> None:
        cls(data=data if isinstance(data, Mapping) else {}).is_valid(raise_exception=True)


def unknown_field_message(name: str, known: list[str]) -> str:
    if not known:
        return gettext("Unknown field: this request takes no fields.")
    close = difflib.get_close_matches(name, known, n=1)
    listed = ", ".join(sorted(known))
    if close:
        return gettext("Unknown field. Did you mean '%(close)s'? Known fields: %(known)s.") % {
            "close": close[0],
            "known": listed,
        }
    return gettext("Unknown field. Known fields: %(known)s.") % {"known": listed}


class BoundedListSerializer(serializers.ListSerializer):  # type: ignore[type-arg]
    """A list of nested inputs with ``max_length``, checked before any item is read, its
    error a plain list of messages like any field's."""

    def to_internal_value(self, data: Any) -> Any:
        limit: int | None = getattr(self, "max_length", None)  # DRF's, unknown to the stubs
        if isinstance(data, list) and limit is not None and len(data) > limit:
            raise serializers.ValidationError(
                self.error_messages["max_length"].format(max_length=limit),
                code="max_length",
            )
        return super().to_internal_value(data)


def at_most(value: Any, limit: int) -> Any:
    """``value`` (a JSON list or object) if it has at most ``limit`` entries; else a 400."""
    if isinstance(value, list | dict) and len(value) > limit:
        raise serializers.ValidationError(
            gettext("Give at most %(limit)s entries (%(count)s given).")
            % {"limit": limit, "count": len(value)}
        )
    return value


@extend_schema_field(OpenApiTypes.STR)
class VisibleTenantField(serializers.SlugRelatedField):  # type: ignore[type-arg]
    """A tenant named by slug, looked up only among the tenants the caller may see."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("slug_field", "slug")
        super().__init__(**kwargs)

    def get_queryset(self) -> Any:
        request = self.context.get("request")
        return access.tenants_visible_to(request.user if request else None)


class TenantSerializer(RejectUnknownFields, serializers.ModelSerializer[Tenant]):
    # DRF's metaclass moves declared fields off the class, so this does not clash with
    # Field.parent at run time; the stubs cannot know that.
    parent = VisibleTenantField(required=False, allow_null=True)  # type: ignore[assignment]
    weight = serializers.DecimalField(max_digits=8, decimal_places=3, required=False)

    class Meta:
        model = Tenant
        fields = [
            "id",
            "slug",
            "name",
            "parent",
            "cost_center",
            "weight",
            "is_active",
            "depth",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "depth", "created_at", "updated_at"]

    def validate_weight(self, value: Decimal) -> Decimal:
        if value <= 0:
            raise serializers.ValidationError(
                "The fair-share weight must be greater than 0 (1 is the default share)."
            )
        return value

    def validate_name(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("The display name may not be blank.")
        return value.strip()


class MembershipSerializer(RejectUnknownFields, serializers.ModelSerializer[Membership]):
    tenant = VisibleTenantField()
    user = serializers.SlugRelatedField(
        slug_field="username", queryset=get_user_model().objects.filter(is_active=True)
    )
    role = serializers.ChoiceField(choices=Role.choices)

    class Meta:
        model = Membership
        fields = ["id", "tenant", "user", "role", "created_at"]
        read_only_fields = ["id", "created_at"]
        validators: list[Any] = []  # uniqueness is the service's, with a clearer message


class MembershipUpdateSerializer(RejectUnknownFields, serializers.Serializer[Membership]):
    role = serializers.ChoiceField(choices=Role.choices)


class NamespaceBindingSerializer(
    RejectUnknownFields, serializers.ModelSerializer[NamespaceBinding]
):
    tenant = VisibleTenantField()

    class Meta:
        model = NamespaceBinding
        fields = [
            "id",
            "tenant",
            "cluster_name",
            "namespace",
            "sync_state",
            "sync_message",
            "synced_at",
            "created_at",
        ]
        read_only_fields = ["id", "sync_state", "sync_message", "synced_at", "created_at"]
        validators: list[Any] = []  # "already bound" is the service's, naming the owner


class NamespaceBindingUpdateSerializer(
    RejectUnknownFields, serializers.Serializer[NamespaceBinding]
):
    tenant: VisibleTenantField = VisibleTenantField()


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True
    )

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "actor_repr",
            "source",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "tenant",
            "before",
            "after",
            "message",
        ]
        read_only_fields = fields


class MeMembershipSerializer(serializers.Serializer[Membership]):
    tenant = serializers.CharField(source="tenant.slug")
    tenant_name = serializers.CharField(source="tenant.name")
    role = serializers.CharField()


class MeSerializer(serializers.Serializer[Any]):
    username = serializers.CharField()
    email = serializers.EmailField()
    is_platform_admin = serializers.BooleanField()
    memberships = MeMembershipSerializer(many=True)
    visible_tenants = serializers.ListField(child=serializers.CharField())


class ApiTokenSerializer(RejectUnknownFields, serializers.ModelSerializer[ApiToken]):
    """A token as its owner sees it: never the secret (nor its hash)."""

    prefix = serializers.CharField(source="token_key", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created", "expiry", "last_used_at"]
        read_only_fields = ["id", "prefix", "created", "expiry", "last_used_at"]

    def validate_name(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError(
                _("Name the token after what will use it (e.g. 'ci-pipeline').")
            )
        return value.strip()


class NewApiTokenSerializer(ApiTokenSerializer):
    """A token just created: the only time its secret is shown."""

    token = serializers.CharField(
        read_only=True, help_text="The secret: send it as 'Authorization: Token <secret>'."
    )

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
