"""Work no node layout could ever hold has no place in line, whatever its quota says."""

from __future__ import annotations

from scheduler_bridge.admission import ReasonCode, run_cycle

from .factories import nodes, quota, running, snapshot, tenants, two_teams, workload


def test_a_job_larger_than_any_node_layout_has_no_position_even_when_its_quota_is_short():
    """1 x 16 GPUs on 8-GPU nodes: never fits, with its quota short or not."""
    tree, quotas = two_teams(a=8, b=8)
    too_big = workload("big", "a", 16, submitted=1)
    busy = [running("a-own", "a", {"n000": 8})]  # a's quota is used up
    for running_list in ([], busy):
        result = run_cycle(snapshot(tree, quotas, nodes(2), [too_big], running_list))
        [decision] = result.pending
        assert decision.code is ReasonCode.NEVER_FITS, decision
        assert decision.position is None
        assert decision.message == "needs 1 pod x 16 H100; the largest node has 8"


def test_a_job_that_never_fits_is_listed_after_the_line_without_a_quota_row_too():
    tree = tenants({"org": None, "a": "org", "b": "org"})
    quotas = (quota("org", 16), quota("b", 8))  # a has no row of its own
    pending = [workload("big", "a", 16, submitted=1), workload("small", "b", 8, submitted=2)]
    busy = [running("b-own", "b", {"n000": 8}), running("b-two", "b", {"n001": 8})]
    result = run_cycle(snapshot(tree, quotas, nodes(2), pending, busy))
    by_id = {d.workload_id: d for d in result.pending}
    assert by_id["big"].code is ReasonCode.NEVER_FITS and by_id["big"].position is None
    assert by_id["small"].position == 1
    assert [d.workload_id for d in result.pending] == ["small", "big"]
