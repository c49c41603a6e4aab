"""The contention and Philly scenarios, and the figures both systems are measured by."""

from __future__ import annotations

import pytest

from benchmarks._kueue_workloads import WorkloadWatch, is_running, requested
from benchmarks._versus_figures import Observed, Queue, measured_figures
from benchmarks._versus_scenarios import (
    OWNERS_RETURN_MS,
    classes_of,
    contention_scenario,
    philly_scenario,
    queues_of,
    simulated_figures,
)
from benchmarks._versus_tidegate import creation_schedule
from benchmarks.versus_kueue import main, workload_count

QUEUES = {"a": Queue("c", 4), "b": Queue("c", 4)}


def test_waits_preemptions_and_utilisation_of_observed_runs() -> None:
    workloads = [
        # a: 4 GPUs from 0 to 10, preempted once at 5 and started again at 6
        Observed("a", "owner", 4, 0.0, [(0.0, 5.0), (6.0, 10.0)]),
        # b: created at 2, waits 3 s, runs 5 s
        Observed("b", "borrower", 2, 2.0, [(5.0, 10.0)]),
    ]
    figures = measured_figures(workloads, QUEUES)
    assert figures["span_s"] == 10.0
    # held: 4 * 9 + 2 * 5 = 46 GPU-seconds of 8 GPUs over 10 s
    assert figures["utilization"] == pytest.approx(46 / 80, abs=1e-4)
    # per queue class as Kueue's checker: a's class held 36 of 40, b's 10 of 40
    by_class = {"a": Queue("c", 4, "owners"), "b": Queue("c", 4, "borrowers")}
    assert measured_figures(workloads, by_class)["min_usage"] == 0.25
    assert figures["preemptions"] == 1
    assert figures["wait_mean_s"] == 1.5  # first admissions: 0 and 3 s
    assert figures["mean_admission_s_owner"] == 0.0
    assert figures["mean_admission_s_borrower"] == 3.0
    assert figures["owner_wait_mean_s"] == 1.5  # both fit their queue's nominal quota


def test_share_fairness_is_one_when_each_queue_gets_its_entitlement_and_drops_when_one_starves() -> (
    None
):
    # both queues want more than their 4 GPUs for 10 s: each is entitled to 4
    fair = [
        Observed("a", "x", 4, 0.0, [(0.0, 10.0)]),
        Observed("a", "x", 4, 0.0, [(10.0, 20.0)]),
        Observed("b", "x", 4, 0.0, [(0.0, 10.0)]),
        Observed("b", "x", 4, 0.0, [(10.0, 20.0)]),
    ]
    assert measured_figures(fair, QUEUES)["share_fairness"] == pytest.approx(1.0)
    # a takes all 8 for 10 s while b waits: a got twice its due, b two thirds of it
    starved = [
        Observed("a", "x", 8, 0.0, [(0.0, 10.0)]),
        Observed("b", "x", 8, 0.0, [(10.0, 20.0)]),
    ]
    assert measured_figures(starved, QUEUES)["share_fairness"] == pytest.approx(0.8)


def test_nothing_observed_is_an_error_not_a_figure() -> None:
    with pytest.raises(ValueError, match="no workload was observed"):
        measured_figures([], QUEUES)


def test_the_contention_scenario_brings_the_owners_back_after_the_borrowers_filled_the_cohort() -> (
    None
):
    scenario = contention_scenario()
    queues = queues_of(scenario)
    assert len(queues) == 12 and {q.nominal for q in queues.values()} == {20}
    assert classes_of(scenario) == {"borrower": 240, "owner": 120}
    schedule = creation_schedule(scenario)
    first_owner = min(at for at, _, queue_class, _, _ in schedule if queue_class == "owner")
    borrowed_by_then = sum(
        int(w["request"]) for at, _, c, _, w in schedule if c == "borrower" and at < 2
    )
    assert first_owner == OWNERS_RETURN_MS / 1000
    # per cohort (two cohorts of 120 GPUs), the borrowers ask for more than all of it at once
    assert borrowed_by_then / 2 > 120
    assert workload_count(scenario) == len(schedule) == 360


def test_the_philly_scenario_keeps_every_job_compressed_in_time() -> None:
    scenario = philly_scenario(5000)
    queues = queues_of(scenario)
    assert sum(q.nominal for q in queues.values()) == 320
    assert all(name.startswith("vc-") for name in queues)  # never read as a number
    schedule = creation_schedule(scenario)
    assert len(schedule) == 9376
    # two weeks of arrivals in about four minutes
    assert 230 < schedule[-1][0] < 245
    smallest = min(w["runtimeMs"] for *_, w in schedule)
    assert smallest >= 1
    with pytest.raises(ValueError, match="compress divides time"):
        philly_scenario(0.5)
    first_day = philly_scenario(5000, days=1)
    assert queues_of(first_day) == queues  # the same quotas, whichever days run
    arrivals = [at for at, *_ in creation_schedule(first_day)]
    assert 0 < len(arrivals) < 9376 and max(arrivals) < 86400 / 5000


def test_the_simulator_runs_the_same_workloads_with_the_cohorts_apart() -> None:
    figures = simulated_figures(contention_scenario(), 1.0)
    assert figures["workloads"] == 360 and figures["never_admitted"] == 0
    assert 0 < figures["utilization"] <= 1
    # owners come back to their own guarantee: they wait far less than the borrowers
    assert figures["mean_admission_s_owner"] < figures["mean_admission_s_borrower"] / 2
    # where queues mix classes, no per-class wait is made up from a queue's waits
    philly = simulated_figures(philly_scenario(5000, days=0.5), 1.0)
    assert not [key for key in philly if key.startswith("mean_admission_s_")]


def _workload(uid: str, conditions: dict[str, str]) -> dict:
    return {
        "metadata": {
            "uid": uid,
            "namespace": "owner-1-0-cohort-0",
            "labels": {"kueue.x-k8s.io/performance-scheduler-class": "owner"},
        },
        "spec": {
            "podSets": [
                {
                    "count": 2,
                    "template": {
                        "spec": {"containers": [{"resources": {"requests": {"cpu": "5"}}}]}
                    },
                }
            ]
        },
        "status": {"conditions": [{"type": k, "status": v} for k, v in conditions.items()]},
    }


def test_kueues_workloads_are_followed_through_admission_eviction_and_finish(tmp_path) -> None:
    watch = WorkloadWatch(tmp_path)
    watch.observe(_workload("u1", {}), 1.0)
    watch.observe(_workload("u1", {"Admitted": "True"}), 2.0)
    watch.observe(_workload("u1", {"Admitted": "True", "Evicted": "True"}), 3.0)
    watch.observe(_workload("u1", {"Admitted": "False"}), 3.5)
    watch.observe(_workload("u1", {"Admitted": "True"}), 4.0)
    watch.observe(_workload("u1", {"Admitted": "True", "Finished": "True"}), 9.0)
    [seen] = watch.seen.values()
    assert (seen.queue, seen.class_name, seen.gpus, seen.created) == (
        "owner-1-0-cohort-0",
        "owner",
        10,
        1.0,
    )
    assert seen.runs == [(2.0, 3.0), (4.0, 9.0)]
    assert requested(_workload("u2", {})) == 10
    assert not is_running(_workload("u2", {"Admitted": "True", "Finished": "True"}))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--compress", "0.5"], "--compress divides time"),
        (["--philly-days", "0"], "--philly-days is a number of days above 0"),
    ],
)
def test_bad_options_are_refused_with_the_reason(arguments, message, capsys) -> None:
    with pytest.raises(SystemExit):
        main(arguments)
    assert message in capsys.readouterr().err
