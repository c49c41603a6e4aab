"""`manage.py seed_demo`: load the demo data (idempotent) and print one login per role."""

from typing import Any

from django.core.management.base import BaseCommand

from tenants.demo import seed_demo


class Command(BaseCommand):
    help = "Load Tidegate's demo data (safe to run again) and print the demo logins."

    def handle(self, *args: Any, **options: Any) -> None:
        result = seed_demo()
        self.stdout.write(self.style.SUCCESS("Demo data ready. Log in at http://127.0.0.1:8000/"))
        width = max(len(login.username) for login in result.logins)
        for login in result.logins:
            self.stdout.write(
                f"  {login.username.ljust(width)}  password: {login.password}  "
                f"({login.description})"
            )
