"""`manage.py replay`: a real GPU-cluster trace through the admission engine, per policy."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from rich.progress import Progress

from scheduler_bridge.replay.policies import POLICIES, replay
from scheduler_bridge.replay.trace import (
    PHILLY_ATTRIBUTION,
    PHILLY_JOBS,
    PHILLY_VC_NODES,
    read_jobs,
    read_vc_nodes,
)


class Command(BaseCommand):
    help = (
        "Replay a GPU-cluster trace (default: the two-week Microsoft Philly trace, Jeon et "
        "al., USENIX ATC 2019) under static quotas, FIFO and Tidegate's fair share."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--trace",
            type=Path,
            default=PHILLY_JOBS,
            help="per-job CSV in the Philly form (default: the shipped two-week slice)",
        )
        parser.add_argument(
            "--vc-nodes",
            type=Path,
            default=PHILLY_VC_NODES,
            help="nodes per virtual cluster, which set the guarantees (default: shipped)",
        )
        parser.add_argument("--policy", choices=[*POLICIES, "all"], default="all")
        parser.add_argument("--nodes", type=int, default=64, help="simulated 8-GPU nodes")
        parser.add_argument("--limit", type=int, help="replay only the first N jobs")
        parser.add_argument("--json", action="store_true", help="one JSON line per policy")
        parser.add_argument(
            "--reclaim-min-run",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="fair-share: borrowed work runs this long before it may be reclaimed",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        for path in (options["trace"], options["vc_nodes"]):
            if not path.is_file():
                raise CommandError(f"{path} does not exist; pass --trace / --vc-nodes.")
        if options["nodes"] < 1:
            raise CommandError("--nodes must be at least 1.")
        if options["reclaim_min_run"] < 0:
            raise CommandError("--reclaim-min-run must be 0 or more seconds.")
        jobs = read_jobs(options["trace"], options["limit"])
        vc_nodes = read_vc_nodes(options["vc_nodes"])
        policies = POLICIES if options["policy"] == "all" else (options["policy"],)
        console = Console(stderr=True)
        results = []
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("replaying", total=len(policies))
            for policy in policies:
                progress.update(task, description=f"{policy}: {len(jobs)} jobs")
                results.append(
                    replay(
                        policy,
                        jobs,
                        vc_nodes,
                        nodes=options["nodes"],
                        reclaim_min_run_s=options["reclaim_min_run"],
                    )
                )
                progress.advance(task)
        for figures in results:
            if options["json"]:
                line = {"bench": "replay", "scenario": figures.policy, **asdict(figures)}
                self.stdout.write(json.dumps({**line, "trace_source": PHILLY_ATTRIBUTION}))
            else:
                self.stdout.write(
                    f"{figures.policy:>18}: utilisation {figures.utilization:.1%}, "
                    f"goodput {figures.goodput:.1%}, {figures.wasted_gpu_hours:,.0f} GPU-hours "
                    f"wasted, mean wait {figures.wait_mean_s / 3600:.2f} h, p95 wait "
                    f"{figures.wait_p95_s / 3600:.2f} h, fairness {figures.jain_fairness:.3f}, "
                    f"{figures.preemptions} preemptions ({figures.jobs} jobs, {figures.wall_s} s)"
                )
        if not options["json"]:
            self.stdout.write(PHILLY_ATTRIBUTION)
