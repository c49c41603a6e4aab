"""REST API v1 for tenants, memberships, namespace bindings, the audit trail and the caller.

Scoping is done once, in `get_queryset`, through `tenants.access`: an object the caller
may not see is a 404. Writes go through `tenants.services`, which check roles (403).
"""

from __future__ import annotations

from typing import Any

import django_filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants import access, services, tokens
from tenants.api import serializers as s
from tenants.api.contract import KeepsContract
from tenants.api.filters import UtcIsoDateTimeFilter
from tenants.models import ApiToken, AuditEvent, Membership, NamespaceBinding, Tenant
from tenants.throttles import TokenCreateThrottle


class TenantFilter(django_filters.FilterSet):
    parent = django_filters.CharFilter(field_name="parent__slug")
    top_level = django_filters.BooleanFilter(field_name="parent", lookup_expr="isnull")

    class Meta:
        model = Tenant
        fields = ["parent", "is_active", "depth", "cost_center", "top_level"]


class TenantViewSet(KeepsContract, viewsets.ModelViewSet[Tenant]):
    """The tenant tree. `DELETE` answers 409 while children or bindings remain."""

    serializer_class = s.TenantSerializer
    lookup_field = "slug"
    filterset_class = TenantFilter
    search_fields = ["slug", "name", "cost_center"]
    ordering_fields = ["slug", "name", "depth", "created_at", "weight"]
    ordering = ["slug"]

    def get_queryset(self) -> Any:
        return access.tenants_visible_to(self.request.user).select_related("parent")

    def perform_create(self, serializer: Any) -> None:
        data = dict(serializer.validated_data)
        serializer.instance = services.tenant_create(
            actor=self.request.user, parent=data.pop("parent", None), source="api", **data
        )

    def perform_update(self, serializer: Any) -> None:
        assert serializer.instance is not None
        serializer.instance = services.tenant_update(
            actor=self.request.user,
            tenant=serializer.instance,
            source="api",
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: Tenant) -> None:
        services.tenant_delete(actor=self.request.user, tenant=instance, source="api")


class MembershipViewSet(KeepsContract, viewsets.ModelViewSet[Membership]):
    """Who holds which role on which tenant. Leads grant member/lead; admins any role."""

    serializer_class = s.MembershipSerializer
    filterset_fields = {"tenant__slug": ["exact"], "user__username": ["exact"], "role": ["exact"]}
    ordering_fields = ["created_at", "role"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        return access.memberships_visible_to(self.request.user)

    def get_serializer_class(self) -> Any:
        if self.action == "partial_update":
            return s.MembershipUpdateSerializer
        return s.MembershipSerializer

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = s.MembershipSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        membership = services.membership_create(
            actor=request.user, source="api", **serializer.validated_data
        )
        out = s.MembershipSerializer(membership, context={"request": request})
        return Response(out.data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.MembershipUpdateSerializer, responses=s.MembershipSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        membership = self.get_object()
        serializer = s.MembershipUpdateSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        membership = services.membership_update(  # without fields: checked, not changed
            actor=request.user, membership=membership, source="api", **serializer.validated_data
        )
        return Response(s.MembershipSerializer(membership, context={"request": request}).data)

    def perform_destroy(self, instance: Membership) -> None:
        services.membership_delete(actor=self.request.user, membership=instance, source="api")


class NamespaceBindingViewSet(KeepsContract, viewsets.ModelViewSet[NamespaceBinding]):
    """Which tenant owns which (cluster, namespace)."""

    serializer_class = s.NamespaceBindingSerializer
    filterset_fields = ["cluster_name", "namespace", "tenant__slug", "sync_state"]
    search_fields = ["namespace", "cluster_name"]
    ordering_fields = ["cluster_name", "namespace", "created_at"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        return access.bindings_visible_to(self.request.user)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = s.NamespaceBindingSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        binding = services.binding_create(
            actor=request.user, source="api", **serializer.validated_data
        )
        out = s.NamespaceBindingSerializer(binding, context={"request": request})
        return Response(out.data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=s.NamespaceBindingUpdateSerializer, responses=s.NamespaceBindingSerializer
    )
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        binding = self.get_object()
        serializer = s.NamespaceBindingUpdateSerializer(
            data=request.data, context={"request": request}, partial=True
        )
        serializer.is_valid(raise_exception=True)
        binding = services.binding_update(  # without fields: checked, not changed
            actor=request.user, binding=binding, source="api", **serializer.validated_data
        )
        return Response(s.NamespaceBindingSerializer(binding, context={"request": request}).data)

    def perform_destroy(self, instance: NamespaceBinding) -> None:
        services.binding_delete(actor=self.request.user, binding=instance, source="api")


class AuditEventFilter(django_filters.FilterSet):
    actor = django_filters.CharFilter(field_name="actor_repr")
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    since = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["action", "object_type", "object_id", "source", "actor", "tenant"]


class AuditEventViewSet(KeepsContract, viewsets.ReadOnlyModelViewSet[AuditEvent]):
    """The audit trail: platform admins see all of it, tenant admins their subtrees."""

    serializer_class = s.AuditEventSerializer
    filterset_class = AuditEventFilter
    ordering_fields = ["created_at"]
    ordering = ["-created_at", "-id"]

    def get_queryset(self) -> Any:
        return access.audit_events_visible_to(self.request.user).select_related("tenant")


class MeView(KeepsContract, APIView):
    """The caller: name, platform-admin flag, memberships and the tenants they may see."""

    @extend_schema(responses=s.MeSerializer)
    def get(self, request: Request) -> Response:
        user = request.user
        memberships = user.memberships.select_related("tenant").order_by("tenant__path")  # type: ignore[union-attr]
        data = {
            "username": user.get_username(),
            "email": getattr(user, "email", ""),
            "is_platform_admin": access.is_platform_admin(user),
            "memberships": memberships,
            "visible_tenants": list(access.tenants_visible_to(user).values_list("slug", flat=True)),
        }
        return Response(s.MeSerializer(data).data)


class ApiTokenViewSet(
    KeepsContract,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[ApiToken],
):
    """Your own API tokens: create one (its secret is in the answer, and only there),
    list them (name, created, expiry, last used) and revoke one (`DELETE`). Another
    user's token is a 404."""

    serializer_class = s.ApiTokenSerializer
    throttle_classes = [*APIView.throttle_classes, TokenCreateThrottle]
    ordering_fields = ["created", "expiry", "name"]
    filterset_fields: list[str] = []
    search_fields = ["name"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return ApiToken.objects.none()
        return tokens.tokens_of(self.request.user)

    @extend_schema(request=s.ApiTokenSerializer, responses={201: s.NewApiTokenSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = s.ApiTokenSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, secret = tokens.token_create(
            user=request.user, name=serializer.validated_data["name"]
        )
        token.token = secret  # type: ignore[attr-defined]
        return Response(s.NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        tokens.token_revoke(instance)
