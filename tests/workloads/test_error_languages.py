"""Domain errors whose message holds a list or a reason worded elsewhere read wholly in
the reader's language (the API answers English by default, Chinese with
Accept-Language: zh-hans); a hard budget's refusal reads in Chinese inside the reason."""

from __future__ import annotations

import pytest

from tests.conftest import Cast, client_for
from tests.workloads.conftest import FakeCluster

pytestmark = pytest.mark.django_db


def test_a_tenant_in_use_lists_what_blocks_it_in_the_readers_language(cast: Cast) -> None:
    client = client_for(cast.platform_admin)
    english = client.delete("/api/v1/tenants/research/").json()["detail"]
    assert "2 sub-tenant(s): speech, vision" in english
    chinese = client.delete("/api/v1/tenants/research/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert chinese.status_code == 409
    assert "2 个子租户：speech, vision" in chinese.json()["detail"]
    assert "sub-tenant" not in chinese.json()["detail"]


def test_a_bad_period_is_refused_in_the_readers_language(cast: Cast) -> None:
    client = client_for(cast.finance)
    url = "/api/v1/billing/reports/spend/?period=2026-13&group_by=tenant"
    english = client.get(url).json()
    assert "'2026-13' is not a period; periods are months named YYYY-MM." in str(english)
    chinese = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    assert "“2026-13”不是账期" in str(chinese)


def test_a_hard_budget_refusal_reads_in_chinese() -> None:
    from fractions import Fraction

    from django.utils import translation

    from billing.budgeting.gate import HardBudget
    from scheduler_bridge.admission import reasons
    from scheduler_bridge.templatetags.tidegate import say

    budget = HardBudget("vision", "2026-11", "EUR", amount=Fraction(50), spent=Fraction(45))
    refused = reasons.budget(budget.reason_too_expensive(Fraction(12)))
    assert refused == (
        "budget: vision budget for 2026-11: this workload would cost about 12.00 EUR, "
        "5.00 EUR left of 50.00 EUR allowed (hard)"
    )
    with translation.override("zh-hans"):
        assert say(refused) == (
            "预算：vision 在 2026-11 的预算：该工作负载约需 12.00 EUR，"
            "预算 50.00 EUR 仅剩 5.00 EUR（硬性）"
        )
        assert say(reasons.budget(budget.reason_exhausted())) == (
            "预算：vision 在 2026-11 的预算已用尽（硬性）：已支出 45.00 / 50.00 EUR"
        )


def test_a_bad_toleration_is_refused_in_the_readers_language(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    url = f"/api/v1/flavours/{fake_cluster.h100.pk}/"
    body = {"tolerations": [{"key": "gpu", "operator": "Maybe"}]}
    client = client_for(cast.platform_admin)
    english = client.patch(url, body, format="json").json()["tolerations"]
    assert english == ['toleration 0: operator must be "Equal" or "Exists", not \'Maybe\'']
    chinese = client.patch(url, body, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert chinese.status_code == 422
    assert chinese.json()["tolerations"] == [
        '容忍度 0：operator 必须是 "Equal" 或 "Exists"，而不是 \'Maybe\''
    ]


def test_cancelling_twice_says_so_in_the_readers_language(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from tests.tenants.test_portal import logged_in
    from tests.workloads.test_queue import submit

    workload = submit(cast.member, "vision", 1).json()["id"]
    client = logged_in(cast.member)
    client.post(f"/workloads/{workload}/cancel/")
    again = client.post(
        f"/workloads/{workload}/cancel/", follow=True, HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert f"工作负载 {workload} 已处于“已取消”状态。" in again.content.decode()
