"""The one test cluster, `gpu-east`: which namespaces each team has there and how its
GPU quotas are handed down the tree. Two fixtures build it: the bridge's (nodes read
from the local Kubernetes API server by a real inventory sync) and billing's (nodes and
flavours written straight to the database, no server); both bind and hand down here."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler_bridge.inventory.models import Flavour
from tenants.models import Tenant
from tests.conftest import Cast
from tests.factories import BindingFactory, QuotaFactory

CLUSTER = "gpu-east"


def bind_team_namespaces(cast: Cast) -> None:
    """vision-train and vision-dev to vision, speech-train to speech, globex-train to
    the other organisation."""
    for tenant, namespace in [
        (cast.team_a, "vision-train"),
        (cast.team_a, "vision-dev"),
        (cast.team_b, "speech-train"),
        (cast.other_org, "globex-train"),
    ]:
        BindingFactory(tenant=tenant, cluster_name=CLUSTER, namespace=namespace)


def hand_down(guarantees: Iterable[tuple[Tenant, Flavour, int]]) -> None:
    """Quotas, parents first (each child's guarantee fits in its parent's)."""
    for tenant, flavour, guaranteed in guarantees:
        QuotaFactory(tenant=tenant, flavour=flavour, guaranteed=guaranteed)
