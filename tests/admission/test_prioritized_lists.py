"""A pod set whose alternatives ask for different amounts (a prioritized list of DRA
claims, "two H100s, or else four MIG slices"): each option is priced, placed and
admitted at its own amount, in the order given."""

from __future__ import annotations

import pytest

from scheduler_bridge.admission import AdmissionEngine, Flavour, PendingWorkload, PodSet
from scheduler_bridge.admission.simulator import apply_result

from .factories import nodes, quota, snapshot, tenants

MIG = "mig-1g"


def _either(wid: str, count: int = 1) -> PendingWorkload:
    return PendingWorkload(
        id=wid,
        tenant_id="a",
        pod_sets=(PodSet(count, 2, ("H100", MIG), per_flavour=(2, 4)),),
    )


def _world(h100_free: int, pending: list[PendingWorkload]):  # type: ignore[no-untyped-def]
    tree = tenants({"org": None, "a": "org"})
    quotas = (
        quota("org", 8),
        quota("a", 8),
        quota("org", 8, flavour=MIG),
        quota("a", 8, flavour=MIG),
    )
    node_list = nodes(1, gpus=2, free=[h100_free]) + nodes(1, gpus=7, flavour=MIG, prefix="m")
    return snapshot(tree, quotas, node_list, pending, flavours=(Flavour("H100"), Flavour(MIG)))


def test_the_first_alternative_is_taken_at_its_own_amount_while_it_fits() -> None:
    result = AdmissionEngine().run_cycle(_world(2, [_either("w")]))
    (admission,) = result.admissions
    assert [(p.flavour, p.gpus) for p in admission.placements] == [("H100", 2)]


def test_the_next_alternative_is_taken_at_its_own_amount_when_the_first_is_full() -> None:
    world = _world(0, [_either("w1"), _either("w2")])
    result = AdmissionEngine().run_cycle(world)
    placed = {a.workload_id: [(p.flavour, p.gpus) for p in a.placements] for a in result.admissions}
    # four slices each: the first takes 4 of the 7, the second finds only 3 left
    assert placed == {"w1": [(MIG, 4)]}
    (waiting,) = result.pending
    assert waiting.workload_id == "w2" and MIG in waiting.message
    after = apply_result(world, result)
    assert sum(p.gpus for r in after.running for p in r.placements if p.flavour == MIG) == 4


@pytest.mark.parametrize(
    "per_flavour", [(2,), (2, 0), (3, 4)], ids=["too few", "zero", "first not gpus_per_pod"]
)
def test_amounts_that_do_not_match_the_flavours_are_refused(per_flavour: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="per_flavour"):
        PodSet(1, 2, ("H100", MIG), per_flavour=per_flavour)
