"""Kueue's own scheduler performance test, run here as Kueue runs it (docs/benchmarks.md).

Kueue ships a scheduler performance test in ``sigs.k8s.io/kueue``
(``test/performance/scheduler``): a runner that reads a scenario
(``configs/baseline/generator.yaml``: 5 cohorts of 6 ClusterQueues, 15,000 workloads of
three classes created on a schedule), starts an API server and etcd (envtest) and
``minimalkueue`` (Kueue's scheduler and core controllers), creates the objects, marks
each workload finished its runtime after admission, and records per workload class the
mean time to admission and per queue class the usage; Kueue's checker holds the figures
to ``rangespec.yaml``. This script builds the runner and minimalkueue of the pinned
release (``toolchain/kueue``, on request) with the same kube-apiserver and etcd as
Tidegate's real control plane, runs the scenario and prints its figures by Kueue's own
definitions, with the checker's thresholds beside them:

* ``wall_s``: minimalkueue's wall time (the checker's ``maxWallMs``);
* ``min_usage``: the lowest queue class's mean usage over its nominal quota (0..1);
* ``mean_admission_s_<class>``: mean time from creation to admission;
* ``cpu_s``, ``peak_rss_mb``: minimalkueue's user+system CPU time and peak memory.

``--scale`` multiplies every workload count (not the queues, quotas, sizes, runtimes or
creation intervals) so that a 2-core machine can run it in minutes; 1.0 is Kueue's own
scenario. The ``tidegate`` line runs the same scenario on Tidegate, as production runs
it (``benchmarks/_versus_tidegate.py``), right after Kueue's, on the same machine.

Two scenarios of Tidegate's own, in the same generator form
(``benchmarks/_versus_scenarios.py``): ``contention`` (owners coming back to quota their
cohort lent) and ``philly`` (the shipped Philly slice, arrivals and runtimes divided by
``--compress``). On them every system prints the figures of
``benchmarks/_versus_figures.py``, computed the same way from what each workload went
through (utilisation, mean and p95 wait, waits per class, owners' wait, preemptions,
share fairness); Kueue's side is watched from beside its runner. Systems: ``kueue``
(minimalkueue: classic cohort preemption), ``kueue-fair-sharing`` (the same core with
Kueue's fair sharing on, ``toolchain/kueue/fairsharing``), ``tidegate``, and
``tidegate-simulator`` (Tidegate's replay simulator on the same workloads).

    python benchmarks/versus_kueue.py --scale 0.2 [--scenario baseline --scenario tas]
    python benchmarks/versus_kueue.py --scale 0.05 --system tidegate [--with-pods]
    python benchmarks/versus_kueue.py --scenario contention --system kueue \
        --system kueue-fair-sharing --system tidegate --system tidegate-simulator
    python benchmarks/versus_kueue.py --scenario philly --compress 5000 --system ...
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._kueue_workloads import WorkloadWatch  # noqa: E402
from benchmarks._support import emit, progress  # noqa: E402
from benchmarks._versus_figures import measured_figures  # noqa: E402
from benchmarks._versus_scenarios import (  # noqa: E402
    contention_scenario,
    philly_scenario,
    queues_of,
    simulated_figures,
    workload_count,
)
from toolchain import build  # noqa: E402

# Kueue's scenarios this runs: its baseline, and the same queues and workloads placed
# with topology-aware scheduling on 640 nodes (its runner's --enableTAS)
KUEUE_SCENARIOS = ("baseline", "tas")
# Tidegate's, in the same form (benchmarks/_versus_scenarios.py): owners coming back to
# borrowed quota, and the Philly slice time-compressed
OWN_SCENARIOS = ("contention", "philly")
SCENARIOS = KUEUE_SCENARIOS + OWN_SCENARIOS
# Kueue's programs: its minimalkueue (classic cohort preemption), and the same core with
# fair sharing on (toolchain/kueue/fairsharing)
KUEUE_PROGRAMS = {"kueue": "minimalkueue", "kueue-fair-sharing": "fairsharing"}
SYSTEMS = (*KUEUE_PROGRAMS, "tidegate", "tidegate-simulator")
# the simulator's spacing of cycles after a change, as production's admission cycle
SIMULATOR_CYCLE_S = 1.0
CONFIGS = "test/performance/scheduler/configs"
CRDS = "config/components/crd/bases"


def scaled_scenario(config: dict[str, Any], scale: float) -> dict[str, Any]:
    """Kueue's generator config with every workload set's ``count`` times ``scale``
    (at least 1); queues, quotas, sizes, runtimes and intervals stay as Kueue set them."""
    scaled = copy.deepcopy(config)
    for cohort in scaled.get("cohorts") or []:
        for queues in cohort.get("queuesSets") or []:
            for workloads in queues.get("workloadsSets") or []:
                workloads["count"] = max(1, round(workloads["count"] * scale))
    return scaled


def kueue_figures(summary: dict[str, Any], stats: dict[str, Any]) -> dict[str, float]:
    """The figures of Kueue's checker, from the runner's ``summary.yaml`` and
    ``minimalkueue.stats.yaml``: usage of a queue class is its mean usage over its
    nominal quota (``cpuAverageUsage / nominalQuota``), as the checker computes it."""
    usages = [
        group["cpuAverageUsage"] / group["nominalQuota"]
        for group in (summary.get("clusterQueueClasses") or {}).values()
        if group.get("nominalQuota")
    ]
    figures: dict[str, float] = {
        "wall_s": stats["wallMs"] / 1000,
        "min_usage": round(min(usages), 4) if usages else 0.0,
        "cpu_s": (stats["userMs"] + stats["sysMs"]) / 1000,
        # ru_maxrss is in kilobytes on Linux
        "peak_rss_mb": round(stats["maxrss"] / 1024, 1),
    }
    for name, workloads in sorted((summary.get("workloadClasses") or {}).items()):
        figures[f"mean_admission_s_{name}"] = workloads["averageTimeToAdmissionMs"] / 1000
    return figures


def within_thresholds(figures: dict[str, float], spec: dict[str, Any]) -> dict[str, bool]:
    """Each of Kueue's ``rangespec.yaml`` checks, passed or not."""
    checks = {"wall": figures["wall_s"] * 1000 <= spec["cmd"]["maxWallMs"]}
    for name, percent in (spec.get("clusterQueueClassesMinUsage") or {}).items():
        checks[f"usage_{name}"] = figures["min_usage"] * 100 >= percent
    for name, most_ms in (spec.get("wlClassesMaxAvgTimeToAdmissionMs") or {}).items():
        mean = figures.get(f"mean_admission_s_{name}")
        checks[f"admission_{name}"] = mean is not None and mean * 1000 <= most_ms
    return checks


@dataclass(frozen=True)
class Options:
    """How to run each scenario (the command line)."""

    scale: float = 0.2
    timeout_s: int = 1800
    compress: float = 5000.0
    philly_days: float | None = None


def scenario_of(name: str, options: Options) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A scenario's generator config and, for Kueue's own, its thresholds."""
    if name == "contention":
        return contention_scenario(), None
    if name == "philly":
        return philly_scenario(options.compress, options.philly_days), None
    return kueue_scenario(name, options.scale)


def kueue_scenario(scenario_name: str, scale: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """Kueue's scenario (scaled) and its thresholds, as the pinned release ships them."""
    build.build_all(["kueue"])
    kueue = next(m for m in build.modules() if m.name == "kueue")
    files = build.files_folder(kueue)
    config = yaml.safe_load((files / CONFIGS / scenario_name / "generator.yaml").read_text())
    spec = yaml.safe_load((files / CONFIGS / scenario_name / "rangespec.yaml").read_text())
    return scaled_scenario(config, scale), spec


def run_kueue(scenario_name: str, options: Options, system: str = "kueue") -> dict[str, Any]:
    """Kueue's runner on ``scenario_name`` with ``system``'s program (minimalkueue, or
    the fair-sharing core); Kueue's own figures and checks for its own scenarios, the
    figures of benchmarks/_versus_figures.py (from a watch on its Workloads) for ours."""
    progress("building Kueue's performance test and the control plane (cached once built)")
    folders = build.build_all(["kueue", "kubernetes", "etcd"])
    kueue = next(m for m in build.modules() if m.name == "kueue")
    files = build.files_folder(kueue)
    scenario, spec = scenario_of(scenario_name, options)
    program = KUEUE_PROGRAMS[system]
    with tempfile.TemporaryDirectory(prefix="versus-kueue-") as work:
        workdir = Path(work)
        # envtest finds kube-apiserver and etcd in KUBEBUILDER_ASSETS
        assets = workdir / "assets"
        assets.mkdir()
        (assets / "kube-apiserver").symlink_to(folders["kubernetes"] / "kube-apiserver")
        (assets / "etcd").symlink_to(folders["etcd"] / "etcd")
        generator = workdir / "generator.yaml"
        generator.write_text(yaml.safe_dump(scenario))
        out = workdir / "out"
        out.mkdir()
        command = [
            str(folders["kueue"] / "runner"),
            f"--o={out}",
            f"--crds={files / CRDS}",
            f"--generatorConfig={generator}",
            f"--minimalKueue={folders['kueue'] / program}",
            f"--timeout={options.timeout_s}s",
            *(["--enableTAS"] if scenario_name == "tas" else []),
        ]
        watch = WorkloadWatch(out).start() if spec is None else None
        progress(f"running {scenario_name} on {system} ({workload_count(scenario):,} workloads)")
        started = time.monotonic()
        with open(workdir / "runner.log", "w") as log:
            finished = subprocess.run(
                command,
                env={**os.environ, "KUBEBUILDER_ASSETS": str(assets)},
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=options.timeout_s + 300,
                check=False,
            )
        seen = watch.stop() if watch is not None else []
        if finished.returncode != 0:
            tail = (workdir / "runner.log").read_text()[-3000:]
            raise SystemExit(f"Kueue's runner failed ({finished.returncode}):\n{tail}")
        progress(f"Kueue's runner done in {time.monotonic() - started:.0f} s")
        summary = yaml.safe_load((out / "summary.yaml").read_text())
        stats = yaml.safe_load((out / f"{program}.stats.yaml").read_text())
    figures = kueue_figures(summary, stats)
    line: dict[str, Any] = {
        "bench": "versus_kueue",
        "scenario": scenario_name,
        "system": system,
        "version": kueue.main_version,
        "workloads": workload_count(scenario),
    }
    if spec is None:
        measured = measured_figures(seen, queues_of(scenario))
        assert watch is not None
        measured["fair_sharing_status"] = int(watch.fair_sharing_seen)
        kept = ("wall_s", "cpu_s", "peak_rss_mb")
        return (
            line
            | measured
            | {k: figures[k] for k in kept}
            | _scenario_facts(options, scenario_name)
        )
    checks = within_thresholds(figures, spec)
    return {
        **line,
        **figures,
        "scale": options.scale,
        "within_kueue_thresholds": int(all(checks.values())),
        **{f"check_{name}": int(ok) for name, ok in checks.items()},
    }


def _scenario_facts(options: Options, scenario_name: str) -> dict[str, Any]:
    """What a line of one of Tidegate's scenarios says about how it was run (both sides
    run it whole: ``scale`` 1.0)."""
    if scenario_name == "philly":
        return {"scale": 1.0, "compress": options.compress, "philly_days": options.philly_days}
    return {"scale": 1.0}


def run_simulator(scenario_name: str, options: Options) -> dict[str, Any]:
    """Tidegate's replay simulator on the same workloads (benchmarks/_versus_scenarios.py)."""
    if scenario_name not in OWN_SCENARIOS:
        raise SystemExit("the simulator runs the contention and philly scenarios")
    scenario, _ = scenario_of(scenario_name, options)
    return {
        "bench": "versus_kueue",
        "scenario": scenario_name,
        "system": "tidegate-simulator",
        **simulated_figures(scenario, SIMULATOR_CYCLE_S),
        **_scenario_facts(options, scenario_name),
    }


def run_tidegate(
    scenario_name: str,
    options: Options,
    queue_tick_s: float | None = None,
    watch: bool = True,
    pods: bool = False,
) -> dict[str, Any]:
    """Tidegate on the same scenario (benchmarks/_versus_tidegate.py), with the same
    checks against Kueue's thresholds on Kueue's scenarios."""
    from benchmarks._versus_tidegate import run_tidegate as run

    if scenario_name == "tas":
        raise SystemExit("Tidegate runs Kueue's baseline scenario and its own ones, not tas")
    build.build_all(["kubernetes", "etcd", "kwok"])
    scenario, spec = scenario_of(scenario_name, options)
    figures = run(scenario, options.timeout_s, queue_tick_s, watch, pods, spec is None)
    line = {"bench": "versus_kueue", "scenario": scenario_name, "system": "tidegate", **figures}
    if spec is None:
        return line | _scenario_facts(options, scenario_name)
    checks = within_thresholds(figures, spec)
    return {
        **line,
        "scale": options.scale,
        "within_kueue_thresholds": int(all(checks.values())),
        **{f"check_{name}": int(ok) for name, ok in checks.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scale",
        type=float,
        default=float(os.environ.get("VERSUS_KUEUE_SCALE", "0.2")),
        help="multiply every workload count (1.0: Kueue's own 15,000)",
    )
    parser.add_argument("--timeout", type=int, default=1800, help="seconds for each system")
    parser.add_argument(
        "--compress",
        type=float,
        default=5000.0,
        help="the philly scenario's time compression: arrivals and runtimes divided by it",
    )
    parser.add_argument(
        "--philly-days",
        type=float,
        help="the philly scenario's first days only (default: the whole two weeks)",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help="Kueue's scenario to run (repeat for several; default: baseline)",
    )
    parser.add_argument(
        "--system",
        action="append",
        choices=SYSTEMS,
        help="which system to run (repeat for several; default: Kueue, then Tidegate; "
        "kueue-fair-sharing is Kueue's core with fair sharing on; tidegate-simulator is "
        "Tidegate's replay simulator on the contention and philly scenarios)",
    )
    parser.add_argument(
        "--queue-tick",
        type=float,
        action="append",
        help="Tidegate's queue tick in seconds (TIDEGATE_QUEUE_TICK_S; repeat for several "
        "runs; default: the production default)",
    )
    parser.add_argument(
        "--without-watch",
        action="store_true",
        help="run Tidegate without its queue watch (manage.py watch_queues): admission "
        "then follows the queue tick alone",
    )
    parser.add_argument(
        "--with-pods",
        action="store_true",
        help="run Tidegate on the whole control plane, pods created, bound and run for "
        "every started Job (default: the API server and etcd alone, as Kueue's test)",
    )
    args = parser.parse_args(argv)
    if not 0 < args.scale <= 1:
        parser.error("--scale is a factor in (0, 1]")
    if args.compress < 1:
        parser.error("--compress divides time: give a factor of 1 or more")
    if args.philly_days is not None and args.philly_days <= 0:
        parser.error("--philly-days is a number of days above 0")
    options = Options(args.scale, args.timeout, args.compress, args.philly_days)
    for scenario_name in args.scenario or ["baseline"]:
        for system in args.system or ["kueue", "tidegate"]:
            if system in KUEUE_PROGRAMS:
                emit(**run_kueue(scenario_name, options, system))
            elif system == "tidegate-simulator":
                emit(**run_simulator(scenario_name, options))
            else:
                for tick in args.queue_tick or [None]:
                    emit(
                        **run_tidegate(
                            scenario_name,
                            options,
                            tick,
                            not args.without_watch,
                            args.with_pods,
                        )
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
