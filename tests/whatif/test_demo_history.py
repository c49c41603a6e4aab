"""The what-if on the demo cluster replays the demo's month of history (the seeded trace
work, not only the few workloads the live clock finished), counts MIG slices as the GPUs
they are, and refuses a proposal beyond the cluster's capacity."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest

from billing.whatif import services
from billing.whatif.records import Proposal, QuotaEntry
from scheduler_bridge.gateways import simulated
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.quotas.models import Quota
from tenants.demo import seed_demo
from tenants.errors import ValidationFailed

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo() -> Iterator[Cluster]:
    simulated.reset()
    seed_demo()
    yield Cluster.objects.get(name="demo")
    simulated.reset()


def test_the_demos_what_if_replays_its_month_and_shows_a_difference(demo: Cluster) -> None:
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.get(username="admin")
    tenants = services.history_tenants(cluster=demo, days=30)
    assert len(tenants) >= 6  # every team that ran trace work, not a handful
    vision = Quota.objects.get(tenant__slug="vision", flavour__name="h100-80gb").guaranteed
    nlp = Quota.objects.get(tenant__slug="nlp", flavour__name="h100-80gb").guaranteed
    # vision gets nlp's H100 guarantee: the total stays within capacity
    proposal = Proposal(
        quotas=(
            QuotaEntry("vision", "h100-80gb", vision + nlp),
            QuotaEntry("nlp", "h100-80gb", 0),
        )
    )
    run = services.whatif_run_create(
        actor=admin, cluster=demo, kind="whatif", days=30, proposal=proposal
    )
    run = services.whatif_run_execute(run_id=run.pk) or run
    assert run.status == "done", run.error
    result = run.whatif_result()
    assert result is not None
    assert result.history.jobs > 1000
    whole = sum(
        f.capacity * f.gpu_equivalent for f in Flavour.objects.filter(cluster=demo, capacity__gt=0)
    )
    assert (
        result.history.capacity_gpus
        == round(whole)
        < sum(f.capacity for f in Flavour.objects.filter(cluster=demo))
    )
    today, proposed = result.today.tenant_waits, result.proposed.tenant_waits
    assert proposed["vision"].mean_s < today["vision"].mean_s
    assert proposed["nlp"].mean_s > today["nlp"].mean_s
    assert Decimal(str(result.today.makespan_h)) > 24  # a month, not minutes


def test_a_proposal_beyond_the_clusters_capacity_is_a_field_error(demo: Cluster) -> None:
    capacity = Flavour.objects.get(cluster=demo, name="h100-80gb").capacity
    with pytest.raises(ValidationFailed) as refused:
        services.whatif_request_check(
            cluster=demo,
            kind="whatif",
            days=30,
            proposal=Proposal(quotas=(QuotaEntry("vision", "h100-80gb", 500),)),
        )
    assert "quotas" in (refused.value.field_errors or {})
    assert f"more than its capacity of {capacity}" in str(refused.value.field_errors)
