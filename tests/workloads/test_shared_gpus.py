"""Shared GPUs through the API and the cycle: an administrator marks a flavour shared,
teams ask for shares of one GPU, the cycle places each on one GPU and says which, quotas
count thousandths, and every way of asking wrong is a 400 that says what to change."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from scheduler_bridge.inventory.models import Flavour, Node
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.models import Workload
from tests.conftest import Cast, client_for
from tests.workloads.conftest import FakeCluster

pytestmark = pytest.mark.django_db

FLAVOURS = "/api/v1/flavours/"


def share(user: Any, milli: int | None = None, *, memory: int | None = None, **pod: Any) -> Any:
    body = {
        "cluster": "gpu-east",
        "tenant": pod.pop("tenant", "vision"),
        "name": f"notebook-{milli}-{memory}",
        "pod_sets": [
            {
                "count": pod.pop("count", 1),
                "gpus_per_pod": pod.pop("gpus_per_pod", 1),
                "flavour": pod.pop("flavour", "h100-80gb"),
                **({"gpu_milli": milli} if milli is not None else {}),
                **({"gpu_memory_mib": memory} if memory is not None else {}),
            }
        ],
    }
    return client_for(user).post("/api/v1/workloads/", body, format="json")


def make_shared(cast: Cast, flavour: Flavour, sharing: str = "hami") -> Any:
    return client_for(cast.platform_admin).patch(
        f"{FLAVOURS}{flavour.pk}/", {"sharing": sharing}, format="json"
    )


def test_an_administrator_marks_a_flavour_shared_and_everyone_sees_its_isolation(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    response = make_shared(cast, fake_cluster.h100)
    assert response.status_code == 200, response.content
    assert response.json()["sharing"] == "hami"
    seen = client_for(cast.member).get(f"{FLAVOURS}{fake_cluster.h100.pk}/").json()
    assert seen["isolation"] == "HAMi (memory and cores enforced)"
    zh = client_for(cast.member).get(
        f"{FLAVOURS}{fake_cluster.h100.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert zh.json()["sharing"] == "hami"
    assert zh.json()["isolation"] == "HAMi（强制限制显存和算力）"


@pytest.mark.parametrize("who", ["lead", "dept_admin", "member", "finance"])
def test_only_platform_administrators_set_sharing(
    fake_cluster: FakeCluster, cast: Cast, who: str
) -> None:
    response = client_for(cast.user(who)).patch(
        f"{FLAVOURS}{fake_cluster.h100.pk}/", {"sharing": "mps"}, format="json"
    )
    assert response.status_code == 403
    fake_cluster.h100.refresh_from_db()
    assert fake_cluster.h100.sharing == ""


def test_an_outsider_cannot_see_or_share_another_organisations_flavour(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from tests.factories import UserFactory

    stranger = UserFactory(username="stranger")
    url = f"{FLAVOURS}{fake_cluster.h100.pk}/"
    assert client_for(stranger).get(url).status_code == 404
    assert client_for(stranger).patch(url, {"sharing": "mps"}, format="json").status_code == 404


def test_sharing_cannot_change_under_unfinished_work_nor_take_an_unknown_value(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    client = client_for(cast.platform_admin)
    url = f"{FLAVOURS}{fake_cluster.h100.pk}/"
    bad = client.patch(url, {"sharing": "vgpu"}, format="json")
    assert bad.status_code == 400 and "sharing" in bad.json()["errors"]
    mig = client.patch(f"{FLAVOURS}{fake_cluster.mig_1g.pk}/", {"sharing": "mps"}, format="json")
    assert mig.status_code == 400 and "MIG" in mig.json()["detail"]
    assert share(cast.member, None).status_code == 201  # one whole GPU, not shared yet
    busy = client.patch(url, {"sharing": "hami"}, format="json")
    assert busy.status_code == 400
    assert "1 unfinished workloads" in busy.json()["detail"]
    fake_cluster.h100.refresh_from_db()
    assert fake_cluster.h100.sharing == ""


def test_shares_are_placed_on_one_gpu_each_and_quotas_count_thousandths(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    assert make_shared(cast, fake_cluster.h100).status_code == 200
    ids = []
    for milli in (470, 470, 470, 600):
        response = share(cast.member, milli)
        assert response.status_code == 201, response.content
        ids.append(response.json()["id"])
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    per_gpu: dict[tuple[str, int], int] = defaultdict(int)
    for workload in Workload.objects.filter(pk__in=ids):
        assert workload.state == "running", workload.reason
        (placement,) = workload.placements
        assert placement["gpu"] in range(8)
        per_gpu[(placement["node"], placement["gpu"])] += placement["gpus"]
    # best fit: the second 470 joins the first (940), the third and the 600 need fresh GPUs
    assert sorted(per_gpu.values()) == [470, 600, 940]
    assert all(held <= 1000 for held in per_gpu.values())
    # vision's guarantee is 6 GPUs: 6,000 thousandths. 2,010 are held; 3,990 are left,
    # so nine more shares of 470 fit its guarantee (4,230 would borrow)
    for _ in range(8):
        assert share(cast.member, 470).status_code == 201
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    running = Workload.objects.filter(tenant=cast.team_a, state="running")
    assert sum(w.gpus for w in running) == 2010 + 8 * 470
    assert all(not w.borrowed for w in running)


def test_a_memory_share_holds_its_part_of_the_gpu(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    assert make_shared(cast, fake_cluster.h100).status_code == 200
    memory = Node.objects.filter(cluster=fake_cluster.cluster, name="h100-1").get().gpu_memory_mib
    assert memory
    response = share(cast.member, 100, memory=memory // 4)
    assert response.status_code == 201, response.content
    workload = Workload.objects.get(pk=response.json()["id"])
    # a quarter of the memory outweighs a tenth of the compute
    assert workload.pod_set_records[0].gpus_per_pod == 250


@pytest.mark.parametrize(
    ("pod", "status", "says"),
    [
        ({"milli": 1001}, 400, "less than or equal to 1000"),
        ({"milli": 0}, 400, "greater than or equal to 1"),
        ({"milli": 500, "gpus_per_pod": 2}, 400, "gpus_per_pod must be 1"),
        ({"milli": None, "gpus_per_pod": 2}, 400, "holds at most one GPU"),
        ({"milli": 500, "memory": 200_000}, 400, "more than one GPU"),
    ],
)
def test_a_share_no_gpu_can_give_is_refused_with_the_reason(
    fake_cluster: FakeCluster, cast: Cast, pod: dict[str, Any], status: int, says: str
) -> None:
    assert make_shared(cast, fake_cluster.h100).status_code == 200
    response = share(
        cast.member,
        pod.get("milli"),
        memory=pod.get("memory"),
        gpus_per_pod=pod.get("gpus_per_pod", 1),
    )
    assert response.status_code == status, response.content
    assert says in response.content.decode()
    assert not Workload.objects.exists()


def test_a_share_on_a_flavour_nobody_shares_is_refused(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    response = share(cast.member, 500)
    assert response.status_code == 400
    assert response.json()["detail"] == (
        "h100-80gb is not shared: a share of a GPU (gpu_milli, gpu_memory_mib) needs a shared "
        "flavour; shared flavours on gpu-east: none."
    )
    assert not Workload.objects.exists()


def test_the_share_packing_policy_is_a_setting(settings: Any) -> None:
    from scheduler_bridge.workloads.cycle import engine_config

    assert engine_config().share_packing == "fgd"  # the default
    settings.TIDEGATE = {**settings.TIDEGATE, "SHARE_PACKING": "best-fit"}
    assert engine_config().share_packing == "best-fit"
