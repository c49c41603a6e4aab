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

    python benchmarks/versus_kueue.py --scale 0.2 [--scenario baseline --scenario tas]
    python benchmarks/versus_kueue.py --scale 0.05 --system tidegate [--with-pods]
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._support import emit, progress  # noqa: E402
from toolchain import build  # noqa: E402

# Kueue's scenarios this runs: its baseline, and the same queues and workloads placed
# with topology-aware scheduling on 640 nodes (its runner's --enableTAS)
SCENARIOS = ("baseline", "tas")
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


def workload_count(config: dict[str, Any]) -> int:
    total = 0
    for cohort in config.get("cohorts") or []:
        for queues in cohort.get("queuesSets") or []:
            for workloads in queues.get("workloadsSets") or []:
                total += (
                    cohort["count"]
                    * queues["count"]
                    * workloads["count"]
                    * len(workloads.get("workloads") or [])
                )
    return total


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


def kueue_scenario(scenario_name: str, scale: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """Kueue's scenario (scaled) and its thresholds, as the pinned release ships them."""
    build.build_all(["kueue"])
    kueue = next(m for m in build.modules() if m.name == "kueue")
    files = build.files_folder(kueue)
    config = yaml.safe_load((files / CONFIGS / scenario_name / "generator.yaml").read_text())
    spec = yaml.safe_load((files / CONFIGS / scenario_name / "rangespec.yaml").read_text())
    return scaled_scenario(config, scale), spec


def run_kueue(scenario_name: str, scale: float, timeout_s: int) -> dict[str, Any]:
    """Kueue's runner and minimalkueue on ``scenario_name``; its figures and checks."""
    progress("building Kueue's performance test and the control plane (cached once built)")
    folders = build.build_all(["kueue", "kubernetes", "etcd"])
    kueue = next(m for m in build.modules() if m.name == "kueue")
    files = build.files_folder(kueue)
    scenario, spec = kueue_scenario(scenario_name, scale)
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
            f"--minimalKueue={folders['kueue'] / 'minimalkueue'}",
            f"--timeout={timeout_s}s",
            *(["--enableTAS"] if scenario_name == "tas" else []),
        ]
        progress(f"running Kueue's {scenario_name} ({workload_count(scenario):,} workloads)")
        started = time.monotonic()
        with open(workdir / "runner.log", "w") as log:
            finished = subprocess.run(
                command,
                env={**os.environ, "KUBEBUILDER_ASSETS": str(assets)},
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout_s + 300,
                check=False,
            )
        if finished.returncode != 0:
            tail = (workdir / "runner.log").read_text()[-3000:]
            raise SystemExit(f"Kueue's runner failed ({finished.returncode}):\n{tail}")
        progress(f"Kueue's runner done in {time.monotonic() - started:.0f} s")
        summary = yaml.safe_load((out / "summary.yaml").read_text())
        stats = yaml.safe_load((out / "minimalkueue.stats.yaml").read_text())
    figures = kueue_figures(summary, stats)
    checks = within_thresholds(figures, spec)
    return {
        "bench": "versus_kueue",
        "scenario": scenario_name,
        "system": "kueue",
        "version": kueue.main_version,
        "workloads": workload_count(scenario),
        **figures,
        "scale": scale,
        "within_kueue_thresholds": int(all(checks.values())),
        **{f"check_{name}": int(ok) for name, ok in checks.items()},
    }


def run_tidegate(
    scenario_name: str,
    scale: float,
    timeout_s: int,
    queue_tick_s: float | None = None,
    watch: bool = True,
    pods: bool = False,
) -> dict[str, Any]:
    """Tidegate on the same scenario (benchmarks/_versus_tidegate.py), with the same
    checks against Kueue's thresholds."""
    from benchmarks._versus_tidegate import run_tidegate as run

    if scenario_name != "baseline":
        raise SystemExit("Tidegate runs Kueue's baseline scenario only")
    build.build_all(["kubernetes", "etcd", "kwok"])
    scenario, spec = kueue_scenario(scenario_name, scale)
    figures = run(scenario, timeout_s, queue_tick_s, watch, pods)
    checks = within_thresholds(figures, spec)
    return {
        "bench": "versus_kueue",
        "scenario": scenario_name,
        "system": "tidegate",
        **figures,
        "scale": scale,
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
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help="Kueue's scenario to run (repeat for several; default: baseline)",
    )
    parser.add_argument(
        "--system",
        action="append",
        choices=("kueue", "tidegate"),
        help="which system to run (repeat for both; default: both, Kueue first)",
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
    for scenario_name in args.scenario or ["baseline"]:
        for system in args.system or ["kueue", "tidegate"]:
            if system == "kueue":
                emit(**run_kueue(scenario_name, args.scale, args.timeout))
            for tick in args.queue_tick or [None]:
                if system == "tidegate":
                    emit(
                        **run_tidegate(
                            scenario_name,
                            args.scale,
                            args.timeout,
                            tick,
                            not args.without_watch,
                            args.with_pods,
                        )
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
