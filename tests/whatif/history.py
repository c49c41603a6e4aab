"""A small history of finished workloads on one 8-GPU flavour: speech fills the cluster
with long runs (borrowing 2 GPUs beyond its guarantee of 6), then vision (guarantee 2)
submits three 2-GPU jobs every two hours. Under today's quotas vision reclaims only its
2 GPUs, so two of each three wait; a bigger guarantee lets them all start at once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from billing.models import RateCard
from scheduler_bridge.inventory.models import Cluster, Flavour
from tests.conftest import Cast
from tests.factories import (
    ClusterFactory,
    FinishedWorkloadFactory,
    FlavourFactory,
    QuotaFactory,
)

RESERVED_PRICE = Decimal("2.5000")


@dataclass
class History:
    cluster: Cluster
    flavour: Flavour
    start: datetime


def build_history(cast: Cast, *, days_ago: int = 10, rounds: int = 8) -> History:
    cluster = ClusterFactory(name="gpu-east")
    flavour = FlavourFactory(cluster=cluster, name="h100-80gb", product="H100-80GB", capacity=8)
    QuotaFactory(tenant=cast.team_a, flavour=flavour, guaranteed=2)
    QuotaFactory(tenant=cast.team_b, flavour=flavour, guaranteed=6)
    start = timezone.now().replace(microsecond=0) - timedelta(days=days_ago)
    for _ in range(4):
        FinishedWorkloadFactory(
            tenant=cast.team_b, flavour=flavour, gpus=2, submitted_at=start, ran=timedelta(hours=20)
        )
    for round_ in range(rounds):
        for _ in range(3):
            FinishedWorkloadFactory(
                tenant=cast.team_a,
                flavour=flavour,
                gpus=2,
                submitted_at=start + timedelta(hours=1 + 2 * round_),
                ran=timedelta(hours=1),
            )
    return History(cluster, flavour, start)


def h100_rate_card() -> RateCard:
    return RateCard.objects.create(
        name="H100 list price",
        product="H100-80GB",
        currency="USD",
        reserved_price=RESERVED_PRICE,
        on_demand_price=Decimal("4.0000"),
        valid_from=date(2020, 1, 1),
    )


PROPOSAL_BODY = {
    "quotas": [
        {"tenant": "vision", "flavour": "h100-80gb", "guaranteed": 6},
        {"tenant": "speech", "flavour": "h100-80gb", "guaranteed": 2},
    ],
    "weights": {"vision": 2},
    "reclaim_min_run_s": 0,
}
