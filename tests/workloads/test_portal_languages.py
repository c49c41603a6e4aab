"""Every main portal page, rendered in Simplified Chinese for each kind of user, has no
English left but data: names, usernames, flavours, nodes and resources. Why work runs or
waits is not data: the cycle's reasons read in Chinese too, and so do the audit
messages Tidegate stored (their English text is what the API returns)."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth import get_user_model

from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.models import Workload
from tenants.models import AuditEvent, NamespaceBinding, Tenant
from tests.conftest import Cast
from tests.tenants.test_portal import logged_in
from tests.workloads.conftest import FakeCluster
from tests.workloads.test_queue import submit

pytestmark = pytest.mark.django_db

PAGES = [
    "/",
    "/tenants/vision/",
    "/clusters/",
    "/clusters/gpu-east/",
    "/clusters/gpu-east/queue/",
    "/billing/",
    "/audit/",
]
# an English phrase: two words of three letters or more
PHRASE = re.compile(r"[A-Za-z]{3,}[ ,.:;]+[A-Za-z]{3,}")


def visible_text(page: str) -> list[str]:
    page = re.sub(r"(?s)<(script|style)[^>]*>.*?</\1>", " ", page)
    page = re.sub(r"(?s)<[^>]+>", "\n", page)
    return [html.unescape(t).strip() for t in page.split("\n") if t.strip()]


def data_values() -> set[str]:
    """Text that comes from records, not from Tidegate's own strings."""
    values: set[str] = set()
    for name, slug in Tenant.objects.values_list("name", "slug"):
        values |= {name, slug}
    values |= set(get_user_model().objects.values_list("username", flat=True))
    values |= set(Cluster.objects.values_list("name", flat=True))
    values |= set(Flavour.objects.values_list("name", flat=True))
    values |= set(Node.objects.values_list("name", flat=True))
    values |= set(NamespaceBinding.objects.values_list("namespace", flat=True))
    values |= set(Workload.objects.values_list("name", flat=True))
    values |= set(AuditEvent.objects.values_list("object_repr", flat=True))
    return {v for v in values if v}


def untranslated(text: str, data: set[str]) -> bool:
    if not PHRASE.search(text):
        return False
    rest = text
    for value in sorted(data, key=len, reverse=True):
        rest = rest.replace(value, " ")
    rest = re.sub(r"\b[\w.-]+/[\w./-]+\b", " ", rest)  # resource names: nvidia.com/gpu
    return bool(PHRASE.search(rest))


@pytest.mark.parametrize("role", ["lead", "finance", "platform_admin", "dept_admin", "member"])
def test_every_main_page_speaks_chinese_but_for_its_data(
    fake_cluster: FakeCluster, cast: Cast, role: str
) -> None:
    submit(cast.member, "vision", 2, name="vision-job")
    # 2 pods of 8: more than vision's quota could ever give it, so it waits, saying why
    submit(cast.member, "vision", 8, count=2, name="vision-big")
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    assert set(Workload.objects.values_list("name", "state")) == {
        ("vision-job", "running"),
        ("vision-big", "pending"),
    }
    data = data_values()
    client = logged_in(cast.user(role))
    left: list[str] = []
    for url in PAGES:
        response = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans")
        if response.status_code == 404:
            continue  # not this user's page (scoping is tested elsewhere)
        assert response.status_code == 200, url
        page = response.content.decode()
        assert '<html lang="zh-hans">' in page, url
        left += [f"{url}: {t}" for t in visible_text(page) if untranslated(t, data)]
    assert left == []
