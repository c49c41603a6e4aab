"""Node fit: gangs, topology, best fit, flavours."""

from __future__ import annotations

from scheduler_bridge.admission import (
    Flavour,
    Node,
    PendingWorkload,
    PodSet,
    ReasonCode,
    Topology,
    run_cycle,
)

from .factories import nodes, quota, running, snapshot, tenants, workload

TREE = tenants({"org": None, "a": "org"})
QUOTAS = (quota("a", 64),)


def only_reason(result):
    assert len(result.pending) == 1
    return result.pending[0]


def test_gang_is_admitted_all_or_nothing():
    busy = [running("x", "a", {"n003": 8})]
    result = run_cycle(snapshot(TREE, QUOTAS, nodes(4), [workload("g", "a", 8, count=4)], busy))
    assert result.admissions == ()
    why = only_reason(result)
    assert why.code is ReasonCode.NODE_CAPACITY
    assert (
        why.message
        == "needs 4 pods x 8 H100; free H100 holds 3 such pods (largest free block is 8)"
    )


def test_one_node_topology_reason_names_the_largest_free_block():
    busy = [running("x", "a", {"n000": 4, "n001": 4})]
    wl = workload("g", "a", 8, topology=Topology.ONE_NODE)
    why = only_reason(run_cycle(snapshot(TREE, QUOTAS, nodes(2), [wl], busy)))
    assert why.code is ReasonCode.TOPOLOGY
    assert why.message == "needs 8 H100 on one node; largest free block is 4"


def test_one_domain_topology_reason_names_the_largest_free_block():
    node_list = nodes(4, gpus=4, domain_size=2)  # two NVLink domains of 8 GPUs
    busy = [running("x", "a", {"n000": 2, "n002": 2})]
    wl = workload("g", "a", 2, count=4, topology=Topology.ONE_DOMAIN)
    why = only_reason(run_cycle(snapshot(TREE, QUOTAS, node_list, [wl], busy)))
    assert why.code is ReasonCode.TOPOLOGY
    assert why.message == "needs 8 H100 in one NVLink domain; largest free block is 6"


def test_one_domain_gang_lands_inside_one_domain():
    node_list = nodes(4, gpus=4, domain_size=2)
    wl = workload("g", "a", 2, count=4, topology=Topology.ONE_DOMAIN)
    result = run_cycle(snapshot(TREE, QUOTAS, node_list, [wl]))
    placed = {p.node for p in result.admissions[0].placements}
    assert placed in ({"n000", "n001"}, {"n002", "n003"})


def test_best_fit_picks_the_fullest_node_that_fits():
    busy = [running("x", "a", {"n000": 2, "n001": 5, "n002": 4})]
    result = run_cycle(snapshot(TREE, QUOTAS, nodes(3), [workload("j", "a", 3)], busy))
    assert result.admissions[0].placements[0].node == "n001"


def test_best_fit_picks_the_tightest_domain_that_fits():
    node_list = nodes(4, gpus=4, domain_size=2)
    busy = [running("x", "a", {"n000": 3})]
    wl = workload("g", "a", 2, count=2, topology=Topology.ONE_DOMAIN)
    result = run_cycle(snapshot(TREE, QUOTAS, node_list, [wl], busy))
    assert {p.node for p in result.admissions[0].placements} == {"n001"}


def test_pods_fill_the_tightest_nodes_first_to_keep_large_holes():
    busy = [running("x", "a", {"n000": 6, "n001": 7})]
    result = run_cycle(snapshot(TREE, QUOTAS, nodes(3), [workload("j", "a", 1, count=3)], busy))
    assert [(p.node, p.gpus) for p in result.admissions[0].placements] == [("n000", 2), ("n001", 1)]


def test_first_acceptable_flavour_that_fits_is_chosen():
    flavours = (Flavour("H100"), Flavour("A100", 0.5))
    quotas = (quota("a", 8), quota("a", 8, flavour="A100"))
    node_list = (*nodes(1), Node("b000", {"A100": 8}))
    busy = [running("x", "a", {"n000": 6})]
    wl = workload("j", "a", 4, flavour=("H100", "A100"))
    result = run_cycle(snapshot(TREE, quotas, node_list, [wl], busy, flavours=flavours))
    assert result.admissions[0].flavour == "A100"


def test_each_flavour_tried_is_explained():
    flavours = (Flavour("H100"), Flavour("A100", 0.5))
    quotas = (quota("a", 8, borrow_limit=0), quota("a", 2, borrow_limit=0, flavour="A100"))
    node_list = (*nodes(1), Node("b000", {"A100": 8}))
    busy = [running("x", "a", {"n000": 8})]
    wl = workload("j", "a", 4, flavour=("H100", "A100"))
    why = only_reason(run_cycle(snapshot(TREE, quotas, node_list, [wl], busy, flavours=flavours)))
    assert why.message.startswith("H100: quota of H100 used 8/8")
    assert "A100: needs 4 A100 but quota lets a hold at most 2" in why.message


def test_a_shape_no_node_can_ever_hold_is_marked_never_fits():
    wl = workload("j", "a", 16, topology=Topology.ONE_NODE)
    why = only_reason(run_cycle(snapshot(TREE, QUOTAS, nodes(4), [wl])))
    assert why.code is ReasonCode.NEVER_FITS
    assert why.message == "needs 16 H100 on one node; the largest node has 8"


def test_several_pod_sets_are_placed_together_or_not_at_all():
    wl = PendingWorkload(
        id="mpi",
        tenant_id="a",
        pod_sets=(PodSet(1, 1, ("H100",), "launcher"), PodSet(2, 8, ("H100",), "workers")),
    )
    busy = [running("x", "a", {"n000": 7})]
    result = run_cycle(snapshot(TREE, QUOTAS, nodes(3), [wl], busy))
    placements = sorted((p.node, p.gpus) for p in result.admissions[0].placements)
    assert placements == [("n000", 1), ("n001", 8), ("n002", 8)]
    assert result.admissions[0].flavours == ("H100", "H100")


def test_gateway_free_counts_are_respected_over_what_running_work_implies():
    node_list = nodes(2, free=[0, 3])
    result = run_cycle(snapshot(TREE, QUOTAS, node_list, [workload("j", "a", 4)]))
    assert result.admissions == ()
    result = run_cycle(snapshot(TREE, QUOTAS, node_list, [workload("j", "a", 3)]))
    assert result.admissions[0].placements[0].node == "n001"


def test_mig_slices_are_a_flavour_of_their_own():
    flavours = (Flavour("mig-1g.10gb", 1 / 7),)
    quotas = (quota("a", 14, flavour="mig-1g.10gb"),)
    node_list = (Node("mig0", {"mig-1g.10gb": 14}),)
    pending = [workload(f"m{i}", "a", 1, flavour="mig-1g.10gb", submitted=i) for i in range(15)]
    result = run_cycle(snapshot(TREE, quotas, node_list, pending, flavours=flavours))
    assert len(result.admissions) == 14
