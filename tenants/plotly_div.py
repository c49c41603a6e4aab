"""A plotly figure as an empty ``<div>`` and its figure as a JSON data block (a
``<script type="application/json">``, which browsers never run), drawn by
static/tidegate/charts.js: no inline code, so the Content-Security-Policy can forbid it
(config/security.py). plotly.js is served from Tidegate's static files."""

from __future__ import annotations

from typing import Any

import plotly.io as pio
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

# As Django's json_script: the JSON cannot end its <script> element or open another.
JSON_IN_HTML = {ord("<"): "\\u003C", ord(">"): "\\u003E", ord("&"): "\\u0026"}


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
    as_json = pio.to_json(figure, validate=False)
    layout = (figure.to_dict() if hasattr(figure, "to_dict") else figure).get("layout", {})
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
