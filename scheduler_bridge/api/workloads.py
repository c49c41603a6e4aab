"""REST API for workloads (submit, list with position and reason, cancel, finish) and
priority classes (read for everyone, written by platform admins)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from scheduler_bridge import selectors
from scheduler_bridge.api.permissions import PlatformAdminWrites
from scheduler_bridge.workloads import services
from scheduler_bridge.workloads.models import PriorityClass, Workload
from scheduler_bridge.workloads.selectors import workloads_visible_to
from tenants.api.contract import KeepsContract
from tenants.api.serializers import (
    BoundedListSerializer,
    NoInput,
    RejectUnknownFields,
    VisibleTenantField,
)

# Kueue's Workload takes at most 8 pod sets (its CRD's maxItems); so does Tidegate, and
# a longer list is refused before any pod set is looked at.
MAX_POD_SETS = 8


class PodSetInput(RejectUnknownFields, serializers.Serializer[Any]):
    name = serializers.CharField(required=False, default="main", max_length=63)
    count = serializers.IntegerField(min_value=1, max_value=100_000, default=1)
    gpus_per_pod = serializers.IntegerField(min_value=1, max_value=1024)
    flavour = serializers.CharField(required=False, allow_null=True, default=None, max_length=120)
    product = serializers.CharField(required=False, allow_null=True, default=None, max_length=120)
    mig_profile = serializers.CharField(
        required=False, allow_null=True, default=None, max_length=63
    )
    min_count = serializers.IntegerField(
        min_value=1,
        required=False,
        allow_null=True,
        default=None,
        help_text="Elastic: the pods it needs at least (its core); the rest of count "
        "grow into idle GPUs and are the first taken back.",
    )
    gpu_milli = serializers.IntegerField(
        min_value=1,
        max_value=1000,
        required=False,
        allow_null=True,
        default=None,
        help_text="A share of one GPU per pod, in thousandths (470: 47 %), on a shared "
        "flavour; gpus_per_pod is then 1.",
    )
    gpu_memory_mib = serializers.IntegerField(
        min_value=1,
        max_value=1_048_576,
        required=False,
        allow_null=True,
        default=None,
        help_text="GPU memory per pod in MiB, on a shared flavour; the pod holds the larger "
        "of this share of the GPU's memory and gpu_milli.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        minimum = attrs.get("min_count")
        if minimum is not None and minimum > attrs.get("count", 1):
            raise serializers.ValidationError(
                {
                    "min_count": f"min_count {minimum} is above count {attrs.get('count', 1)}; "
                    "give at most count pods as the minimum."
                }
            )
        if attrs.get("flavour") and (attrs.get("product") or attrs.get("mig_profile")):
            raise serializers.ValidationError(
                "Give a flavour, or a product and/or a MIG profile, not both: a flavour "
                "already names its product and profile."
            )
        return attrs


class WorkloadSubmitSerializer(RejectUnknownFields, serializers.Serializer[Workload]):
    cluster = serializers.SlugField()
    tenant = VisibleTenantField()
    name = serializers.CharField(max_length=253)
    pod_sets: BoundedListSerializer = BoundedListSerializer(
        child=PodSetInput(), max_length=MAX_POD_SETS
    )
    gang = serializers.BooleanField(default=True)
    topology = serializers.ChoiceField(choices=Workload.Topology.choices, default="none")
    priority_class = serializers.CharField(
        required=False, allow_null=True, default=None, max_length=63
    )
    max_run_time_s = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, required=False, allow_null=True
    )
    preemption_grace_s = serializers.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        required=False,
        allow_null=True,
        help_text="Seconds to save a checkpoint once told it will be preempted (capped by "
        "its priority class).",
    )
    checkpoint_interval_s = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, required=False, allow_null=True
    )

    def validate_pod_sets(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not value:
            raise serializers.ValidationError("Give at least one pod set.")
        names = [ps["name"] for ps in value]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise serializers.ValidationError(
                f"Pod set names must differ; used more than once: {', '.join(twice)} "
                "(a pod set without a name is called 'main'): name each pod set."
            )
        return value

    def validate_cluster(self, value: str) -> Any:
        request = self.context["request"]
        cluster = selectors.clusters_visible_to(request.user).filter(name=value).first()
        if cluster is None:
            raise serializers.ValidationError(f"No cluster {value!r} that you may use.")
        return cluster


class PodCountSerializer(serializers.Serializer[Any]):
    pod_set = serializers.CharField()
    current = serializers.IntegerField()
    min = serializers.IntegerField()
    max = serializers.IntegerField()


class WorkloadSerializer(serializers.ModelSerializer[Workload]):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    flavour = serializers.CharField(source="flavour.name", read_only=True, allow_null=True)
    priority_class = serializers.CharField(
        source="priority_class.name", read_only=True, allow_null=True
    )
    submitted_by = serializers.CharField(
        source="submitted_by.username", read_only=True, allow_null=True
    )
    pods = serializers.SerializerMethodField(
        help_text="Per pod set: pods running now, its minimum (core) and its maximum."
    )

    class Meta:
        model = Workload
        fields = [
            "id",
            "cluster",
            "tenant",
            "name",
            "source",
            "kind",
            "namespace",
            "job_name",
            "state",
            "queue_position",
            "reason_code",
            "reason",
            "pod_sets",
            "elastic",
            "pods",
            "elastic_pods",
            "gang",
            "topology",
            "priority_class",
            "priority",
            "preemptible",
            "fills_idle",
            "max_run_time_s",
            "preemption_grace_s",
            "checkpoint_interval_s",
            "preempt_at",
            "flavour",
            "placements",
            "borrowed",
            "gpus",
            "preemptions",
            "past_runs",
            "submitted_by",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "apply_error",
            "apply_attempts",
        ]
        read_only_fields = fields

    @extend_schema_field(PodCountSerializer(many=True))
    def get_pods(self, workload: Workload) -> list[dict[str, Any]]:
        return workload.pods_report()


class WorkloadViewSet(
    KeepsContract,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[Workload],
):
    """The queue. Pending work carries its position and the precise reason it waits."""

    serializer_class = WorkloadSerializer
    filterset_fields = {
        "cluster__name": ["exact"],
        "tenant__slug": ["exact"],
        "state": ["exact", "in"],
        "source": ["exact"],
        "reason_code": ["exact"],
    }
    search_fields = ["name", "job_name", "namespace"]
    ordering_fields = ["queue_position", "submitted_at", "admitted_at", "priority"]

    def get_queryset(self) -> Any:
        return workloads_visible_to(self.request.user)

    @extend_schema(request=WorkloadSubmitSerializer, responses={201: WorkloadSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = WorkloadSubmitSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        data["pod_sets"] = [services.PodSetSpec(**ps) for ps in data["pod_sets"]]
        workload = services.workload_submit(actor=request.user, **data)
        return Response(WorkloadSerializer(workload).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=WorkloadSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Withdraw pending or running work."""
        workload = self.get_object()  # another tenant's work is a 404 whatever the body
        NoInput.check(request.data)
        workload = services.workload_cancel(actor=request.user, workload=workload)
        return Response(WorkloadSerializer(workload).data)

    @extend_schema(request=None, responses=WorkloadSerializer)
    @action(detail=True, methods=["post"])
    def finish(self, request: Request, pk: str | None = None) -> Response:
        """Report that running work ended, freeing its GPUs."""
        workload = self.get_object()  # another tenant's work is a 404 whatever the body
        NoInput.check(request.data)
        workload = services.workload_finish(actor=request.user, workload=workload)
        return Response(WorkloadSerializer(workload).data)


class PriorityClassSerializer(RejectUnknownFields, serializers.ModelSerializer[PriorityClass]):
    class Meta:
        model = PriorityClass
        fields = [
            "id",
            "name",
            "value",
            "preemptible",
            "fills_idle",
            "price_multiplier",
            "description",
            "is_default",
        ]


class PriorityClassViewSet(KeepsContract, viewsets.ModelViewSet[PriorityClass]):
    """Priority classes: value, preemptible flag, whether its work only fills idle GPUs,
    price multiplier."""

    serializer_class = PriorityClassSerializer
    permission_classes = [PlatformAdminWrites]
    lookup_field = "name"
    queryset = PriorityClass.objects.all()
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = services.priority_class_save(
            actor=self.request.user, instance=PriorityClass(**serializer.validated_data)
        )

    def perform_update(self, serializer: Any) -> None:
        instance = serializer.instance
        for key, value in serializer.validated_data.items():
            setattr(instance, key, value)
        serializer.instance = services.priority_class_save(
            actor=self.request.user, instance=instance
        )

    def perform_destroy(self, instance: PriorityClass) -> None:
        services.priority_class_delete(actor=self.request.user, instance=instance)
