"""API tokens stored as hashes (django-rest-knox) with an expiry, replacing DRF's
clear-text tokens: each existing token becomes a hashed one named "migrated token" that
still works until TIDEGATE_API_TOKEN_TTL days from now, then the clear-text table is
dropped (docs/operations.md#security)."""

from datetime import timedelta
from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.utils import timezone

CLEAR_TEXT_TABLE = "authtoken_token"


def hash_clear_text_tokens(apps: Any, schema_editor: Any) -> None:
    from knox.crypto import hash_token
    from knox.settings import CONSTANTS

    connection = schema_editor.connection
    if CLEAR_TEXT_TABLE not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("tenants", "ApiToken")
    expiry = timezone.now() + timedelta(days=int(settings.TIDEGATE_API_TOKEN_TTL))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, user_id FROM {CLEAR_TEXT_TABLE}")
        rows = cursor.fetchall()
        ApiToken.objects.bulk_create(
            ApiToken(
                user_id=user_id,
                digest=hash_token(key),
                token_key=key[: CONSTANTS.TOKEN_KEY_LENGTH],
                name="migrated token",
                expiry=expiry,
            )
            for key, user_id in rows
        )
        cursor.execute(f"DROP TABLE {CLEAR_TEXT_TABLE}")
        cursor.execute("DELETE FROM django_migrations WHERE app = 'authtoken'")


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0005_outbox_and_idempotency_keys'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('token_key', models.CharField(db_index=True, max_length=25)),
                ('created', models.DateTimeField(auto_now_add=True)),
                ('expiry', models.DateTimeField(blank=True, null=True)),
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('digest', models.CharField(max_length=128, unique=True)),
                ('name', models.CharField(max_length=100, verbose_name='name')),
                ('last_used_at', models.DateTimeField(blank=True, null=True, verbose_name='last used')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='auth_token_set', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'API token',
                'verbose_name_plural': 'API tokens',
                'ordering': ['-created', '-id'],
            },
        ),
        migrations.RunPython(hash_clear_text_tokens, migrations.RunPython.noop),
    ]
