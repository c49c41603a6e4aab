"""GPUs a driver splits on claim (partitionable devices): one GPU each, laid out by the
MIG planner or by what claims hold, never the sum of the alternatives it publishes."""

from __future__ import annotations

import pytest

from scheduler_bridge.dra.flavours import devices_by_node, gpus_by_node
from scheduler_bridge.dra.objects import Device, devices_of_slices
from scheduler_bridge.dra.partitions import (
    WHOLE,
    PartitionableGpu,
    layout_devices,
    most_of,
    partition_layout,
    partitionable_gpus,
)
from scheduler_bridge.inventory.catalogue import product_by_name
from scheduler_bridge.mig.layouts import MigLayout
from tests.dra.devices import partitionable_gpu_slices

H100 = product_by_name("H100-80GB")
SEVEN_SMALL = MigLayout.of(*(("1g.10gb", start) for start in range(7)))


@pytest.fixture
def devices() -> list[Device]:
    found, unreadable = devices_of_slices(partitionable_gpu_slices("split-1", gpus=2))
    assert unreadable == []
    return found


def _gpus(
    devices: list[Device], allocated: frozenset[tuple[str, str, str]] = frozenset()
) -> list[PartitionableGpu]:
    return partitionable_gpus(devices, allocated)["split-1"]


def test_each_gpu_is_one_gpu_whatever_it_could_be_split_into(devices: list[Device]) -> None:
    assert len(devices) == 2 * (1 + 7 + 2)
    gpus = _gpus(devices)
    assert [g.counter_set[2] for g in gpus] == ["gpu-0-counter-set", "gpu-1-counter-set"]
    assert dict(gpus[0].published) == {WHOLE: 1, "1g.10gb": 7, "3g.40gb": 2}
    assert {p: f.name for p, f in gpus[0].flavours.items()} == {
        WHOLE: "h100-80gb",
        "1g.10gb": "h100-80gb-mig-1g.10gb",
        "3g.40gb": "h100-80gb-mig-3g.40gb",
    }
    # counted through their GPUs, never each (that would be 20 devices on 2 GPUs)
    assert devices_by_node(devices) == {}
    assert gpus_by_node(devices) == {}


def test_a_gpu_offers_the_most_of_each_profile_one_layout_can_hold(devices: list[Device]) -> None:
    gpu = _gpus(devices)[0]
    assert [most_of(gpu, H100, p) for p in (WHOLE, "1g.10gb", "3g.40gb")] == [1, 7, 2]
    # a profile the driver does not publish offers nothing
    assert most_of(gpu, H100, "2g.20gb") == 0


def test_the_planners_layout_holds_until_claims_hold_something_else(
    devices: list[Device],
) -> None:
    idle = _gpus(devices)[0]
    assert partition_layout(idle, H100, None) == MigLayout.disabled()
    assert partition_layout(idle, H100, SEVEN_SMALL) == SEVEN_SMALL
    offered = {f.name: n for f, n in layout_devices(idle, SEVEN_SMALL).items()}
    assert offered == {"h100-80gb-mig-1g.10gb": 7}
    assert {f.name: n for f, n in layout_devices(idle, MigLayout.disabled()).items()} == {
        "h100-80gb": 1
    }
    # an illegal layout (two 3g instances overlapping) is not taken
    overlapping = MigLayout.of(("3g.40gb", 0), ("3g.40gb", 0))
    assert partition_layout(idle, H100, overlapping) == MigLayout.disabled()


def test_what_claims_hold_decides_when_the_plan_would_drop_it(devices: list[Device]) -> None:
    held = frozenset({("gpu.nvidia.com", "split-1-split", "gpu-0-mig-3g40gb-4")})
    gpu, other = _gpus(devices, held)
    assert dict(gpu.in_use) == {"3g.40gb": 1} and dict(other.in_use) == {}
    # the plan (seven 1g) has no 3g: the GPU counts as what is held
    layout = partition_layout(gpu, H100, SEVEN_SMALL)
    assert layout.counts() == {"3g.40gb": 1}
    # a plan that keeps it holds
    kept = MigLayout.of(("3g.40gb", 4), ("1g.10gb", 0), ("1g.10gb", 1))
    assert partition_layout(gpu, H100, kept) == kept
    # held whole: whole, whatever the plan
    whole = PartitionableGpu(gpu.node, gpu.counter_set, gpu.flavours, {WHOLE: 1}, gpu.published)
    assert partition_layout(whole, H100, SEVEN_SMALL) == MigLayout.disabled()
