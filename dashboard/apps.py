from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = _("Team lead dashboard")

    def ready(self) -> None:
        from tenants.context_processors import register_nav_entry

        # everyone signed in sees some tenant's dashboard (its subtree, no money for members)
        register_nav_entry("dashboard-home", _("Dashboard"))
