from typing import Any

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants and access"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from tenants.history import track_tenant
        from tenants.models import Tenant

        post_save.connect(track_tenant, sender=Tenant, dispatch_uid="tenant-history")

        from celery import signals

        signals.task_prerun.connect(_outbox_task_started, dispatch_uid="outbox-task-started")

        from tenants import outbox
        from tenants.metrics import register_gauge

        register_gauge(
            "tidegate_outbox_messages",
            "Background tasks written to the outbox and not yet started, by task and state "
            "(unsent: the broker has not taken them; sent: waiting for a worker).",
            outbox.depth,
            labels=("task", "state"),
        )
        register_gauge(
            "tidegate_outbox_oldest_unsent_seconds",
            "How long the oldest outbox message not yet taken by the broker has waited.",
            outbox.oldest_unsent_age_s,
        )


def _outbox_task_started(
    sender: Any = None, args: Any = None, kwargs: Any = None, **_: Any
) -> None:
    """A worker starts a task: its outbox message is done (tenants.outbox)."""
    from tenants import outbox

    if sender is None or kwargs:
        return  # outbox messages carry positional arguments only
    outbox.task_started(sender.name, list(args or ()))
