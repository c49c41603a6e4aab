"""The data behind benchmarks/portal.py: an organisation of departments and teams on one
cluster, with quotas, rate cards, an hourly usage ledger (closed months with their
statements, the current month open), budgets, a year of finished work and a deep queue.

The ledger is written in SQL (generate_series, a month per INSERT): every team runs a
training job on its flavour in most hours (a job lasts 12 hours; four of them at once in
the big teams), a notebook on an A100 in office hours on weekdays (mostly idle), and
every third team a small inference service on MIG slices. Months are closed with the
product's own `billing.statements.periods.period_close`, budgets evaluated with `budgets_evaluate`
and the queue decided by the product's admission cycle (`decide_and_persist`), so
statements, budget states, queue positions and reasons are what the product writes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

HOUR = timedelta(hours=1)
CLUSTER = "east"
GPUS_PER_NODE = 8
MIG_SLICES_PER_GPU = 7
BLOCK_HOURS = 12  # a training job's length
BIG_TEAM_EVERY = 19  # every 19th team is big: four training jobs at once, 8 GPUs each


@dataclass(frozen=True)
class Size:
    """How much data one run builds."""

    label: str
    departments: int
    teams: int
    history: timedelta  # of ledger rows, up to the benchmark's now
    pending: int
    finished: int  # workloads finished before now, spread over the history
    h100_nodes: int
    a100_nodes: int
    mig_nodes: int

    @property
    def tenants(self) -> int:
        return 1 + self.departments + self.teams


LARGE = Size("large", 10, 189, timedelta(days=365), 5000, 20_000, 64, 64, 8)
SMALL = Size("small", 3, 16, timedelta(days=37), 50, 100, 8, 8, 1)


@dataclass
class Built:
    """What the pages are measured on."""

    size: Size
    rows: int = 0
    pending: int = 0
    running: int = 0
    workloads: int = 0
    statements: int = 0
    team: str = ""  # a big team, whose lead is measured
    department: str = ""  # its department
    organisation: str = ""
    statement_pk: int = 0  # the big team's statement of the last closed month
    last_closed: str = ""
    users: dict[str, str] = field(default_factory=dict)  # role -> username


def benchmark_now(real: datetime) -> datetime:
    """The moment the benchmark pretends it is: the 28th, 12:00 UTC, of the month before
    the real one. Late in a month the open period (priced on the fly) and the budget
    window hold four weeks of rows, so the figures do not depend on the day they run."""
    first = real.astimezone(UTC).replace(day=1, hour=12, minute=0, second=0, microsecond=0)
    return (first - timedelta(days=1)).replace(day=28)


def build(size: Size, now: datetime, track: Callable[..., Any]) -> Built:
    from benchmarks._support import progress

    built = Built(size)
    progress(f"[{size.label}] tenants, cluster, quotas, rate cards ...")
    cluster, flavours = _cluster(size)
    org, departments, teams = _tenants(size)
    _quotas(flavours, org, departments, teams)
    _rates_and_policy(now - size.history, org, departments)
    built.users = _users(org, departments, teams)
    big = teams[0]
    built.team, built.department, built.organisation = big.slug, departments[0].slug, org.slug
    built.rows = _ledger(size, cluster, flavours, teams, now, track)
    built.last_closed, built.statements = _close_months(now, track)
    built.statement_pk = _statement_of(big, built.last_closed)
    _budgets(departments, teams, built.last_closed, now)
    _finished_work(size, cluster, flavours, teams, now)
    built.running, built.pending = _queue(size, cluster, flavours, teams, now)
    from scheduler_bridge.workloads.models import Workload

    built.workloads = Workload.objects.count()
    return built


def _cluster(size: Size) -> tuple[Any, dict[str, Any]]:
    from scheduler_bridge.inventory.models import Cluster, Flavour, Node
    from scheduler_bridge.workloads.models import PriorityClass

    cluster = Cluster.objects.create(
        name=CLUSTER, display_name="East (benchmark)", gateway=Cluster.Gateway.SIMULATED
    )
    shapes = [
        ("h100-80gb", "H100-80GB", "nvidia.com/gpu", "", Decimal(1), size.h100_nodes, 8),
        ("a100-sxm4-80gb", "A100-SXM4-80GB", "nvidia.com/gpu", "", Decimal(1), size.a100_nodes, 8),
        (
            "h100-80gb-mig-1g.10gb",
            "H100-80GB",
            "nvidia.com/mig-1g.10gb",
            "1g.10gb",
            Decimal("0.1429"),
            size.mig_nodes,
            GPUS_PER_NODE * MIG_SLICES_PER_GPU,
        ),
    ]
    flavours = {}
    nodes = []
    for name, product, resource, profile, weight, count, per_node in shapes:
        flavours[name] = Flavour.objects.create(
            cluster=cluster,
            name=name,
            product=product,
            resource_name=resource,
            mig_profile=profile,
            gpu_equivalent=weight,
            capacity=count * per_node,
        )
        for i in range(count):
            nodes.append(
                Node(
                    cluster=cluster,
                    name=f"{name.split('-')[0]}{'-mig' if profile else ''}-{i:03d}",
                    product=product,
                    gpu_count=GPUS_PER_NODE,
                    mig_capable=product.startswith("H100"),
                    mig_strategy="mixed" if profile else "",
                    gpu_layouts=[["1g.10gb"] * MIG_SLICES_PER_GPU] * GPUS_PER_NODE
                    if profile
                    else [None] * GPUS_PER_NODE,
                    allocatable={resource: per_node},
                    topology_domain=f"clique.{i // 8}",
                )
            )
    Node.objects.bulk_create(nodes)
    for name, value, preemptible, multiplier, default in [
        ("spot", -10, True, "0.5", False),
        ("batch", 0, True, "1", True),
        ("prod", 100, False, "1.5", False),
    ]:
        PriorityClass.objects.get_or_create(
            name=name,
            defaults={
                "value": value,
                "preemptible": preemptible,
                "price_multiplier": Decimal(multiplier),
                "is_default": default,
            },
        )
    return cluster, flavours


def _tenants(size: Size) -> tuple[Any, list[Any], list[Any]]:
    from tenants.models import NamespaceBinding, Tenant

    org = Tenant.objects.create(slug="acme", name="Acme AI", cost_center="CC-1000")
    org.path = f"/{org.pk}/"
    org.save(update_fields=["path"])
    departments = Tenant.objects.bulk_create(
        Tenant(
            slug=f"dept-{d}",
            name=f"Department {d}",
            cost_center=f"CC-{2100 + d * 100}",
            parent=org,
            depth=1,
        )
        for d in range(size.departments)
    )
    for dept in departments:
        dept.path = f"{org.path}{dept.pk}/"
    Tenant.objects.bulk_update(departments, ["path"])
    teams = Tenant.objects.bulk_create(
        Tenant(
            slug=f"team-{t}",
            name=f"Team {t}",
            cost_center=departments[t % size.departments].cost_center,
            parent=departments[t % size.departments],
            depth=2,
            weight=Decimal(2) if t % BIG_TEAM_EVERY == 0 else Decimal(1),
        )
        for t in range(size.teams)
    )
    for t, team in enumerate(teams):
        team.path = f"{departments[t % size.departments].path}{team.pk}/"
    Tenant.objects.bulk_update(teams, ["path"])
    NamespaceBinding.objects.bulk_create(
        NamespaceBinding(
            tenant=team, cluster_name=CLUSTER, namespace=f"{team.slug}-{suffix}", sync_state="ok"
        )
        for team in teams
        for suffix in ("train", "dev")
    )
    return org, departments, teams


def _quotas(flavours: dict[str, Any], org: Any, departments: list[Any], teams: list[Any]) -> None:
    """The organisation is guaranteed every flavour's capacity; departments 90 % of it
    between them; teams split their department's share (and may borrow up to it)."""
    from scheduler_bridge.quotas.models import Quota

    quotas = []
    for flavour in flavours.values():
        quotas.append(Quota(tenant=org, flavour=flavour, guaranteed=flavour.capacity))
        share = int(flavour.capacity * 0.9) // len(departments)
        for dept in departments:
            quotas.append(Quota(tenant=dept, flavour=flavour, guaranteed=share, lend_limit=share))
            members = [t for t in teams if t.parent_id == dept.pk]
            for team in members:
                quotas.append(
                    Quota(
                        tenant=team,
                        flavour=flavour,
                        guaranteed=share // len(members),
                        borrow_limit=share,
                    )
                )
    Quota.objects.bulk_create(quotas)


def _rates_and_policy(start: datetime, org: Any, departments: list[Any]) -> None:
    from billing.models import BillingPolicy, RateCard, TenantBillingSettings

    day = (start - timedelta(days=31)).date()
    for name, product, profile, reserved, on_demand in [
        ("H100 80GB", "H100-80GB", "", "2.5000", "3.7500"),
        ("A100 80GB", "A100-SXM4-80GB", "", "1.6000", "2.4000"),
        ("H100 1g.10gb", "H100-80GB", "1g.10gb", "0.4000", "0.6000"),
        ("Any other GPU", "", "", "1.0000", "1.5000"),
    ]:
        RateCard.objects.create(
            name=name,
            product=product,
            mig_profile=profile,
            currency="USD",
            reserved_price=Decimal(reserved),
            on_demand_price=Decimal(on_demand),
            priority_multipliers={"spot": "0.6"},
            valid_from=day,
        )
    policy = BillingPolicy.current()
    policy.idle_mode = BillingPolicy.IdleMode.LINE
    policy.save()
    TenantBillingSettings.objects.create(tenant=org, mode="chargeback")
    TenantBillingSettings.objects.create(tenant=departments[-1], mode="showback")


def _users(org: Any, departments: list[Any], teams: list[Any]) -> dict[str, str]:
    from django.contrib.auth import get_user_model

    from tenants.models import Membership, Role

    users: Any = get_user_model().objects
    users.create_user("admin", "admin@example.com", "x", is_staff=True, is_superuser=True)
    for username, role, tenant in [
        ("finance", Role.FINANCE, org),
        ("org-lead", Role.LEAD, org),
        ("team-lead", Role.LEAD, teams[0]),
        ("dept-lead", Role.LEAD, departments[0]),
    ]:
        user = users.create_user(username, f"{username}@example.com", "x")
        Membership.objects.create(user=user, tenant=tenant, role=role)
    return {
        "admin": "admin",
        "finance": "finance",
        "lead": "team-lead",
        "dept": "dept-lead",
        "org": "org-lead",
    }


LEDGER_COLUMNS = (
    "tenant_id, cluster_id, flavour_id, period_id, namespace, pod_uid, pod_name, workload_id, "
    "job_name, priority_class, source, interval_start, interval_end, devices, "
    "gpu_seconds_allocated, gpu_seconds_busy, gpu_seconds_borrowed, created_at"
)
# Hour h counts from %(start)s; teams come in as parallel arrays. A training job runs
# in 85 % of the 12-hour blocks (pseudo-randomly per team and block); one block in
# eleven it sits nearly idle; one in five it borrows half its GPUs.
TRAINING_SQL = f"""
INSERT INTO billing_usagerecord ({LEDGER_COLUMNS})
SELECT t.id, %(cluster)s, t.flavour, %(period)s, t.slug || '-train',
       t.slug || '-train-' || j || '-' || (h / {BLOCK_HOURS}),
       t.slug || '-train-' || j || '-' || (h / {BLOCK_HOURS}) || '-0',
       NULL, t.slug || '-train-' || j || '-' || (h / {BLOCK_HOURS}), t.priority, 'pod',
       %(start)s + make_interval(hours => h), %(start)s + make_interval(hours => h + 1),
       t.gpus, t.gpus * 3600,
       round(t.gpus * 3600 * CASE WHEN (t.id * 13 + j * 7 + h / {BLOCK_HOURS}) %% 11 = 0
                                  THEN 0.02
                                  ELSE 0.45 + ((t.id * 31 + h * 17 + j) %% 50) / 100.0 END, 3),
       CASE WHEN (t.id + j + h / {BLOCK_HOURS}) %% 5 = 0 THEN (t.gpus / 2) * 3600 ELSE 0 END,
       now()
FROM generate_series(%(h0)s, %(h1)s - 1) AS h,
     unnest(%(ids)s::bigint[], %(slugs)s::text[], %(flavours)s::bigint[], %(gpus)s::int[],
            %(parallel)s::int[], %(priorities)s::text[])
         AS t(id, slug, flavour, gpus, parallel, priority),
     generate_series(1, t.parallel) AS j
WHERE (t.id * 7919 + j * 104729 + (h / {BLOCK_HOURS}) * 31) %% 100 < 85
"""  # noqa: S608 - constants only
NOTEBOOK_SQL = f"""
INSERT INTO billing_usagerecord ({LEDGER_COLUMNS})
SELECT t.id, %(cluster)s, %(flavour)s, %(period)s, t.slug || '-dev', t.slug || '-notebook',
       t.slug || '-notebook', NULL, '', 'batch', 'pod',
       %(start)s + make_interval(hours => h), %(start)s + make_interval(hours => h + 1),
       1, 3600, 36 + 360 * ((t.id + h) %% 4), 0, now()
FROM generate_series(%(h0)s, %(h1)s - 1) AS h,
     unnest(%(ids)s::bigint[], %(slugs)s::text[]) AS t(id, slug)
WHERE extract(isodow FROM (%(start)s + make_interval(hours => h)) AT TIME ZONE 'UTC') < 6
  AND extract(hour FROM (%(start)s + make_interval(hours => h)) AT TIME ZONE 'UTC')
      BETWEEN 8 AND 19
"""  # noqa: S608 - constants only
INFERENCE_SQL = f"""
INSERT INTO billing_usagerecord ({LEDGER_COLUMNS})
SELECT t.id, %(cluster)s, %(flavour)s, %(period)s, t.slug || '-dev', t.slug || '-inference',
       t.slug || '-inference', NULL, '', 'prod', 'pod',
       %(start)s + make_interval(hours => h), %(start)s + make_interval(hours => h + 1),
       2, 7200, 7200 * (0.3 + ((t.id * 7 + h) %% 30) / 100.0), 0, now()
FROM generate_series(%(h0)s, %(h1)s - 1) AS h,
     unnest(%(ids)s::bigint[], %(slugs)s::text[]) AS t(id, slug)
"""  # noqa: S608 - constants only


def _ledger(
    size: Size,
    cluster: Any,
    flavours: dict[str, Any],
    teams: list[Any],
    now: datetime,
    track: Callable[..., Any],
) -> int:
    from django.db import connection, transaction

    from billing.months import add_months, month_start
    from billing.usage.ledger import period_create

    start = (now - size.history).replace(minute=0, second=0, microsecond=0)
    end = now.replace(minute=0, second=0, microsecond=0)
    hours = int((end - start) / HOUR)
    big = [t % BIG_TEAM_EVERY == 0 for t in range(len(teams))]
    training = {
        "ids": [t.pk for t in teams],
        "slugs": [t.slug for t in teams],
        "flavours": [
            flavours["h100-80gb" if i % 2 == 0 else "a100-sxm4-80gb"].pk for i in range(len(teams))
        ],
        "gpus": [8 if b else 4 for b in big],
        "parallel": [4 if b else 1 for b in big],
        "priorities": ["spot" if i % 3 == 2 else "batch" for i in range(len(teams))],
    }
    everyone = {"ids": training["ids"], "slugs": training["slugs"]}
    serving = {"ids": training["ids"][::3], "slugs": training["slugs"][::3]}
    months = []
    moment = month_start(start)
    while moment < end:
        months.append(period_create(moment))
        moment = add_months(moment, 1)
    for period in track(months, description=f"[{size.label}] ledger, a month at a time"):
        h0 = max(0, int((period.start - start) / HOUR))
        h1 = min(hours, int((period.end - start) / HOUR))
        common = {"cluster": cluster.pk, "period": period.pk, "start": start, "h0": h0, "h1": h1}
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(TRAINING_SQL, {**common, **training})
            cursor.execute(
                NOTEBOOK_SQL, {**common, **everyone, "flavour": flavours["a100-sxm4-80gb"].pk}
            )
            cursor.execute(
                INFERENCE_SQL,
                {**common, **serving, "flavour": flavours["h100-80gb-mig-1g.10gb"].pk},
            )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE billing_usagerecord")
        cursor.execute("SELECT count(*) FROM billing_usagerecord")
        return int(cursor.fetchone()[0])


def _close_months(now: datetime, track: Callable[..., Any]) -> tuple[str, int]:
    """Close every month that has ended, oldest first, as finance would."""
    from django.db import connection

    from billing.models import BillingPeriod, Statement
    from billing.statements.periods import period_close

    ended = list(BillingPeriod.objects.filter(end__lte=now).order_by("start"))
    for period in track(ended, description="closing ended months"):
        period_close(actor=None, period=period, source="system", now=now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE billing_statement; ANALYZE billing_statementline")
    return (ended[-1].name if ended else ""), Statement.objects.count()


def _statement_of(tenant: Any, period_name: str) -> int:
    from billing.models import Statement

    statement = Statement.objects.filter(tenant=tenant, period__name=period_name).first()
    return statement.pk if statement else 0


def _budgets(departments: list[Any], teams: list[Any], last_closed: str, now: datetime) -> None:
    """Monthly budgets for every department and every fifth team, sized on last month's
    statements: some on track, some tight, a few hard ones that run out."""
    from billing.budgeting.budgets import budgets_evaluate
    from billing.models import Budget, BudgetAlert, Statement

    totals: dict[int, Decimal] = {}
    for statement in Statement.objects.filter(period__name=last_closed).select_related("tenant"):
        if statement.tenant is None:
            continue
        for ancestor in statement.tenant.ancestor_ids():
            totals[ancestor] = totals.get(ancestor, Decimal(0)) + statement.total
    chosen = [*departments, *teams[::5]]
    for i, tenant in enumerate(chosen):
        factor = Decimal(["1.3", "1.05", "0.8", "1.6"][i % 4])
        Budget.objects.create(
            tenant=tenant,
            cadence=Budget.Cadence.MONTH,
            amount=max(Decimal(100), (totals.get(tenant.pk, Decimal(0)) * factor).quantize(1)),
            currency="USD",
            enforcement=Budget.Enforcement.HARD if i % 7 == 3 else Budget.Enforcement.SOFT,
        )
    budgets_evaluate(now=now)
    BudgetAlert.objects.filter(emailed_at__isnull=True).update(emailed_at=now)


def _pod_sets(count: int, gpus: int, flavour: str) -> list[dict[str, Any]]:
    return [{"name": "main", "count": count, "gpus_per_pod": gpus, "flavours": [flavour]}]


def _finished_work(
    size: Size, cluster: Any, flavours: dict[str, Any], teams: list[Any], now: datetime
) -> None:
    """A history of finished work: the workload table holds far more closed rows than
    open ones, as it does after a year."""
    from scheduler_bridge.workloads.models import Workload

    rng = random.Random(13)
    span = size.history.total_seconds()
    rows = []
    for i in range(size.finished):
        team = teams[i % len(teams)]
        flavour = flavours["h100-80gb" if i % 2 == 0 else "a100-sxm4-80gb"]
        submitted = now - timedelta(seconds=rng.uniform(3600, span))
        admitted = submitted + timedelta(minutes=rng.randint(1, 600))
        finished = admitted + timedelta(hours=rng.randint(1, 24))
        gpus = rng.choice([1, 2, 4, 8])
        rows.append(
            Workload(
                cluster=cluster,
                tenant=team,
                name=f"{team.slug}-done-{i}",
                namespace=f"{team.slug}-train",
                pod_sets=_pod_sets(1, gpus, flavour.name),
                state=Workload.State.FINISHED if i % 10 else Workload.State.FAILED,
                submitted_at=submitted,
                admitted_at=admitted,
                started_at=admitted,
                finished_at=min(finished, now),
                flavour=flavour,
                gpus=gpus,
                placements=[{"node": "h100-000", "flavour": flavour.name, "gpus": gpus}],
            )
        )
    Workload.objects.bulk_create(rows, batch_size=2000)


def _queue(
    size: Size, cluster: Any, flavours: dict[str, Any], teams: list[Any], now: datetime
) -> tuple[int, int]:
    """Running work that fills most of the cluster, then a deep queue in front of it,
    decided by the product's admission cycle (positions and reasons are its own)."""
    from django.db import connection

    from benchmarks._support import progress
    from scheduler_bridge.workloads.cycle import decide_and_persist
    from scheduler_bridge.workloads.models import PriorityClass, Workload

    classes = {p.name: p for p in PriorityClass.objects.all()}
    rng = random.Random(29)

    def workload(team: Any, name: str, pod_sets: Any, pclass: str, **extra: Any) -> Any:
        priority = classes[pclass]
        return Workload(
            cluster=cluster,
            tenant=team,
            name=name,
            namespace=f"{team.slug}-train",
            pod_sets=pod_sets,
            priority_class=priority,
            priority=priority.value,
            preemptible=priority.preemptible,
            submitted_at=now - timedelta(seconds=rng.uniform(60, 3 * 86_400)),
            **extra,
        )

    running = []
    for i, team in enumerate(teams):
        flavour = "h100-80gb" if i % 2 == 0 else "a100-sxm4-80gb"
        running.append(workload(team, f"{team.slug}-train-now", _pod_sets(1, 4, flavour), "batch"))
        if i % 3 == 0:
            running.append(
                workload(
                    team,
                    f"{team.slug}-serve",
                    _pod_sets(2, 1, "h100-80gb-mig-1g.10gb"),
                    "prod",
                )
            )
    Workload.objects.bulk_create(running)
    progress(f"[{size.label}] admission cycle over {len(running)} workloads to start")
    decide_and_persist(cluster)
    _start_admitted(now)

    shapes = [
        (1, 1, "h100-80gb", "none"),
        (1, 2, "a100-sxm4-80gb", "none"),
        (2, 4, "h100-80gb", "none"),
        (1, 8, "a100-sxm4-80gb", "node"),
        (4, 1, "h100-80gb-mig-1g.10gb", "none"),
        (2, 8, "h100-80gb", "domain"),
        (1, 16, "h100-80gb", "node"),  # can never fit: no node has 16 GPUs
    ]
    made = 0
    for _round in range(8):  # admission takes what fits; top the queue up until it is full
        missing = size.pending - Workload.objects.filter(state=Workload.State.PENDING).count()
        if missing <= 0:
            break
        batch = []
        for _ in range(missing):
            i = made
            made += 1
            team = teams[rng.randrange(len(teams))]
            count, gpus, flavour, topology = shapes[i % len(shapes)]
            batch.append(
                workload(
                    team,
                    f"{team.slug}-job-{i}",
                    _pod_sets(count, gpus, flavour),
                    rng.choice(["batch", "batch", "spot", "prod"]),
                    topology=topology,
                )
            )
        Workload.objects.bulk_create(batch, batch_size=2000)
        progress(f"[{size.label}] admission cycle over {len(batch)} more queued workloads")
        decide_and_persist(cluster)
        _start_admitted(now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_bridge_workload")
    active = Workload.objects.filter(state__in=Workload.ACTIVE_STATES).count()
    return active, Workload.objects.filter(state=Workload.State.PENDING).count()


def _start_admitted(now: datetime) -> None:
    """What the reconciler would do once the cluster started the pods."""
    from scheduler_bridge.workloads.models import Workload

    Workload.objects.filter(state=Workload.State.ADMITTED).update(
        state=Workload.State.RUNNING, started_at=now
    )
