"""The usage ledger (append-only, hourly) and each cluster's collection watermark."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from billing.errors import StatementFrozen
from billing.models.common import WriteOnceModel, WriteOnceQuerySet
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.workloads.models import Workload
from tenants.models import Tenant


class UsageRecordQuerySet(WriteOnceQuerySet["UsageRecord"]):
    pass


class UsageRecord(WriteOnceModel):
    """Devices of one flavour that one pod (or admitted workload) held during one hour.

    ``gpu_seconds_*`` count device-seconds of the flavour (one MIG instance held for an
    hour is 3600); pricing converts them to whole-GPU equivalents. ``gpu_seconds_busy``
    is None when Prometheus had no series for the pod. ``period`` is where the row is
    billed: the period of its hour while that is open, else the next open one (then it
    is late usage and becomes an adjustment there). Rows are written once, keyed by
    (pod uid, flavour, interval start), so collecting twice never counts twice.
    """

    class Source(models.TextChoices):
        POD = "pod", _("Pod")
        WORKLOAD = "workload", _("Admitted workload")
        DEMO = "demo", _("Demo data")

    write_once_error = StatementFrozen

    # The ledger's foreign keys are not database constraints: PostgreSQL checks each one
    # per inserted row at commit, which would halve ingest speed. Django still refuses to
    # delete a tenant, cluster, flavour or period that ledger rows name (PROTECT), and the
    # only writer (billing.usage.ledger) takes the ids from rows it just read.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    cluster = models.ForeignKey(
        Cluster, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    flavour = models.ForeignKey(
        Flavour, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    period = models.ForeignKey(
        "billing.BillingPeriod",
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    namespace = models.CharField(max_length=63)
    pod_uid = models.CharField(max_length=80)
    pod_name = models.CharField(max_length=253, blank=True)
    # Workloads may be pruned; the ledger keeps the id and the job name regardless.
    workload = models.ForeignKey(
        Workload,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    job_name = models.CharField(max_length=253, blank=True)
    priority_class = models.CharField(max_length=63, blank=True)
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.POD)
    interval_start = models.DateTimeField()
    interval_end = models.DateTimeField()
    devices = models.PositiveIntegerField()
    gpu_seconds_allocated = models.BigIntegerField()
    gpu_seconds_busy = models.DecimalField(max_digits=16, decimal_places=3, null=True, blank=True)
    gpu_seconds_borrowed = models.BigIntegerField(default=0)
    # Fewer DCGM series than devices held: busy time scaled from the devices that reported.
    busy_partial = models.BooleanField(default=False, db_default=False)
    # MIG without profiling metrics: busy time estimated from the parent GPU's utilisation.
    busy_estimated = models.BooleanField(default=False, db_default=False)
    created_at = models.DateTimeField(default=timezone.now)

    objects = UsageRecordQuerySet.as_manager()

    class Meta:
        ordering = ["interval_start", "id"]
        verbose_name = _("usage record")
        verbose_name_plural = _("usage records")
        constraints = [
            models.UniqueConstraint(
                fields=["pod_uid", "flavour", "interval_start"], name="usage_idempotency_key"
            ),
            models.CheckConstraint(
                condition=models.Q(gpu_seconds_allocated__gte=0)
                & models.Q(gpu_seconds_borrowed__gte=0)
                & models.Q(gpu_seconds_borrowed__lte=models.F("gpu_seconds_allocated")),
                name="usage_seconds_sane",
            ),
            models.CheckConstraint(
                condition=models.Q(interval_end__gt=models.F("interval_start")),
                name="usage_interval_ordered",
            ),
        ]
        indexes = [
            models.Index(fields=["period", "tenant"], name="usage_period_tenant"),
            models.Index(fields=["tenant", "interval_start"], name="usage_tenant_time"),
            # the newest hour in the ledger (what keeps cached reads of it current)
            models.Index(fields=["interval_start"], name="usage_time"),
            # the few rows whose busy time is partial or estimated (statement warnings)
            models.Index(
                fields=["period", "tenant"],
                name="usage_busy_flagged",
                condition=models.Q(busy_partial=True) | models.Q(busy_estimated=True),
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.namespace}/{self.pod_name or self.pod_uid} {self.interval_start:%Y-%m-%d %H}h"
        )


class CollectorWatermark(models.Model):
    """How far usage of a cluster has been collected: every hour before ``collected_until``
    is in the ledger. A collector that was down resumes from here."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="+")
    collected_until = models.DateTimeField()
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_rows = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    prometheus_down_since = models.DateTimeField(null=True, blank=True)
    # The DCGM label pair found on this cluster's series at the last collection:
    # "exported_pod/exported_namespace" behind a ServiceMonitor with honorLabels false,
    # "pod/namespace" otherwise, "" when no DCGM series named a pod.
    dcgm_pod_labels = models.CharField(max_length=80, blank=True)

    class Meta:
        ordering = ["cluster__name"]

    def __str__(self) -> str:
        return f"{self.cluster.name} collected until {self.collected_until:%Y-%m-%d %H:%M}"
