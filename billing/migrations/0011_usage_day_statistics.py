"""Statistics on how many (tenant, flavour, priority class, UTC day) the ledger holds.

Pricing sums the ledger per UTC day first (billing.usage.usage_sums); without these the planner
takes every hour for a distinct day and sorts millions of rows on disk instead of hashing
them into a few thousand sums. PostgreSQL only: the expression must read exactly as
billing.usage.usage_sums.UtcDay writes it.
"""

from typing import Any

from django.db import migrations

CREATE = (
    "CREATE STATISTICS IF NOT EXISTS usage_day_groups (ndistinct) "
    "ON tenant_id, flavour_id, priority_class, "
    "(date_bin('1 day'::interval, interval_start, '2000-01-01 00:00:00+00'::timestamptz)) "
    "FROM billing_usagerecord"
)
DROP = "DROP STATISTICS IF EXISTS usage_day_groups"


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0010_whatif_runs"),
    ]

    operations = [migrations.RunPython(create, drop)]
