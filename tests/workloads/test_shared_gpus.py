"""Shared GPUs through the API and the cycle: an administrator marks a flavour shared,
teams ask for shares of one GPU, the cycle places each on one GPU and says which, quotas
count thousandths, and every way of asking wrong is a 400 that says what to change."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from django.utils import translation

from scheduler_bridge.inventory.models import Flavour, Node
from scheduler_bridge.templatetags.tidegate import reason
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.selectors import admitted_jobs, queue_holdings
from scheduler_bridge.workloads.snapshot import pending_of, running_of
from tests.conftest import Cast, client_for
from tests.tenants.test_portal import logged_in
from tests.workloads.conftest import FakeCluster

pytestmark = pytest.mark.django_db

FLAVOURS = "/api/v1/flavours/"


def share(user: Any, milli: int | None = None, *, memory: int | None = None, **pod: Any) -> Any:
    extra = {"priority_class": pod.pop("priority_class")} if "priority_class" in pod else {}
    body = {
        **extra,
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
    assert mig.status_code == 422 and "MIG" in mig.json()["detail"]
    assert share(cast.member, None).status_code == 201  # one whole GPU, not shared yet
    busy = client.patch(url, {"sharing": "hami"}, format="json")
    assert busy.status_code == 422
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
    quotas = client_for(cast.member).get("/api/v1/quotas/?tenant=vision").json()["results"]
    (h100,) = [
        q for q in quotas if q["flavour"] == "gpu-east/h100-80gb" and q["tenant"] == "vision"
    ]
    assert (h100["guaranteed"], h100["held_core"]) == (6, 2.01)
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
        ({"milli": 500, "gpus_per_pod": 2}, 422, "gpus_per_pod must be 1"),
        ({"milli": None, "gpus_per_pod": 2}, 422, "holds at most one GPU"),
        ({"milli": 500, "memory": 200_000}, 422, "more than one GPU"),
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
    assert response.status_code == 422
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


# -- shares asked for by objects on the cluster (the local API server) ------------------


def shared_job(
    fake: FakeCluster,
    name: str,
    *,
    requests: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict:
    from scheduler_bridge.gateways.simulated_objects import job as job_manifest

    manifest = job_manifest(
        "vision-train", name, requests=requests or {}, labels={"tidegate.io/queue": "vision"}
    )
    manifest["apiVersion"] = "batch/v1"
    template = manifest["spec"]["template"]
    template["spec"]["containers"][0]["image"] = "notebook:1"
    if annotations:
        template.setdefault("metadata", {})["annotations"] = annotations
    return fake.api.create_object(manifest)


def synced_workload(fake: FakeCluster, name: str) -> Workload:
    from scheduler_bridge.workloads.jobs import jobs_sync

    jobs_sync(fake.cluster, fake.gateway)
    return Workload.objects.get(job_name=name)


def test_a_hami_job_holds_the_larger_of_its_memory_and_core_share_and_starts(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    from tests.kube_fake.schema import assert_valid_kubernetes

    assert make_shared(cast, fake_cluster.h100, "hami").status_code == 200
    # 20,000 of the H100's 81,559 MiB is 246 thousandths; 30 % of its cores is 300
    shared_job(
        fake_cluster,
        "hami-notebook",
        requests={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000, "nvidia.com/gpucores": 30},
    )
    workload = synced_workload(fake_cluster, "hami-notebook")
    assert workload.state == "pending", workload.reason
    assert workload.pod_sets == [
        {"name": "main", "count": 1, "gpus_per_pod": 300, "flavours": ["h100-80gb"]}
    ]
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    assert workload.state == "running"
    assert workload.placements[0]["gpu"] in range(8)
    live = fake_cluster.api.get_object("Job", "vision-train", "hami-notebook")
    assert live is not None and live["spec"]["suspend"] is False
    assert_valid_kubernetes(live)


def test_a_fraction_annotation_asks_for_part_of_one_gpu_without_a_gpu_resource(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    assert make_shared(cast, fake_cluster.h100, "fraction").status_code == 200
    shared_job(fake_cluster, "half", annotations={"gpu-fraction": "0.5"})
    shared_job(fake_cluster, "by-memory", annotations={"gpu-memory": "40779"})
    half = synced_workload(fake_cluster, "half")
    assert half.pod_set_records[0].gpus_per_pod == 500
    assert Workload.objects.get(job_name="by-memory").pod_set_records[0].gpus_per_pod == 500
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    placed = [w.placements[0] for w in Workload.objects.filter(state="running")]
    assert len(placed) == 2
    # two halves share one GPU
    assert {(p["node"], p["gpu"]) for p in placed} == {(placed[0]["node"], placed[0]["gpu"])}


def test_a_time_sliced_replica_holds_its_part_of_a_gpu_and_quotas_count_replicas(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    from scheduler_bridge.inventory.services import inventory_sync
    from scheduler_bridge.quotas.sync import desired_quotas
    from tenants.models import NamespaceBinding

    for name in ("h100-1", "h100-2"):  # the device plugin shares each GPU four ways
        fake_cluster.api.edit_object(
            "Node",
            None,
            name,
            lambda node: node["status"]["allocatable"].update({"nvidia.com/gpu": "32"}),
        )
    inventory_sync(fake_cluster.cluster, fake_cluster.gateway, admitted=admitted_jobs)
    assert make_shared(cast, fake_cluster.h100, "time-slicing").status_code == 200
    shared_job(fake_cluster, "replica", requests={"nvidia.com/gpu": 1})
    assert synced_workload(fake_cluster, "replica").pod_set_records[0].gpus_per_pod == 250
    # vision's guarantee of 6 GPUs is 24 replicas to Kubernetes' ResourceQuota
    bindings = list(NamespaceBinding.objects.filter(cluster_name=fake_cluster.cluster.name))
    lent = queue_holdings(fake_cluster.cluster).lent
    hard = desired_quotas(fake_cluster.cluster, bindings, {}, lent=lent)
    vision = [b.namespace for b in bindings if b.tenant == cast.team_a]
    assert sum(int(hard[ns]["requests.nvidia.com/gpu"]) for ns in vision) == 24


@pytest.mark.parametrize(
    ("sharing", "requests", "annotations", "says"),
    [
        (
            "time-slicing",
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000},
            None,
            "not shared by HAMi, so no node enforces them",
        ),
        ("hami", {"nvidia.com/gpumem": 4000}, None, "without nvidia.com/gpu"),
        ("fraction", None, {"gpu-fraction": "1.5"}, "above 0 and at most 1"),
        ("fraction", None, {"gpu-fraction": "half"}, "above 0 and at most 1"),
        ("fraction", None, {"gpu-memory": "-4"}, "a whole number above 0"),
        ("fraction", {"nvidia.com/gpu": 1}, {"gpu-fraction": "0.5"}, "remove one of them"),
        ("hami", {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 150}, None, "1..100"),
        ("hami", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 200000}, None, "more than one GPU"),
    ],
)
def test_a_share_asked_for_wrong_on_the_cluster_is_rejected_with_the_reason(
    fake_cluster: FakeCluster,
    cast: Cast,
    sharing: str,
    requests: dict[str, Any] | None,
    annotations: dict[str, str] | None,
    says: str,
) -> None:
    assert make_shared(cast, fake_cluster.h100, sharing).status_code == 200
    shared_job(fake_cluster, "wrong", requests=requests, annotations=annotations)
    workload = synced_workload(fake_cluster, "wrong")
    assert workload.state == "rejected"
    assert says in workload.reason
    # the reason is worded once and said again in Chinese, the share's problem included
    with translation.override("zh-hans"):
        said = reason(workload)
    assert said != workload.reason and not said.isascii(), said
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    live = fake_cluster.api.get_object("Job", "vision-train", "wrong")
    assert live is not None and live["spec"]["suspend"] is True


def test_the_node_api_shows_what_each_shared_gpu_holds_and_has_free(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    assert make_shared(cast, fake_cluster.h100).status_code == 200
    for milli in (600, 300):
        assert share(cast.member, milli).status_code == 201
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    nodes = client_for(cast.member).get("/api/v1/nodes/?cluster__name=gpu-east").json()["results"]
    by_name = {node["name"]: node for node in nodes}
    assert by_name["a100-1"]["shared_gpus"] == []  # a MIG node is not shared
    gpus = [gpu for name in ("h100-1", "h100-2") for gpu in by_name[name]["shared_gpus"]]
    assert len(gpus) == 16
    held = sorted(gpu["held_milli"] for gpu in gpus if gpu["held_milli"])
    # fgd: 400 left beside the 600 suits no 600 share; the 300 goes there
    assert held == [900]
    for gpu in gpus:
        assert gpu["free_milli"] == 1000 - gpu["held_milli"]
        assert gpu["free_memory_mib"] == 81559 * gpu["free_milli"] // 1000


def test_the_cluster_page_names_how_a_flavour_is_shared_in_both_languages(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    from django.urls import reverse

    assert make_shared(cast, fake_cluster.h100, "mps").status_code == 200
    url = reverse("portal-cluster", kwargs={"name": "gpu-east"})
    english = logged_in(cast.member).get(url)
    assert english.status_code == 200
    assert "MPS (compute limited)" in english.content.decode()
    chinese = logged_in(cast.member).get(url, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "MPS（限制算力）" in chinese.content.decode()


def test_low_priority_shares_fill_idle_gpus_and_are_the_first_taken_back(
    fake_cluster: FakeCluster, cast: Cast, priorities: dict
) -> None:
    admin = client_for(cast.platform_admin)
    scavenger = {"name": "scavenger", "value": -10, "fills_idle": True}
    refused = admin.post("/api/v1/priority-classes/", scavenger | {"preemptible": False})
    assert refused.status_code == 422
    assert "must be preemptible" in refused.json()["errors"]["fills_idle"][0]
    assert admin.post("/api/v1/priority-classes/", scavenger, format="json").status_code == 201
    assert make_shared(cast, fake_cluster.h100).status_code == 200
    filler = share(cast.member, 300, priority_class="scavenger")
    assert filler.status_code == 201, filler.content
    assert filler.json()["fills_idle"] is True
    assert share(cast.member, 300).json()["fills_idle"] is False
    workload = Workload.objects.get(pk=filler.json()["id"])
    assert pending_of(workload).fills_idle
    admission_cycle(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    assert workload.state == "running", workload.reason
    assert running_of(workload).fills_idle  # the engine takes it back first
    page = logged_in(cast.member).get("/priority-classes/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "填补空闲 GPU" in page.content.decode()
