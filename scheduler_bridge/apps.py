from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SchedulerBridgeConfig(AppConfig):
    name = "scheduler_bridge"
    verbose_name = _("GPU clusters, quotas and admission")

    def ready(self) -> None:
        # Lower apps ask; this app answers through their registries (docs/architecture.md#registries).
        from django.db.models.signals import post_delete, post_save

        from scheduler_bridge import bindings, history, metrics, portal
        from scheduler_bridge.demo import seed as demo
        from scheduler_bridge.demo.clock import demo_history_jobs
        from scheduler_bridge.inventory.models import Flavour
        from scheduler_bridge.portal import queue as queue_portal
        from scheduler_bridge.quotas.models import Quota
        from scheduler_bridge.workloads.history_trace import register_history_source
        from tenants.binding_rules import register_binding_check, register_binding_listener
        from tenants.context_processors import register_nav_entry
        from tenants.deletion import register_deletion_blocker
        from tenants.demo import register_demo_seeder
        from tenants.models import Role
        from tenants.portal.views import register_tenant_panel

        metrics.register_gauges()
        register_history_source(demo_history_jobs)
        register_deletion_blocker(portal.quota_deletion_blocker)
        register_demo_seeder(demo.seed_demo_cluster)
        register_tenant_panel(portal.quota_panel)
        register_tenant_panel(queue_portal.queue_panel)
        register_deletion_blocker(queue_portal.workload_deletion_blocker)
        register_nav_entry("portal-clusters", _("Clusters"), None)
        register_nav_entry(
            "portal-quota-requests",
            _("Quota requests"),
            frozenset({Role.ADMIN}),
            count=portal.pending_count,
        )
        register_binding_check(bindings.binding_check)
        register_binding_listener(bindings.sync_quotas_of)
        post_save.connect(history.track_quota, sender=Quota, dispatch_uid="quota-history")
        post_delete.connect(
            history.track_quota_deleted, sender=Quota, dispatch_uid="quota-history-delete"
        )
        post_save.connect(history.track_capacity, sender=Flavour, dispatch_uid="capacity-history")
