from __future__ import annotations

import logging

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

logger = logging.getLogger(__name__)


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = _("Metering, budgets and chargeback")

    def ready(self) -> None:
        # Lower apps ask; billing answers through their registries (docs/architecture.md#registries).
        from billing import demo, metrics, portal
        from billing.budgeting.gate import budget_gate_for_cluster
        from billing.usage import cluster_health
        from scheduler_bridge.demo.clock import register_demo_meter
        from scheduler_bridge.portal import register_cluster_health
        from scheduler_bridge.workloads.budget_gate import register_budget_gate
        from tenants.deletion import register_deletion_blocker
        from tenants.demo import register_demo_seeder
        from tenants.portal.views import register_tenant_panel

        register_budget_gate(budget_gate_for_cluster)
        metrics.register_gauges()
        _track_history()
        register_cluster_health(cluster_health.usage_collection_health)
        register_deletion_blocker(demo.billing_deletion_blocker)
        register_demo_seeder(demo.seed_demo_billing)
        register_demo_meter(demo.demo_usage_meter)
        # The panel checks at render time that the billing pages are routed.
        register_tenant_panel(portal.budget_panel)
        if _portal_routed():
            register_nav_entry()


def _track_history() -> None:
    """Tenants' billing settings are recorded as they change (billing.charging.history)."""
    from django.db.models.signals import post_delete, post_save

    from billing.charging import history
    from billing.models import TenantBillingSettings

    post_save.connect(
        history.track_billing_settings, sender=TenantBillingSettings, dispatch_uid="billing-history"
    )
    post_delete.connect(
        history.track_billing_settings_deleted,
        sender=TenantBillingSettings,
        dispatch_uid="billing-history-delete",
    )


def register_nav_entry() -> None:
    """Put "Billing" in the navigation of everyone who reads money, and the finance pages
    (billing periods, budgets, rate cards) in that of those who read them."""
    from tenants import access
    from tenants.context_processors import register_nav_entry as register
    from tenants.models import Role

    register("billing-home", _("Billing"), access.BILLING_READ_ROLES)
    register("billing-periods", _("Billing periods"), access.BILLING_READ_ROLES)
    register("billing-budgets", _("Budgets"), access.BILLING_READ_ROLES)
    register("billing-rate-cards", _("Rate cards"), frozenset({Role.FINANCE}))
    register("billing-whatif", _("What-if"), frozenset())  # platform admins only


def _portal_routed() -> bool:
    """Whether the project's URLconf routes the billing pages (config.urls includes
    billing.portal). Until it does, a navigation entry would break every page."""
    from django.urls import NoReverseMatch, reverse

    try:
        reverse("billing-home")
    except NoReverseMatch:
        return False
    except Exception:  # a URLconf that cannot load yet must not break start-up
        logger.debug("billing: URLconf not loadable at start-up", exc_info=True)
        return False
    return True
