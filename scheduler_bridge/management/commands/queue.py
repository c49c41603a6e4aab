"""`manage.py queue --cluster NAME`: the admission queue, like `squeue`."""

from __future__ import annotations

import json
from datetime import datetime
from typing import IO, Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from rich.console import Console
from rich.table import Table

from scheduler_bridge.admission.reasons import duration
from scheduler_bridge.management.commands._cluster import cluster_named
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.records import placement_nodes
from tenants.models import Tenant


def request_text(workload: Workload) -> str:
    parts = []
    for ps in workload.pod_set_records:
        parts.append(f"{ps.count}x{ps.gpus_per_pod} {'|'.join(ps.flavours)}")
    return ", ".join(parts)


class Command(BaseCommand):
    help = (
        "Print the admission queue of a cluster: position, tenant, request, priority, age, "
        "state and where it runs or why it waits (like squeue)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--tenant", help="only this tenant's work and its sub-teams'")
        parser.add_argument("--all", action="store_true", help="include finished work")
        parser.add_argument("--json", action="store_true", help="one JSON object per line")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = cluster_named(options["cluster"])
        rows = Workload.objects.filter(cluster=cluster).select_related(
            "tenant", "flavour", "priority_class"
        )
        if not options["all"]:
            rows = rows.filter(state__in=Workload.OPEN_STATES)
        if options["tenant"]:
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"No tenant {options['tenant']!r}; give a tenant's slug.")
            rows = rows.filter(tenant__path__startswith=tenant.path)
        rows = rows.order_by(*Workload.QUEUE_ORDER)
        now = timezone.now()
        if options["json"]:
            for workload in rows:
                self.stdout.write(json.dumps(self._record(workload, now)))
            return
        table = Table(title=f"Queue of {cluster.name}", expand=False)
        for column in ("ID", "POS", "TENANT", "NAME", "REQUEST", "PRIO", "AGE", "STATE"):
            table.add_column(column, overflow="fold")
        table.add_column("WHERE / WHY", overflow="fold")
        count = 0
        for workload in rows:
            count += 1
            record = self._record(workload, now)
            table.add_row(
                str(workload.pk),
                str(workload.queue_position or ""),
                workload.tenant.slug,
                workload.name,
                record["request"],
                str(workload.priority),
                duration(record["age_s"]),
                workload.state,
                record["where"] or record["reason"],
            )
        console = Console(file=cast(IO[str], self.stdout), width=160)
        if count:
            console.print(table)
        else:
            console.print(f"The queue of {cluster.name} is empty.")

    @staticmethod
    def _record(workload: Workload, now: datetime) -> dict[str, Any]:
        where = ""
        if workload.state in Workload.ACTIVE_STATES:
            nodes = placement_nodes(workload.placements)
            flavour = workload.flavour.name if workload.flavour else ""
            where = f"{flavour} on {', '.join(nodes)}"
        return {
            "id": workload.pk,
            "position": workload.queue_position,
            "tenant": workload.tenant.slug,
            "name": workload.name,
            "request": request_text(workload),
            "priority_class": workload.priority_class.name if workload.priority_class else None,
            "priority": workload.priority,
            "age_s": round((now - workload.submitted_at).total_seconds()),
            "state": workload.state,
            "reason_code": workload.reason_code,
            "reason": workload.reason,
            "where": where,
            "preemptions": workload.preemptions,
        }
