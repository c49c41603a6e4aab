"""A workload's shape is found by a flat int for one plain pod set and by the nested key
otherwise: both ways must give every distinct request its own shape, and equal requests
the same one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler_bridge.admission import Flavour, PendingWorkload, PodSet, Topology
from scheduler_bridge.admission.state import PART_LIMIT, Static, node_layout


def _static() -> Static:
    flavours = (Flavour("a100"), Flavour("h100"), Flavour("shared", shared=True))
    return Static((), (), flavours, node_layout(()))


def _workload(wid: str, *pod_sets: PodSet, **fields: Any) -> PendingWorkload:
    return replace(PendingWorkload(id=wid, tenant_id="t", pod_sets=pod_sets), **fields)


def test_equal_requests_share_a_shape_and_distinct_ones_do_not() -> None:
    static = _static()
    requests = [
        _workload("one", PodSet(2, 4, ("a100",))),
        _workload("count", PodSet(4, 2, ("a100",))),  # same GPUs, other count
        _workload("per-pod", PodSet(2, 2, ("a100",))),
        _workload("order", PodSet(2, 4, ("h100", "a100"))),
        _workload("flavours", PodSet(2, 4, ("a100", "h100"))),
        _workload("node", PodSet(2, 4, ("a100",)), topology=Topology.ONE_NODE),
        _workload("domain", PodSet(2, 4, ("a100",)), topology=Topology.ONE_DOMAIN),
        _workload("rigid", PodSet(2, 4, ("a100",)), preemptible=False),
        _workload("fills", PodSet(2, 4, ("a100",)), fills_idle=True),
        _workload("two-sets", PodSet(2, 4, ("a100",)), PodSet(1, 1, ("a100",), name="b")),
        _workload("per-flavour", PodSet(2, 4, ("a100", "h100"), per_flavour=(4, 2))),
        _workload("huge", PodSet(PART_LIMIT, 1, ("a100",))),
        # without the limit, 1 pod of 2**20 + 7 would make the key of 2 pods of 7
        _workload("huge-share", PodSet(1, PART_LIMIT + 7, ("shared",))),
        _workload("small-share", PodSet(2, 7, ("shared",))),
    ]
    shapes = [static.shape_of(wl) for wl in requests]
    assert len({id(s) for s in shapes}) == len(requests)
    for wl, shape in zip(requests, shapes, strict=True):
        nested = (
            wl.topology,
            tuple(ps.raw for ps in wl.pod_sets),
            wl.preemptible,
            wl.opportunistic,
        )
        assert shape.key == nested  # built from what it asks for
        assert static.shape(nested) is shape  # one shape however it is found
        again = replace(wl, id=f"{wl.id}-again", pod_sets=tuple(replace(p) for p in wl.pod_sets))
        assert static.shape_of(again) is shape


def test_an_elastic_pod_and_work_that_fills_idle_gpus_share_a_shape() -> None:
    # both are opportunistic: queued after all other work, taken back first
    static = _static()
    fills = _workload("fills", PodSet(1, 4, ("a100",)), fills_idle=True)
    pod = _workload("pod", PodSet(1, 4, ("a100",)), elastic_of="job")
    assert static.shape_of(fills) is static.shape_of(pod)
    assert static.shape_of(pod) is not static.shape_of(_workload("job", PodSet(1, 4, ("a100",))))
