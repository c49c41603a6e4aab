"""The queue run by real Celery workers on Redis against the local Kubernetes API server:
a submission is admitted by the worker the API queued a cycle on, a suspended Job is
picked up and started by the periodic tick, and two workers running cycles at the same
time never admit more than fits."""

from __future__ import annotations

import pytest

from scheduler_bridge.tasks import admission_cycle, queue_tick_all
from scheduler_bridge.workloads.models import Workload
from tests.celery_worker import Worker, Workers, celery_worker, two_celery_workers, wait_for
from tests.conftest import Cast
from tests.workloads.conftest import FakeCluster
from tests.workloads.test_jobs import create_job, job
from tests.workloads.test_queue import submit

__all__ = ["celery_worker", "two_celery_workers"]

pytestmark = [pytest.mark.celery_worker, pytest.mark.xdist_group("celery")]


def test_a_submission_is_admitted_by_the_worker(
    celery_worker: Worker, fake_cluster: FakeCluster, cast: Cast
) -> None:
    pk = submit(cast.member, "vision", 4, name="by-the-worker").json()["id"]
    assert wait_for(lambda: Workload.objects.get(pk=pk).state == "running", timeout=60)
    admitted = Workload.objects.get(pk=pk)
    assert sum(p["gpus"] for p in admitted.placements) == 4
    assert admitted.reason_code == "within_guarantee"


def test_the_tick_picks_up_a_suspended_job_and_the_worker_starts_it(
    celery_worker: Worker, fake_cluster: FakeCluster, cast: Cast
) -> None:
    create_job(fake_cluster, "vision-train", "resnet", "vision", 4, parallelism=2)
    queue_tick_all.delay().get(timeout=60)
    assert wait_for(lambda: job(fake_cluster, "vision-train", "resnet")["spec"]["suspend"] is False)
    # the reconciler unsuspends the Job, then records the start: wait for both
    assert wait_for(lambda: Workload.objects.get(job_name="resnet").state == "running")
    assert Workload.objects.get(job_name="resnet").tenant == cast.team_a


def test_two_workers_running_cycles_at_once_admit_no_more_than_fits(
    two_celery_workers: Workers, fake_cluster: FakeCluster, cast: Cast
) -> None:
    """vision may hold acme's 12 H100: three of its 4-GPU jobs, whichever worker's cycle
    admits them; the admission lock makes the second cycle see the first one's work."""
    for i in range(6):
        submit(cast.platform_admin, "vision", 4, name=f"w{i}")
    results = [admission_cycle.delay(fake_cluster.cluster.pk) for _ in range(8)]
    for result in results:
        result.get(timeout=120)
    admitted = list(Workload.objects.filter(state="running"))
    assert len(admitted) == 3
    per_node: dict[str, int] = {}
    for workload in admitted:
        for placement in workload.placements:
            per_node[placement["node"]] = per_node.get(placement["node"], 0) + placement["gpus"]
    assert all(used <= 8 for used in per_node.values())
    ran_on = {
        path.name for path in two_celery_workers.logs if "admission_cycle" in path.read_text()
    }
    assert len(ran_on) == 2  # both workers ran cycles
