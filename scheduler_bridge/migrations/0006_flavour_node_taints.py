"""Flavour tolerations become an admin's choice: inventory records the nodes' taints in
``node_taints`` and no longer writes ``tolerations``. Tolerations inventory wrote for
node-condition taints (cordoned, unreachable, ...) are dropped; the rest are kept so
that admission keeps placing pods where it did."""

from django.db import migrations, models

from scheduler_bridge.gateways.tolerations import NODE_CONDITION_TAINTS


def drop_node_condition_tolerations(apps, schema_editor):
    Flavour = apps.get_model("scheduler_bridge", "Flavour")
    for flavour in Flavour.objects.all():
        kept = [t for t in flavour.tolerations if t.get("key") not in NODE_CONDITION_TAINTS]
        if kept != flavour.tolerations:
            flavour.tolerations = kept
            flavour.save(update_fields=["tolerations"])


class Migration(migrations.Migration):
    dependencies = [("scheduler_bridge", "0005_workload_held_placements")]

    operations = [
        migrations.AddField(
            model_name="flavour",
            name="node_taints",
            field=models.JSONField(default=list),
        ),
        migrations.RunPython(drop_node_condition_tolerations, migrations.RunPython.noop),
    ]
