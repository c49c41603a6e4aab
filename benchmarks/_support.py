"""Shared set-up for benchmarks that touch the database: a throw-away PostgreSQL database
(created, migrated, dropped afterwards), progress on stderr, one JSON line on stdout."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@contextmanager
def bench_database(name: str) -> Iterator[None]:
    """Django on a fresh database `test_tidegate_bench_<name>`, dropped on exit."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    import django

    django.setup()
    from django.db import connections
    from django.test.utils import setup_databases, teardown_databases

    connections["default"].settings_dict["TEST"]["NAME"] = f"test_tidegate_bench_{name}"
    config = setup_databases(verbosity=0, interactive=False, keepdb=False)
    try:
        yield
    finally:
        teardown_databases(config, verbosity=0)


def emit(**figures: Any) -> None:
    print(json.dumps(figures), flush=True)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def teams_under_one_org(count: int, *, description: str = "tenants") -> list[Any]:
    """An organisation ``org`` with ``count`` teams ``team-0`` ... below it (with their
    materialised paths), created with a progress bar on stderr."""
    from rich.console import Console
    from rich.progress import track

    from tenants.models import Tenant

    org = Tenant.objects.create(slug="org", name="Org", path="/0/")
    org.path = f"/{org.pk}/"
    org.save()
    teams = []
    for t in track(range(count), description=description, console=Console(stderr=True)):
        team = Tenant.objects.create(
            slug=f"team-{t}", name=f"Team {t}", parent=org, depth=1, path=""
        )
        team.path = f"{org.path}{team.pk}/"
        team.save(update_fields=["path"])
        teams.append(team)
    return teams
