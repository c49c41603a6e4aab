"""Reads of the team lead dashboard, each a fixed number of queries whatever the data size.

Every function takes a tenant the caller was allowed to open (``dashboard_tenant_or_404``)
and reads that tenant's subtree only; lists are capped and come with their full count.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from django.core.cache import cache
from django.db.models import Case, Count, DateTimeField, Max, Q, QuerySet, Sum, When
from django.db.models.functions import TruncDay, TruncHour
from django.shortcuts import get_object_or_404
from django.utils import timezone

from billing.models import UsageRecord
from billing.usage.ledger_cache import ledger_cached as billing_ledger_cached
from billing.usage.ledger_cache import ledger_mark
from dashboard.holdings import Holding, Share, TenantNode, holdings
from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.records import parse_elastic_pods, parse_pod_sets
from tenants import access
from tenants.models import Role, Tenant

QUEUE_LIMIT = 25
RUNNING_LIMIT = 25
# the chart keeps hours for this long, whole days before that (a year of hours would be
# 8,760 points per line)
HOURLY_DAYS = 30
CHART_DAYS = 365
EFFICIENCY_DAYS = 7
# what the dashboard's workload rows show of their relations (as workloads_visible_to)
WORKLOAD_RELATIONS = ("tenant", "cluster", "flavour", "priority_class", "submitted_by")
# reasons after which a quota request is the change to make (others: the request itself)
QUOTA_CODES = frozenset({"never_fits", "no_quota"})


def dashboard_tenants(user: Any) -> QuerySet[Tenant]:
    """The tenants whose dashboard ``user`` may open: every tenant they see."""
    return access.tenants_visible_to(user).order_by("path")


def dashboard_tenant_or_404(user: Any, slug: str) -> Tenant:
    return get_object_or_404(dashboard_tenants(user), slug=slug)


def default_tenant(user: Any) -> Tenant | None:
    """The first tenant ``user`` leads (or administers), else the first they see (None
    when they belong to no tenant yet)."""
    led = access.tenants_with_role(user, [Role.LEAD, Role.ADMIN]).order_by("depth", "path")
    return led.first() or dashboard_tenants(user).order_by("depth", "path").first()


# ---------------------------------------------------------------------------- holdings
@dataclass
class HoldingRow:
    tenant: dict[str, Any]
    holding: Holding
    elastic: int
    is_subtree: bool  # the dashboard's own tenant (its whole subtree), not a sub-team


@dataclass
class FlavourHoldings:
    flavour: Flavour
    rows: list[HoldingRow] = field(default_factory=list)


def subtree_holdings(tenant: Tenant) -> list[FlavourHoldings]:
    """Per flavour the tenant has a quota of or uses: its holding (its whole subtree) and
    each direct sub-team's, as dashboard.holdings defines guaranteed / in use / borrowed
    / lent. Five queries: tenants, quotas, GPUs held per tenant x flavour, elastic pods
    of the subtree, flavours."""
    tree = list(Tenant.objects.order_by("path").values("id", "parent_id", "path", "slug", "name"))
    by_id = {t["id"]: t for t in tree}
    shares: dict[int, dict[int, Share]] = defaultdict(dict)
    for tenant_id, flavour_id, guaranteed, lend_limit in Quota.objects.values_list(
        "tenant_id", "flavour_id", "guaranteed", "lend_limit"
    ):
        shares[flavour_id][tenant_id] = Share(guaranteed, lend_limit)
    use: dict[int, dict[int, int]] = defaultdict(dict)
    held = (
        Workload.objects.filter(state__in=Workload.ACTIVE_STATES, flavour__isnull=False)
        .order_by()
        .values_list("flavour_id", "tenant_id")
        .annotate(gpus=Sum("gpus"))
    )
    for flavour_id, tenant_id, gpus in held:
        use[flavour_id][tenant_id] = int(gpus or 0)
    subtree_ids = {t["id"] for t in tree if t["path"].startswith(tenant.path)}
    elastic: dict[tuple[int, int], int] = defaultdict(int)
    for tenant_id, flavour_id, pods in Workload.objects.filter(
        state__in=Workload.ACTIVE_STATES, elastic=True, tenant_id__in=subtree_ids
    ).values_list("tenant_id", "flavour_id", "elastic_pods"):
        elastic[(flavour_id, tenant_id)] += sum(p.gpus for p in parse_elastic_pods(pods))
    relevant = {
        f
        for f in set(shares) | set(use)
        if subtree_ids & (set(shares.get(f, {})) | set(use.get(f, {})))
    }
    flavours = Flavour.objects.filter(pk__in=relevant).select_related("cluster")
    nodes = [TenantNode(t["id"], t["parent_id"]) for t in tree]
    children = [t for t in tree if t["parent_id"] == tenant.pk]
    out = []
    for flavour in sorted(flavours, key=lambda f: (f.cluster.name, f.name)):
        result = holdings(nodes, shares.get(flavour.pk, {}), use.get(flavour.pk, {}))
        if not (result[tenant.pk].guaranteed or result[tenant.pk].in_use):
            continue  # a quota of nothing, and nothing held
        group = FlavourHoldings(flavour)
        for row, is_subtree in [(by_id[tenant.pk], True), *((c, False) for c in children)]:
            inside = [t for t in subtree_ids if by_id[t]["path"].startswith(row["path"])]
            holding = result[row["id"]]
            if not is_subtree and not (holding.guaranteed or holding.in_use or holding.lent):
                continue  # a sub-team with nothing of this flavour
            group.rows.append(
                HoldingRow(
                    tenant=dict(row),
                    holding=holding,
                    elastic=sum(elastic.get((flavour.pk, t), 0) for t in inside),
                    is_subtree=is_subtree,
                )
            )
        out.append(group)
    return out


# ------------------------------------------------------------------------------- queue
def _subtree_work(user: Any, tenant: Tenant) -> QuerySet[Workload]:
    """The work of the tenant's subtree that ``user`` may see, filtered by tenant id: a
    path prefix leaves PostgreSQL guessing one tenant, and it then walks every tenant's
    workloads one by one (one query for the ids)."""
    ids = list(
        access.tenants_visible_to(user)
        .filter(path__startswith=tenant.path)
        .values_list("pk", flat=True)
    )
    return Workload.objects.filter(tenant_id__in=ids).select_related(*WORKLOAD_RELATIONS)


def _first(work: QuerySet[Workload], order: tuple[Any, ...], limit: int) -> list[Workload]:
    """The first ``limit`` of ``work`` in ``order``: picked by a subquery that sorts ids
    and the order's columns alone, then read whole (a whole row is wide; sorting
    thousands of them is slow). One query."""
    first = work.order_by(*order).values("pk")[:limit]
    return list(work.filter(pk__in=first).order_by(*order))


def subtree_queue(user: Any, tenant: Tenant, limit: int = QUEUE_LIMIT) -> dict[str, Any]:
    """The subtree's waiting work in cluster-queue order (first ``limit``), its counts per
    cluster, and for work that cannot run as asked what to change. Four queries."""
    pending = _subtree_work(user, tenant).filter(state=Workload.State.PENDING)
    counts = list(
        pending.order_by()
        .values("cluster__name")
        .annotate(
            n=Count("id"), stuck=Count("id", filter=Q(reason_code__in=Workload.INADMISSIBLE_CODES))
        )
        .order_by("cluster__name")
    )
    workloads = _first(pending, Workload.QUEUE_ORDER, limit)
    stuck = [w for w in workloads if w.inadmissible]
    changes = what_to_change(stuck)
    for workload in workloads:
        workload.change = changes.get(workload.pk)  # type: ignore[attr-defined]
    return {
        "workloads": workloads,
        "total": sum(c["n"] for c in counts),
        "stuck": sum(c["stuck"] for c in counts),
        "clusters": counts,
    }


def what_to_change(workloads: list[Workload]) -> dict[int, dict[str, Any]]:
    """For each workload that cannot run as asked: the flavour it asks for, the GPUs it
    needs, the largest request its tenant's quota allows (None when the quota is not
    what stops it) and whether a quota request would help. Two queries for any number."""
    wanted: dict[tuple[int, str], list[Workload]] = defaultdict(list)
    for workload in workloads:
        records = parse_pod_sets(workload.pod_sets)
        if records and records[0].flavours:
            wanted[(workload.cluster_id, records[0].flavours[0])].append(workload)
    if not wanted:
        return {}
    query = Q(pk__in=[])
    for cluster_id, name in wanted:
        query |= Q(cluster_id=cluster_id, name=name)
    flavours = {(f.cluster_id, f.name): f for f in Flavour.objects.filter(query)}
    tenants = {w.tenant_id for ws in wanted.values() for w in ws}
    ancestors = {a for ws in wanted.values() for w in ws for a in w.tenant.ancestor_ids()}
    quotas = {
        (q.tenant_id, q.flavour_id): q
        for q in Quota.objects.filter(
            tenant_id__in=tenants | ancestors, flavour__in=list(flavours.values())
        )
    }
    out: dict[int, dict[str, Any]] = {}
    for key, group in wanted.items():
        flavour = flavours.get(key)
        if flavour is None:
            continue
        for workload in group:
            need = sum(ps.core_record.gpus for ps in parse_pod_sets(workload.pod_sets))
            largest = None
            if workload.reason_code in QUOTA_CODES:
                largest = quota_ceiling(workload, flavour, quotas)
            out[workload.pk] = {
                "flavour": flavour,
                "need": need,
                "largest": largest,
                "ask_quota": workload.reason_code in QUOTA_CODES,
            }
    return out


def quota_ceiling(
    workload: Workload, flavour: Flavour, quotas: dict[tuple[int, int], Quota]
) -> int:
    """The most of ``flavour`` the workload's tenant could hold with its cohort idle:
    work that may not be preempted runs inside the tenant's own guarantee; other work up
    to the guarantee plus the borrow limit, at every level up to the cohort's root,
    never beyond the root's guarantee (the same ceiling the queue's reason states)."""
    chain = workload.tenant.ancestor_ids()  # root first, the tenant last
    own = quotas.get((workload.tenant_id, flavour.pk))
    if not workload.preemptible:
        return own.guaranteed if own else 0
    root = quotas.get((chain[0], flavour.pk))
    ceiling = root.guaranteed if root else 0
    for tenant_id in chain[1:]:
        quota = quotas.get((tenant_id, flavour.pk))
        if quota is not None and quota.borrow_limit is not None:
            ceiling = min(ceiling, quota.guaranteed + quota.borrow_limit)
    return ceiling


def subtree_running(user: Any, tenant: Tenant, limit: int = RUNNING_LIMIT) -> dict[str, Any]:
    """Work of the subtree holding GPUs now, latest admitted first (two queries)."""
    active = _subtree_work(user, tenant).filter(state__in=Workload.ACTIVE_STATES)
    counts = list(
        active.order_by()
        .values("cluster__name")
        .annotate(n=Count("id"), gpus=Sum("gpus"))
        .order_by("cluster__name")
    )
    return {
        "workloads": _first(active, ("-admitted_at", "-id"), limit),
        "total": sum(c["n"] for c in counts),
        "gpus": sum(c["gpus"] or 0 for c in counts),
        "clusters": counts,
    }


# A pod outside the queue is worth stopping only while it still holds its GPUs idle: its
# last idle hour must be among the latest the collector wrote.
RECENTLY_IDLE = timedelta(hours=3)


def idle_workloads(
    user: Any, tenant: Tenant, findings: list[dict[str, Any]], now: datetime | None = None
) -> list[Any]:
    """billing's idle-GPU findings that can be acted on now, with the workload to stop:
    queued work still holding its GPUs (found by the ledger's workload id, else by
    namespace and Job), and pods outside the queue idle in the latest hours. Work that
    ended, or waits again, has nothing to stop and is left out. One query."""
    now = now or timezone.now()
    ids = {f["workload_id"] for f in findings if f.get("workload_id") is not None}
    query = Q(pk__in=ids)
    for finding in findings:
        if finding.get("workload_id") is None and finding["job_name"]:
            query |= Q(namespace=finding["namespace"], job_name=finding["job_name"])
    by_id: dict[int, Workload] = {}
    by_job: dict[tuple[str, str], Workload] = {}
    if findings:
        for found in _subtree_work(user, tenant).filter(query).order_by("-submitted_at"):
            by_id[found.pk] = found
            by_job.setdefault((found.namespace, found.job_name), found)
    out = []
    for finding in findings:
        workload: Workload | None = by_id.get(finding.get("workload_id") or 0) or by_job.get(
            (finding["namespace"], finding["job_name"])
        )
        if workload is not None:
            if workload.state in Workload.ACTIVE_STATES:
                out.append({**finding, "workload": workload})
        elif finding["last"] is not None and finding["last"] >= now - RECENTLY_IDLE:
            out.append({**finding, "workload": None})
    return out


# ------------------------------------------------------------------------------- usage
@dataclass(frozen=True)
class UsagePoint:
    start: datetime
    allocated: float  # GPU-equivalents held on average over the bucket
    busy: float | None  # of which busy, where DCGM measured it


T = TypeVar("T")


def ledger_cached(name: str, tenant: Tenant, moment: datetime, compute: Callable[[], T]) -> T:
    """``compute()`` (a read of the subtree's ledger as of ``moment``), kept while the
    ledger has no new row (billing's ledger cache): a year of it need not be summed again
    at every refresh. One query (where the ledger stands) when kept."""
    parts = (tenant.pk, tenant.path, moment.isoformat())
    return billing_ledger_cached(f"dashboard-{name}", ledger_mark(), parts, compute)


def usage_series(tenant: Tenant, now: datetime) -> list[UsagePoint]:
    """Allocated and busy GPU-equivalents of the subtree over the last year from the
    hourly ledger: hours for the last HOURLY_DAYS days, whole days before (one GROUP BY
    query, then weighted by each flavour's GPU-equivalent; kept while the ledger does
    not grow)."""
    hour = now.replace(minute=0, second=0, microsecond=0)
    return ledger_cached("usage", tenant, hour, lambda: _usage_series(tenant, hour))


# bucket start -> flavour id -> (allocated, busy) GPU-seconds (busy None: not measured)
Sums = dict[datetime, dict[int, tuple[Decimal, Decimal | None]]]
PAST_CACHE_S = 24 * 3600


def _usage_series(tenant: Tenant, now: datetime) -> list[UsagePoint]:
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    hourly_from = day - timedelta(days=HOURLY_DAYS)
    ids = sorted(tenant.subtree().values_list("pk", flat=True))
    sums = _past_usage(ids, day) | _usage_sums(ids, day, None, hourly_from)
    weights = dict(Flavour.objects.values_list("pk", "gpu_equivalent"))
    allocated: dict[datetime, Decimal] = defaultdict(Decimal)
    busy: dict[datetime, Decimal | None] = {}
    for start, flavours in sums.items():
        for flavour_id, (seconds, busy_seconds) in flavours.items():
            weight = weights.get(flavour_id) or Decimal(1)
            allocated[start] += seconds * weight
            if busy_seconds is not None:
                busy[start] = (busy.get(start) or Decimal(0)) + busy_seconds * weight
            else:
                busy.setdefault(start, None)
    points = []
    for start in sorted(allocated):
        seconds = Decimal(3600 if start >= hourly_from else 86400)
        measured = busy.get(start)
        points.append(
            UsagePoint(
                start=start,
                allocated=float(allocated[start] / seconds),
                busy=float(measured / seconds) if measured is not None else None,
            )
        )
    return points


def _past_usage(ids: list[int], day: datetime) -> Sums:
    """The subtree's sums before ``day`` (a year of them), kept for the day: the ledger
    grows by the hour, and a row that starts before ``day`` and is newer than the kept
    sums (late usage) makes them read again (one query to check, by row id)."""
    key = "dashboard:usage-past:" + hashlib.sha256(repr((ids, day)).encode()).hexdigest()
    found = cache.get(key)
    if found is not None:
        newest, sums = found
        late = UsageRecord.objects.filter(id__gt=newest or 0, interval_start__lt=day)
        if not late.exists():
            return sums  # type: ignore[no-any-return]
    newest = UsageRecord.objects.aggregate(newest=Max("id"))["newest"]
    sums = _usage_sums(
        ids, day - timedelta(days=CHART_DAYS), day, day - timedelta(days=HOURLY_DAYS)
    )
    cache.set(key, (newest, sums), PAST_CACHE_S)
    return sums


def _usage_sums(
    ids: list[int], start: datetime, end: datetime | None, hourly_from: datetime
) -> Sums:
    """Sums of the tenants' ledger over [start, end) (end None: everything from start)
    per bucket (hours from ``hourly_from`` on, whole days before) and flavour (one
    GROUP BY query)."""
    bucket = Case(
        When(interval_start__gte=hourly_from, then=TruncHour("interval_start")),
        default=TruncDay("interval_start"),
        output_field=DateTimeField(),
    )
    window = UsageRecord.objects.filter(tenant_id__in=ids, interval_start__gte=start)
    if end is not None:
        window = window.filter(interval_start__lt=end)
    rows = (
        window.annotate(bucket=bucket)
        .order_by()
        .values("bucket", "flavour_id")
        .annotate(allocated=Sum("gpu_seconds_allocated"), busy=Sum("gpu_seconds_busy"))
    )
    sums: Sums = defaultdict(dict)
    for row in rows:
        moment = row["bucket"]
        if moment.tzinfo is None:  # a CASE of truncations comes back without its zone
            moment = moment.replace(tzinfo=UTC)
        busy = Decimal(row["busy"]) if row["busy"] is not None else None
        sums[moment][row["flavour_id"]] = (Decimal(row["allocated"] or 0), busy)
    return dict(sums)


def team_efficiency(tenant: Tenant, now: datetime) -> list[dict[str, Any]]:
    """Per direct sub-team (its subtree), and the tenant's own work when it has any:
    allocated and busy GPU-hours (GPU-equivalents) over the last EFFICIENCY_DAYS days
    and busy / allocated over the hours where DCGM measured activity. Two queries, kept
    while the ledger does not grow."""
    hour = now.replace(minute=0, second=0, microsecond=0)
    return ledger_cached("efficiency", tenant, hour, lambda: _team_efficiency(tenant, hour))


def _team_efficiency(tenant: Tenant, now: datetime) -> list[dict[str, Any]]:
    tree = list(tenant.subtree().values_list("pk", "path", "parent_id", "slug", "name"))
    teams = [(path, slug, name) for pk, path, parent, slug, name in tree if parent == tenant.pk]
    paths = {pk: path for pk, path, *_ in tree}
    rows = (
        UsageRecord.objects.filter(
            tenant_id__in=list(paths), interval_start__gte=now - timedelta(days=EFFICIENCY_DAYS)
        )
        .order_by()
        .values("tenant_id", "flavour__gpu_equivalent")
        .annotate(
            allocated=Sum("gpu_seconds_allocated"),
            measured=Sum("gpu_seconds_allocated", filter=Q(gpu_seconds_busy__isnull=False)),
            busy=Sum("gpu_seconds_busy"),
        )
    )
    totals: dict[str, dict[str, Decimal]] = defaultdict(
        lambda: {"allocated": Decimal(0), "measured": Decimal(0), "busy": Decimal(0)}
    )
    for row in rows:
        path = paths.get(row["tenant_id"], "")
        owner = next((slug for p, slug, _ in teams if path.startswith(p)), tenant.slug)
        weight = row["flavour__gpu_equivalent"] or Decimal(1)
        total = totals[owner]
        total["allocated"] += Decimal(row["allocated"] or 0) * weight / 3600
        total["measured"] += Decimal(row["measured"] or 0) * weight / 3600
        total["busy"] += Decimal(row["busy"] or 0) * weight / 3600
    names = {slug: name for _, slug, name in teams} | {tenant.slug: tenant.name}
    out = []
    for slug in [*(s for _, s, _ in teams), tenant.slug]:
        if slug == tenant.slug and slug not in totals:
            continue  # the tenant's own line only when its own work used GPUs
        total = totals[slug]
        out.append(
            {
                "slug": slug,
                "name": names[slug],
                "allocated": total["allocated"],
                "busy": total["busy"] if total["measured"] else None,
                "efficiency": total["busy"] / total["measured"] if total["measured"] else None,
            }
        )
    return out
