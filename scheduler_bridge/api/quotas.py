"""Quotas and quota requests through the API: who may read and write them and in which
shapes."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from scheduler_bridge import selectors
from scheduler_bridge.api.inventory import flavour_ids_of
from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.quotas import services as quota_services
from scheduler_bridge.quotas.models import TEXT_MAX_LENGTH, Quota, QuotaRequest
from scheduler_bridge.workloads.selectors import holdings_by_tenant_and_flavour
from tenants.api.contract import KeepsContract
from tenants.api.serializers import (
    NoInput,
    RejectUnknownFields,
    VisibleTenantField,
)


@extend_schema_field({"type": "string", "pattern": "^[^/\\u0000]+/[^/\\u0000]+$"})
class VisibleFlavourField(serializers.RelatedField[Flavour, Flavour, str]):
    """A flavour named `cluster/flavour`, among the clusters the caller may see."""

    default_error_messages = {
        "format": "Name a flavour as <cluster>/<flavour>, e.g. gpu-east/h100-80gb.",
        "missing": "Flavour {value} does not exist; the cluster has: {choices}.",
    }

    def get_queryset(self) -> Any:
        request = self.context.get("request")
        return selectors.flavours_visible_to(request.user if request else None)

    def to_representation(self, value: Any) -> str:
        return f"{value.cluster.name}/{value.name}"

    def to_internal_value(self, data: Any) -> Flavour:
        if not isinstance(data, str) or data.count("/") != 1:
            self.fail("format")
        cluster, name = data.split("/")
        flavour = self.get_queryset().filter(cluster__name=cluster, name=name).first()
        if flavour is None:
            names = self.get_queryset().filter(cluster__name=cluster).offered()
            choices = ", ".join(names.values_list("name", flat=True)) or "nothing you may see"
            self.fail("missing", value=data, choices=choices)
        return flavour


class QuotaSerializer(RejectUnknownFields, serializers.ModelSerializer[Quota]):
    tenant = VisibleTenantField()
    flavour = VisibleFlavourField()
    overcommitted = serializers.SerializerMethodField()
    held_core = serializers.SerializerMethodField(
        help_text="GPUs of this flavour the tenant's admitted work holds now, less its elastic pods "
        "(to the thousandth on a shared flavour)."
    )
    held_elastic = serializers.SerializerMethodField(
        help_text="GPUs its elastic pods hold now (above their workloads' cores; reclaimed first)."
    )

    class Meta:
        model = Quota
        fields = [
            "id",
            "tenant",
            "flavour",
            "guaranteed",
            "borrow_limit",
            "lend_limit",
            "overcommit_allowed",
            "overcommitted",
            "held_core",
            "held_elastic",
            "updated_at",
        ]
        read_only_fields = ["id", "overcommitted", "held_core", "held_elastic", "updated_at"]
        # the model's default (0) is for rows; a request names what it guarantees
        extra_kwargs: dict[str, Any] = {"guaranteed": {"required": True}}
        validators: list[Any] = []  # one quota per (tenant, flavour): the API updates it

    @extend_schema_field(OpenApiTypes.NUMBER)
    def get_held_core(self, quota: Quota) -> int | float:
        return self.context.get("held", {}).get((quota.tenant_id, quota.flavour_id), (0, 0))[0]

    @extend_schema_field(OpenApiTypes.NUMBER)
    def get_held_elastic(self, quota: Quota) -> int | float:
        return self.context.get("held", {}).get((quota.tenant_id, quota.flavour_id), (0, 0))[1]

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_overcommitted(self, quota: Quota) -> bool:
        return quota.tenant.parent_id is None and quota.flavour_id in self.context.get(
            "overcommitted", set()
        )


# Named apart from the request half of QuotaSerializer, which the schema calls QuotaRequest.
@extend_schema_serializer(component_name="QuotaChangeRequest")
class QuotaRequestSerializer(RejectUnknownFields, serializers.ModelSerializer[QuotaRequest]):
    tenant = VisibleTenantField()
    flavour = VisibleFlavourField()
    requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    decided_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = QuotaRequest
        fields = [
            "id",
            "tenant",
            "flavour",
            "guaranteed",
            "borrow_limit",
            "lend_limit",
            "justification",
            "state",
            "requested_by",
            "decided_by",
            "decision_comment",
            "created_at",
            "decided_at",
        ]
        read_only_fields = [
            "id",
            "state",
            "requested_by",
            "decided_by",
            "decision_comment",
            "created_at",
            "decided_at",
        ]


class DecisionSerializer(RejectUnknownFields, serializers.Serializer[QuotaRequest]):
    comment = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=TEXT_MAX_LENGTH
    )


class QuotaViewSet(KeepsContract, viewsets.ModelViewSet[Quota]):
    """Quotas (tenant x flavour). Set by the parent's admins; POST updates an existing one."""

    serializer_class = QuotaSerializer
    filterset_fields = {
        "tenant__slug": ["exact"],
        "flavour__cluster__name": ["exact"],
        "flavour__name": ["exact"],
    }
    ordering_fields = ["guaranteed", "updated_at"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        return selectors.quotas_visible_to(self.request.user)

    def get_serializer(self, *args: Any, **kwargs: Any) -> Any:
        flavour_ids = flavour_ids_of(args[0] if args else kwargs.get("instance"))
        kwargs["context"] = self.get_serializer_context() | {
            "overcommitted": selectors.overcommitted_flavour_ids(flavour_ids),
            "held": holdings_by_tenant_and_flavour(flavour_ids),
        }
        return super().get_serializer(*args, **kwargs)

    @extend_schema(
        responses={
            201: OpenApiResponse(QuotaSerializer, description="A quota for a new pair."),
            200: OpenApiResponse(
                QuotaSerializer,
                description="The tenant already had a quota of this flavour: it is changed.",
            ),
        }
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Set a tenant's quota of a flavour: created (201), or changed when one exists (200)."""
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        if "overcommit_allowed" in request.data:
            data["overcommit_allowed"] = bool(data["overcommit_allowed"])
        else:
            data.pop("overcommit_allowed", None)
        quota, created = quota_services.quota_upsert(actor=request.user, source="api", **data)
        out = self.get_serializer(quota).data
        return Response(out, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        body = self.get_serializer(quota, data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        data = {
            "guaranteed": quota.guaranteed,
            "borrow_limit": quota.borrow_limit,
            "lend_limit": quota.lend_limit,
        } | {
            k: v
            for k, v in body.validated_data.items()
            if k in ("guaranteed", "borrow_limit", "lend_limit", "overcommit_allowed")
        }
        quota = quota_services.quota_set(
            actor=request.user, tenant=quota.tenant, flavour=quota.flavour, source="api", **data
        )
        return Response(self.get_serializer(quota).data)

    def perform_destroy(self, instance: Quota) -> None:
        quota_services.quota_delete(actor=self.request.user, quota=instance)


class QuotaRequestViewSet(
    KeepsContract,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet[QuotaRequest],
):
    """Leads ask for quota changes; the tenant's parent admins approve or reject them."""

    serializer_class = QuotaRequestSerializer
    filterset_fields = {
        "tenant__slug": ["exact"],
        "state": ["exact"],
        "flavour__cluster__name": ["exact"],
    }
    ordering_fields = ["created_at"]

    def get_queryset(self) -> Any:
        return selectors.quota_requests_visible_to(self.request.user)

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = quota_services.quota_request_create(
            actor=self.request.user, source="api", **serializer.validated_data
        )

    def _decide(self, request: Request, decide: Any) -> Response:
        quota_request = self.get_object()
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        decided = decide(
            actor=request.user, request=quota_request, comment=body.validated_data["comment"]
        )
        return Response(self.get_serializer(decided).data)

    @extend_schema(request=DecisionSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve and apply in one transaction (400 if it no longer fits the rules)."""
        return self._decide(request, quota_services.quota_request_approve)

    @extend_schema(request=DecisionSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Reject with a comment saying why."""
        return self._decide(request, quota_services.quota_request_reject)

    @extend_schema(request=None, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """The requester (or an approver) withdraws a pending request."""
        quota_request = self.get_object()
        NoInput.check(request.data)
        decided = quota_services.quota_request_cancel(actor=request.user, request=quota_request)
        return Response(self.get_serializer(decided).data)
