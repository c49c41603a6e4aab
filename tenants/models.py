"""Tenants (a tree of any depth), memberships with roles, namespace bindings, the audit trail."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _
from knox.models import AbstractAuthToken
from knox.settings import CONSTANTS

from tenants.binding_rules import binding_problems

# RFC 1123 label, as Kubernetes requires for namespace names: lower-case alphanumerics and
# '-', starting and ending with an alphanumeric, at most 63 characters.
DNS1123_LABEL = RegexValidator(
    regex=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    message=_(
        "Must be a DNS-1123 label: at most 63 lower-case letters, digits or '-', "
        "starting and ending with a letter or digit (e.g. 'ml-research')."
    ),
    code="dns1123",
)


class Role(models.TextChoices):
    """What a membership lets its user do; a role on a tenant covers its whole subtree."""

    ADMIN = "admin", _("Admin")
    FINANCE = "finance", _("Finance")
    LEAD = "lead", _("Lead")
    MEMBER = "member", _("Member")


class Tenant(models.Model):
    """A node of the organisation tree (organisation > department > team > ...).

    `path` is a materialised path of primary keys ("/1/4/9/") kept by the services so
    that a whole subtree is one indexed prefix query.
    """

    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    slug = models.CharField(_("slug"), max_length=63, unique=True, validators=[DNS1123_LABEL])
    name = models.CharField(_("display name"), max_length=200)
    cost_center = models.CharField(_("cost centre"), max_length=64, blank=True)
    weight = models.DecimalField(
        _("fair-share weight"),
        max_digits=8,
        decimal_places=3,
        default=Decimal("1"),
        validators=[MinValueValidator(Decimal("0.001"))],
    )
    is_active = models.BooleanField(_("active"), default=True)
    path = models.CharField(max_length=512, db_index=True, editable=False, default="")
    depth = models.PositiveSmallIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.CheckConstraint(condition=models.Q(weight__gt=0), name="tenant_weight_positive"),
        ]

    def __str__(self) -> str:
        return self.slug

    def subtree(self) -> models.QuerySet[Tenant]:
        """This tenant and all its descendants."""
        return Tenant.objects.filter(path__startswith=self.path)

    def ancestor_ids(self) -> list[int]:
        """Primary keys from the root down to (and including) this tenant."""
        return [int(part) for part in self.path.strip("/").split("/") if part]

    def is_descendant_of(self, other: Tenant) -> bool:
        return self.path.startswith(other.path) and self.pk != other.pk


class Membership(models.Model):
    """A user's role on a tenant (and so on its subtree)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__path", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_user_tenant_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.tenant}"


class NamespaceBinding(models.Model):
    """Maps one namespace of one cluster to exactly one tenant."""

    class SyncState(models.TextChoices):
        PENDING = "pending", _("Not synced yet")
        OK = "ok", _("In sync")
        NAMESPACE_MISSING = "namespace_missing", _("Namespace missing in the cluster")
        ERROR = "error", _("Sync error")

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="bindings")
    cluster_name = models.CharField(_("cluster"), max_length=63, validators=[DNS1123_LABEL])
    namespace = models.CharField(_("namespace"), max_length=63, validators=[DNS1123_LABEL])
    sync_state = models.CharField(max_length=24, choices=SyncState.choices, default="pending")
    sync_message = models.TextField(blank=True)
    synced_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster_name", "namespace"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster_name", "namespace"], name="binding_cluster_namespace_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster_name}/{self.namespace} -> {self.tenant_id}"

    def clean(self) -> None:
        """Refuse system namespaces and whatever the registered checks refuse (a
        cluster that does not exist, its MIG ConfigMap namespace)."""
        problems = binding_problems(self.cluster_name, self.namespace)
        if problems:
            raise ValidationError(problems)


class AuditEvent(models.Model):
    """Who changed what, when, with the object's state before and after. Append-only."""

    class Action(models.TextChoices):
        CREATE = "create", _("Create")
        UPDATE = "update", _("Update")
        DELETE = "delete", _("Delete")
        ACTION = "action", _("Action")

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_repr = models.CharField(max_length=150, blank=True)
    source = models.CharField(max_length=16, default="system")  # api, portal, admin, system
    action = models.CharField(max_length=16, choices=Action.choices)
    object_type = models.CharField(max_length=64, db_index=True)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    tenant_path = models.CharField(max_length=512, blank=True, db_index=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    message = models.TextField(blank=True)
    # how ``message`` was worded (template and values), so it reads in the reader's
    # language; {} for a message that is plain text (tenants.audit.message_words)
    message_args = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return (
            f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_repr} {self.action} {self.object_type}"
        )


class UserPreference(models.Model):
    """What a person chose for themselves: the language the portal and their e-mails use
    (blank: the site's default, or what their browser asks for)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference"
    )
    language = models.CharField(max_length=16, blank=True, choices=settings.LANGUAGES)

    def __str__(self) -> str:
        return f"{self.user} ({self.language or 'default'})"


class SettingChange(models.Model):
    """One value a setting took from ``valid_from`` on: the history billing prices the past by.

    Append-only. ``topic`` names what the value is ("tenant": parent path and cost centre;
    "quota": a guarantee; "capacity": a flavour's devices; "billing": a tenant's billing
    settings) and ``key`` which one. ``valid_from``
    None means "since before Tidegate kept history": the first value recorded for a key
    applies to every earlier hour. Written by :func:`tenants.history.record_setting`.
    """

    topic = models.CharField(max_length=32)
    key = models.CharField(max_length=64)
    value = models.JSONField(null=True)
    valid_from = models.DateTimeField(null=True, blank=True)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["topic", "key", "valid_from", "id"]
        indexes = [
            models.Index(fields=["topic", "valid_from"], name="setting_change_topic_time"),
            models.Index(fields=["topic", "key", "valid_from"], name="setting_change_key"),
        ]

    def __str__(self) -> str:
        since = f"{self.valid_from:%Y-%m-%d %H:%M}" if self.valid_from else "always"
        return f"{self.topic} {self.key} = {self.value!r} since {since}"


class OutboxMessage(models.Model):
    """A background task to queue, written in the same transaction as the change that asks
    for it (tenants.outbox): a broker outage delays the task but never loses it.

    ``key`` names the task and its arguments; one row per key at a time, so a burst of
    changes asking for the same work (fifty submits to one cluster) queues it once. The
    row is deleted when a worker starts the task: a change committed after that start
    asks again, and gets a run that sees it.
    """

    key = models.CharField(max_length=500, unique=True)
    task = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    send_attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["pk"]
        indexes = [models.Index(fields=["sent_at"], name="outbox_sent_at")]

    def __str__(self) -> str:
        return self.key


class IdempotentRequest(models.Model):
    """A POST sent with an ``Idempotency-Key`` header and the answer it got
    (tenants.idempotency): the same key from the same credentials gets that answer again
    instead of a second write."""

    scope = models.CharField(max_length=64)  # a hash of the credentials that sent it
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=2000)
    fingerprint = models.CharField(max_length=64)  # a hash of the request's body
    status = models.PositiveSmallIntegerField(null=True, blank=True)  # None: in progress
    content_type = models.CharField(max_length=200, blank=True, default="")
    location = models.CharField(max_length=2000, blank=True, default="")
    body = models.BinaryField(default=b"")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="idempotent_request_once")
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path} ({self.key})"


class TaskLastStart(models.Model):
    """When a task with a shortest interval between runs (``TASK_MIN_INTERVAL_S``) last
    started for its arguments: read by every process that queues it (tenants.outbox)."""

    key = models.CharField(max_length=500, unique=True)
    started_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.key} at {self.started_at:%Y-%m-%d %H:%M:%S}"


class ApiToken(AbstractAuthToken):
    """An API token, stored only as a hash (django-rest-knox's scheme): the secret is shown
    once, when created. It expires (TIDEGATE_API_TOKEN_TTL days) and its owner may
    revoke it. `id` names it in the API; the digest never leaves the database."""

    id: models.BigAutoField[int, int] = models.BigAutoField(primary_key=True)
    digest: models.CharField[str, str] = models.CharField(
        max_length=CONSTANTS.DIGEST_LENGTH, unique=True
    )
    name: models.CharField[str, str] = models.CharField(_("name"), max_length=100)
    last_used_at: models.DateTimeField[Any, Any] = models.DateTimeField(
        _("last used"), null=True, blank=True
    )

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")

    def __str__(self) -> str:
        return f"{self.name} ({self.token_key}…, {self.user_id})"
