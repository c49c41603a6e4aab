"""Clusters, their nodes and flavours, and a cluster's MIG plan, through the API: who
may read and write them and in which shapes."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from scheduler_bridge import selectors
from scheduler_bridge.api.permissions import PlatformAdminWrites
from scheduler_bridge.dra.flavours import mapping_problems
from scheduler_bridge.followups import queue_inventory_sync
from scheduler_bridge.gateways.tolerations import untolerated
from scheduler_bridge.inventory import pins
from scheduler_bridge.inventory.models import SHARE_UNITS_PER_GPU, Cluster, Flavour, Node
from scheduler_bridge.inventory.services import (
    cluster_delete,
    cluster_save,
    flavour_set_sharing,
    flavour_set_tolerations,
)
from scheduler_bridge.mig.services import mig_plan
from scheduler_bridge.workloads.selectors import shared_gpu_context
from tenants import access
from tenants.api.contract import NUL_FREE, KeepsContract
from tenants.api.serializers import (
    NoInput,
    QueuedSerializer,
    RejectUnknownFields,
    at_most,
)
from tenants.errors import PermissionDenied

# a node has at most this many GPUs, a flavour at most this many tolerations
MAX_GPUS_PER_NODE = 64
MAX_TOLERATIONS = 64


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class DraFlavoursField(serializers.JSONField):
    """A DRA driver's name to the flavour its devices count as."""


_TEXT = {"type": "string", "pattern": NUL_FREE}


@extend_schema_field(
    {
        "type": "array",
        "maxItems": MAX_TOLERATIONS,
        "items": {
            "type": "object",
            "properties": {
                "key": _TEXT,
                "operator": _TEXT,
                "value": _TEXT,
                "effect": _TEXT,
                "tolerationSeconds": {"type": "integer", "nullable": True},
            },
        },
    },
)
class TolerationsField(serializers.JSONField):
    """Kubernetes tolerations, as a pod spec writes them; the service
    (gateways/tolerations.py) checks each entry and names the bad ones."""


class ClusterSerializer(RejectUnknownFields, serializers.ModelSerializer[Cluster]):
    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "display_name",
            "gateway",
            "kubeconfig_path",
            "kubeconfig_env",
            "kube_context",
            "in_cluster",
            "mig_config_namespace",
            "topology_label",
            "prometheus_url",
            "dra_flavours",
            "status",
            "status_message",
            "last_synced_at",
            "workload_kinds",
        ]
        read_only_fields = ["id", "status", "status_message", "last_synced_at", "workload_kinds"]

    dra_flavours = DraFlavoursField(
        required=False,
        help_text="DRA drivers whose devices do not describe themselves as NVIDIA's driver "
        'does, mapped to the flavour each device counts as, e.g. {"gpu.amd.com": "mi300x"} '
        "(docs/dra.md).",
    )

    def validate_dra_flavours(self, value: Any) -> dict[str, str]:
        problems = mapping_problems(value)
        if problems:
            raise serializers.ValidationError(problems)
        return dict(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        merged = {**(self.instance.__dict__ if self.instance else {}), **attrs}
        if merged.get("gateway", "kubernetes") == Cluster.Gateway.KUBERNETES:
            ways = [
                bool(merged.get("in_cluster")),
                bool(merged.get("kubeconfig_path")),
                bool(merged.get("kubeconfig_env")),
            ]
            if sum(ways) != 1:
                raise serializers.ValidationError(
                    {
                        "kubeconfig_path": "A kubernetes cluster needs exactly one of "
                        "kubeconfig_path, kubeconfig_env or in_cluster."
                    }
                )
        return attrs


class PublicClusterSerializer(serializers.ModelSerializer[Cluster]):
    """What non-admins see of a cluster: no connection details."""

    class Meta:
        model = Cluster
        fields = ["id", "name", "display_name", "status", "last_synced_at", "workload_kinds"]
        read_only_fields = fields


class NodeSerializer(serializers.ModelSerializer[Node]):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    last_seen_at = serializers.SerializerMethodField(
        help_text="When inventory last saw the node: its cluster's last sync while it is "
        "present, the last sync that found it once it has gone."
    )

    shared_gpus = serializers.SerializerMethodField(
        help_text="For a node of a shared flavour, each GPU: thousandths held by admitted "
        "shares, thousandths free, and at least this much memory free (MiB); empty otherwise."
    )

    def get_last_seen_at(self, node: Node) -> str | None:
        seen = node.last_seen_for_api()
        return serializers.DateTimeField().to_representation(seen) if seen else None

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_shared_gpus(self, node: Node) -> list[dict[str, int]]:
        if (node.cluster_id, node.product) not in self.context.get("shared_products", set()):
            return []
        held = self.context.get("shared_held", {}).get((node.cluster_id, node.name), {})
        memory = node.gpu_memory_mib or 0
        rows = []
        for gpu in range(node.gpu_count):
            taken = min(SHARE_UNITS_PER_GPU, held.get(gpu, 0))
            free = SHARE_UNITS_PER_GPU - taken
            rows.append(
                {
                    "gpu": gpu,
                    "held_milli": taken,
                    "free_milli": free,
                    "free_memory_mib": memory * free // SHARE_UNITS_PER_GPU,
                }
            )
        return rows

    class Meta:
        model = Node
        fields = [
            "id",
            "cluster",
            "name",
            "product",
            "gpu_count",
            "gpu_memory_mib",
            "mig_capable",
            "mig_strategy",
            "mig_config",
            "mig_config_state",
            "gpu_layouts",
            "busy",
            "allocatable",
            "dra_devices",
            "partitionable_held",
            "dra_most",
            "topology_domain",
            "unschedulable",
            "pinned_layout",
            "mig_requested_config",
            "present",
            "last_seen_at",
            "labels",
            "shared_gpus",
        ]
        read_only_fields = [f for f in fields if f != "pinned_layout"]


@extend_schema_field(
    {
        "type": "array",
        "nullable": True,
        "maxItems": MAX_GPUS_PER_NODE,
        "items": {"type": "array", "nullable": True, "items": {}},
    }
)
class PinnedLayoutField(serializers.JSONField):
    """One entry per GPU: null (MIG off), or profile names or [profile, start] pairs."""


class NodePinSerializer(RejectUnknownFields, serializers.Serializer[Node]):
    """An admin pin: one entry per GPU, each `null` (MIG disabled) or a list of
    profile names (placed by Tidegate) or [profile, start] pairs."""

    pinned_layout = PinnedLayoutField(allow_null=True)

    def validate_pinned_layout(self, value: Any) -> Any:
        return at_most(value, MAX_GPUS_PER_NODE)


class FlavourSerializer(RejectUnknownFields, serializers.ModelSerializer[Flavour]):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    overcommitted = serializers.SerializerMethodField()
    untolerated_taints = serializers.SerializerMethodField()
    tolerations = TolerationsField()
    sharing = serializers.ChoiceField(
        choices=Flavour.Sharing.choices,
        required=False,
        help_text="How pods share one GPU: '' (not shared), time-slicing (no isolation), "
        "mps (compute limited), hami (memory and cores enforced), fraction (advisory). "
        "A shared flavour counts thousandths of a GPU: pods ask for gpu_milli.",
    )
    isolation = serializers.CharField(source="get_sharing_display", read_only=True)

    class Meta:
        model = Flavour
        fields = [
            "id",
            "cluster",
            "name",
            "product",
            "resource_name",
            "mig_profile",
            "gpu_equivalent",
            "capacity",
            "most_capacity",
            "node_selector",
            "tolerations",
            "node_taints",
            "untolerated_taints",
            "overcommitted",
            "sharing",
            "isolation",
        ]
        read_only_fields = [f for f in fields if f not in ("tolerations", "sharing")]

    def validate_tolerations(self, value: Any) -> Any:
        return at_most(value, MAX_TOLERATIONS)

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_overcommitted(self, flavour: Flavour) -> bool:
        return flavour.pk in self.context.get("overcommitted", set())

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_untolerated_taints(self, flavour: Flavour) -> list[dict[str, Any]]:
        """Taints of the flavour's nodes that its tolerations leave out: admitted pods
        cannot run on those nodes."""
        return untolerated(flavour.node_taints, flavour.tolerations)


class MigPlanGpuSerializer(serializers.Serializer[Any]):
    node = serializers.CharField()
    index = serializers.IntegerField()
    product = serializers.CharField(source="product.name")
    current = serializers.CharField(source="current.describe")
    target = serializers.CharField(source="target.describe")
    changed = serializers.BooleanField()
    reason = serializers.CharField()


class MigDemandOutcomeSerializer(serializers.Serializer[Any]):
    product = serializers.CharField()
    profile = serializers.CharField(allow_null=True)
    wanted = serializers.IntegerField()
    planned = serializers.IntegerField()
    unmet = serializers.IntegerField()
    reason = serializers.CharField()


class MigPlanSerializer(serializers.Serializer[Any]):
    cluster = serializers.CharField()
    nodes_to_reconfigure = serializers.ListField(child=serializers.CharField())
    demand_met_ratio = serializers.FloatField()
    outcomes = MigDemandOutcomeSerializer(many=True)
    changed = MigPlanGpuSerializer(many=True)


class ClusterViewSet(KeepsContract, viewsets.ModelViewSet[Cluster]):
    """Clusters. Admins manage them; others see the clusters their tenants use."""

    lookup_field = "name"
    permission_classes = [PlatformAdminWrites]
    filterset_fields = ["gateway", "status"]
    ordering_fields = ["name", "last_synced_at"]

    def get_queryset(self) -> Any:
        return selectors.clusters_visible_to(self.request.user)

    def get_serializer_class(self) -> Any:
        if access.is_platform_admin(self.request.user):
            return ClusterSerializer
        return PublicClusterSerializer

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

    @extend_schema(request=None, responses=MigPlanSerializer)
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
        return Response(MigPlanSerializer(data).data)


class NodeViewSet(
    KeepsContract, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Node]
):
    """Nodes as the last inventory sync saw them. Admins pin MIG layouts with `pin`."""

    serializer_class = NodeSerializer
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

    @extend_schema(request=NodePinSerializer, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def pin(self, request: Request, pk: str | None = None) -> Response:
        """Pin this node's MIG layout (null unpins); the planner then keeps it."""
        node = self.get_object()
        body = NodePinSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        node = pins.node_pin(
            actor=request.user, node=node, pin=body.validated_data["pinned_layout"]
        )
        return Response(NodeSerializer(node, context=shared_gpu_context([node])).data)


class FlavourViewSet(
    KeepsContract,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet[Flavour],
):
    """GPU flavours found by inventory: whole GPUs per product and MIG profiles.
    Platform admins set a flavour's `tolerations` and its `sharing` (PATCH); `node_taints`
    are what its nodes carry, `untolerated_taints` those the tolerations leave out."""

    serializer_class = FlavourSerializer
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
        flavour_ids = flavour_ids_of(args[0] if args else kwargs.get("instance"))
        kwargs["context"] = self.get_serializer_context() | {
            "overcommitted": selectors.overcommitted_flavour_ids(flavour_ids),
        }
        return super().get_serializer(*args, **kwargs)


def flavour_ids_of(instance: Any) -> list[int]:
    """The flavours of what is being serialised: a page of flavours or quotas, or one.
    Context that costs a query per flavour is computed for those rows only."""
    if instance is None:
        return []
    rows = instance if isinstance(instance, list | tuple) else [instance]
    return sorted({getattr(row, "flavour_id", None) or row.pk for row in rows})
