from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0005_effective_dated_history"),
    ]

    operations = [
        migrations.AddField(
            model_name="billingpolicy",
            name="allocation_idle",
            field=models.CharField(
                choices=[
                    ("even", "Evenly over the groups that used the flavour"),
                    ("guarantee", "By guarantee"),
                    ("usage", "By usage"),
                ],
                default="usage",
                max_length=9,
            ),
        ),
    ]
