"""Billing's cast on top of the standing one: a cluster `gpu-east` with whole H100s and
A100 MIG slices, namespaces bound to the teams, quotas, and a USD rate card."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from billing.models import RateCard
from scheduler_bridge.inventory.models import Cluster, Flavour
from tests.clusters import bind_team_namespaces, hand_down
from tests.conftest import Cast
from tests.factories import ClusterFactory, FlavourFactory, NodeFactory

# February 2026: 28 days, far enough in the past to close.
FEB = datetime(2026, 2, 1, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)


@dataclass
class GpuCluster:
    cluster: Cluster
    h100: Flavour
    mig_1g: Flavour
    mig_3g: Flavour
    card: RateCard


@pytest.fixture
def gpu(cast: Cast) -> GpuCluster:
    cluster = ClusterFactory(name="gpu-east")
    NodeFactory(cluster=cluster, name="h100-1", product="H100-80GB")
    NodeFactory(cluster=cluster, name="a100-1", product="A100-SXM4-40GB")
    h100 = FlavourFactory(cluster=cluster)
    mig_1g = FlavourFactory(
        cluster=cluster,
        name="a100-sxm4-40gb-mig-1g.5gb",
        product="A100-SXM4-40GB",
        resource_name="nvidia.com/mig-1g.5gb",
        mig_profile="1g.5gb",
        gpu_equivalent=Decimal("0.1429"),
        capacity=14,
    )
    mig_3g = FlavourFactory(
        cluster=cluster,
        name="a100-sxm4-40gb-mig-3g.20gb",
        product="A100-SXM4-40GB",
        resource_name="nvidia.com/mig-3g.20gb",
        mig_profile="3g.20gb",
        gpu_equivalent=Decimal("0.4286"),
        capacity=4,
    )
    bind_team_namespaces(cast)
    hand_down(
        [
            (cast.org, h100, 6),
            (cast.dept, h100, 6),
            (cast.team_a, h100, 4),
            (cast.team_b, h100, 2),
            (cast.other_org, h100, 2),
        ]
    )
    card = RateCard.objects.create(
        name="Standard",
        currency="USD",
        reserved_price=Decimal("2.0000"),
        on_demand_price=Decimal("3.0000"),
        priority_multipliers={"spot": "0.5"},
        valid_from=date(2026, 1, 1),
    )
    return GpuCluster(cluster, h100, mig_1g, mig_3g, card)
