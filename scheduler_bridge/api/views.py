"""REST API v1 of the scheduler bridge: clusters, nodes, flavours, quotas, quota requests.

Scoping happens in `get_queryset` through `scheduler_bridge.selectors` (404 for what the
caller may not see); writes go through services (403 for what the caller may not do).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from scheduler_bridge import selectors
from scheduler_bridge.api import serializers as s
from scheduler_bridge.followups import queue_inventory_sync
from scheduler_bridge.inventory import pins
from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.inventory.services import (
    cluster_delete,
    cluster_save,
    flavour_set_sharing,
    flavour_set_tolerations,
)
from scheduler_bridge.mig.services import mig_plan
from scheduler_bridge.quotas import services as quota_services
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from scheduler_bridge.workloads.selectors import holdings_by_tenant_and_flavour, shared_gpu_context
from tenants import access
from tenants.api.serializers import NoInput, QueuedSerializer
from tenants.errors import PermissionDenied


class PlatformAdminWrites(BasePermission):
    """Signed-in users read what the queryset shows them; only platform admins write.
    Anonymous callers get nothing (401), not even the reads."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return access.is_platform_admin(request.user)


class ClusterViewSet(viewsets.ModelViewSet[Cluster]):
    """Clusters. Admins manage them; others see the clusters their tenants use."""

    lookup_field = "name"
    permission_classes = [PlatformAdminWrites]
    filterset_fields = ["gateway", "status"]
    ordering_fields = ["name", "last_synced_at"]

    def get_queryset(self) -> Any:
        return selectors.clusters_visible_to(self.request.user)

    def get_serializer_class(self) -> Any:
        if access.is_platform_admin(self.request.user):
            return s.ClusterSerializer
        return s.PublicClusterSerializer

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = cluster_save(
            actor=self.request.user, cluster=Cluster(**serializer.validated_data), source="api"
        )

    def perform_update(self, serializer: Any) -> None:
        cluster = serializer.instance
        for name, value in serializer.validated_data.items():
            setattr(cluster, name, value)
        serializer.instance = cluster_save(actor=self.request.user, cluster=cluster, source="api")

    def perform_destroy(self, instance: Cluster) -> None:
        cluster_delete(actor=self.request.user, cluster=instance, source="api")

    @extend_schema(request=None, responses={202: QueuedSerializer})
    @action(detail=True, methods=["post"])
    def sync(self, request: Request, name: str | None = None) -> Response:
        """Queue an inventory sync (then a quota sync) of this cluster now."""
        cluster = self.get_object()
        NoInput.check(request.data)
        queue_inventory_sync(cluster.pk)
        return Response(
            {"detail": f"sync of {cluster.name} queued"}, status=status.HTTP_202_ACCEPTED
        )

    @extend_schema(request=None, responses=s.MigPlanSerializer)
    @action(
        detail=True, methods=["get"], url_path="mig-plan", permission_classes=[PlatformAdminWrites]
    )
    def mig_plan(self, request: Request, name: str | None = None) -> Response:
        """Dry run of the MIG planner for this cluster: what would change, and why."""
        cluster = self.get_object()
        if not access.is_platform_admin(request.user):
            raise PermissionDenied("The MIG plan is for platform administrators.")
        plan = mig_plan(cluster)
        data = {
            "cluster": cluster.name,
            "nodes_to_reconfigure": list(plan.nodes_to_reconfigure),
            "demand_met_ratio": plan.demand_met_ratio,
            "outcomes": [
                {
                    "product": o.product,
                    "profile": o.profile,
                    "wanted": o.wanted,
                    "planned": o.planned,
                    "unmet": o.unmet,
                    "reason": o.reason,
                }
                for o in plan.outcomes
            ],
            "changed": plan.changed,
        }
        return Response(s.MigPlanSerializer(data).data)


class NodeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Node]):
    """Nodes as the last inventory sync saw them. Admins pin MIG layouts with `pin`."""

    serializer_class = s.NodeSerializer
    filterset_fields = {
        "cluster__name": ["exact"],
        "product": ["exact"],
        "mig_capable": ["exact"],
        "present": ["exact"],
        "topology_domain": ["exact"],
    }
    search_fields = ["name"]
    ordering_fields = ["name", "product"]

    def get_queryset(self) -> Any:
        return selectors.nodes_visible_to(self.request.user)

    def get_serializer(self, *args: Any, **kwargs: Any) -> Any:
        instance = args[0] if args else kwargs.get("instance")
        rows = instance if isinstance(instance, list | tuple) else [instance] if instance else []
        kwargs["context"] = self.get_serializer_context() | shared_gpu_context(list(rows))
        return super().get_serializer(*args, **kwargs)

    @extend_schema(request=s.NodePinSerializer, responses=s.NodeSerializer)
    @action(detail=True, methods=["post"])
    def pin(self, request: Request, pk: str | None = None) -> Response:
        """Pin this node's MIG layout (null unpins); the planner then keeps it."""
        node = self.get_object()
        body = s.NodePinSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        node = pins.node_pin(
            actor=request.user, node=node, pin=body.validated_data["pinned_layout"]
        )
        return Response(s.NodeSerializer(node, context=shared_gpu_context([node])).data)


class FlavourViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet[Flavour],
):
    """GPU flavours found by inventory: whole GPUs per product and MIG profiles.
    Platform admins set a flavour's `tolerations` and its `sharing` (PATCH); `node_taints`
    are what its nodes carry, `untolerated_taints` those the tolerations leave out."""

    serializer_class = s.FlavourSerializer
    # no write permission class: a flavour the caller cannot see is 404 before the
    # service answers 403 to a caller who is not a platform admin
    http_method_names = ["get", "patch", "head", "options"]
    filterset_fields = {"cluster__name": ["exact"], "product": ["exact"], "mig_profile": ["exact"]}
    ordering_fields = ["name", "capacity"]

    def get_queryset(self) -> Any:
        return selectors.flavours_visible_to(self.request.user)

    def perform_update(self, serializer: Any) -> None:
        data = serializer.validated_data
        flavour = serializer.instance
        if "tolerations" in data:
            flavour = flavour_set_tolerations(
                actor=self.request.user, flavour=flavour, tolerations=data["tolerations"]
            )
        if "sharing" in data:
            flavour = flavour_set_sharing(
                actor=self.request.user, flavour=flavour, sharing=data["sharing"]
            )
        serializer.instance = flavour

    def get_serializer(self, *args: Any, **kwargs: Any) -> Any:
        flavour_ids = _flavour_ids(args[0] if args else kwargs.get("instance"))
        kwargs["context"] = self.get_serializer_context() | {
            "overcommitted": selectors.overcommitted_flavour_ids(flavour_ids),
        }
        return super().get_serializer(*args, **kwargs)


def _flavour_ids(instance: Any) -> list[int]:
    """The flavours of what is being serialised: a page of flavours or quotas, or one.
    Context that costs a query per flavour is computed for those rows only."""
    if instance is None:
        return []
    rows = instance if isinstance(instance, list | tuple) else [instance]
    return sorted({getattr(row, "flavour_id", None) or row.pk for row in rows})


class QuotaViewSet(viewsets.ModelViewSet[Quota]):
    """Quotas (tenant x flavour). Set by the parent's admins; POST updates an existing one."""

    serializer_class = s.QuotaSerializer
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
        flavour_ids = _flavour_ids(args[0] if args else kwargs.get("instance"))
        kwargs["context"] = self.get_serializer_context() | {
            "overcommitted": selectors.overcommitted_flavour_ids(flavour_ids),
            "held": holdings_by_tenant_and_flavour(flavour_ids),
        }
        return super().get_serializer(*args, **kwargs)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
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
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet[QuotaRequest],
):
    """Leads ask for quota changes; the tenant's parent admins approve or reject them."""

    serializer_class = s.QuotaRequestSerializer
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
        body = s.DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        decided = decide(
            actor=request.user, request=quota_request, comment=body.validated_data["comment"]
        )
        return Response(self.get_serializer(decided).data)

    @extend_schema(request=s.DecisionSerializer, responses=s.QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve and apply in one transaction (400 if it no longer fits the rules)."""
        return self._decide(request, quota_services.quota_request_approve)

    @extend_schema(request=s.DecisionSerializer, responses=s.QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Reject with a comment saying why."""
        return self._decide(request, quota_services.quota_request_reject)

    @extend_schema(request=None, responses=s.QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """The requester (or an approver) withdraws a pending request."""
        quota_request = self.get_object()
        NoInput.check(request.data)
        decided = quota_services.quota_request_cancel(actor=request.user, request=quota_request)
        return Response(self.get_serializer(decided).data)
