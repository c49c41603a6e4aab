"""Workloads (jobs asking for GPUs) and the priority classes they run at."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from i18n.wording import Wording
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.workloads.records import (
    ElasticPodRecord,
    Placement,
    PodSetRecord,
    parse_borrowed,
    parse_elastic_pods,
    parse_placements,
    parse_pod_sets,
)
from tenants.models import DNS1123_LABEL, Tenant


def dump_reason(reason: str) -> dict[str, Any]:
    """What to store as ``Workload.reason_args`` next to ``reason`` (the engine's reasons
    are Wordings; any other text stays English only)."""
    return reason.to_json() if isinstance(reason, Wording) else {}


class PriorityClass(models.Model):
    """How urgent work is, whether it may be preempted, and what it costs."""

    name = models.CharField(max_length=63, unique=True, validators=[DNS1123_LABEL])
    value = models.IntegerField(default=0, help_text=_("Higher runs first."))
    preemptible = models.BooleanField(default=True)
    fills_idle = models.BooleanField(
        default=False,
        help_text=_(
            "Work of this class only fills GPUs nobody else waits for (fragments of shared "
            "GPUs, idle guarantee): it queues after all other work, never preempts, and is "
            "the first taken back. It must be preemptible."
        ),
    )
    price_multiplier = models.DecimalField(
        max_digits=6,
        decimal_places=3,
        default=Decimal("1"),
        validators=[MinValueValidator(Decimal("0"))],
    )
    description = models.CharField(max_length=200, blank=True)
    is_default = models.BooleanField(default=False)
    max_preemption_grace_s = models.PositiveIntegerField(
        default=600,
        help_text=_("The longest grace a workload of this class gets before it is preempted."),
    )

    class Meta:
        ordering = ["-value", "name"]

    def __str__(self) -> str:
        return self.name


class Workload(models.Model):
    """A job asking for GPUs, from the API or from a workload object on the cluster (a
    suspended Job, JobSet, PyTorchJob, RayCluster or RayJob: ``kind`` says which;
    ``job_name`` and ``job_uid`` are that object's name and uid)."""

    class State(models.TextChoices):
        """Where a workload is in its life; every change goes through lifecycle.py,
        whose docstring has the table of legal transitions."""

        PENDING = "pending", _("Pending")
        ADMITTED = "admitted", _("Admitted, starting")
        RUNNING = "running", _("Running")
        FINISHED = "finished", _("Finished")
        FAILED = "failed", _("Failed")
        REJECTED = "rejected", _("Rejected")
        CANCELLED = "cancelled", _("Cancelled")
        TIMED_OUT = "timed_out", _("Stopped at its time limit")

    class Source(models.TextChoices):
        API = "api", _("API")
        JOB = "job", _("Kubernetes workload object")

    class Topology(models.TextChoices):
        NONE = "none", _("Anywhere")
        ONE_NODE = "node", _("One node")
        ONE_DOMAIN = "domain", _("One NVLink domain")

    ACTIVE_STATES = (State.ADMITTED, State.RUNNING)
    # Queue order: work holding GPUs, then waiting work by position (work without one -
    # inadmissible - last), then closed work; age breaks ties.
    QUEUE_ORDER = (
        models.Case(
            models.When(state__in=(State.ADMITTED, State.RUNNING), then=models.Value(0)),
            models.When(state=State.PENDING, then=models.Value(1)),
            default=models.Value(2),
        ).asc(),
        models.F("queue_position").asc(nulls_last=True),
        "submitted_at",
        "id",
    )
    OPEN_STATES = (State.PENDING, State.ADMITTED, State.RUNNING)

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="workloads")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="workloads")
    name = models.CharField(max_length=253)
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.API)
    namespace = models.CharField(max_length=63, blank=True)
    job_name = models.CharField(max_length=253, blank=True)
    job_uid = models.CharField(max_length=64, blank=True, db_index=True)
    # the object's labels and annotations when it was queued (cost allocation groups by them)
    labels = models.JSONField(default=dict, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    # the Kubernetes kind of the object behind a workload from the cluster ("" from the API)
    kind = models.CharField(max_length=32, blank=True)
    priority_class = models.ForeignKey(
        PriorityClass, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    priority = models.IntegerField(default=0)
    preemptible = models.BooleanField(default=True)
    fills_idle = models.BooleanField(default=False)  # from its priority class
    # [{"name": "main", "count": 2, "gpus_per_pod": 4, "flavours": ["h100-80gb"]}, ...]
    pod_sets = models.JSONField()
    gang = models.BooleanField(default=True)
    topology = models.CharField(max_length=8, choices=Topology.choices, default=Topology.NONE)
    max_run_time_s = models.PositiveIntegerField(null=True, blank=True)
    # asked for: time to save a checkpoint once told it will be preempted, and how often
    # it saves one anyway (replay and what-if use it)
    preemption_grace_s = models.PositiveIntegerField(null=True, blank=True)
    checkpoint_interval_s = models.PositiveIntegerField(null=True, blank=True)
    # set when a preemption was announced: the GPUs go back then
    preempt_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    submitted_at = models.DateTimeField(db_index=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    # when the cluster was told to run it (its Job unsuspended); empty while admitted
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Where admission put it: the flavour, [{"node", "flavour", "gpus"}], borrowed per resource.
    flavour = models.ForeignKey(
        Flavour, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    placements = models.JSONField(default=list)
    # the running pods above the core of elastic pod sets (their GPUs are in placements)
    elastic_pods = models.JSONField(default=list, blank=True, editable=False)
    # a pod set has a core below its count (set once, from pod_sets)
    elastic = models.BooleanField(default=False, editable=False)
    borrowed = models.JSONField(default=dict)
    gpus = models.PositiveIntegerField(default=0)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    reason_code = models.CharField(max_length=32, blank=True)
    reason = models.TextField(blank=True)
    # how the engine worded ``reason`` (a Wording's JSON form, see dump_reason), so the
    # portal can say it in the reader's language; {} when it was not worded that way
    reason_args = models.JSONField(default=dict, blank=True)
    preemptions = models.PositiveIntegerField(default=0)
    # Admitted work the reconciler could not start yet: the last error and how many tries
    # failed; after RECONCILE_START_ATTEMPTS it goes back to the queue (lifecycle.requeue).
    apply_error = models.TextField(blank=True)
    apply_attempts = models.PositiveSmallIntegerField(default=0)
    # Kubernetes Events owed to the workload's Job ([{"reason", "message", "warning"}]):
    # written by the transition that owes them, in its transaction; posted and cleared by
    # the reconciler, so a decision and what its owner is told never disagree.
    job_events = models.JSONField(default=list, blank=True)
    # While it preempts: where it will start once its victims stop ([{"node", "flavour",
    # "gpus"}]); the next cycle holds those GPUs for it, so nothing takes what it freed.
    held_placements = models.JSONField(default=list, blank=True)
    # Pods of a Job that completed and gave their GPUs back while it ran (Kueue's
    # reclaimable pods), over the workload's life: its pod set asks that many fewer.
    released_pods = models.PositiveIntegerField(default=0)
    # Runs that ended in preemption: [{"admitted_at", "ended_at" (ISO 8601), "flavour",
    # "gpu_equivalent", "placements", "borrowed", "gpus"}]. They held GPUs, so billing and
    # the fair-share usage history count them like the current run.
    past_runs = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["cluster__name", "queue_position", "submitted_at", "id"]
        indexes = [models.Index(fields=["cluster", "state"])]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "job_uid"],
                condition=~models.Q(job_uid=""),
                name="workload_one_per_job",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name} ({self.state})"

    @property
    def reason_wording(self) -> Wording | None:
        """How ``reason`` was worded, if it was and the words still make that text (a
        writer that changed ``reason`` alone leaves words that no longer match it)."""
        if not self.reason_args:
            return None
        wording = Wording.parse(self.reason_args)
        return wording if wording is not None and wording == self.reason else None

    @property
    def pod_set_records(self) -> list[PodSetRecord]:
        return parse_pod_sets(self.pod_sets)

    @property
    def placement_records(self) -> list[Placement]:
        return parse_placements(self.placements)

    @property
    def elastic_pod_records(self) -> list[ElasticPodRecord]:
        return parse_elastic_pods(self.elastic_pods)

    def pod_counts(self) -> dict[str, int]:
        """Pods each pod set runs now: its core plus its running elastic pods."""
        counts = {ps.name: ps.core for ps in self.pod_set_records}
        for pod in self.elastic_pod_records:
            counts[pod.pod_set] = counts.get(pod.pod_set, 0) + 1
        return counts

    # reasons a pending workload is not in line at all: its request or its tenant's quota
    # must change first (admission/explain.py INADMISSIBLE)
    INADMISSIBLE_CODES = frozenset({"never_fits", "no_quota", "unknown_tenant", "unknown_flavour"})

    @property
    def inadmissible(self) -> bool:
        return self.state == self.State.PENDING and self.reason_code in self.INADMISSIBLE_CODES

    def quota_ask(self) -> dict[str, Any] | None:
        """What to ask for so that it can run: its first flavour and the GPUs it needs
        (None when it asks for no flavour Tidegate knows)."""
        records = self.pod_set_records
        if not records or not records[0].flavours:
            return None
        flavour = self.cluster.flavours.filter(name=records[0].flavours[0]).first()
        if flavour is None:
            return None
        return {"flavour": flavour.pk, "guaranteed": sum(ps.core_record.gpus for ps in records)}

    def pods_report(self) -> list[dict[str, Any]]:
        """Per pod set: pods running now, its core (min) and its maximum."""
        now = self.pod_counts() if self.state in self.ACTIVE_STATES else {}
        return [
            {"pod_set": ps.name, "current": now.get(ps.name, 0), "min": ps.core, "max": ps.count}
            for ps in self.pod_set_records
        ]

    @property
    def borrowed_gpus(self) -> dict[str, int]:
        return parse_borrowed(self.borrowed)

    @property
    def gpus_asked(self) -> int:
        """GPUs of all its pod sets together."""
        return sum(record.gpus for record in self.pod_set_records)
