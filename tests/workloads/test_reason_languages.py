"""A waiting workload's reason reads in the reader's language on the queue and workload
pages, worded by the real cycle; the API, logs and Kubernetes Events keep the English."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_bridge.admission import reasons
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.models import Workload, dump_reason
from tests.conftest import Cast, client_for
from tests.tenants.test_portal import logged_in
from tests.workloads.conftest import FakeCluster
from tests.workloads.test_queue import submit

pytestmark = pytest.mark.django_db

ENGLISH = "quota of h100-80gb used 2/3 (guaranteed 2, borrowing limit 1); needs 2"
CHINESE = "h100-80gb 配额已用 2/3（保障 2，借用上限 1）；需要 2"


def waiting_at_its_quota_limit(fake_cluster: FakeCluster, cast: Cast) -> Workload:
    """speech holds 2 H100 and may borrow 1 more: its second job of 2 waits."""
    Quota.objects.filter(tenant=cast.team_b, flavour=fake_cluster.h100).update(borrow_limit=1)
    ids = [submit(cast.platform_admin, "speech", 2, name=f"s{i}").json()["id"] for i in range(2)]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    waiting = Workload.objects.get(pk=ids[1])
    assert waiting.state == "pending" and waiting.reason_code == "quota_limit"
    return waiting


def page(user: object, url: str, language: str) -> str:
    response = logged_in(user).get(url, HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 200, url
    return html.unescape(response.content.decode())


def test_a_waiting_reason_reads_in_chinese_for_a_chinese_reader(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    waiting = waiting_at_its_quota_limit(fake_cluster, cast)
    for url in ("/clusters/gpu-east/queue/", f"/workloads/{waiting.pk}/"):
        text = page(cast.platform_admin, url, "zh-hans")
        assert CHINESE in text, url
        assert ENGLISH not in text, url


def test_the_same_reason_reads_in_english_for_an_english_reader(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    waiting = waiting_at_its_quota_limit(fake_cluster, cast)
    for url in ("/clusters/gpu-east/queue/", f"/workloads/{waiting.pk}/"):
        text = page(cast.platform_admin, url, "en")
        assert ENGLISH in text and CHINESE not in text, url


def test_the_api_keeps_the_english_reason_whatever_the_language(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    waiting = waiting_at_its_quota_limit(fake_cluster, cast)
    assert waiting.reason == ENGLISH
    client = client_for(cast.platform_admin)
    for language in ("en", "zh-hans"):
        body = client.get(f"/api/v1/workloads/{waiting.pk}/", HTTP_ACCEPT_LANGUAGE=language)
        assert body.json()["reason"] == ENGLISH


def test_work_that_can_never_run_says_why_in_chinese(fake_cluster: FakeCluster, cast: Cast) -> None:
    """speech may hold 2 H100 and borrow none: 2 pods of 2 wait for nothing."""
    Quota.objects.filter(tenant=cast.team_b, flavour=fake_cluster.h100).update(borrow_limit=0)
    pk = submit(cast.platform_admin, "speech", 2, count=2, name="over-quota").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload = Workload.objects.get(pk=pk)
    assert workload.reason_code == "never_fits", workload.reason
    text = page(cast.platform_admin, f"/workloads/{pk}/", "zh-hans")
    assert "需要 4 块 h100-80gb，但即使整个资源组空闲，配额也只允许 speech 最多占用 2 块" in text


def test_why_running_work_holds_its_gpus_reads_in_chinese(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """speech (guarantee 2) runs a 2-GPU job, then a 4-GPU one that borrows 4; when the
    first finishes, the second borrows only 2 and says so."""
    older = submit(cast.platform_admin, "speech", 2, name="older").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    text = page(cast.platform_admin, f"/workloads/{older}/", "zh-hans")
    assert "在保障额度内：h100-80gb 已用 2/2" in text
    newer = submit(cast.platform_admin, "speech", 4, name="newer").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    client_for(cast.platform_admin).post(f"/api/v1/workloads/{older}/finish/")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert Workload.objects.get(pk=newer).reason == (
        "borrows 2 of its 4 GPUs now (its tenant's work changed)"
    )
    text = page(cast.platform_admin, f"/workloads/{newer}/", "zh-hans")
    assert "现在借用其 4 块 GPU 中的 2 块（其租户的工作有变化）" in text


def test_preempted_work_says_why_in_chinese(fake_cluster: FakeCluster, cast: Cast) -> None:
    """speech borrows the whole cluster; vision comes back for its guarantee."""
    big = submit(cast.platform_admin, "speech", 8, name="big").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    submit(cast.lead, "vision", 6, name="owner")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    victim = Workload.objects.get(pk=big)
    assert victim.state == "pending" and victim.reason.startswith("preempted: reclaim: vision")
    queue = page(cast.platform_admin, "/clusters/gpu-east/queue/", "zh-hans")
    assert "已被抢占：收回：vision 需要其保障的 h100-80gb" in queue
    assert "preempted: reclaim" not in queue


def test_work_told_it_will_be_preempted_says_when_in_chinese(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    """The same, with a grace to save a checkpoint: speech is told first, then waits."""
    big = submit(cast.platform_admin, "speech", 8, name="big", preemption_grace_s=300)
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    submit(cast.lead, "vision", 6, name="owner")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    victim = Workload.objects.get(pk=big.json()["id"])
    assert victim.state == "running" and victim.preempt_at is not None
    announced = page(cast.platform_admin, f"/workloads/{victim.pk}/", "zh-hans")
    assert "秒宽限期以保存检查点）：收回：vision 需要其保障的 h100-80gb" in announced
    Workload.objects.filter(pk=victim.pk).update(preempt_at=timezone.now() - timedelta(seconds=1))
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    victim.refresh_from_db()
    assert (victim.state, victim.reason_code) == ("pending", "cohort_exhausted")
    text = page(cast.platform_admin, f"/workloads/{victim.pk}/", "zh-hans")
    assert "资源组 acme 只能借出 4 块 h100-80gb（其租户有 2 块保障额度未使用）；需要 8" in text


def test_a_reason_rewritten_without_its_words_is_shown_as_stored(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    """Older rows, and reasons written outside the engine, have no words that match."""
    waiting = waiting_at_its_quota_limit(fake_cluster, cast)
    Workload.objects.filter(pk=waiting.pk).update(reason="held by an operator")
    text = page(cast.platform_admin, f"/workloads/{waiting.pk}/", "zh-hans")
    assert "held by an operator" in text and CHINESE not in text
    Workload.objects.filter(pk=waiting.pk).update(reason=ENGLISH, reason_args={})
    assert ENGLISH in page(cast.platform_admin, f"/workloads/{waiting.pk}/", "zh-hans")


def test_only_the_engines_words_are_stored() -> None:
    worded = reasons.waiting_fair_share("h100")
    assert dump_reason(worded)["template"].startswith("waiting behind fair share")
    assert dump_reason(str(worded) + "!") == {}
