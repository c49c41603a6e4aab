"""The rows the what-if page shows: every figure of both runs with the difference, the
waits per tenant, and the savings search's points, worded for the reader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from billing.whatif.records import RunSettings, SavingsResult
from scheduler_bridge.replay.figures import WaitFigures
from scheduler_bridge.replay.policies import ReplayFigures


def wait_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if abs(seconds) < 3600:
        return _("%(minutes)s min") % {"minutes": f"{seconds / 60:.1f}"}
    return _("%(hours)s h") % {"hours": f"{seconds / 3600:.2f}"}


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f} %"


def _gpu_hours(value: float | None) -> str:
    return "—" if value is None else _("%(hours)s GPU-h") % {"hours": f"{value:,.1f}"}


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3f}"


# (figure, label, how it reads, whether lower is better)
FIGURES: list[tuple[str, Any, Callable[[Any], str], bool]] = [
    ("utilization", gettext_lazy("Utilisation"), _percent, False),
    ("peak_utilization", gettext_lazy("Peak utilisation"), _percent, False),
    ("allocated_gpu_hours", gettext_lazy("Allocated"), _gpu_hours, False),
    ("goodput", gettext_lazy("Goodput (work that counted)"), _gpu_hours, False),
    ("wasted_gpu_hours", gettext_lazy("Wasted by preemption"), _gpu_hours, True),
    ("borrowed_gpu_hours", gettext_lazy("Borrowed"), _gpu_hours, False),
    ("wait_mean_s", gettext_lazy("Wait, mean"), wait_text, True),
    ("wait_p50_s", gettext_lazy("Wait, median"), wait_text, True),
    ("wait_p95_s", gettext_lazy("Wait, 95th percentile"), wait_text, True),
    ("wait_p99_s", gettext_lazy("Wait, 99th percentile"), wait_text, True),
    ("owner_wait_mean_s", gettext_lazy("Owner work's mean wait"), wait_text, True),
    ("owner_wait_ratio", gettext_lazy("Owner wait ratio (against static slices)"), _number, True),
    ("share_fairness", gettext_lazy("Share fairness (1 = fair)"), _number, False),
    ("jain_fairness", gettext_lazy("Slowdown fairness (Jain)"), _number, False),
    ("preemptions", gettext_lazy("Preemptions"), _number, True),
    ("preempted_jobs", gettext_lazy("Jobs preempted (at least once)"), _number, True),
    ("shrinks", gettext_lazy("Elastic shrinks"), _number, True),
    ("grows", gettext_lazy("Elastic grows"), _number, False),
    ("jobs_completed", gettext_lazy("Jobs completed"), _number, False),
    ("never_started", gettext_lazy("Jobs never started"), _number, True),
    ("makespan_h", gettext_lazy("Makespan (hours)"), _number, True),
]


def _difference(before: Any, after: Any, shown: Callable[[Any], str]) -> tuple[str, float]:
    if before is None or after is None:
        return "—", 0.0
    change = float(after) - float(before)
    if change == 0:
        return "=", 0.0
    text = shown(abs(change))
    return ("+" if change > 0 else "−") + text, change


def figure_rows(today: ReplayFigures, proposed: ReplayFigures) -> list[dict[str, Any]]:
    rows = []
    for name, label, shown, lower_better in FIGURES:
        before, after = getattr(today, name), getattr(proposed, name)
        difference, change = _difference(before, after, shown)
        rows.append(
            {
                "name": name,
                "label": label,
                "today": shown(before),
                "proposed": shown(after),
                "difference": difference,
                "better": change != 0 and ((change < 0) == lower_better),
                "worse": change != 0 and ((change < 0) != lower_better),
            }
        )
    return rows


def _seconds(value: float) -> str:
    return _("%(seconds).0f s") % {"seconds": value}


def _yes_no(value: bool) -> str:
    return _("on") if value else _("off")


# (setting, label, how it reads)
SETTINGS: list[tuple[str, Any, Callable[[Any], str]]] = [
    ("reclaim_wait_s", gettext_lazy("Reclaim wait"), _seconds),
    ("reclaim_min_run_s", gettext_lazy("Reclaim minimum run"), _seconds),
    ("priority_preemption", gettext_lazy("Priority preemption"), _yes_no),
    ("share_packing", gettext_lazy("Share packing"), str),
    (
        "half_life_h",
        gettext_lazy("Usage half-life"),
        lambda h: _("%(hours)s h") % {"hours": f"{h:g}"},
    ),
]


def settings_rows(today: RunSettings | None, proposed: RunSettings | None) -> list[dict[str, Any]]:
    """The settings each run replayed under, side by side (none for a run kept before
    they were recorded)."""
    if today is None or proposed is None:
        return []
    return [
        {
            "name": name,
            "label": label,
            "today": shown(getattr(today, name)),
            "proposed": shown(getattr(proposed, name)),
            "changed": getattr(today, name) != getattr(proposed, name),
        }
        for name, label, shown in SETTINGS
    ]


def tenant_wait_rows(today: ReplayFigures, proposed: ReplayFigures) -> list[dict[str, Any]]:
    """Per tenant: jobs, mean and p95 wait under today's quotas and the proposal."""
    empty = WaitFigures(0, 0.0, 0.0, 0.0, 0.0)
    rows = []
    for tenant in sorted(set(today.tenant_waits) | set(proposed.tenant_waits)):
        before = today.tenant_waits.get(tenant, empty)
        after = proposed.tenant_waits.get(tenant, empty)
        rows.append(
            {
                "tenant": tenant,
                "jobs": before.jobs,
                "mean_today": wait_text(before.mean_s),
                "mean_proposed": wait_text(after.mean_s),
                "mean_difference": _difference(before.mean_s, after.mean_s, wait_text)[0],
                "p95_today": wait_text(before.p95_s),
                "p95_proposed": wait_text(after.p95_s),
                "p95_difference": _difference(before.p95_s, after.p95_s, wait_text)[0],
                "better": after.mean_s < before.mean_s,
                "worse": after.mean_s > before.mean_s,
            }
        )
    return rows


def savings_rows(savings: SavingsResult) -> list[dict[str, Any]]:
    return [
        {
            "capacity": point.capacity_gpus,
            "p95": wait_text(point.wait_p95_s),
            "never_started": point.never_started,
            "meets": point.meets,
        }
        for point in savings.points
    ]
