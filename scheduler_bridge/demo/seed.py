"""Demo data of the scheduler bridge: the simulated cluster `demo` and its quotas."""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth import get_user_model
from django.utils import timezone

from i18n.wording import gettext_noop, wording
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.quotas.services import quota_set
from scheduler_bridge.quotas.sync import quota_sync
from scheduler_bridge.workloads.models import PriorityClass
from scheduler_bridge.workloads.selectors import admitted_jobs, queue_holdings
from tenants.demo import DEMO_CLUSTER, DemoResult
from tenants.models import Tenant

# Share of the parent's guarantee each department gets (the rest stays with the parent,
# shared by its subtree); teams split their department's share evenly.
DEPARTMENT_SHARES = {"research": 0.5, "product": 0.3, "platform": 0.15}

# the audit message of what the demo seeds, in the reader's language on the audit page
DEMO_DATA = wording(gettext_noop("demo data"))


def seed_demo_cluster(result: DemoResult) -> None:
    cluster, created = Cluster.objects.get_or_create(
        name=DEMO_CLUSTER,
        defaults={
            "display_name": (
                "Demo cluster (simulated: 6 x H100, 6 x A100, some with MIG; "
                "work replayed from the Microsoft Philly trace)"
            ),
            "gateway": Cluster.Gateway.SIMULATED,
        },
    )
    inventory_sync(cluster, admitted=admitted_jobs)
    if Quota.objects.filter(flavour__cluster=cluster).exists():
        quota_sync(cluster, queue=queue_holdings(cluster))
        return
    _seed_priority_classes()
    admin = get_user_model().objects.get(username="admin")
    org = Tenant.objects.get(slug="acme")
    for flavour in Flavour.objects.filter(cluster=cluster, capacity__gt=0).order_by("name"):
        quota_set(
            actor=admin,
            tenant=org,
            flavour=flavour,
            guaranteed=flavour.capacity,
            source="system",
            message=DEMO_DATA,
        )
        for department in org.children.order_by("slug"):
            share = int(flavour.capacity * DEPARTMENT_SHARES.get(department.slug, 0))
            quota_set(
                actor=admin,
                tenant=department,
                flavour=flavour,
                guaranteed=share,
                lend_limit=share,
                source="system",
                message=DEMO_DATA,
            )
            teams = list(department.children.order_by("slug"))
            for team in teams:
                quota_set(
                    actor=admin,
                    tenant=team,
                    flavour=flavour,
                    guaranteed=share // len(teams),
                    borrow_limit=share,
                    source="system",
                    message=DEMO_DATA,
                )
    quota_sync(cluster, queue=queue_holdings(cluster))
    _seed_queue(cluster)
    result.created += int(created)


def _seed_priority_classes() -> None:
    for name, value, preemptible, multiplier, default, text in [
        ("spot", -10, True, "0.5", False, "cheapest; first to be preempted"),
        ("batch", 0, True, "1", True, "default for training runs"),
        ("prod", 100, False, "1.5", False, "serving and deadlines; never preempted"),
    ]:
        PriorityClass.objects.get_or_create(
            name=name,
            defaults={
                "value": value,
                "preemptible": preemptible,
                "price_multiplier": Decimal(multiplier),
                "is_default": default,
                "description": text,
            },
        )


# (team, name, pod sets as (count, gpus per pod, flavour), topology, priority class,
# virtual hours it runs once started: the demo's clock finishes it then)
DEMO_WORKLOADS = [
    ("vision", "resnet-sweep", [(4, 1, "h100-80gb")], "none", "batch", 3),
    ("vision", "vit-huge", [(2, 8, "h100-80gb")], "domain", "batch", 10),
    ("nlp", "llm-finetune", [(1, 8, "h100-80gb")], "node", "prod", 6),
    ("nlp", "tokenizer-eval", [(6, 1, "h100-80gb-mig-1g.10gb")], "none", "spot", 1),
    ("speech", "asr-train", [(2, 4, "a100-sxm4-80gb")], "none", "batch", 8),
    ("search", "ranker", [(4, 2, "a100-sxm4-80gb")], "none", "batch", 4),
    ("recsys", "two-tower", [(1, 8, "a100-sxm4-80gb")], "node", "batch", 5),
    ("ads", "ctr-daily", [(8, 1, "a100-sxm4-80gb-mig-1g.10gb")], "none", "prod", 2),
    ("infra", "nccl-burn-in", [(3, 8, "h100-80gb")], "domain", "spot", 1),
    ("data", "embedding-backfill", [(4, 1, "a100-sxm4-80gb-mig-3g.40gb")], "none", "spot", 3),
]

# Submitted once the work above runs: each inside its team's unused guarantee, so it
# starts, and with it every whole H100 is taken.
DEMO_FILLING = [
    ("speech", "whisper-finetune", [(4, 1, "h100-80gb")], "none", "batch", 4),
    ("nlp", "bert-distill", [(4, 1, "h100-80gb")], "none", "batch", 3),
    ("search", "query-encoder", [(2, 1, "h100-80gb")], "none", "batch", 2),
    ("recsys", "seq-rec", [(2, 1, "h100-80gb")], "none", "batch", 2),
]

# Ordinary work that waits in line: each fits its team's quota but asks more than the
# team's unused guarantee, so it would borrow, and every whole H100 is held - by work
# inside its owners' guarantees or by vision's borrowed run, which only an owner's
# guaranteed work may reclaim. Submitted after the cluster filled, it waits with a
# position until GPUs are freed: the demo's clock finishes the work above after its
# hours, and the trace's work keeps arriving (scheduler_bridge/demo/clock.py).
DEMO_WAITING = [
    ("speech", "whisper-eval", [(2, 1, "h100-80gb")], "none", "batch", 1),
    ("search", "ranker-refresh", [(2, 1, "h100-80gb")], "none", "batch", 1),
]


def _seed_queue(cluster: Cluster) -> None:
    from scheduler_bridge.demo.clock import demo_annotations, virtual
    from scheduler_bridge.workloads.cycle import admission_cycle
    from scheduler_bridge.workloads.services import PodSetSpec, workload_submit

    # the live clock starts where the seeded history ends: this hour
    at = virtual(timezone.now().replace(minute=0, second=0, microsecond=0))
    for batch in (DEMO_WORKLOADS, DEMO_FILLING, DEMO_WAITING):
        for slug, name, pod_sets, topology, pclass, hours in batch:
            workload_submit(
                actor=None,
                cluster=cluster,
                tenant=Tenant.objects.get(slug=slug),
                name=name,
                pod_sets=[PodSetSpec(count=c, gpus_per_pod=g, flavour=f) for c, g, f in pod_sets],
                topology=topology,
                priority_class=pclass,
                audit_source="system",
                annotations=demo_annotations(at, hours * 3600.0),
            )
        admission_cycle(cluster)
