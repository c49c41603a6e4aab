"""`manage.py mig_plan --cluster NAME`: dry run of the MIG planner."""

from __future__ import annotations

import json
from typing import IO, Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from rich.table import Table

from scheduler_bridge.gateways import GatewayError
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.management.commands._cluster import cluster_named
from scheduler_bridge.mig.services import mig_plan
from scheduler_bridge.workloads.selectors import admitted_jobs


class Command(BaseCommand):
    help = "Show the MIG layouts Tidegate would request for a cluster; changes nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="cluster name")
        parser.add_argument("--sync", action="store_true", help="sync the inventory first")
        parser.add_argument("--json", action="store_true", help="print JSON instead of tables")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = cluster_named(options["cluster"])
        if options["sync"]:
            try:
                inventory_sync(cluster, admitted=admitted_jobs)
            except GatewayError as error:
                raise CommandError(f"inventory sync of {cluster.name} failed: {error}") from error
        plan = mig_plan(cluster)
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "cluster": cluster.name,
                        "nodes_to_reconfigure": list(plan.nodes_to_reconfigure),
                        "demand_met_ratio": plan.demand_met_ratio,
                        "changes": [
                            {
                                "node": g.node,
                                "gpu": g.index,
                                "from": g.current.describe(),
                                "to": g.target.describe(),
                                "reason": g.reason,
                            }
                            for g in plan.changed
                        ],
                    },
                    indent=2,
                )
            )
            return
        console = Console(file=cast(IO[str], self.stdout), width=120)
        demand = Table(title=f"MIG demand on {cluster.name}")
        for column in ("product", "profile", "wanted", "planned", "unmet", "reason"):
            demand.add_column(column)
        for o in plan.outcomes:
            demand.add_row(
                o.product,
                o.profile or "whole GPU",
                str(o.wanted),
                str(o.planned),
                str(o.unmet),
                o.reason,
            )
        console.print(demand)
        if not plan.changed:
            console.print("No GPU needs a new layout.")
            return
        changes = Table(title="GPUs to reconfigure")
        for column in ("node", "GPU", "from", "to", "why"):
            changes.add_column(column)
        for g in plan.changed:
            changes.add_row(
                g.node, str(g.index), g.current.describe(), g.target.describe(), g.reason
            )
        console.print(changes)
