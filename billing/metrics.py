"""What billing tells Prometheus: how far behind usage collection is, and budget alerts
fired (docs/operations.md#metrics). Not to be confused with billing.usage.prometheus, which
reads GPU usage *from* a cluster's Prometheus."""

from __future__ import annotations

from django.utils import timezone
from prometheus_client import Counter

from billing.models import CollectorWatermark
from tenants.metrics import register_gauge

BUDGET_ALERTS = Counter(
    "tidegate_budget_alerts_total",
    "Budget thresholds crossed (each fires once per budget period), by threshold percent.",
    ["threshold"],
)


def budget_alert_counted(threshold: int) -> None:
    BUDGET_ALERTS.labels(str(threshold)).inc()


def collector_lag() -> dict[tuple[str, ...], float]:
    """Seconds between now and the end of the last hour collected into the ledger, per
    cluster. Hours are collected once complete (plus COLLECT_DELAY_MINUTES), so a
    healthy collector stays between that delay and an hour and a quarter behind."""
    now = timezone.now()
    return {
        (name,): (now - until).total_seconds()
        for name, until in CollectorWatermark.objects.values_list(
            "cluster__name", "collected_until"
        )
    }


def register_gauges() -> None:
    """Serve the collector lag on /metrics (called once, from the app's ready())."""
    register_gauge(
        "tidegate_collector_lag_seconds",
        "How far behind now usage collection into the ledger is, per cluster.",
        collector_lag,
        labels=("cluster",),
    )
