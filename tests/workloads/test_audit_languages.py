"""The audit trail reads in the reader's language: each event keeps how its message was
worded (a Wording, or a gettext_lazy template with its values) next to the English text
the API returns."""

from __future__ import annotations

import pytest

from scheduler_bridge.workloads.cycle import admission_cycle
from tests.conftest import Cast, client_for
from tests.workloads.conftest import FakeCluster
from tests.workloads.test_queue import submit
from tests.workloads.test_reason_languages import page

pytestmark = pytest.mark.django_db


def test_the_audit_trail_reads_in_chinese_for_a_chinese_admin(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    pk = submit(cast.member, "vision", 2, name="audited").json()["id"]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert client_for(cast.member).post(f"/api/v1/workloads/{pk}/cancel/").status_code == 200
    zh = page(cast.platform_admin, "/audit/", "zh-hans")
    assert "已提交：2 个 GPU" in zh and "submitted: 2 GPUs" not in zh
    assert "已准入到 h100-80gb（" in zh and "admitted onto" not in zh
    assert "已在集群上启动" in zh and "started on the cluster" not in zh
    en = page(cast.platform_admin, "/audit/", "en")
    assert "submitted: 2 GPUs" in en and "admitted onto h100-80gb (" in en
    # the workload's own history says the same
    history = page(cast.platform_admin, f"/workloads/{pk}/", "zh-hans")
    assert "已提交：2 个 GPU" in history


def test_an_audit_message_from_a_lazy_template_keeps_its_words(cast: Cast) -> None:
    from django.template import Context, Template
    from django.utils import translation
    from django.utils.translation import gettext_lazy

    from tenants.audit import audit_record

    event = audit_record(
        actor=None,
        action="action",
        instance=cast.team_a,
        before=None,
        after=None,
        message=gettext_lazy("%(count)s quota(s)"),
        params={"count": 3},
    )
    event.refresh_from_db()
    assert event.message == "3 quota(s)"
    template = Template("{% load tidegate %}{{ e|audit_message }}")
    with translation.override("zh-hans"):
        assert template.render(Context({"e": event})) == "3 个配额"
    event.message = "edited by hand"  # words that no longer make the text are not used
    with translation.override("zh-hans"):
        assert template.render(Context({"e": event})) == "edited by hand"
