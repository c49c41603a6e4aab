"""Celery tasks of billing: thin, take ids, idempotent, retry on transient errors.

Periodic (Celery beat): ``usage_collect_all`` and ``budgets_evaluate`` every 15 minutes,
``periods_roll`` hourly, ``periods_resume_closes`` every minute.
"""

from __future__ import annotations

import logging

from django.core.mail import send_mail
from django.utils import timezone, translation

from billing.usage.prometheus import PrometheusUnavailable
from scheduler_bridge.gateways import ClusterUnreachable, GatewayError
from scheduler_bridge.inventory.models import Cluster
from tenants.task_policy import background_task
from tenants.transactions import queue_after_commit

logger = logging.getLogger(__name__)

# A cluster or Prometheus that does not answer is retried, as a database outage is.
retrying_task = background_task(retry_for=(ClusterUnreachable, PrometheusUnavailable))


@retrying_task
def usage_collect(cluster_id: int) -> dict[str, int] | None:
    """Collect one cluster's completed hours into the ledger; re-queue while more are due
    (catching up after downtime). Retries with backoff while the cluster or Prometheus
    does not answer; nothing is written by a failed run."""
    from billing.usage.collection import usage_collect as collect

    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return None
    try:
        result = collect(cluster=cluster)
    except (ClusterUnreachable, PrometheusUnavailable):
        raise
    except GatewayError as error:  # bad settings: an admin must fix the cluster first
        logger.warning("usage collection of %s failed: %s", cluster.name, error)
        return None
    for problem in result.problems[:20]:
        logger.warning("usage collection of %s: %s", cluster.name, problem)
    if result.unbound_namespaces:
        logger.warning(
            "usage collection of %s: GPU pods in namespaces bound to no tenant (not billed): %s",
            cluster.name,
            ", ".join(sorted(result.unbound_namespaces)),
        )
    if result.more_due:
        queue_after_commit("billing.tasks.usage_collect", cluster_id)
    return {"hours": result.hours, "rows": result.rows, "inserted": result.inserted}


@background_task()
def usage_collect_all() -> int:
    """Queue a collection per cluster, so one broken cluster never stops the others."""
    ids = list(Cluster.objects.values_list("pk", flat=True))
    for cluster_id in ids:
        usage_collect.delay(cluster_id)
    return len(ids)


@background_task()
def budgets_evaluate() -> dict[str, int]:
    """Recompute budgets' spend and forecast; fire crossed thresholds (once each)."""
    from billing.budgeting.budgets import budgets_evaluate as evaluate

    result = evaluate()
    return {
        "budgets": result.budgets,
        "alerts_fired": result.alerts_fired,
        "suspended": len(result.suspended),
    }


@background_task(retry_for=(OSError,))
def budget_alert_notify(alert_id: int) -> int:
    """E-mail a fired budget alert to the leads, finance and admins over its tenant.

    Claimed with a conditional UPDATE, so a redelivered task sends nothing twice; a
    failed send releases the claim and is retried.
    """
    from billing.budgeting.notifications import alert_mail, alert_recipients
    from billing.models import BudgetAlert

    claimed = BudgetAlert.objects.filter(pk=alert_id, emailed_at__isnull=True).update(
        emailed_at=timezone.now()
    )
    if not claimed:
        return 0
    alert = BudgetAlert.objects.select_related("budget", "budget__tenant").get(pk=alert_id)
    by_language = alert_recipients(alert)
    sent = 0
    try:
        for language, recipients in by_language.items():
            with translation.override(language):
                subject, body = alert_mail(alert)
            send_mail(subject, body, None, recipients)
            sent += len(recipients)
    except OSError:
        BudgetAlert.objects.filter(pk=alert_id).update(emailed_at=None)
        raise
    return sent


@background_task(retry_for=(OSError,))
def budget_suspension_notify(
    budget_id: int, period_name: str, spent: str, amount: str, workload_ids: list[int]
) -> int:
    """E-mail the leads (and finance and admins over the budget's tenant) that a spent
    budget suspended running work, each in their language. Queued once, by the
    evaluation that suspended the work."""
    from decimal import Decimal

    from billing.budgeting.notifications import suspension_mail, suspension_recipients
    from billing.models import Budget
    from scheduler_bridge.workloads.models import Workload

    budget = Budget.objects.select_related("tenant").filter(pk=budget_id).first()
    if budget is None:
        return 0
    workloads = list(
        Workload.objects.filter(pk__in=workload_ids).select_related("tenant").order_by("pk")
    )
    sent = 0
    for language, recipients in suspension_recipients(budget, workloads).items():
        with translation.override(language):
            subject, body = suspension_mail(
                budget, period_name, Decimal(spent), Decimal(amount), workloads
            )
        send_mail(subject, body, None, recipients)
        sent += len(recipients)
    return sent


@background_task()
def periods_roll() -> list[str]:
    """Open this month's period, resume closes whose worker died, auto-close if set."""
    from billing.statements.periods import periods_roll as roll

    return roll()


@background_task()
def periods_resume_closes() -> list[str]:
    """Finish every close whose closer died, once its lease expired (every minute)."""
    from billing.statements.periods import periods_resume_closes as resume

    return resume()


@background_task()
def period_close(period_id: int, actor_id: int | None = None) -> str:
    """Close one period in the background (e.g. from the portal). Idempotent: a closed
    period is left alone."""
    from django.contrib.auth import get_user_model

    from billing.errors import PeriodBusy, PeriodClosed
    from billing.models import BillingPeriod
    from billing.statements.periods import period_close as close

    period = BillingPeriod.objects.filter(pk=period_id).first()
    if period is None:
        return "missing"
    actor = get_user_model().objects.filter(pk=actor_id).first() if actor_id else None
    try:
        close(actor=actor, period=period, source="system")
    except (PeriodBusy, PeriodClosed) as error:
        return error.message
    return "closed"


@background_task()
def whatif_run(run_id: int) -> str | None:
    """Execute a what-if or savings run (billing.whatif.services). A worker that dies
    mid-run gets the task delivered again and the run starts over (at most three times);
    one past the soft time limit fails the run with a message."""
    from celery.exceptions import SoftTimeLimitExceeded

    from billing.whatif.services import whatif_run_execute, whatif_run_fail

    try:
        run = whatif_run_execute(run_id=run_id)
    except SoftTimeLimitExceeded:
        whatif_run_fail(
            run_id=run_id,
            attempt=None,
            error="The replay took longer than the task's time limit; choose fewer days.",
        )
        return "failed"
    return None if run is None else run.status


@background_task()
def whatif_runs_fail_stalled() -> int:
    """Fail what-if runs whose worker stopped (no progress past the time limit)."""
    from billing.whatif.services import whatif_runs_fail_stalled as fail_stalled

    return fail_stalled()
