"""The workload's JSON fields have one parse and one dump each."""

from __future__ import annotations

import pytest

from scheduler_bridge.workloads.records import (
    Placement,
    PodSetRecord,
    dump_placements,
    dump_pod_sets,
    parse_borrowed,
    parse_placements,
    parse_pod_sets,
    placement_nodes,
)


def test_pod_sets_round_trip_and_count_their_gpus() -> None:
    records = [PodSetRecord("workers", 4, 2, ("h100-80gb", "a100-80gb"))]
    stored = dump_pod_sets(records)
    assert stored == [
        {"name": "workers", "count": 4, "gpus_per_pod": 2, "flavours": ["h100-80gb", "a100-80gb"]}
    ]
    assert parse_pod_sets(stored) == records and records[0].gpus == 8


def test_a_damaged_pod_set_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="pod set 1 is unreadable"):
        parse_pod_sets([{"count": 1, "gpus_per_pod": 1, "flavours": ["x"]}, {"count": "many"}])


def test_placements_round_trip_and_skip_what_is_not_a_placement() -> None:
    placements = [Placement("h100-2", "h100-80gb", 4), Placement("h100-1", "h100-80gb", 4)]
    stored = dump_placements(placements)
    assert parse_placements([*stored, "junk", {"node": "x"}]) == placements
    assert placement_nodes(stored) == ["h100-1", "h100-2"]


def test_borrowed_counts_are_whole_numbers() -> None:
    assert parse_borrowed({"nvidia.com/gpu": "3", "nvidia.com/mig-1g.10gb": None}) == {
        "nvidia.com/gpu": 3,
        "nvidia.com/mig-1g.10gb": 0,
    }
    assert parse_borrowed(["not", "a", "mapping"]) == {}
