"""Plotly charts of the billing pages, as embeddable divs (plotly.js is served from our
static files by the base layout's pages). Amounts become floats here only to be drawn."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import plotly.graph_objects as go
from django.utils.translation import gettext as _

LAYOUT: dict[str, Any] = {"height": 320, "margin": {"l": 50, "r": 10, "t": 40, "b": 80}}


def _html(figure: go.Figure, div_id: str) -> str:
    return str(figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id))


def spend_by_cost_center(groups: Sequence[dict[str, Any]], currency: str, title: str) -> str:
    """Bars of chargeback and showback amounts per cost centre."""
    names = [g["key"] for g in groups]
    figure = go.Figure(
        data=[
            go.Bar(
                name=_("Chargeback"),
                x=names,
                y=[float(g["chargeback"]) for g in groups],
            ),
            go.Bar(name=_("Showback"), x=names, y=[float(g["showback"]) for g in groups]),
        ]
    )
    figure.update_layout(barmode="stack", title=title, yaxis_title=currency, **LAYOUT)
    return _html(figure, "spend-by-cost-centre")


def burn(
    days: Sequence[date],
    daily: Sequence[Decimal],
    *,
    budget: Decimal | None,
    currency: str,
    forecast_at: datetime | None,
    title: str,
) -> str:
    """Daily spend (bars), cumulative spend (line), the budget and its forecast exhaustion."""
    cumulative = []
    running = Decimal(0)
    for amount in daily:
        running += amount
        cumulative.append(float(running))
    figure = go.Figure(
        data=[
            go.Bar(name=_("Spend per day"), x=list(days), y=[float(a) for a in daily]),
            go.Scatter(name=_("Spent so far"), x=list(days), y=cumulative, mode="lines+markers"),
        ]
    )
    if budget is not None:
        figure.add_hline(
            y=float(budget), line_dash="dash", line_color="firebrick", annotation_text=_("Budget")
        )
    if forecast_at is not None:
        figure.add_vline(
            x=forecast_at.timestamp() * 1000,
            line_dash="dot",
            line_color="darkorange",
            annotation_text=_("Forecast: exhausted"),
        )
    figure.update_layout(title=title, yaxis_title=currency, **LAYOUT)
    return _html(figure, "budget-burn")
