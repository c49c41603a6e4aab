"""Cluster pages: every GPU drawn with its MIG slices and what runs on each, sync health
for platform admins (with the DCGM labels usage collection found), priority classes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import CollectorWatermark
from scheduler_bridge.inventory.models import Cluster
from tests.conftest import Cast
from tests.factories import (
    BindingFactory,
    ClusterFactory,
    FlavourFactory,
    NodeFactory,
    PriorityClassFactory,
    UserFactory,
    WorkloadFactory,
)
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db

MIG_3G = "h100-80gb-mig-3g.40gb"


@pytest.fixture
def mig_cluster(cast: Cast) -> Cluster:
    """`gpu-map`: one H100 node split into 3g.40gb + 4g.40gb on GPU 0, whole GPU 1;
    vision runs `vit-small` on a 3g.40gb slice; vision's namespace is bound there."""
    cluster = ClusterFactory(name="gpu-map", status="ok", last_synced_at=datetime.now(UTC))
    FlavourFactory(cluster=cluster, name="h100-80gb", capacity=1)
    FlavourFactory(
        cluster=cluster,
        name=MIG_3G,
        mig_profile="3g.40gb",
        resource_name="nvidia.com/mig-3g.40gb",
        capacity=1,
    )
    NodeFactory(
        cluster=cluster,
        name="h100-a",
        gpu_count=2,
        mig_capable=True,
        gpu_layouts=[[["4g.40gb", 0], ["3g.40gb", 4]], None],
    )
    BindingFactory(tenant=cast.team_a, cluster_name="gpu-map", namespace="vision-train")
    WorkloadFactory(
        cluster=cluster,
        tenant=cast.team_a,
        name="vit-small",
        state="running",
        gpus=1,
        placements=[{"node": "h100-a", "flavour": MIG_3G, "gpus": 1}],
    )
    return cluster


def slices(page: str) -> list[tuple[str, str]]:
    """(class, text) of every drawn slot, in order."""
    found = re.findall(r'<li class="slice (\w+)"[^>]*>(.*?)</li>', page, re.S)
    return [(kind, " ".join(re.sub(r"<[^>]+>", " ", body).split())) for kind, body in found]


def test_the_drawing_shows_the_running_workload_on_its_mig_slice(
    mig_cluster: Cluster, cast: Cast
) -> None:
    page = logged_in(cast.lead).get("/clusters/gpu-map/").content.decode()
    drawn = slices(page.split('id="gpu-map"', 1)[1])
    assert drawn == [
        ("idle", "4g.40gb idle"),
        ("busy", "3g.40gb vit-small vision"),
        ("idle", "whole GPU idle"),
    ]
    workload = mig_cluster.workloads.get()
    assert f'<a href="/workloads/{workload.pk}/">vit-small</a>' in page


def test_work_of_a_tenant_the_reader_cannot_see_is_drawn_without_its_name(
    mig_cluster: Cluster, cast: Cast
) -> None:
    BindingFactory(tenant=cast.other_org, cluster_name="gpu-map", namespace="globex-train")
    page = logged_in(cast.outsider).get("/clusters/gpu-map/").content.decode()
    assert "vit-small" not in page and "another tenant's work" in page


def test_pods_outside_the_queue_take_their_slots(mig_cluster: Cluster, cast: Cast) -> None:
    mig_cluster.nodes.update(busy_foreign={"nvidia.com/gpu": 1})
    page = logged_in(cast.platform_admin).get("/clusters/gpu-map/").content.decode()
    assert ("foreign", "whole GPU outside the queue") in slices(page.split('id="gpu-map"')[1])


def test_the_cluster_page_reads_a_constant_number_of_queries_whatever_the_nodes(
    mig_cluster: Cluster, cast: Cast
) -> None:
    client = logged_in(cast.platform_admin)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/clusters/gpu-map/").status_code == 200
        return len(captured)

    before = queries()
    for i in range(5):
        NodeFactory(
            cluster=mig_cluster,
            name=f"h100-more-{i}",
            gpu_count=2,
            gpu_layouts=[[["3g.40gb", 4]], None],
        )
        WorkloadFactory(
            cluster=mig_cluster,
            tenant=cast.team_a,
            state="running",
            gpus=1,
            placements=[{"node": f"h100-more-{i}", "flavour": MIG_3G, "gpus": 1}],
        )
    assert queries() == before


def test_platform_admins_see_sync_health_with_errors_and_dcgm_labels(
    mig_cluster: Cluster, cast: Cast
) -> None:
    Cluster.objects.filter(pk=mig_cluster.pk).update(
        status="error", status_message="kubeconfig /etc/k.yaml not found"
    )
    CollectorWatermark.objects.create(
        cluster=mig_cluster,
        collected_until=datetime(2026, 12, 1, 10, tzinfo=UTC),
        last_run_at=datetime(2026, 12, 1, 10, 5, tzinfo=UTC),
        dcgm_pod_labels="exported_pod/exported_namespace",
    )
    page = logged_in(cast.platform_admin).get("/clusters/gpu-map/").content.decode()
    health = page.split('id="sync-health"', 1)[1].split("</section>", 1)[0]
    assert "kubeconfig /etc/k.yaml not found" in health
    assert "Usage collection" in health and "exported_pod/exported_namespace" in health
    assert "Quota sync" in health and "MIG layouts" in health
    for role in ("dept_admin", "lead"):
        other = logged_in(cast.user(role)).get("/clusters/gpu-map/").content.decode()
        assert 'id="sync-health"' not in other


def test_sync_health_says_when_dcgm_labels_were_not_found(mig_cluster: Cluster, cast: Cast) -> None:
    page = logged_in(cast.platform_admin).get("/clusters/gpu-map/").content.decode()
    assert "Usage has not been collected yet." in page


def test_the_cluster_page_of_a_cluster_none_of_my_tenants_uses_is_404(
    mig_cluster: Cluster, cast: Cast
) -> None:
    assert logged_in(cast.outsider).get("/clusters/gpu-map/").status_code == 404


def test_priority_classes_are_listed_for_whoever_sees_a_cluster(
    mig_cluster: Cluster, cast: Cast
) -> None:
    PriorityClassFactory(
        name="prod", value=100, preemptible=False, description="serving; never preempted"
    )
    PriorityClassFactory(name="spot", value=-10, max_preemption_grace_s=30)
    page = logged_in(cast.member).get("/priority-classes/").content.decode()
    rows = re.findall(r"<tr><td><code>([\w-]+)</code>", page)
    assert rows == ["prod", "spot"]
    assert "serving; never preempted" in page and "30 seconds" in page


def test_priority_classes_say_what_to_do_when_there_are_none(
    mig_cluster: Cluster, cast: Cast
) -> None:
    assert "A platform admin can add classes." in (
        logged_in(cast.lead).get("/priority-classes/").content.decode()
    )


def test_who_sees_no_cluster_gets_404_for_priority_classes(cast: Cast) -> None:
    assert logged_in(UserFactory(username="nobody")).get("/priority-classes/").status_code == 404
    assert logged_in(cast.outsider).get("/priority-classes/").status_code == 404


@pytest.mark.parametrize(
    ("who", "words"),
    [("platform_admin", "Add one under Administration"), ("lead", "Ask your tenant's admin")],
)
def test_no_cluster_says_what_to_do(cast: Cast, who: str, words: str) -> None:
    page: Any = logged_in(cast.user(who)).get("/clusters/").content.decode()
    assert 'id="clusters-empty"' in page and words in page
