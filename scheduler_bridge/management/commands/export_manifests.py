"""`manage.py export_manifests --cluster NAME --out DIR`: every object Tidegate would apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_bridge.gateways import GatewayError
from scheduler_bridge.management.commands._cluster import cluster_named
from scheduler_bridge.manifests_export import cluster_manifests


class Command(BaseCommand):
    help = (
        "Write the ResourceQuotas, node label patches and MIG ConfigMap Tidegate would apply "
        "to a cluster as YAML files, for review or `kubectl apply -f DIR`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--out", required=True, type=Path, help="directory to write into")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = cluster_named(options["cluster"])
        out: Path = options["out"]
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CommandError(f"cannot create {out}: {error.strerror}") from error
        try:
            files = cluster_manifests(cluster)
        except GatewayError as error:
            raise CommandError(f"cannot read cluster {cluster.name}: {error}") from error
        for relative, document in files.items():
            path = out / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(document, sort_keys=False))
        self.stdout.write(self.style.SUCCESS(f"wrote {len(files)} file(s) to {out}"))
