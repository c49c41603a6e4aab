from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_bridge", "0011_workload_reason_args"),
    ]

    operations = [
        migrations.AddField(
            model_name="workload",
            name="labels",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="workload",
            name="annotations",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
