"""Portal parts of the scheduler bridge: the quota panel of a tenant page and the quota
requests leads send from it, the inbox where admins decide them, the cluster pages
(capacity vs guarantees, nodes with their GPUs and MIG slices, sync health) and the
priority classes."""

from __future__ import annotations

from django.urls import path

from scheduler_bridge.portal.clusters import cluster_detail, cluster_list, priority_classes
from scheduler_bridge.portal.health import register_cluster_health
from scheduler_bridge.portal.inbox import (
    pending_count,
    quota_history,
    quota_inbox,
    quota_request_decide,
)
from scheduler_bridge.portal.quota_requests import (
    quota_deletion_blocker,
    quota_panel,
    quota_request_add,
    quota_request_withdraw,
)

__all__ = [
    "pending_count",
    "quota_deletion_blocker",
    "quota_panel",
    "register_cluster_health",
    "urlpatterns",
]

urlpatterns = [
    path("clusters/", cluster_list, name="portal-clusters"),
    path("clusters/<slug:name>/", cluster_detail, name="portal-cluster"),
    path("priority-classes/", priority_classes, name="portal-priority-classes"),
    path(
        "tenants/<slug:slug>/quota-requests/add/",
        quota_request_add,
        name="portal-quota-request-add",
    ),
    path("quota-requests/", quota_inbox, name="portal-quota-requests"),
    path("quota-requests/decided/", quota_history, name="portal-quota-request-history"),
    path(
        "quota-requests/<int:request_id>/withdraw/",
        quota_request_withdraw,
        name="portal-quota-request-withdraw",
    ),
    path(
        "quota-requests/<int:request_id>/<str:decision>/",
        quota_request_decide,
        name="portal-quota-request-decide",
    ),
]
