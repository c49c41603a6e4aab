"""The what-if page's plotly charts (plotly.js is served from our static files)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from billing.reporting.charts import CATEGORY_AXIS, LAYOUT, VALUE_AXIS, _dict_html
from billing.whatif.records import SavingsResult
from scheduler_bridge.replay.policies import ReplayFigures

HOUR_S = 3600.0


def tenant_waits_chart(today: ReplayFigures, proposed: ReplayFigures) -> str:
    """Mean and p95 wait per tenant (hours), today against the proposal."""
    tenants = sorted(set(today.tenant_waits) | set(proposed.tenant_waits))

    def hours(figures: ReplayFigures, attr: str) -> list[float]:
        return [
            round(getattr(figures.tenant_waits[t], attr) / HOUR_S, 3)
            if t in figures.tenant_waits
            else 0.0
            for t in tenants
        ]

    data: list[dict[str, Any]] = [
        {"type": "bar", "name": _("Mean, today"), "x": tenants, "y": hours(today, "mean_s")},
        {"type": "bar", "name": _("Mean, proposed"), "x": tenants, "y": hours(proposed, "mean_s")},
        {"type": "bar", "name": _("p95, today"), "x": tenants, "y": hours(today, "p95_s")},
        {"type": "bar", "name": _("p95, proposed"), "x": tenants, "y": hours(proposed, "p95_s")},
    ]
    layout = {
        **LAYOUT,
        "title": {"text": _("Wait per tenant (hours)")},
        "barmode": "group",
        "xaxis": CATEGORY_AXIS,
        "yaxis": {**VALUE_AXIS, "title": {"text": _("hours")}},
    }
    return _dict_html(data, layout, "whatif-waits-chart")


def savings_chart(savings: SavingsResult) -> str:
    """The p95 wait of static slices at each capacity tried, and the target's."""
    points = sorted(savings.points, key=lambda p: p.capacity_gpus)
    capacities = [p.capacity_gpus for p in points]
    target = round(savings.target.wait_p95_s / HOUR_S, 3)
    span = [min(capacities, default=0), max(capacities, default=0)]
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": _("Static slices, p95 wait"),
            "x": capacities,
            "y": [round(p.wait_p95_s / HOUR_S, 3) for p in points],
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": _("Target: %(policy)s at today's capacity") % {"policy": savings.policy},
            "x": span,
            "y": [target, target],
            "line": {"dash": "dash"},
        },
    ]
    layout = {
        **LAYOUT,
        "title": {"text": _("p95 wait against capacity")},
        "xaxis": {**VALUE_AXIS, "title": {"text": _("GPUs")}},
        "yaxis": {**VALUE_AXIS, "title": {"text": _("hours")}},
    }
    return _dict_html(data, layout, "whatif-savings-chart")
