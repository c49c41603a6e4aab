"""A plotly figure as an empty ``<div>`` and its figure as a JSON data block (a
``<script type="application/json">``, which browsers never run), drawn by
static/tidegate/charts.js: no inline code, so the Content-Security-Policy can forbid it
(config/security.py). plotly.js is served from Tidegate's static files."""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any

import plotly.io as pio
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language

# As Django's json_script: the JSON cannot end its <script> element or open another.
JSON_IN_HTML = {ord("<"): "\\u003C", ord(">"): "\\u003E", ord("&"): "\\u0026"}


ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
# plotly.js names months and weekdays in English ("Nov 29 2026") unless a locale bundle is
# loaded; numeric dates read the same in every language
NUMERIC_DATES = [
    {"dtickrange": [None, 86_400_000], "value": "%m-%d %H:%M"},
    {"dtickrange": [86_400_000, None], "value": "%Y-%m-%d"},
]


def numeric_dates(figure: dict[str, Any]) -> dict[str, Any]:
    """``figure`` with its date axes labelled in numbers (2026-11-29, 11-29 14:00) where
    it does not format them itself: for readers of languages plotly.js does not speak."""
    dated = set()
    for trace in figure.get("data") or ():
        xs = trace.get("x")
        first = next((x for x in xs if x is not None), None) if xs is not None else None
        if isinstance(first, str | datetime | date) and ISO_DATE.match(str(first)):
            dated.add("xaxis" + str(trace.get("xaxis", "x"))[1:])
    if not dated:
        return figure
    layout = dict(figure.get("layout") or {})
    for name in dated:
        axis = dict(layout.get(name) or {})
        if "tickformat" not in axis and "tickformatstops" not in axis:
            axis["tickformatstops"] = NUMERIC_DATES
        axis.setdefault("hoverformat", "%Y-%m-%d %H:%M")
        layout[name] = axis
    return {**figure, "layout": layout}


def _size(value: Any, default: str) -> str:
    return f"{value}px" if isinstance(value, int | float) else default


def plotly_div(
    figure: Any,
    div_id: str,
    *,
    config: dict[str, Any] | None = None,
    default_width: str = "100%",
    default_height: str = "100%",
) -> SafeString:
    """``figure`` (a plotly Figure or a figure dict, not validated) as a div of id
    ``div_id``, sized as plotly's own HTML export sizes it."""
    as_dict = figure.to_dict() if hasattr(figure, "to_dict") else dict(figure)
    if (get_language() or "").lower().startswith("zh"):
        as_dict = numeric_dates(as_dict)
    as_json = pio.to_json(as_dict, validate=False)
    layout = as_dict.get("layout", {})
    style = (
        f"height:{_size(layout.get('height'), default_height)}; "
        f"width:{_size(layout.get('width'), default_width)};"
    )
    data_id = f"{div_id}-figure"
    return format_html(
        '<div id="{}" class="plotly-graph-div" style="{}" data-plotly-figure="{}" '
        'data-plotly-config="{}"></div><script type="application/json" id="{}">{}</script>',
        div_id,
        style,
        data_id,
        pio.json.to_json_plotly({"responsive": True, **(config or {})}),
        data_id,
        mark_safe(as_json.translate(JSON_IN_HTML)),  # noqa: S308 - escaped just above
    )
