"""The backup and restore of docs/operations.md, done for real: the ledger and the
statements of a closed period come back from ``pg_dump`` into a fresh database with every
total to the cent."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from billing.models import Statement, UsageRecord
from billing.statements.periods import period_close
from tests.billing.conftest import GpuCluster
from tests.billing.test_periods import february
from tests.conftest import Cast

# What finance checks after a restore: each statement's total and line sum, and the ledger.
STATEMENTS = """
    SELECT s.tenant_slug, s.revision, s.total::text, s.currency,
           (SELECT sum(l.amount)::text FROM billing_statementline l WHERE l.statement_id = s.id)
    FROM billing_statement s ORDER BY s.tenant_slug, s.revision
"""
LEDGER = "SELECT count(*), sum(gpu_seconds_allocated)::text FROM billing_usagerecord"


def _dsn(database: str) -> str:
    settings = connection.settings_dict
    return (
        f"host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432} "
        f"user={settings['USER']} dbname={database}"
    )


def _run(*command: str) -> None:
    settings = connection.settings_dict
    env = {"PGHOST": settings["HOST"] or "127.0.0.1", "PGPORT": str(settings["PORT"] or 5432)}
    env |= {"PGUSER": settings["USER"], "PGPASSWORD": settings["PASSWORD"] or ""}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def scratch_database() -> Iterator[str]:
    """An empty database on the same server, with a name nobody else uses; dropped after."""
    name = f"tidegate_restore_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_dsn("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(_dsn("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _read(database: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(_dsn(database)) as conn:
        return list(conn.execute(query).fetchall())


def test_a_dump_restores_the_ledger_and_statements_to_the_cent(
    transactional_db: Any, cast: Cast, gpu: GpuCluster, scratch_database: str, tmp_path: Path
) -> None:
    period_close(actor=cast.platform_admin, period=february(cast, gpu))
    assert Statement.objects.count() == 6 and UsageRecord.objects.exists()
    source = connection.settings_dict["NAME"]
    dump = tmp_path / "tidegate.dump"

    # the commands of docs/operations.md, "Backing up" and "Restoring"
    _run("pg_dump", "--format=custom", "--no-owner", "--file", str(dump), source)
    _run("pg_restore", "--no-owner", "--exit-on-error", "--dbname", scratch_database, str(dump))

    assert _read(scratch_database, STATEMENTS) == _read(source, STATEMENTS)
    assert _read(scratch_database, LEDGER) == _read(source, LEDGER)
    restored = dict((row[0], row[2]) for row in _read(scratch_database, STATEMENTS))
    assert restored["vision"] == "48.86" and restored["speech"] == "7.50"
    # the restored database knows every migration: `migrate` has nothing left to do
    migrations = "SELECT app, name FROM django_migrations ORDER BY app, name"
    assert _read(scratch_database, migrations) == _read(source, migrations)
