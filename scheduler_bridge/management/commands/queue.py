"""`manage.py queue --cluster NAME`: the admission queue, like `squeue`."""

from __future__ import annotations

from typing import IO, Any, cast

from django.core.management.base import BaseCommand, CommandParser
from rich.console import Console
from rich.table import Table

from scheduler_bridge.management.commands._cluster import cluster_named
from scheduler_bridge.workloads.models import Workload


def request_text(workload: Workload) -> str:
    parts = []
    for ps in workload.pod_sets:
        flavours = "|".join(ps["flavours"])
        parts.append(f"{ps['count']}x{ps['gpus_per_pod']} {flavours}")
    return ", ".join(parts)


class Command(BaseCommand):
    help = "Print the admission queue of a cluster: position, tenant, request, state, reason."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--tenant", help="only this tenant's work")
        parser.add_argument("--all", action="store_true", help="include finished work")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = cluster_named(options["cluster"])
        rows = Workload.objects.filter(cluster=cluster).select_related("tenant", "flavour")
        if not options["all"]:
            rows = rows.filter(state__in=Workload.OPEN_STATES)
        if options["tenant"]:
            rows = rows.filter(tenant__slug=options["tenant"])
        rows = rows.order_by("state", "queue_position", "submitted_at", "pk")
        table = Table(title=f"Queue of {cluster.name}", expand=False)
        for column in ("ID", "POS", "TENANT", "NAME", "REQUEST", "STATE", "WHERE / WHY"):
            table.add_column(column, overflow="fold")
        count = 0
        for workload in rows:
            count += 1
            where = workload.reason
            if workload.state in Workload.ACTIVE_STATES:
                nodes = sorted({p["node"] for p in workload.placements})
                where = f"{workload.flavour.name if workload.flavour else ''} on {', '.join(nodes)}"
            table.add_row(
                str(workload.pk),
                str(workload.queue_position or ""),
                workload.tenant.slug,
                workload.name,
                request_text(workload),
                workload.state,
                where,
            )
        console = Console(file=cast(IO[str], self.stdout), width=160)
        if count:
            console.print(table)
        else:
            console.print(f"The queue of {cluster.name} is empty.")
