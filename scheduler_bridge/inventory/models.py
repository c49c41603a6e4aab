"""Clusters, their nodes as inventory last saw them, and the GPU flavours found on them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from scheduler_bridge.admission.devices import MILLI
from tenants.models import DNS1123_LABEL

# Units of a shared flavour in one GPU: its pods, quotas and placements count thousandths.
SHARE_UNITS_PER_GPU = MILLI


class Cluster(models.Model):
    """A Kubernetes cluster (or a simulated one) that Tidegate manages.

    No credentials live here: a cluster names a kubeconfig file (or an environment variable
    holding its path) and a context, or uses the in-cluster service account.
    """

    class Gateway(models.TextChoices):
        KUBERNETES = "kubernetes", _("Kubernetes API")
        SIMULATED = "simulated", _("Simulated (in process)")

    class Status(models.TextChoices):
        NEW = "new", _("Not synced yet")
        OK = "ok", _("OK")
        ERROR = "error", _("Error")

    name = models.CharField(max_length=63, unique=True, validators=[DNS1123_LABEL])
    display_name = models.CharField(max_length=200, blank=True)
    gateway = models.CharField(max_length=16, choices=Gateway.choices, default=Gateway.KUBERNETES)
    kubeconfig_path = models.CharField(max_length=500, blank=True)
    kubeconfig_env = models.CharField(
        max_length=100, blank=True, help_text=_("Environment variable holding a kubeconfig path")
    )
    kube_context = models.CharField(max_length=200, blank=True)
    in_cluster = models.BooleanField(default=False)
    mig_config_namespace = models.CharField(
        max_length=63, default="gpu-operator", validators=[DNS1123_LABEL]
    )
    topology_label = models.CharField(max_length=200, default="nvidia.com/gpu.clique")
    prometheus_url = models.URLField(blank=True)
    # DRA drivers that do not describe their GPUs as NVIDIA's does, mapped to the flavour
    # their devices count as: {"gpu.amd.com": "mi300x"} (docs/dra.md#devices-to-flavours)
    dra_flavours = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.NEW)
    status_message = models.TextField(blank=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)
    # kind -> what the last workload sync found: "queued" or why the kind was skipped
    workload_kinds = models.JSONField(default=dict, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def connection(self) -> dict[str, object]:
        """Keyword arguments for `gateway_for` (paths and names only, never secrets)."""
        if self.gateway == self.Gateway.SIMULATED:
            return {"name": self.name}
        connection: dict[str, object] = {}
        if self.in_cluster:
            connection["in_cluster"] = True
        elif self.kubeconfig_env:
            connection["kubeconfig_env"] = self.kubeconfig_env
        elif self.kubeconfig_path:
            connection["kubeconfig"] = self.kubeconfig_path
        if self.kube_context and not self.in_cluster:
            connection["context"] = self.kube_context
        return connection


class Node(models.Model):
    """A node as the last inventory sync saw it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    labels = models.JSONField(default=dict)
    allocatable = models.JSONField(default=dict)
    product = models.CharField(max_length=120, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    gpu_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    mig_capable = models.BooleanField(default=False)
    mig_strategy = models.CharField(max_length=8, blank=True)
    mig_config = models.CharField(max_length=200, blank=True)
    mig_config_state = models.CharField(max_length=32, blank=True)
    # One entry per GPU index: a list of MIG profile names, or null for a whole GPU.
    gpu_layouts = models.JSONField(default=list)
    # GPU and MIG resources requested by pods running on the node, and the part of it
    # that pods outside Tidegate's queue hold (the queue accounts for its own work).
    busy = models.JSONField(default=dict)
    busy_foreign = models.JSONField(default=dict)
    topology_domain = models.CharField(max_length=200, blank=True)
    unschedulable = models.BooleanField(default=False)
    # Devices its drivers publish for it through DRA (ResourceSlices), per flavour: GPUs or
    # MIG devices (docs/dra.md#devices-to-flavours)
    dra_devices = models.JSONField(default=dict)
    # One entry per GPU a DRA driver splits when a claim asks (partitionable devices; the
    # node's first GPUs in gpu_layouts): whether claims hold any part of it now. Their
    # layouts take effect as the MIG planner sets them, without MIG Manager
    # (docs/dra.md#partitionable-gpus)
    partitionable_held = models.JSONField(default=list)
    # Per flavour those GPUs serve, the most the node could offer were they laid out for
    # it (dra_devices says what it offers now)
    dra_most = models.JSONField(default=dict)
    # An admin pin: the layout the MIG planner must keep (same shape as gpu_layouts).
    pinned_layout = models.JSONField(null=True, blank=True)
    # What Tidegate last asked MIG Manager for, and whether a failure was reported.
    mig_requested_config = models.CharField(max_length=200, blank=True)
    mig_requested_layouts = models.JSONField(null=True, blank=True)
    mig_request_open = models.BooleanField(default=False)
    # A failed request is reported once; the node is then left alone until an admin pins it.
    mig_failure_reported = models.BooleanField(default=False)
    present = models.BooleanField(default=True)
    # When inventory last saw the node; moved when it leaves (not at every sync: a
    # present node is seen by each sync, Cluster.last_synced_at says when).
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_cluster_name_unique")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    def last_seen_for_api(self) -> Any:
        """When inventory last saw the node (see ``last_seen_at``)."""
        if self.present and self.cluster.last_synced_at is not None:
            return self.cluster.last_synced_at
        return self.last_seen_at

    @property
    def topology_short(self) -> str:
        """GFD cliques read '<fabric uuid>.<clique id>'; the clique id tells nodes apart."""
        fabric, _, clique = self.topology_domain.rpartition(".")
        return f"…{fabric[-4:]}.{clique}" if fabric else self.topology_domain


class FlavourQuerySet(models.QuerySet["Flavour"]):
    def offered(self) -> FlavourQuerySet:
        """Flavours the cluster offers now, or could where GPUs split on claim are laid
        out for them: what teams can ask for and work can name."""
        return self.filter(models.Q(capacity__gt=0) | models.Q(most_capacity__gt=0))


class Flavour(models.Model):
    """A schedulable GPU resource on a cluster: a whole GPU of a product, a MIG profile,
    or a shared GPU (several pods on one GPU, counted in thousandths of it)."""

    class Sharing(models.TextChoices):
        """How pods share one GPU, from no isolation to memory and compute enforced."""

        NONE = "", _("not shared")
        TIME_SLICING = "time-slicing", _("time-slicing (no isolation)")
        MPS = "mps", _("MPS (compute limited)")
        HAMI = "hami", _("HAMi (memory and cores enforced)")
        FRACTION = "fraction", _("fractions (advisory, not enforced)")
        DRA = "dra", _("DRA consumable capacity (each claim takes part of a GPU)")

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="flavours")
    name = models.CharField(max_length=120)
    product = models.CharField(max_length=120)
    resource_name = models.CharField(max_length=120)
    mig_profile = models.CharField(max_length=40, blank=True)
    gpu_equivalent = models.DecimalField(max_digits=6, decimal_places=4, default=Decimal("1"))
    capacity = models.PositiveIntegerField(default=0)
    # the most it could offer where GPUs split on claim were laid out for it (DRA
    # partitionable devices; docs/dra.md#partitionable-gpus): how far it may be guaranteed
    most_capacity = models.PositiveIntegerField(default=0)
    node_selector = models.JSONField(default=dict)
    # Tolerations admission injects into the pods it admits here: an admin's choice
    # (API: PATCH /flavours/{id}/), never node-condition taints (gateways/tolerations.py).
    tolerations = models.JSONField(default=list)
    # NoSchedule/NoExecute taints inventory saw on the nodes offering it (read-only).
    node_taints = models.JSONField(default=list)
    # shared: pods ask for thousandths of one GPU (gpu_milli), never more than one GPU each
    sharing = models.CharField(max_length=16, choices=Sharing.choices, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = FlavourQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="flavour_cluster_name_unique")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    @property
    def is_mig(self) -> bool:
        return bool(self.mig_profile)

    @property
    def is_shared(self) -> bool:
        return bool(self.sharing)

    @property
    def guarantee_ceiling(self) -> int:
        """How much of it teams may be guaranteed in all: what it offers now, or more
        where GPUs split on claim can be laid out for it."""
        return max(self.capacity, self.most_capacity)

    @property
    def unit_equivalent(self) -> float:
        """Whole-GPU equivalents of one unit: a GPU, a MIG device, or for a shared
        flavour a thousandth of a GPU (a 470-milli pod holds 0.47 of a GPU)."""
        equivalent = float(self.gpu_equivalent)
        return equivalent / SHARE_UNITS_PER_GPU if self.is_shared else equivalent
