"""Billing's tunables, with defaults; override any of them in settings.TIDEGATE_BILLING."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Hours are collected only once they ended this long ago, so that Prometheus has
    # scraped (and the exporter reported) the last minutes of the hour.
    "COLLECT_DELAY_MINUTES": 5,
    # How far back the very first collection of a cluster reaches.
    "INITIAL_LOOKBACK_HOURS": 24,
    # One collection run writes at most this many hours, then re-queues itself.
    "MAX_HOURS_PER_RUN": 48,
    # Seconds to wait for Prometheus before counting it as down.
    "PROMETHEUS_TIMEOUT_S": 10.0,
    # After Prometheus has been down this long, hours older than this are written
    # without busy data (allocation must not stall forever); younger hours wait.
    "PROMETHEUS_GIVE_UP_HOURS": 24,
    # Label names the DCGM exporter uses for the pod and namespace (Kubernetes mode).
    "POD_LABEL": "pod",
    "NAMESPACE_LABEL": "namespace",
    # An allocation is an idle-GPU finding when engine activity stays under this ratio
    # for a whole hour.
    "IDLE_THRESHOLD": "0.05",
    # Tenants written per transaction when a period closes.
    "CLOSE_CHUNK": 200,
    # PostgreSQL memory per process for summing the ledger per day (pricing, closes): the
    # day sums of a large ledger are hashed in memory instead of spilling to disk.
    "USAGE_SUM_WORK_MEM": "64MB",
    # Seconds a close's lease lasts without renewal: a closer renews it at every step
    # (pricing, each chunk of statements); once it expired (the closer died), the next
    # close resumes the work. Longer than the slowest step (pricing the period).
    "CLOSE_LEASE_SECONDS": 30,
    # Hours of metered spend the budget forecast averages.
    "FORECAST_WINDOW_HOURS": 72,
    # Close the previous month automatically this many days after it ended (None: never;
    # finance closes periods by hand).
    "AUTO_CLOSE_AFTER_DAYS": None,
    # Currency of statements when no rate card says otherwise.
    "DEFAULT_CURRENCY": "USD",
    # Who issues the statement PDFs: name, address lines, contact, tax id (as printed).
    "ISSUER": {"name": "Tidegate GPU platform", "address": [], "contact": "", "tax_id": ""},
    # Payment terms printed on chargeback statement PDFs (lines; empty: a generic line).
    "PAYMENT_TERMS": "",
}


def billing_setting(name: str) -> Any:
    """The value of one billing setting (settings.TIDEGATE_BILLING first, then the default)."""
    overrides: dict[str, Any] = getattr(settings, "TIDEGATE_BILLING", {}) or {}
    return overrides.get(name, DEFAULTS[name])
