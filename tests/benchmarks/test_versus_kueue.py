"""The figures versus_kueue.py reads from Kueue's runner are Kueue's checker's figures."""

from __future__ import annotations

import copy
from typing import Any

from benchmarks._versus_tidegate import preempts_lower_priority
from benchmarks.versus_kueue import (
    kueue_figures,
    scaled_scenario,
    within_thresholds,
    workload_count,
)

SCENARIO: dict[str, Any] = {
    "cohorts": [
        {
            "className": "cohort",
            "count": 5,
            "queuesSets": [
                {
                    "className": "cq",
                    "count": 6,
                    "nominalQuota": 20,
                    "borrowingLimit": 100,
                    "workloadsSets": [
                        {
                            "count": 350,
                            "creationIntervalMs": 100,
                            "workloads": [{"className": "small"}],
                        },
                        {
                            "count": 100,
                            "creationIntervalMs": 500,
                            "workloads": [{"className": "medium"}],
                        },
                        {
                            "count": 50,
                            "creationIntervalMs": 1200,
                            "workloads": [{"className": "large"}],
                        },
                    ],
                }
            ],
        }
    ]
}
SPEC = {
    "cmd": {"maxWallMs": 425_000},
    "clusterQueueClassesMinUsage": {"cq": 55},
    "wlClassesMaxAvgTimeToAdmissionMs": {"large": 11_000, "medium": 90_000, "small": 260_000},
}


def test_scaling_changes_workload_counts_only() -> None:
    assert workload_count(SCENARIO) == 15_000  # Kueue's baseline
    scaled = scaled_scenario(SCENARIO, 0.05)
    assert workload_count(scaled) == 750
    queues = scaled["cohorts"][0]["queuesSets"][0]
    assert (queues["count"], queues["nominalQuota"], queues["borrowingLimit"]) == (6, 20, 100)
    assert [w["creationIntervalMs"] for w in queues["workloadsSets"]] == [100, 500, 1200]
    assert workload_count(SCENARIO) == 15_000  # the original is left as it was
    # never below one workload per set
    assert workload_count(scaled_scenario(SCENARIO, 0.0001)) == 90


def test_the_figures_and_checks_are_the_checkers() -> None:
    """Usage is a class's mean usage over its nominal quota (cpuAverageUsage /
    nominalQuota, as Kueue's checker); maxrss is kilobytes."""
    summary = {
        "clusterQueueClasses": {"cq": {"cpuAverageUsage": 338, "nominalQuota": 600}},
        "workloadClasses": {
            "large": {"averageTimeToAdmissionMs": 14_678},
            "medium": {"averageTimeToAdmissionMs": 91_532},
            "small": {"averageTimeToAdmissionMs": 230_499},
        },
    }
    stats = {"wallMs": 383_252, "userMs": 90_000, "sysMs": 6_675, "maxrss": 359_833}
    figures = kueue_figures(summary, stats)
    assert figures == {
        "wall_s": 383.252,
        "min_usage": 0.5633,
        "cpu_s": 96.675,
        "peak_rss_mb": 351.4,
        "mean_admission_s_large": 14.678,
        "mean_admission_s_medium": 91.532,
        "mean_admission_s_small": 230.499,
    }
    assert within_thresholds(figures, SPEC) == {
        "wall": True,
        "usage_cq": True,
        "admission_large": False,
        "admission_medium": False,
        "admission_small": True,
    }


def test_tidegate_preempts_lower_priority_only_where_every_queue_of_the_scenario_does() -> None:
    assert not preempts_lower_priority(SCENARIO)  # the queues say nothing: Kueue's Never
    every = copy.deepcopy(SCENARIO)
    every["cohorts"][0]["queuesSets"][0]["withinClusterQueue"] = "LowerPriority"
    assert preempts_lower_priority(every)
    mixed = copy.deepcopy(every)
    other = copy.deepcopy(mixed["cohorts"][0]["queuesSets"][0])
    other["className"], other["withinClusterQueue"] = "strict", "Never"
    mixed["cohorts"][0]["queuesSets"].append(other)
    assert not preempts_lower_priority(mixed)
