"""Input and output shapes of the scheduler-bridge API."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from scheduler_bridge import selectors
from scheduler_bridge.dra.flavours import mapping_problems
from scheduler_bridge.gateways.tolerations import untolerated
from scheduler_bridge.inventory.models import SHARE_UNITS_PER_GPU, Cluster, Flavour, Node
from scheduler_bridge.quotas.models import TEXT_MAX_LENGTH, Quota, QuotaRequest
from tenants.api.serializers import RejectUnknownFields, VisibleTenantField, at_most

# a node has at most this many GPUs, a flavour at most this many tolerations
MAX_GPUS_PER_NODE = 64
MAX_TOLERATIONS = 64


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
        extra_kwargs = {
            "dra_flavours": {
                "help_text": "DRA drivers whose devices do not describe themselves as NVIDIA's "
                "driver does, mapped to the flavour each device counts as, e.g. "
                '{"gpu.amd.com": "mi300x"} (docs/dra.md).'
            }
        }

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


class NodePinSerializer(RejectUnknownFields, serializers.Serializer[Node]):
    """An admin pin: one entry per GPU, each `null` (MIG disabled) or a list of
    profile names (placed by Tidegate) or [profile, start] pairs."""

    pinned_layout = serializers.JSONField(allow_null=True)

    def validate_pinned_layout(self, value: Any) -> Any:
        return at_most(value, MAX_GPUS_PER_NODE)


class FlavourSerializer(RejectUnknownFields, serializers.ModelSerializer[Flavour]):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    overcommitted = serializers.SerializerMethodField()
    untolerated_taints = serializers.SerializerMethodField()
    # validated by the service (gateways/tolerations.py), which names each bad entry
    tolerations = serializers.JSONField()
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


@extend_schema_field(OpenApiTypes.STR)
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
