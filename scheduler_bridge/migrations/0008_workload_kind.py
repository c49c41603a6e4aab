from django.db import migrations, models


def jobs_are_jobs(apps, schema_editor):
    Workload = apps.get_model("scheduler_bridge", "Workload")
    Workload.objects.filter(source="job").update(kind="Job")


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_bridge", "0007_workload_released_pods"),
    ]

    operations = [
        migrations.AddField(
            model_name="workload",
            name="kind",
            field=models.CharField(blank=True, max_length=32),
        ),
        migrations.RunPython(jobs_are_jobs, migrations.RunPython.noop),
        migrations.AddField(
            model_name="cluster",
            name="workload_kinds",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
        migrations.AlterField(
            model_name="workload",
            name="source",
            field=models.CharField(
                choices=[("api", "API"), ("job", "Kubernetes workload object")],
                default="api",
                max_length=8,
            ),
        ),
    ]
