"""The periodic tasks of the bridge fan out per cluster and are on the beat schedule."""

from __future__ import annotations

import pytest
from django.conf import settings

from scheduler_bridge.gateways import simulated
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.tasks import inventory_sync_all, mig_reconcile_all, quota_sync_all

pytestmark = pytest.mark.django_db


def test_every_periodic_task_is_scheduled() -> None:
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {
        "scheduler_bridge.tasks.inventory_sync_all",
        "scheduler_bridge.tasks.quota_sync_all",
        "scheduler_bridge.tasks.mig_reconcile_all",
    } <= scheduled


def test_fan_out_runs_each_cluster_and_a_broken_one_does_not_stop_the_rest() -> None:
    simulated.reset()
    good = Cluster.objects.create(name="sim-a", gateway="simulated")
    broken = Cluster.objects.create(name="broken", kubeconfig_path="/nonexistent")
    assert inventory_sync_all() == 2
    assert quota_sync_all() == 2
    assert mig_reconcile_all() == 2
    good.refresh_from_db()
    broken.refresh_from_db()
    assert good.status == "ok" and good.nodes.count() == 12
    assert broken.status == "error" and "/nonexistent" in broken.status_message
    simulated.reset()
