"""MIG layouts and the MIG layout planner (pure Python: no Django, no DB)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_bridge.inventory.catalogue import (
    A100_SXM4_40GB,
    A100_SXM4_80GB,
    H100_80GB,
    H200_141GB,
    L4,
    GpuProduct,
    UnknownMigProfile,
    all_products,
    product_from_gfd_label,
)
from scheduler_bridge.mig import planner
from scheduler_bridge.mig.layouts import (
    IllegalMigLayout,
    MigLayout,
    Placement,
    counts_realisable,
    is_legal_layout,
    layout_from_counts,
    layout_table,
    layout_violations,
    legal_layouts,
)
from scheduler_bridge.mig.planner import (
    WHOLE_GPU_WEIGHT,
    GpuState,
    MigDemand,
    MigPlan,
    NodePin,
    mig_parted_config,
    mig_parted_devices,
    plan_mig_layouts,
    same_config,
)

MIG_PRODUCTS = [p for p in all_products() if p.mig_capable]
DISABLED = MigLayout.disabled()


def gpu(
    node: str,
    index: int,
    product: GpuProduct = H100_80GB,
    layout: MigLayout = DISABLED,
    busy: bool = False,
) -> GpuState:
    return GpuState(node, index, product, layout, busy)


def demand(
    counts: dict[str, int] | None = None, *, whole: int = 0, product: GpuProduct = H100_80GB
) -> MigDemand:
    """MIG instances and whole GPUs wanted of one product, e.g. ``demand({"3g.40gb": 2})``."""
    instances = {(product.name, name): n for name, n in (counts or {}).items()}
    return MigDemand(instances, {product.name: whole} if whole else {})


@contextmanager
def greedy_only() -> Iterator[None]:
    """Force the large-cluster (greedy) solver on a small input."""
    with mock.patch.object(planner, "EXACT_BUDGET", 0):
        yield


# --- legal layouts -------------------------------------------------------------


def test_reference_layouts_are_legal() -> None:
    all_balanced = MigLayout.of(("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4))
    for layout in (
        all_balanced,
        MigLayout.of(("4g.40gb", 0), ("3g.40gb", 4)),
        MigLayout.of(("3g.40gb", 0), ("3g.40gb", 4)),
        MigLayout.of(*[("1g.10gb", s) for s in range(7)]),
        MigLayout.of(("7g.80gb", 0)),
        MigLayout.of(),
        DISABLED,
    ):
        assert is_legal_layout(H100_80GB, layout), layout.describe()


def test_only_one_media_extension_instance_fits_on_a_gpu() -> None:
    layout = MigLayout.of(("1g.10gb+me", 0), ("1g.10gb+me", 1))
    assert layout_violations(H100_80GB, layout) == [
        "has 2 media-extension (+me) instances, at most 1 per GPU"
    ]
    assert not counts_realisable(H100_80GB, {"1g.10gb+me": 2})
    assert counts_realisable(H100_80GB, {"1g.10gb+me": 1, "1g.10gb": 6})


def test_an_instance_outside_its_allowed_starts_is_illegal() -> None:
    assert layout_violations(H100_80GB, MigLayout.of(("3g.40gb", 2))) == [
        "3g.40gb cannot start at memory slice 2 (starts: 0, 4)"
    ]
    assert not is_legal_layout(H100_80GB, MigLayout.of(("4g.40gb", 4)))
    assert not is_legal_layout(H100_80GB, MigLayout.of(("1g.10gb", 7)))


def test_overlapping_instances_are_illegal() -> None:
    assert not is_legal_layout(H100_80GB, MigLayout.of(("4g.40gb", 0), ("2g.20gb", 2)))
    assert not is_legal_layout(H100_80GB, MigLayout.of(("7g.80gb", 0), ("1g.10gb", 6)))


def test_four_g_and_two_three_g_do_not_fit_together() -> None:
    assert not counts_realisable(A100_SXM4_40GB, {"4g.20gb": 1, "3g.20gb": 2})


def test_profiles_of_another_product_and_mig_on_a_card_without_it_are_illegal() -> None:
    assert not is_legal_layout(A100_SXM4_40GB, MigLayout.of(("1g.10gb+me", 0)))
    assert layout_violations(L4, MigLayout.of()) == ["L4 does not support MIG"]
    assert is_legal_layout(L4, DISABLED)


def test_a_gpu_with_mig_disabled_cannot_hold_instances() -> None:
    with pytest.raises(IllegalMigLayout):
        MigLayout(mig_enabled=False, instances=(Placement("1g.10gb", 0),))


def test_layouts_compare_equal_whatever_the_order_of_their_instances() -> None:
    assert MigLayout.of(("3g.40gb", 4), ("4g.40gb", 0)) == MigLayout.of(
        ("4g.40gb", 0), ("3g.40gb", 4)
    )


@pytest.mark.parametrize("product", MIG_PRODUCTS, ids=lambda p: p.name)
def test_most_instances_of_each_profile_match_the_reference_table(product: GpuProduct) -> None:
    table = layout_table(product)
    most = [max(v[i] for v in table.vectors) for i in range(len(table.profiles))]
    assert most == [7, 1, 4, 3, 2, 1, 1]


@cache
def brute_force_layouts(product: GpuProduct) -> frozenset[tuple[Placement, ...]]:
    """Every legal layout, found without the enumerator: try all non-overlapping sets."""
    options = [
        (Placement(p.name, s), ((1 << p.memory_slices) - 1) << s)
        for p in product.mig_profiles
        for s in range(8)
        if s + p.memory_slices <= 8
    ]
    found: set[tuple[Placement, ...]] = set()

    def extend(start: int, used: int, chosen: tuple[Placement, ...]) -> None:
        if is_legal_layout(product, MigLayout.of(*chosen)):
            found.add(MigLayout.of(*chosen).instances)
        for i in range(start, len(options)):
            placement, mask = options[i]
            if not used & mask:
                extend(i + 1, used | mask, (*chosen, placement))

    extend(0, 0, ())
    return frozenset(found)


def test_the_enumerated_layouts_are_exactly_the_legal_ones() -> None:
    enumerated = {layout.instances for layout in legal_layouts(H200_141GB)}
    assert enumerated == brute_force_layouts(H200_141GB)
    assert len(enumerated) == 2319


def test_counts_are_placed_to_keep_the_largest_free_block() -> None:
    # A lone 3g goes to slices 4-7 so the remaining 0-3 can still take a 4g.
    assert layout_from_counts(H100_80GB, {"3g.40gb": 1}) == MigLayout.of(("3g.40gb", 4))


def test_counts_are_placed_around_the_instances_a_gpu_already_has() -> None:
    keep = MigLayout.of(("3g.40gb", 0))
    layout = layout_from_counts(H100_80GB, {"3g.40gb": 1, "1g.10gb": 2}, keep=keep)
    assert Placement("3g.40gb", 0) in layout.instances
    assert is_legal_layout(H100_80GB, layout)


def test_unrealisable_counts_are_refused_with_the_reason() -> None:
    with pytest.raises(IllegalMigLayout, match="cannot hold 2x 7g.80gb on one GPU"):
        layout_from_counts(H100_80GB, {"7g.80gb": 2})


def test_legal_layouts_of_a_card_without_mig_is_empty() -> None:
    assert list(legal_layouts(L4)) == []


# --- planner scenarios ---------------------------------------------------------


def test_an_idle_whole_gpu_is_partitioned_for_demand() -> None:
    plan = plan_mig_layouts([gpu("n1", 0)], demand({"3g.40gb": 2}))
    (only,) = plan.gpus
    assert only.changed and only.target.counts() == {"3g.40gb": 2}
    assert plan.demand_met_ratio == 1.0 and not plan.unmet


def test_a_busy_gpu_is_never_repartitioned_even_when_demand_goes_unmet() -> None:
    plan = plan_mig_layouts([gpu("n1", 0, busy=True)], demand({"1g.10gb": 7}))
    (only,) = plan.gpus
    assert not only.changed and only.target == DISABLED
    (outcome,) = plan.unmet
    assert outcome.unmet == 7
    assert "1 are busy" in outcome.reason


def test_gpus_whose_instances_are_already_wanted_are_kept() -> None:
    balanced = layout_from_counts(H100_80GB, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})
    gpus = [gpu("n1", 0, layout=balanced), gpu("n1", 1)]
    plan = plan_mig_layouts(gpus, demand({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}))
    assert plan.changed == ()


def test_as_few_gpus_as_possible_change() -> None:
    gpus = [gpu("n1", i) for i in range(4)]
    plan = plan_mig_layouts(gpus, demand({"4g.40gb": 1, "3g.40gb": 1}))
    assert len(plan.changed) == 1
    assert plan.changed[0].target.counts() == {"4g.40gb": 1, "3g.40gb": 1}


def test_a_partitioned_gpu_is_extended_before_a_whole_one_is_broken() -> None:
    half = MigLayout.of(("3g.40gb", 0))
    gpus = [gpu("n1", 0), gpu("n1", 1, layout=half)]
    exact = plan_mig_layouts(gpus, demand({"3g.40gb": 2}))
    with greedy_only():
        greedy = plan_mig_layouts(gpus, demand({"3g.40gb": 2}))
    for plan in (exact, greedy):
        (changed,) = plan.changed
        assert changed.index == 1 and changed.target.counts() == {"3g.40gb": 2}


def test_only_the_instances_demand_asks_for_are_created() -> None:
    plan = plan_mig_layouts([gpu("n1", 0)], demand({"1g.10gb": 1}))
    assert plan.gpus[0].target.counts() == {"1g.10gb": 1}


def test_whole_gpus_that_are_demanded_stay_whole() -> None:
    gpus = [gpu("n1", 0), gpu("n1", 1)]
    plan = plan_mig_layouts(gpus, demand({"7g.80gb": 2}, whole=1))
    assert sorted(g.target.mig_enabled for g in plan.gpus) == [False, True]
    (short,) = plan.unmet
    assert (short.profile, short.unmet) == ("7g.80gb", 1)


def test_mig_is_disabled_on_an_idle_gpu_to_supply_a_whole_gpu() -> None:
    gpus = [gpu("n1", 0, layout=MigLayout.of(("1g.10gb", 0)))]
    plan = plan_mig_layouts(gpus, demand(whole=1))
    assert plan.gpus[0].target == DISABLED and plan.gpus[0].changed


def test_an_idle_pinned_gpu_is_set_to_its_pin() -> None:
    pin = MigLayout.of(("4g.40gb", 0), ("3g.40gb", 4))
    plan = plan_mig_layouts([gpu("n1", 0), gpu("n1", 1)], MigDemand(), {"n1": NodePin(pin)})
    assert all(g.target == pin and g.changed for g in plan.gpus)


def test_a_busy_pinned_gpu_keeps_its_layout_until_idle() -> None:
    pin = MigLayout.of(("7g.80gb", 0))
    plan = plan_mig_layouts([gpu("n1", 0, busy=True)], MigDemand(), {"n1": NodePin(pin)})
    assert not plan.gpus[0].changed and plan.gpus[0].target == DISABLED
    assert "pin applies once it is idle" in plan.gpus[0].reason


def test_a_pinned_node_is_not_repartitioned_for_demand() -> None:
    gpus = [gpu("n1", 0), gpu("n2", 0)]
    pins = {"n1": NodePin(per_gpu={0: DISABLED})}
    plan = plan_mig_layouts(gpus, demand({"3g.40gb": 2}), pins)
    assert [g.node for g in plan.changed] == ["n2"]


def test_a_pin_compares_by_counts_as_mig_parted_does() -> None:
    current = MigLayout.of(("1g.10gb", 0))
    pin = MigLayout.of(("1g.10gb", 6))
    plan = plan_mig_layouts([gpu("n1", 0, layout=current)], MigDemand(), {"n1": NodePin(pin)})
    assert not plan.gpus[0].changed and plan.gpus[0].target == current


def test_an_illegal_pin_is_refused_naming_the_gpu() -> None:
    pin = MigLayout.of(("7g.80gb", 0), ("1g.10gb", 0))
    with pytest.raises(IllegalMigLayout, match="pin of n1 GPU 0"):
        plan_mig_layouts([gpu("n1", 0)], MigDemand(), {"n1": NodePin(pin)})


def test_an_illegal_current_layout_is_refused() -> None:
    with pytest.raises(IllegalMigLayout, match="n1 GPU 3"):
        plan_mig_layouts([gpu("n1", 3, layout=MigLayout.of(("3g.40gb", 2)))], MigDemand())


def test_a_gpu_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        plan_mig_layouts([gpu("n1", 0), gpu("n1", 0)], MigDemand())


def test_negative_demand_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        plan_mig_layouts([gpu("n1", 0)], demand({"1g.10gb": -1}))


def test_demand_for_a_profile_the_product_lacks_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownMigProfile, match=r"valid profiles: 1g\.10gb, 1g\.10gb\+me"):
        plan_mig_layouts([gpu("n1", 0)], demand({"1g.5gb": 1}))


def test_demand_may_use_the_resource_spelling_of_plus_me() -> None:
    wanted = MigDemand({(H100_80GB.name, "1g.10gb.me"): 1})
    plan = plan_mig_layouts([gpu("n1", 0)], wanted)
    assert plan.gpus[0].target.counts() == {"1g.10gb+me": 1}
    assert plan.outcomes[0].profile == "1g.10gb+me" and plan.outcomes[0].met == 1


def test_demand_for_a_product_with_no_gpus_is_unmet_with_the_reason() -> None:
    plan = plan_mig_layouts([gpu("n1", 0)], demand({"2g.20gb": 1}, product=A100_SXM4_80GB))
    (outcome,) = plan.unmet
    assert outcome.reason == "1 short: no A100-SXM4-80GB GPUs in the inventory"
    assert plan.changed == ()


def test_cards_without_mig_stay_whole_and_count_as_whole_gpus() -> None:
    plan = plan_mig_layouts([gpu("n1", 0, product=L4)], MigDemand(whole_gpus={"L4": 1}))
    assert not plan.gpus[0].changed and plan.demand_met_ratio == 1.0


def test_a_product_outside_the_catalogue_running_mig_is_left_as_is() -> None:
    h100_nvl = product_from_gfd_label("NVIDIA-H100-NVL")
    layout = MigLayout.of(("1g.12gb", 0))
    plan = plan_mig_layouts([gpu("n1", 0, product=h100_nvl, layout=layout)], MigDemand())
    assert plan.gpus[0].target == layout and not plan.gpus[0].changed


def test_demand_met_ratio_weighs_profiles_by_compute() -> None:
    # 7g met (weight 1.0), 1g unmet (weight 1/7): 1.0 / (1 + 1/7) = 7/8.
    plan = plan_mig_layouts([gpu("n1", 0)], demand({"7g.80gb": 1, "1g.10gb": 1}))
    assert plan.demand_met_ratio == pytest.approx(7 / 8)


def test_the_greedy_solver_meets_demand_that_fits_easily() -> None:
    gpus = [gpu(f"n{n}", i) for n in range(4) for i in range(8)]
    wanted = demand(
        {"1g.10gb": 20, "2g.20gb": 6, "3g.40gb": 8, "4g.40gb": 3, "7g.80gb": 2}, whole=4
    )
    with greedy_only():
        plan = plan_mig_layouts(gpus, wanted)
    assert plan.demand_met_ratio == 1.0
    # 82 compute slices need at least 12 GPUs of 7; the 4 whole GPUs stay as they are.
    assert len(plan.changed) == 12


def test_changes_cluster_on_the_first_nodes_in_name_order() -> None:
    gpus = [gpu(f"n{n}", i) for n in range(3) for i in range(8)]
    with greedy_only():
        plan = plan_mig_layouts(gpus, demand({"3g.40gb": 4}))
    assert plan.nodes_to_reconfigure == ("n0",)


# --- mig-parted rendering --------------------------------------------------------


def test_a_node_plan_renders_as_mig_parted_entries_grouping_equal_layouts() -> None:
    gpus = [gpu("n1", i) for i in range(4)]
    pin = NodePin(
        per_gpu={
            0: MigLayout.of(("3g.40gb", 0), ("3g.40gb", 4)),
            2: MigLayout.of(("3g.40gb", 4), ("3g.40gb", 0)),
        }
    )
    plan = plan_mig_layouts(gpus, MigDemand(), {"n1": pin})
    assert mig_parted_devices(plan.node("n1")) == [
        {"devices": [0, 2], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [1, 3], "mig-enabled": False},
    ]


def test_mig_parted_entries_list_profiles_in_catalogue_order_with_plus_me() -> None:
    layout = layout_from_counts(H100_80GB, {"3g.40gb": 1, "1g.10gb+me": 1, "1g.10gb": 1})
    plan = plan_mig_layouts([gpu("n1", 0, layout=layout, busy=True)], MigDemand())
    (entry,) = mig_parted_devices(plan.gpus)
    assert list(entry.get("mig-devices", {})) == ["1g.10gb", "1g.10gb+me", "3g.40gb"]


def test_mig_parted_config_name_is_stable_short_and_shared_by_equal_nodes() -> None:
    gpus = [gpu(n, i) for n in ("a", "b") for i in range(2)]
    plan = plan_mig_layouts(gpus, MigDemand())
    first, second = mig_parted_config(plan.node("a")), mig_parted_config(plan.node("b"))
    assert first == second and first["version"] == "v1"
    (name,) = first["mig-configs"]
    assert name.startswith("tidegate-") and len(name) <= 63
    assert mig_parted_config(plan.node("a"), name="custom")["mig-configs"] == {
        "custom": [{"devices": [0, 1], "mig-enabled": False}]
    }


# --- properties -----------------------------------------------------------------


@cache
def _layout_pool(product: GpuProduct) -> tuple[MigLayout, ...]:
    return (DISABLED, *legal_layouts(product))


@st.composite
def clusters(
    draw: st.DrawFn, max_nodes: int = 3, max_gpus: int = 4
) -> tuple[list[GpuState], dict[str, NodePin], MigDemand]:
    """Random small clusters: a product per node, random legal layouts, busy GPUs, pins, demand."""
    gpus: list[GpuState] = []
    pins: dict[str, NodePin] = {}
    products = draw(st.lists(st.sampled_from([*MIG_PRODUCTS, L4]), min_size=1, max_size=max_nodes))
    for n, product in enumerate(products):
        node = f"node-{n}"
        pool = _layout_pool(product) if product.mig_capable else (DISABLED,)
        for index in range(draw(st.integers(1, max_gpus))):
            layout = draw(st.sampled_from(pool))
            gpus.append(GpuState(node, index, product, layout, draw(st.booleans())))
        if draw(st.integers(0, 4)) == 0:
            pins[node] = NodePin(draw(st.sampled_from(pool)))
    instances: dict[tuple[str, str], int] = {}
    whole: dict[str, int] = {}
    for product in {p for p in products if p.mig_capable}:
        for profile in draw(
            st.lists(st.sampled_from(product.mig_profiles), max_size=3, unique=True)
        ):
            instances[(product.name, profile.name)] = draw(st.integers(0, 5))
        whole[product.name] = draw(st.integers(0, 2))
    return gpus, pins, MigDemand(instances, whole)


def check_invariants(gpus: list[GpuState], pins: dict[str, NodePin], plan: MigPlan) -> None:
    assert [(g.node, g.index) for g in plan.gpus] == sorted((g.node, g.index) for g in gpus)
    by_key = {(g.node, g.index): g for g in gpus}
    for planned in plan.gpus:
        state = by_key[(planned.node, planned.index)]
        assert is_legal_layout(state.product, planned.target), planned.target.describe()
        assert planned.changed == (not same_config(planned.target, state.layout))
        if not planned.changed:
            assert planned.target == state.layout
        if state.busy:
            assert planned.target == state.layout
        pin = pins[state.node].layout_for(state.index) if state.node in pins else None
        if pin is not None and not state.busy:
            assert same_config(planned.target, pin)
    for outcome in plan.outcomes:
        supply = sum(
            (not p.target.mig_enabled)
            if outcome.profile is None
            else p.target.counts().get(outcome.profile, 0)
            for p in plan.gpus
            if p.product.name == outcome.product
        )
        assert outcome.planned == supply
        assert bool(outcome.reason) == bool(outcome.unmet)


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_every_plan_is_legal_leaves_busy_gpus_alone_and_respects_pins(
    cluster: tuple[list[GpuState], dict[str, NodePin], MigDemand],
) -> None:
    gpus, pins, wanted = cluster
    check_invariants(gpus, pins, plan_mig_layouts(gpus, wanted, pins))


@settings(max_examples=100, deadline=None)
@given(clusters(max_nodes=4, max_gpus=6))
def test_the_greedy_solver_keeps_the_same_guarantees(
    cluster: tuple[list[GpuState], dict[str, NodePin], MigDemand],
) -> None:
    gpus, pins, wanted = cluster
    with greedy_only():
        check_invariants(gpus, pins, plan_mig_layouts(gpus, wanted, pins))


@settings(max_examples=100, deadline=None)
@given(clusters(), st.randoms(use_true_random=False), st.booleans())
def test_the_same_input_gives_the_same_plan_in_any_order(
    cluster: tuple[list[GpuState], dict[str, NodePin], MigDemand], rng: random.Random, greedy: bool
) -> None:
    gpus, pins, wanted = cluster
    shuffled = gpus[:]
    rng.shuffle(shuffled)
    if greedy:
        with greedy_only():
            first, second = (
                plan_mig_layouts(gpus, wanted, pins),
                plan_mig_layouts(shuffled, wanted, pins),
            )
    else:
        first, second = (
            plan_mig_layouts(gpus, wanted, pins),
            plan_mig_layouts(shuffled, wanted, pins),
        )
    assert first == second


@cache
def _brute_force_vectors(product: GpuProduct) -> tuple[tuple[int, ...], ...]:
    """Count vectors (profiles + whole) of every legal layout, from the brute-force search."""
    names = product.profile_names
    vectors = {
        tuple(sum(p.profile == name for p in layout) for name in names) + (0,)
        for layout in brute_force_layouts(product)
    }
    return tuple(sorted(vectors)) + ((0,) * len(names) + (1,),)


def _oracle(product: GpuProduct, gpus: list[GpuState], wanted: MigDemand) -> tuple[int, int]:
    """(least weighted unmet demand, fewest changes reaching it) over every assignment.

    Exhaustive over every legal layout of every idle GPU; supply is capped at
    the demand so equivalent partial assignments merge.
    """
    names = product.profile_names
    target = tuple(wanted.instances.get((product.name, n), 0) for n in names) + (
        wanted.whole_gpus.get(product.name, 0),
    )
    weights = tuple(p.compute_slices for p in product.mig_profiles) + (WHOLE_GPU_WEIGHT,)

    def vector(layout: MigLayout) -> tuple[int, ...]:
        if not layout.mig_enabled:
            return (0,) * len(names) + (1,)
        counts = layout.counts()
        return tuple(counts.get(n, 0) for n in names) + (0,)

    def cap(supply: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(min(s, t) for s, t in zip(supply, target, strict=True))

    reachable = {cap((0,) * len(target)): 0}
    for state in gpus:
        current = vector(state.layout)
        options = [(current, 0)]
        if not state.busy:
            options += [(v, 1) for v in _brute_force_vectors(product) if v != current]
        step: dict[tuple[int, ...], int] = {}
        for supply, changes in reachable.items():
            for option, cost in options:
                key = cap(tuple(a + b for a, b in zip(supply, option, strict=True)))
                step[key] = min(step.get(key, 1 << 30), changes + cost)
        reachable = step
    return min(
        (sum(w * (t - s) for w, t, s in zip(weights, target, supply, strict=True)), changes)
        for supply, changes in reachable.items()
    )


@st.composite
def small_problems(draw: st.DrawFn) -> tuple[GpuProduct, list[GpuState], MigDemand]:
    product = draw(st.sampled_from(MIG_PRODUCTS))
    pool = _layout_pool(product)
    gpus = [
        GpuState("node", i, product, draw(st.sampled_from(pool)), draw(st.integers(0, 3)) == 0)
        for i in range(draw(st.integers(1, 3)))
    ]
    profiles = draw(
        st.lists(st.sampled_from(product.mig_profiles), min_size=1, max_size=3, unique=True)
    )
    instances = {(product.name, p.name): draw(st.integers(0, 4)) for p in profiles}
    whole = {product.name: draw(st.integers(0, 1))}
    return product, gpus, MigDemand(instances, whole)


@settings(max_examples=150, deadline=None)
@given(small_problems())
def test_the_plan_meets_demand_whenever_some_legal_assignment_does_with_fewest_changes(
    problem: tuple[GpuProduct, list[GpuState], MigDemand],
) -> None:
    product, gpus, wanted = problem
    plan = plan_mig_layouts(gpus, wanted)
    weights = {p.name: p.compute_slices for p in product.mig_profiles}
    unmet = sum(
        o.unmet * (WHOLE_GPU_WEIGHT if o.profile is None else weights[o.profile])
        for o in plan.outcomes
    )
    assert (unmet, len(plan.changed)) == _oracle(product, gpus, wanted)


def test_a_thousand_node_cluster_is_planned_whole_without_touching_busy_gpus() -> None:
    """(How fast: benchmarks/mig_plan.py, on the same shape.)"""
    rng = random.Random(7)
    products = [A100_SXM4_40GB, A100_SXM4_80GB, H100_80GB, H200_141GB]
    gpus = []
    for n in range(1000):
        product = products[n % 4]
        pool = _layout_pool(product)
        for i in range(8):
            layout = rng.choice(pool[:200]) if rng.random() < 0.4 else DISABLED
            gpus.append(GpuState(f"node-{n:04d}", i, product, layout, rng.random() < 0.25))
    instances = {(p.name, q.name): 300 for p in products for q in p.mig_profiles}
    for p in products:
        layout_table(p)
    plan = plan_mig_layouts(gpus, MigDemand(instances, {p.name: 100 for p in products}))
    assert len(plan.gpus) == 8000
    busy = {(g.node, g.index) for g in gpus if g.busy}
    assert busy and not [p for p in plan.changed if (p.node, p.index) in busy]
    assert plan.changed  # the demand made it repartition idle GPUs
