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
