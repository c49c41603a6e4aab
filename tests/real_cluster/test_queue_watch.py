"""Admission on events against the real control plane: with no queue tick at all, a Job a
user creates is admitted and started by a real Celery worker because the queue watch saw
it, and deleting a running Job lets the next one in; Tidegate's own writes (unsuspending,
the Job controller's status updates) ask for nothing more."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.queue_watch import QueueWatcher
from tests.celery_worker import Worker, celery_worker, wait_for
from tests.conftest import Cast

from .conftest import RealGpuCluster, gpu_cluster, job_manifest

__all__ = ["celery_worker", "gpu_cluster"]

pytestmark = [pytest.mark.celery_worker, pytest.mark.xdist_group("celery")]


@pytest.fixture
def watching(celery_worker: Worker, gpu_cluster: RealGpuCluster) -> Iterator[QueueWatcher]:
    """The queue watch of this process, following every cluster (``gpu-east``)."""
    watcher = QueueWatcher(settle_s=0.05, gap_s=0.2)
    stopping = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stopping, 1.0), daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: gpu_cluster.cluster.pk in watcher.watched, timeout=30)
        yield watcher
    finally:
        stopping.set()
        thread.join(timeout=10)


def _state(name: str) -> str | None:
    return Workload.objects.filter(job_name=name).values_list("state", flat=True).first()


def test_without_a_tick_a_created_job_is_admitted_and_an_ended_one_lets_the_next_in(
    watching: QueueWatcher, gpu_cluster: RealGpuCluster, cast: Cast, priorities: Any
) -> None:
    real = gpu_cluster.real
    real.create_object(job_manifest("vision-train", "first", queue="vision", gpus=8, pods=2))
    assert wait_for(lambda: _state("first") == Workload.State.RUNNING, timeout=60), _state("first")
    assert real.read("Job", "vision-train", "first")["spec"]["suspend"] is False

    # all 16 H100 are held: the next Job waits in the queue
    real.create_object(job_manifest("vision-train", "second", queue="vision", gpus=8))
    assert wait_for(lambda: _state("second") == Workload.State.PENDING, timeout=60)

    # the running one is deleted: the watch sees it go, the sync closes it, and the cycle
    # it asks for admits the waiting one
    real.delete_object("Job", "vision-train", "first")
    assert wait_for(lambda: _state("second") == Workload.State.RUNNING, timeout=60)
    assert _state("first") not in Workload.OPEN_STATES
    assert real.read("Job", "vision-train", "second")["spec"]["suspend"] is False

    # what followed were Tidegate's own writes and the Job controller's: nothing to sync
    time.sleep(1.0)
    asked = watching.health()[gpu_cluster.cluster.pk]["syncs_asked"]
    time.sleep(2.0)
    assert watching.health()[gpu_cluster.cluster.pk]["syncs_asked"] == asked
