"""The usage ledger and its collection through the API."""

from __future__ import annotations

from typing import Any

import django_filters
from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors
from billing.models import UsageRecord
from tenants.api.contract import KeepsContract
from tenants.api.filters import UtcIsoDateTimeFilter
from tenants.api.serializers import QueuedSerializer, RejectUnknownFields
from tenants.transactions import queue_after_commit


class UsageRecordSerializer(serializers.ModelSerializer[UsageRecord]):
    tenant = serializers.CharField(source="tenant.slug")
    cluster = serializers.CharField(source="cluster.name")
    flavour = serializers.CharField(source="flavour.name")
    period = serializers.CharField(source="period.name")

    class Meta:
        model = UsageRecord
        fields = [
            "id",
            "tenant",
            "cluster",
            "flavour",
            "period",
            "namespace",
            "pod_uid",
            "pod_name",
            "workload",
            "job_name",
            "priority_class",
            "source",
            "interval_start",
            "interval_end",
            "devices",
            "gpu_seconds_allocated",
            "gpu_seconds_busy",
            "gpu_seconds_borrowed",
            "busy_partial",
            "busy_estimated",
            "created_at",
        ]
        read_only_fields = fields


class CollectionStateSerializer(serializers.Serializer[Any]):
    cluster = serializers.CharField()
    collected_until = serializers.DateTimeField()
    last_run_at = serializers.DateTimeField(allow_null=True)
    last_rows = serializers.IntegerField()
    last_error = serializers.CharField()
    dcgm_pod_labels = serializers.CharField()
    dcgm_pod_labels_note = serializers.CharField()


class CollectionRequestSerializer(RejectUnknownFields, serializers.Serializer[Any]):
    cluster = serializers.CharField(max_length=63, help_text=_("The cluster to collect now."))


class UsageFilter(django_filters.FilterSet):
    period = django_filters.CharFilter(field_name="period__name")
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    cluster = django_filters.CharFilter(field_name="cluster__name")
    flavour = django_filters.CharFilter(field_name="flavour__name")
    since = UtcIsoDateTimeFilter(field_name="interval_start", lookup_expr="gte")
    until = UtcIsoDateTimeFilter(field_name="interval_start", lookup_expr="lt")

    class Meta:
        model = UsageRecord
        fields = ["period", "tenant", "cluster", "flavour", "namespace", "workload", "source"]


class UsageRecordViewSet(KeepsContract, viewsets.ReadOnlyModelViewSet[UsageRecord]):
    """The append-only usage ledger (hourly rows), for the caller's subtrees."""

    queryset = UsageRecord.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = UsageRecordSerializer
    filterset_class = UsageFilter
    ordering_fields = ["interval_start", "gpu_seconds_allocated"]
    ordering = ["-interval_start", "id"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.usage_visible_to(self.request.user).select_related(
            "tenant", "cluster", "flavour", "period"
        )


class CollectionViewSet(KeepsContract, viewsets.ViewSet):
    """Usage collection per cluster: watermarks (platform admins); POST {"cluster": name}
    queues a collection now."""

    @extend_schema(responses=CollectionStateSerializer(many=True))
    def list(self, request: Request) -> Response:
        from billing.models import CollectorWatermark
        from tenants import access

        if not access.is_platform_admin(request.user):
            raise Http404
        rows = [
            {
                "cluster": mark.cluster.name,
                "collected_until": mark.collected_until.isoformat(),
                "last_run_at": mark.last_run_at.isoformat() if mark.last_run_at else None,
                "last_rows": mark.last_rows,
                "last_error": mark.last_error,
                "dcgm_pod_labels": mark.dcgm_pod_labels,
                "dcgm_pod_labels_note": _dcgm_note(mark.dcgm_pod_labels),
            }
            for mark in CollectorWatermark.objects.select_related("cluster")
        ]
        return Response(rows)

    @extend_schema(request=CollectionRequestSerializer, responses={202: QueuedSerializer})
    def create(self, request: Request) -> Response:

        from scheduler_bridge.inventory.models import Cluster
        from tenants import access

        if not access.is_platform_admin(request.user):
            raise Http404
        body = CollectionRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        cluster = get_object_or_404(Cluster, name=body.validated_data["cluster"])
        queue_after_commit("billing.tasks.usage_collect", cluster.pk)
        return Response(
            {"detail": f"usage collection of {cluster.name} queued"},
            status=status.HTTP_202_ACCEPTED,
        )


def _dcgm_note(pair: str) -> str:
    if pair.startswith("exported_"):
        return (
            "DCGM series carry exported_pod/exported_namespace (ServiceMonitor with "
            "honorLabels: false); Tidegate reads those."
        )
    if pair:
        return "DCGM series carry pod/namespace."
    return "No DCGM series named a pod at the last collection: no busy time was found."
