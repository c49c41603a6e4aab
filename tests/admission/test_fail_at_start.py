"""The check that fails borrowing work before the main pass (engine._Cycle._fail_at_start)
remembers, for the whole check, each tenant's room on a flavour and how many pods of a
simple shape's size the free GPUs hold, both ways. Nothing is admitted before the main
pass, so what it remembers must answer as a check without memory answers: asked about
every group of a busy cluster, in queue order and in reverse, the two agree."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from scheduler_bridge.admission import AdmissionEngine, ClusterSnapshot, EngineConfig
from scheduler_bridge.admission.devices import to_devices
from scheduler_bridge.admission.engine import NOT_KNOWN, _Cycle
from scheduler_bridge.admission.pending import Shape

from .strategies import workloads, worlds
from .test_properties import PROFILE, _filled


def _fits_without_memory(cycle: _Cycle, node: int, shape: Shape) -> bool:
    """Some option fits the tenant's quota and the free GPUs, each worked out afresh."""
    st_ = cycle.state
    tree = st_.tree
    pool = st_.pool
    for option in shape.options:
        if not shape.may_borrow and not st_.pinned_fits(node, option.totals):
            continue
        if any(
            not tree.access[f][node] or tree.available(f, node, st_.usage[f]) < need
            for f, need in option.totals
        ):
            continue
        if shape.simple:
            f, count, per_pod = option.needs[0]
            fits = pool.flavours[f].plan(count, per_pod, shape.topology) is not None
        else:
            flavours = [f for f, _ in option.totals]
            caps = pool.caps(flavours)
            fits = pool.plan_generic(option.needs, shape.topology, caps) is not None
        if fits:
            return True
    return False


def _cycle_before_its_main_pass(snapshot: ClusterSnapshot) -> tuple[_Cycle, list]:
    """A cycle set up as AdmissionEngine.run_cycle sets it up, stopped before the check:
    the cycle and its (workload node, group) pairs in queue order."""
    engine = AdmissionEngine(EngineConfig(priority_preemption=False))
    snapshot, _ = to_devices(snapshot)
    static = engine._static_for(snapshot)
    items = engine._compile(snapshot.pending, static)
    cycle = _Cycle(
        static,
        snapshot,
        engine.config,
        engine.budget_gate,
        items,
        {},
        engine._ranks,
        engine._buckets,
    )
    cycle.ranks.assign(cycle.items)
    cycle._key_units(cycle.items)
    queues = cycle._build_queues()
    return cycle, [(node, group) for node, queue in queues.items() for group in queue.groups]


@PROFILE
@given(data=st.data(), backwards=st.booleans())
def test_the_up_front_fit_test_answers_as_one_without_memory(data, backwards):
    world = data.draw(worlds())
    busy = _filled(data, world)
    pending = tuple(data.draw(workloads(world, f"w{i}", 200.0 + i)) for i in range(40))
    cycle, groups = _cycle_before_its_main_pass(replace(busy, pending=pending))
    if backwards:
        groups.reverse()
    room = [[NOT_KNOWN] * cycle.state.tree.size for _ in cycle.names]
    fitted: dict[int, int] = {}
    for node, group in groups:
        expected = _fits_without_memory(cycle, node, group.shape)
        assert cycle._fits_now(node, group.shape, room, fitted) == expected, group.shape
