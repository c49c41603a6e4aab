"""Plotly charts of the billing pages, as embeddable divs (plotly.js is served from our
static files by the base layout's pages). Amounts become floats here only to be drawn.

The charts drawn on every refresh of a page (the budget burn, spend per cost centre) are
plain dicts in plotly's schema with plotly's default template, written out without
plotly.py's validation, which costs far more than the chart itself."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from django.utils.translation import gettext as _

from tenants.plotly_div import plotly_div

LAYOUT: dict[str, Any] = {
    "height": 340,
    "margin": {"l": 60, "r": 20, "t": 50, "b": 40},
}
# Long tenant and cost centre names: tilt the labels and let plotly make room for them.
CATEGORY_AXIS: dict[str, Any] = {"automargin": True, "tickangle": -35}
VALUE_AXIS: dict[str, Any] = {"automargin": True, "rangemode": "tozero"}


def _html(figure: go.Figure, div_id: str) -> str:
    return str(plotly_div(figure, div_id))


_TEMPLATE: dict[str, Any] = {}


def _template() -> dict[str, Any]:
    """plotly's default template as a dict (what a validated figure would carry)."""
    if not _TEMPLATE:
        _TEMPLATE.update(pio.templates[pio.templates.default].to_plotly_json())
    return _TEMPLATE


def _dict_html(data: list[dict[str, Any]], layout: dict[str, Any], div_id: str) -> str:
    figure = {"data": data, "layout": {"template": _template(), **layout}}
    return str(plotly_div(figure, div_id))


def spend_by_cost_center(groups: Sequence[dict[str, Any]], currency: str, title: str) -> str:
    """Bars of chargeback and showback amounts per cost centre."""
    names = [g["key"] for g in groups]
    data = [
        {
            "type": "bar",
            "name": _("Chargeback"),
            "x": names,
            "y": [float(g["chargeback"]) for g in groups],
        },
        {
            "type": "bar",
            "name": _("Showback"),
            "x": names,
            "y": [float(g["showback"]) for g in groups],
        },
    ]
    layout = {
        "barmode": "stack",
        "title": {"text": title, "x": 0.01, "xanchor": "left"},
        **LAYOUT,
        "xaxis": dict(CATEGORY_AXIS),
        "yaxis": {"title": {"text": currency}, **VALUE_AXIS},
    }
    return _dict_html(data, layout, "spend-by-cost-centre-chart")


def burn(
    days: Sequence[date],
    daily: Sequence[Decimal],
    *,
    budget: Decimal | None,
    currency: str,
    forecast_at: datetime | None,
    title: str,
    projection: tuple[datetime, Decimal, datetime, Decimal] | None = None,
) -> str:
    """Daily spend (bars), cumulative spend (line), the budget, its forecast exhaustion and
    ``projection`` ((now, spent), (then, spent at the burn rate)): the line the forecast
    follows, so the chart and the stated rate agree."""
    cumulative = []
    running = Decimal(0)
    for amount in daily:
        running += amount
        cumulative.append(float(running))
    x = [day.isoformat() for day in days]
    data: list[dict[str, Any]] = [
        {"type": "bar", "name": _("Spend per day"), "x": x, "y": [float(a) for a in daily]},
        {
            "type": "scatter",
            "name": _("Spent so far"),
            "x": x,
            "y": cumulative,
            "mode": "lines+markers",
        },
    ]
    if projection is not None:
        start, spent, end, projected = projection
        data.append(
            {
                "type": "scatter",
                "name": _("At this burn rate"),
                "x": [start.isoformat(), end.isoformat()],
                "y": [float(spent), float(projected)],
                "mode": "lines",
                "line": {"dash": "dot", "color": "darkorange"},
            }
        )
    # The budget and the forecast as lines across the plot, each with its label (what
    # plotly's add_hline / add_vline write, without their cost).
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    if budget is not None:
        shapes.append(
            {
                "type": "line",
                "xref": "x domain",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": float(budget),
                "y1": float(budget),
                "line": {"dash": "dash", "color": "firebrick"},
            }
        )
        annotations.append(
            {
                "text": _("Budget"),
                "showarrow": False,
                "xref": "x domain",
                "x": 0,
                "xanchor": "left",
                "yref": "y",
                "y": float(budget),
                "yanchor": "bottom",
            }
        )
    if forecast_at is not None:
        moment = forecast_at.timestamp() * 1000
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "x0": moment,
                "x1": moment,
                "yref": "y domain",
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dot", "color": "darkorange"},
            }
        )
        annotations.append(
            {
                "text": _("Forecast: exhausted"),
                "showarrow": False,
                "xref": "x",
                "x": moment,
                "xanchor": "left",
                "yref": "y domain",
                "y": 0,
                "yanchor": "bottom",
            }
        )
    layout = {
        "title": {"text": title, "x": 0.01, "xanchor": "left"},
        **LAYOUT,
        **({"shapes": shapes, "annotations": annotations} if shapes else {}),
        "xaxis": {"automargin": True, "tickangle": -35, "tickformat": "%m-%d"},
        "yaxis": {"title": {"text": currency}, **VALUE_AXIS},
    }
    return _dict_html(data, layout, "budget-burn")


def trend(
    periods: Sequence[str],
    chargeback: Sequence[Decimal],
    showback: Sequence[Decimal],
    *,
    currency: str,
    title: str,
) -> str:
    """Month over month: chargeback and showback per period, stacked."""
    figure = go.Figure(
        data=[
            go.Bar(name=_("Chargeback"), x=list(periods), y=[float(a) for a in chargeback]),
            go.Bar(name=_("Showback"), x=list(periods), y=[float(a) for a in showback]),
        ]
    )
    figure.update_layout(
        barmode="stack",
        title={"text": title, "x": 0.01, "xanchor": "left"},
        yaxis_title=currency,
        **LAYOUT,
    )
    figure.update_xaxes(type="category", **CATEGORY_AXIS)
    figure.update_yaxes(**VALUE_AXIS)
    return _html(figure, "spend-trend")


def budget_heatmap(
    tenants: Sequence[str],
    days: Sequence[date],
    shares: Sequence[Sequence[float | None]],
    title: str,
    x_title: str = "",
) -> str:
    """Tenants x days, coloured by the share of the budget spent by the end of each day
    (percent; 100 = the budget is used up)."""
    figure = go.Figure(
        data=[
            go.Heatmap(
                z=[list(row) for row in shares],
                x=[f"{day:%d}" for day in days],
                y=list(tenants),
                zmin=0,
                zmax=max([100.0, *(v for row in shares for v in row if v is not None)]),
                colorscale=[[0, "#f7fbff"], [0.5, "#fdae61"], [1, "#a50026"]],
                colorbar={"title": {"text": _("Budget used (per cent)")}},
                hovertemplate=_("%(tenant)s, %(day)s: %(share)s %% of the budget spent")
                % {"tenant": "%{y}", "day": "%{x}", "share": "%{z:.0f}"}
                + "<extra></extra>",
            )
        ]
    )
    layout = LAYOUT | {"height": max(260, 90 + 34 * len(tenants))}
    figure.update_layout(title={"text": title, "x": 0.01, "xanchor": "left"}, **layout)
    figure.update_xaxes(automargin=True, type="category", title_text=x_title)
    figure.update_yaxes(automargin=True, autorange="reversed", type="category")
    return _html(figure, "budget-heatmap")


def allocation_bars(
    labels: Sequence[str],
    costs: Sequence[Decimal],
    idle_costs: Sequence[Decimal] | None,
    *,
    currency: str,
    title: str,
) -> str:
    """Stacked bars per allocation group: its cost, and its share of idle capacity when
    the reader sees idle capacity."""
    data: list[dict[str, Any]] = [
        {"type": "bar", "name": _("Cost"), "x": list(labels), "y": [float(c) for c in costs]}
    ]
    if idle_costs is not None:
        data.append(
            {
                "type": "bar",
                "name": _("Idle capacity"),
                "x": list(labels),
                "y": [float(c) for c in idle_costs],
            }
        )
    layout = {
        "barmode": "stack",
        "title": {"text": title, "x": 0.01, "xanchor": "left"},
        **LAYOUT,
        "xaxis": dict(CATEGORY_AXIS),
        "yaxis": {"title": {"text": currency}, **VALUE_AXIS},
    }
    return _dict_html(data, layout, "allocation-chart")
