"""What-if runs: a replay of a cluster's own history under today's quotas and a proposal,
or the savings search, run by a Celery task that reports its progress here."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from billing.whatif.records import SavingsResult, WhatIfParams, WhatIfResult
from scheduler_bridge.inventory.models import Cluster


class WhatIfRun(models.Model):
    """One what-if or savings run. ``params`` holds a ``billing.whatif.records.WhatIfParams``
    and ``result`` a ``WhatIfResult`` or ``SavingsResult`` (read them through the model's
    methods). ``updated_at`` moves with every progress step: a running run whose
    ``updated_at`` is older than the task's time limit has lost its worker."""

    class Kind(models.TextChoices):
        WHATIF = "whatif", _("What-if")
        SAVINGS = "savings", _("Savings")

    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")
        FAILED = "failed", _("Failed")

    kind = models.CharField(max_length=8, choices=Kind.choices)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    params = models.JSONField()
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    message = models.CharField(max_length=200, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["status", "updated_at"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(progress__lte=100), name="whatifrun_progress_at_most_100"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} on {self.cluster_id} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    def params_record(self) -> WhatIfParams:
        return WhatIfParams.from_json(self.params)

    def whatif_result(self) -> WhatIfResult | None:
        if self.kind != self.Kind.WHATIF or self.status != self.Status.DONE or not self.result:
            return None
        return WhatIfResult.from_json(self.result)

    def savings_result(self) -> SavingsResult | None:
        if self.kind != self.Kind.SAVINGS or self.status != self.Status.DONE or not self.result:
            return None
        return SavingsResult.from_json(self.result)
