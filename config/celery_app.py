"""The Celery application; configuration comes from Django settings (CELERY_*)."""

import os
from typing import Any

from celery import Celery, signals

from config import logs  # noqa: F401 - connects the task-id logging signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.demo")

app = Celery("tidegate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
def _serve_metrics(**_: Any) -> None:
    """A worker serves its metrics on TIDEGATE_METRICS_PORT when set (config.metrics)."""
    from django.conf import settings

    from config.metrics import serve_worker_metrics

    if settings.TIDEGATE_METRICS_PORT:
        serve_worker_metrics(settings.TIDEGATE_METRICS_PORT)


@signals.worker_init.connect
def _import_before_forking(**_: Any) -> None:
    """Import what the cluster tasks use once, in the parent: every pool process forked
    from it then starts warm, instead of each paying for the imports (the Kubernetes
    client loads its API classes on first use) inside its first admission cycle."""
    from kubernetes import client

    import scheduler_bridge.workloads.cycle
    import scheduler_bridge.workloads.jobs  # noqa: F401

    for api in ("CoreV1Api", "BatchV1Api", "CustomObjectsApi", "ResourceV1Api", "ApiClient"):
        getattr(client, api)
