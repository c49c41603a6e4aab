"""``manage.py create_api_token <username> --name ci``: a new API token for a user, printed
once (only its hash is kept; it expires after TIDEGATE_API_TOKEN_TTL days)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.tokens import token_create


class Command(BaseCommand):
    help = "Create an API token for a user and print its secret (shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="command line", help="what will use the token")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None or not user.is_active:
            raise CommandError(f"No active user named {options['username']!r}.")
        token, secret = token_create(user=user, name=options["name"])
        self.stdout.write(secret)
        self.stderr.write(f"expires {token.expiry:%Y-%m-%d %H:%M} UTC; keep it secret")
