"""Usage collection in a cluster's sync health (scheduler_bridge's cluster page): when
the collector last ran, its error, and which DCGM pod labels it found."""

from __future__ import annotations

from django.utils.translation import gettext as _

from billing.models import CollectorWatermark
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.portal.health import HealthCheck


def dcgm_labels_note(pair: str) -> str:
    """What the DCGM label pair found means, in the reader's language."""
    if pair.startswith("exported_"):
        return _(
            "%(pair)s: DCGM series carry exported_pod/exported_namespace (a ServiceMonitor "
            "with honorLabels: false); Tidegate reads those."
        ) % {"pair": pair}
    if pair:
        return _("%(pair)s: DCGM series carry pod/namespace.") % {"pair": pair}
    return _(
        "None found: no DCGM series named a pod, so GPU utilisation cannot be tied to "
        "workloads. Check that dcgm-exporter runs with pod labels (kubernetes mode)."
    )


def usage_collection_health(cluster: Cluster) -> HealthCheck:
    mark = CollectorWatermark.objects.filter(cluster=cluster).first()
    if mark is None:
        return HealthCheck(
            _("Usage collection"),
            None,
            None,
            _("Usage has not been collected yet."),
            facts=[(_("DCGM labels"), _("not looked for yet"))],
        )
    summary = _("Collected until %(until)s; %(rows)s rows at the last run.") % {
        "until": mark.collected_until.strftime("%Y-%m-%d %H:%M UTC"),
        "rows": mark.last_rows,
    }
    return HealthCheck(
        _("Usage collection"),
        mark.last_run_at,
        None if mark.last_run_at is None else not mark.last_error,
        summary,
        [mark.last_error] if mark.last_error else [],
        [(_("DCGM labels"), dcgm_labels_note(mark.dcgm_pod_labels))],
    )
