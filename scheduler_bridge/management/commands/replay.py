"""`manage.py replay`: a GPU-cluster trace (or the cluster's own history) through the
admission engine, per policy, with the figures of docs/replay.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from rich.progress import Progress

from scheduler_bridge.admission.model import SHARE_PACKINGS
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.replay.cluster import (
    QuotaPlan,
    ReplayCluster,
    demand_shares,
    one_product,
    proportional_quotas,
    read_products,
    read_quotas,
)
from scheduler_bridge.replay.openb import (
    OPENB_ATTRIBUTION,
    OPENB_NODES,
    OPENB_TASKS,
    openb_cluster,
    openb_jobs,
    read_openb_nodes,
    read_openb_tasks,
)
from scheduler_bridge.replay.plot import replay_page
from scheduler_bridge.replay.policies import (
    POLICIES,
    ReplayInputError,
    ReplayOptions,
    replay_policies,
)
from scheduler_bridge.replay.trace import (
    PHILLY_ATTRIBUTION,
    PHILLY_JOBS,
    PHILLY_VC_NODES,
    TraceError,
    TraceJob,
    read_trace,
    read_vc_nodes,
)
from scheduler_bridge.workloads.history_trace import history_trace

PLOT_POINTS = 600


class Command(BaseCommand):
    help = (
        "Replay a GPU-cluster trace (default: the shipped two weeks of Microsoft's Philly "
        "cluster, Jeon et al., USENIX ATC 2019), Alibaba's GPU-sharing trace (openb), a CSV "
        "of your own, or this cluster's own history under static slices, FIFO and Tidegate's "
        "fair share; see docs/replay.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--trace",
            type=Path,
            help="the trace file (philly, openb: the shipped slice by default; openb: the pod "
            "list; csv: submit_time,duration_s,gpus,tenant[,flavor,priority,min_gpus,"
            "checkpoint_s])",
        )
        parser.add_argument(
            "--format", choices=["philly", "openb", "csv", "history"], default="philly"
        )
        parser.add_argument(
            "--nodes",
            type=Path,
            help="openb: the node list (sn,gpu,model[,cpu_milli,memory_mib]; default: the "
            "shipped one)",
        )
        parser.add_argument("--cluster", help="history: the cluster's name (default: the only one)")
        parser.add_argument("--days", type=int, default=30, help="history: the last N days")
        parser.add_argument(
            "--capacity",
            type=int,
            help="GPUs of the simulated cluster (openb: the node list cut to this many GPUs)",
        )
        parser.add_argument("--gpus-per-node", type=int, default=8)
        parser.add_argument(
            "--products", type=Path, help="CSV flavor,gpus[,gpus_per_node,gpu_equivalent]"
        )
        parser.add_argument(
            "--quotas",
            default="proportional",
            help="proportional (philly: to each virtual cluster's nodes; csv: to each "
            "tenant's GPU-hours) or a CSV tenant,guaranteed[,flavor,weight]",
        )
        parser.add_argument("--policy", choices=[*POLICIES, "all"], default="all")
        parser.add_argument(
            "--half-life", type=float, default=168.0, metavar="HOURS", help="usage half-life"
        )
        parser.add_argument(
            "--reclaim-min-run",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="fair share: borrowed work runs this long before it may be reclaimed",
        )
        parser.add_argument(
            "--reclaim-wait",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help=(
                "fair share: work inside its guarantee waits this long for GPUs to free "
                "before it preempts borrowed work"
            ),
        )
        parser.add_argument(
            "--share-packing",
            choices=SHARE_PACKINGS,
            default="fgd",
            help="shared GPUs (openb): which GPU a share takes",
        )
        parser.add_argument(
            "--priority-preemption",
            action="store_true",
            help="higher-priority work may preempt its own tenant's lower-priority work",
        )
        parser.add_argument("--seed", type=int, default=0, help="orders same-second submits")
        parser.add_argument("--limit", type=int, help="replay only the first N jobs")
        parser.add_argument("--json", action="store_true", help="one JSON line per policy")
        parser.add_argument("--plot", type=Path, metavar="OUT.html", help="write a plot page")
        parser.add_argument(
            "--strict", action="store_true", help="stop at the first bad row (default: skip)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._check_numbers(options)
        console = Console(stderr=True)
        try:
            jobs, cluster, quotas, attribution = self._inputs(options, console)
        except TraceError as error:
            raise CommandError(str(error)) from None
        replay_options = ReplayOptions(
            half_life_h=options["half_life"],
            reclaim_min_run_s=options["reclaim_min_run"],
            reclaim_wait_s=options["reclaim_wait"],
            seed=options["seed"],
            share_packing=options["share_packing"],
            priority_preemption=options["priority_preemption"],
            timeline_points=PLOT_POINTS if options["plot"] else 0,
        )
        policies = POLICIES if options["policy"] == "all" else (options["policy"],)
        runs_needed = len(policies) + (0 if "static" in policies else 1)
        try:
            with Progress(console=console, transient=True) as progress:
                task = progress.add_task("replaying", total=runs_needed)

                def advance(policy: str, done: int) -> None:
                    progress.update(task, completed=done, description=f"{policy}: {len(jobs)} jobs")

                runs = replay_policies(policies, jobs, cluster, quotas, replay_options, advance)
        except ReplayInputError as error:
            raise CommandError(str(error)) from None
        for run in runs:
            figures = run.figures
            if options["json"]:
                line = {"bench": "replay", "scenario": figures.policy, **figures.as_json()}
                line |= {"seed": options["seed"], "trace_source": attribution}
                self.stdout.write(json.dumps(line))
            else:
                ratio = figures.owner_wait_ratio
                self.stdout.write(
                    f"{figures.policy:>18}: utilisation {figures.utilization:.1%}, goodput "
                    f"{figures.goodput:,.0f} GPU-h ({figures.wasted_gpu_hours:,.0f} wasted, "
                    f"{figures.borrowed_gpu_hours:,.0f} borrowed), wait mean "
                    f"{figures.wait_mean_s / 3600:.2f} h p95 {figures.wait_p95_s / 3600:.2f} h, "
                    f"owner wait ratio {'-' if ratio is None else f'{ratio:.2f}'}, share "
                    f"fairness {figures.share_fairness:.3f}, {figures.preemptions} preemptions "
                    f"of {figures.preempted_jobs} jobs (at most "
                    f"{figures.most_preemptions_of_a_job} of one) "
                    f"({figures.jobs_completed}/{figures.jobs} jobs done, {figures.wall_s} s)"
                )
        if options["plot"]:
            options["plot"].write_text(
                replay_page(runs, title="Tidegate replay", attribution=attribution),
                encoding="utf-8",
            )
            console.print(f"plot written to {options['plot']}")
        if not options["json"]:
            self.stdout.write(attribution)

    def _check_numbers(self, options: dict[str, Any]) -> None:
        if options["capacity"] is not None and options["capacity"] < 1:
            raise CommandError("--capacity must be at least 1 GPU.")
        if options["gpus_per_node"] < 1:
            raise CommandError("--gpus-per-node must be at least 1.")
        if options["reclaim_min_run"] < 0:
            raise CommandError("--reclaim-min-run must be 0 or more seconds.")
        if options["reclaim_wait"] < 0:
            raise CommandError("--reclaim-wait must be 0 or more seconds.")
        if options["half_life"] <= 0:
            raise CommandError("--half-life must be more than 0 hours.")
        if options["days"] < 1:
            raise CommandError("--days must be at least 1.")
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit must be at least 1.")

    def _inputs(
        self, options: dict[str, Any], console: Console
    ) -> tuple[list[TraceJob], ReplayCluster, QuotaPlan, str]:
        if options["format"] == "history":
            return self._history(options)
        if options["format"] == "openb":
            return self._openb(options, console)
        path = options["trace"] or (PHILLY_JOBS if options["format"] == "philly" else None)
        if path is None:
            raise CommandError("--format csv needs --trace PATH.")
        read = read_trace(path, options["format"], strict=options["strict"], limit=options["limit"])
        if read.skipped:
            console.print(f"skipped {len(read.skipped)} bad rows; the first: {read.skipped[0]}")
        jobs = read.jobs
        cluster = self._cluster(options)
        tenants = sorted({job.tenant for job in jobs})
        if options["quotas"] != "proportional":
            quotas = read_quotas(Path(options["quotas"]), cluster, tenants)
        elif options["format"] == "philly" and PHILLY_VC_NODES.is_file():
            quotas = proportional_quotas(tenants, read_vc_nodes(PHILLY_VC_NODES), cluster)
        else:
            quotas = proportional_quotas(tenants, demand_shares(jobs), cluster)
        attribution = PHILLY_ATTRIBUTION if options["format"] == "philly" else f"Trace: {path}"
        return jobs, cluster, quotas, attribution

    def _openb(
        self, options: dict[str, Any], console: Console
    ) -> tuple[list[TraceJob], ReplayCluster, QuotaPlan, str]:
        if options["products"] is not None:
            raise CommandError(
                "--format openb takes its products from the node list; give --nodes FILE "
                "(and --capacity GPUS to cut it), not --products."
            )
        nodes = read_openb_nodes(options["nodes"] or OPENB_NODES, strict=options["strict"])
        tasks = read_openb_tasks(options["trace"] or OPENB_TASKS, strict=options["strict"])
        for read in (nodes, tasks):
            if read.skipped:
                console.print(f"skipped {len(read.skipped)} bad rows; the first: {read.skipped[0]}")
        try:
            cluster = openb_cluster(nodes.rows)
        except ValueError as error:
            raise CommandError(f"{options['nodes'] or OPENB_NODES}: {error}") from None
        if options["capacity"] is not None:
            cluster = cluster.scaled(options["capacity"])
        jobs = openb_jobs(tasks.rows, cluster, limit=options["limit"])
        if not jobs:
            raise CommandError("The pod list holds no task with GPUs to replay.")
        tenants = sorted({job.tenant for job in jobs})
        if options["quotas"] != "proportional":
            quotas = read_quotas(Path(options["quotas"]), cluster, tenants)
        else:
            quotas = proportional_quotas(tenants, demand_shares(jobs), cluster)
        default = options["trace"] is None and options["nodes"] is None
        attribution = OPENB_ATTRIBUTION if default else f"Trace: {options['trace'] or OPENB_TASKS}"
        return jobs, cluster, quotas, attribution

    def _cluster(self, options: dict[str, Any]) -> ReplayCluster:
        if options["products"] is not None:
            if options["capacity"] is not None:
                raise CommandError("Give --capacity or --products, not both.")
            return read_products(options["products"])
        if options["capacity"] is None:
            raise CommandError(
                "Give --capacity GPUS (or --products FILE) for the simulated cluster."
            )
        return one_product(options["capacity"], options["gpus_per_node"])

    def _history(
        self, options: dict[str, Any]
    ) -> tuple[list[TraceJob], ReplayCluster, QuotaPlan, str]:
        clusters = Cluster.objects.order_by("name")
        if options["cluster"]:
            clusters = clusters.filter(name=options["cluster"])
        found = list(clusters[:2])
        if len(found) != 1:
            names = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
            raise CommandError(
                f"Name the cluster to replay with --cluster (clusters: {names or 'none'})."
            )
        trace = history_trace(cluster=found[0], days=options["days"])
        if not trace.jobs:
            raise CommandError(
                f"Cluster {found[0].name} has no finished workloads in the last {options['days']} "
                "days; try a larger --days."
            )
        cluster = trace.cluster
        if options["capacity"] is not None:
            cluster = cluster.scaled(options["capacity"])
        quotas = trace.quotas
        if options["quotas"] != "proportional":
            quotas = read_quotas(
                Path(options["quotas"]), cluster, sorted({j.tenant for j in trace.jobs})
            )
        return trace.jobs, cluster, quotas, f"Trace: the history of cluster {found[0].name}"
