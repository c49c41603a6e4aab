"""Plotly charts of the dashboard, as embeddable divs (plotly.js comes from our static
files, loaded once by the page). Figures are plain dicts in plotly's schema, written out
without plotly.py's validation: a year of points would cost more to validate than to read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils.translation import gettext as _

from dashboard.selectors import UsagePoint
from tenants.plotly_div import plotly_div

# colours with enough contrast on white (WCAG AA for graphics: 3:1)
ALLOCATED = "#0b6e99"
BUSY = "#067647"


def _html(figure: dict[str, Any], div_id: str) -> str:
    return str(plotly_div(figure, div_id, config={"displaylogo": False, "responsive": True}))


def allocated_vs_busy(points: Sequence[UsagePoint], now: datetime, title: str) -> str:
    """Allocated and really busy GPU-equivalents over time, with buttons to show the last
    day, week, month or everything (the last week at first)."""
    x = [p.start.isoformat() for p in points]
    data = [
        {
            "type": "scatter",
            "name": _("Allocated"),
            "x": x,
            "y": [round(p.allocated, 3) for p in points],
            "mode": "lines",
            "line": {"color": ALLOCATED, "width": 1.5, "shape": "hv"},
            "fill": "tozeroy",
            "fillcolor": "rgba(11, 110, 153, 0.15)",
        },
        {
            "type": "scatter",
            "name": _("Busy (measured)"),
            "x": x,
            "y": [round(p.busy, 3) if p.busy is not None else None for p in points],
            "mode": "lines",
            "line": {"color": BUSY, "width": 2, "shape": "hv"},
            "connectgaps": False,
        },
    ]
    buttons: list[dict[str, Any]] = [
        {"count": 1, "label": _("1 day"), "step": "day", "stepmode": "backward"},
        {"count": 7, "label": _("7 days"), "step": "day", "stepmode": "backward"},
        {"count": 30, "label": _("30 days"), "step": "day", "stepmode": "backward"},
        {"label": _("all"), "step": "all"},
    ]
    layout = dict(
        title={"text": title, "font": {"size": 14}},
        height=340,
        margin={"l": 50, "r": 10, "t": 60, "b": 40},
        legend={"orientation": "h", "y": -0.15},
        yaxis={"title": {"text": _("GPU-equivalents")}, "rangemode": "tozero"},
        xaxis={
            "type": "date",
            "range": [(now - timedelta(days=7)).isoformat(), now.isoformat()],
            "rangeselector": {"buttons": buttons, "x": 0, "y": 1.02},
        },
        hovermode="x unified",
    )
    return _html({"data": data, "layout": layout}, "usage-chart")


def efficiency_bars(rows: Sequence[dict[str, Any]], title: str) -> str:
    """Busy / allocated per team, as horizontal bars from 0 to 100 %."""
    shown = [r for r in rows if r["efficiency"] is not None]
    data = [
        {
            "type": "bar",
            "x": [round(float(r["efficiency"]) * 100, 1) for r in shown],
            "y": [r["slug"] for r in shown],
            "orientation": "h",
            "marker": {"color": BUSY},
            "hovertemplate": "%{y}: %{x} %<extra></extra>",
        }
    ]
    layout = dict(
        title={"text": title, "font": {"size": 14}},
        height=max(160, 60 + 28 * len(shown)),
        margin={"l": 90, "r": 30, "t": 40, "b": 30},
        xaxis={"range": [0, 100], "ticksuffix": " %"},
        yaxis={"autorange": "reversed"},
    )
    return _html({"data": data, "layout": layout}, "efficiency-chart")
