"""``manage.py replay --plot out.html``: one self-contained page (plotly.js inlined, no
CDN) with utilisation over time per policy, wait distributions per tenant and policy,
and each tenant's holdings against its guarantee over time."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import plotly.io as pio

from .policies import PolicyRun

DAY_S = 86400.0
# plotly's default colour cycle: a tenant's holdings and its guarantee share a colour
PALETTE = (
    "#636efa",
    "#ef553b",
    "#00cc96",
    "#ab63fa",
    "#ffa15a",
    "#19d3f3",
    "#ff6692",
    "#b6e880",
    "#ff97ff",
    "#fecb52",
)


def replay_page(runs: Sequence[PolicyRun], *, title: str, attribution: str) -> str:
    """The HTML page; every run must have been made with a timeline."""
    start = min(run.timeline.times[0] for run in runs if run.timeline and run.timeline.times)
    sections = [
        ("Utilisation over time", _utilisation(runs, start)),
        ("Waits per tenant (box per policy)", _waits(runs)),
    ]
    for run in runs:
        sections.append(
            (f"Holdings against guarantee per tenant: {run.figures.policy}", _holdings(run, start))
        )
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title></head><body style='font-family:sans-serif'>",
        f"<h1>{html.escape(title)}</h1>",
        _table(runs),
    ]
    for index, (heading, figure) in enumerate(sections):
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        parts.append(
            pio.to_html(
                figure,
                full_html=False,
                include_plotlyjs=index == 0,  # inlined once, at the first chart
                validate=False,
            )
        )
    parts.append(f"<p><small>{html.escape(attribution)}</small></p></body></html>")
    return "\n".join(parts)


def _table(runs: Sequence[PolicyRun]) -> str:
    columns: list[tuple[str, str, str]] = [
        ("policy", "policy", "{}"),
        ("utilisation", "utilization", "{:.1%}"),
        ("goodput GPU-h", "goodput", "{:,.0f}"),
        ("wasted GPU-h", "wasted_gpu_hours", "{:,.0f}"),
        ("borrowed GPU-h", "borrowed_gpu_hours", "{:,.0f}"),
        ("mean wait h", "wait_mean_s", "hours"),
        ("p95 wait h", "wait_p95_s", "hours"),
        ("owner wait ratio", "owner_wait_ratio", "{:.2f}"),
        ("share fairness", "share_fairness", "{:.3f}"),
        ("preemptions", "preemptions", "{:,}"),
        ("preempted jobs", "preempted_jobs", "{:,}"),
    ]
    head = "".join(f"<th>{html.escape(label)}</th>" for label, _, _ in columns)
    rows = []
    for run in runs:
        values = run.figures.as_json()
        cells = "".join(
            f"<td>{html.escape(_cell(values[key], form))}</td>" for _, key, form in columns
        )
        rows.append(f"<tr>{cells}</tr>")
    return f"<table border='1' cellpadding='4'><tr>{head}</tr>{''.join(rows)}</table>"


def _cell(value: Any, form: str) -> str:
    if value is None:
        return "-"
    if form == "hours":
        return f"{value / 3600:,.2f}"
    return form.format(value)


def _utilisation(runs: Sequence[PolicyRun], start: float) -> dict[str, Any]:
    traces = []
    for run in runs:
        assert run.timeline is not None
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": run.figures.policy,
                "x": [(t - start) / DAY_S for t in run.timeline.times],
                "y": run.timeline.utilization,
                "line": {"shape": "hv"},  # holdings change in steps, at cycles
            }
        )
    return {
        "data": traces,
        "layout": {
            "xaxis": {"title": {"text": "days since the first submit"}},
            "yaxis": {"title": {"text": "GPUs held / capacity"}, "tickformat": ".0%"},
            "height": 380,
        },
    }


def _waits(runs: Sequence[PolicyRun]) -> dict[str, Any]:
    traces = []
    for run in runs:
        xs: list[str] = []
        ys: list[float] = []
        for tenant, waits in sorted(run.tenant_wait_samples.items()):
            xs.extend([tenant] * len(waits))
            ys.extend(max(w, 1.0) / 3600 for w in waits)  # a log axis: under 1 s shows at 1 s
        traces.append({"type": "box", "name": run.figures.policy, "x": xs, "y": ys})
    return {
        "data": traces,
        "layout": {
            "boxmode": "group",
            "yaxis": {"title": {"text": "wait (hours)"}, "type": "log"},
            "xaxis": {"title": {"text": "tenant"}},
            "height": 420,
        },
    }


def _holdings(run: PolicyRun, start: float) -> dict[str, Any]:
    assert run.timeline is not None
    days = [(t - start) / DAY_S for t in run.timeline.times]
    traces: list[dict[str, Any]] = []
    for index, (tenant, series) in enumerate(sorted(run.timeline.held.items())):
        colour = PALETTE[index % len(PALETTE)]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{tenant} held",
                "x": days,
                "y": series,
                "line": {"shape": "hv", "color": colour},
                "legendgroup": tenant,
            }
        )
        guarantee = run.guarantees.get(tenant, 0.0)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{tenant} guarantee",
                "x": [days[0], days[-1]] if days else [],
                "y": [guarantee, guarantee],
                "line": {"dash": "dot", "color": colour},
                "legendgroup": tenant,
            }
        )
    return {
        "data": traces,
        "layout": {
            "xaxis": {"title": {"text": "days since the first submit"}},
            "yaxis": {"title": {"text": "GPUs held"}},
            "height": 420,
        },
    }
