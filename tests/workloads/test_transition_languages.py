"""Reasons written outside the admission engine (how work ended, why a Job was refused
or went back to the queue, why elastic work is not larger) read in the reader's language
on the workload page, made by the real transitions; the API keeps the English text."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.jobs import jobs_sync
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.reconcile import RECONCILE_START_ATTEMPTS, reconcile
from scheduler_bridge.workloads.services import stop_overrunning
from tests.conftest import Cast, client_for
from tests.workloads.conftest import FakeCluster
from tests.workloads.test_jobs import create_job
from tests.workloads.test_queue import submit
from tests.workloads.test_reason_languages import page

pytestmark = pytest.mark.django_db


def says(cast: Cast, workload: Workload, english: str, chinese: str) -> None:
    """The workload page says ``chinese`` to a Chinese reader and ``english`` to an
    English one; the API says ``english`` whatever the reader's language."""
    url = f"/workloads/{workload.pk}/"
    zh = page(cast.platform_admin, url, "zh-hans")
    assert chinese in zh and english not in zh
    assert english in page(cast.platform_admin, url, "en")
    api = client_for(cast.platform_admin)
    for language in ("en", "zh-hans"):
        body = api.get(f"/api/v1/workloads/{workload.pk}/", HTTP_ACCEPT_LANGUAGE=language)
        assert body.json()["reason"] == english


def test_cancelled_and_finished_work_says_so_in_chinese(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    waiting = submit(cast.member, "vision", 2, name="withdrawn").json()["id"]
    api = client_for(cast.member)
    assert api.post(f"/api/v1/workloads/{waiting}/cancel/").status_code == 200
    says(cast, Workload.objects.get(pk=waiting), "cancelled", "已取消")
    ran = submit(cast.member, "vision", 2, name="done").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert api.post(f"/api/v1/workloads/{ran}/finish/").status_code == 200
    says(cast, Workload.objects.get(pk=ran), "finished", "已完成")


def test_work_stopped_at_its_max_run_time_says_why_in_chinese(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    pk = submit(cast.member, "vision", 2, name="long", max_run_time_s=600).json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    Workload.objects.filter(pk=pk).update(admitted_at=timezone.now() - timedelta(hours=1))
    assert stop_overrunning(fake_cluster.cluster) == [pk]
    says(
        cast,
        Workload.objects.get(pk=pk),
        "stopped: ran past its declared max run time of 10 min",
        "已停止：运行时间超过了其声明的最长运行时间 10 分钟",
    )


def test_a_refused_a_deleted_and_an_unstartable_job_say_why_in_chinese(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    create_job(fake_cluster, "vision-train", "sneaky", "globex", 1)
    create_job(fake_cluster, "vision-train", "gone", "vision", 2)
    create_job(fake_cluster, "vision-train", "flaky", "vision", 2)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    says(
        cast,
        Workload.objects.get(job_name="sneaky"),
        "namespace vision-train belongs to vision, not globex",
        "命名空间 vision-train 属于 vision，而不是 globex",
    )
    fake_cluster.api.fail_next(
        1000, r"/apis/batch/v1/namespaces/vision-train/jobs/flaky", status=403, method="PATCH"
    )
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    for _ in range(RECONCILE_START_ATTEMPTS - 1):
        reconcile(fake_cluster.cluster, fake_cluster.gateway)
    flaky = Workload.objects.get(job_name="flaky")
    assert flaky.state == "pending" and flaky.reason.startswith("could not start the Job: ")
    says(cast, flaky, flaky.reason, "无法启动该作业：")
    fake_cluster.api.delete_object("Job", "vision-train", "gone")
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    says(cast, Workload.objects.get(job_name="gone"), "the Job was deleted", "Job 已被删除")


def test_elastic_work_says_how_many_pods_run_in_chinese(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(guaranteed=8)
    pk = submit(
        cast.platform_admin, "speech", 1, count=8, pod={"flavour": "h100-80gb", "min_count": 4}
    ).json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    says(
        cast,
        Workload.objects.get(pk=pk),
        "running 8 of 8 pods: at its maximum",
        "正在运行 8 个 Pod 中的 8 个：已达上限",
    )


def test_an_announced_preemption_keeps_its_words_through_to_the_preemption(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    """The transitions themselves store the words (the cycle no longer rebuilds them)."""
    big = submit(cast.platform_admin, "speech", 8, name="big", preemption_grace_s=300)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    submit(cast.lead, "vision", 6, name="owner")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    victim = Workload.objects.get(pk=big.json()["id"])
    assert victim.reason_wording is not None
    assert victim.reason_wording.template.startswith("preempted at %(at)s")


def test_an_object_its_integration_cannot_queue_says_why_in_chinese(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from tests.integrations import objects

    fake_cluster.api.create_object(
        objects.batch_job(
            "vision-train",
            "too-few",
            "vision",
            parallelism=2,
            annotations={"tidegate.io/min-pods": "4"},
        )
    )
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    refused = Workload.objects.get(job_name="too-few")
    assert refused.state == "rejected"
    says(
        cast,
        refused,
        refused.reason,
        "Pod 集 'main' 要求 2 个 Pod 中至少 4 个；最小值必须介于 1 和 2 之间",
    )
