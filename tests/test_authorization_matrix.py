"""The authorisation matrix, generated from the URL configuration: every route of
``config.urls`` (API, portal, API docs, Django admin) for every role - a platform admin,
a department admin, a lead, a member, a lead of another organisation (the outsider) and
an anonymous caller - with its path filled with objects of one team (vision).

* anonymous: 401/403 on the API, a redirect to the login page on the portal (the admin's
  own login page for the admin); only the routes in ``PUBLIC`` may answer otherwise;
* outsider: 404 on every route naming an object of the team (``SCOPED``);
* everyone else: never a 5xx.

A route missing from ``EXPECTATIONS`` fails ``test_every_route_has_an_expectation``: add
it there, saying what its path parameters are filled with and whether it names an object
of a tenant.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from billing.models import (
    Adjustment,
    BillingPeriod,
    Budget,
    BudgetAlert,
    ExchangeRate,
    RateCard,
    Statement,
    UsageRecord,
    WhatIfRun,
)
from billing.whatif.records import WhatIfParams
from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from scheduler_bridge.workloads.models import PriorityClass, Workload
from tenants.demo import seed_demo
from tenants.models import AuditEvent, Membership, NamespaceBinding, Role, Tenant
from tenants.tokens import token_create

ROLES = ["platform_admin", "dept_admin", "lead", "member", "outsider", "anonymous"]
USERS = {
    "platform_admin": "admin",
    "dept_admin": "research-admin",
    "lead": "vision-lead",
    "member": "vision-member",
    "outsider": "globex-lead",
}
THIS_FILE = "tests/test_authorization_matrix.py"


@dataclass
class World:
    """The objects path parameters are filled with: the vision team's own, or global."""

    values: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


Fill = Callable[[World], dict[str, Any]]


@dataclass(frozen=True)
class Expect:
    fill: Fill
    scoped: bool = False  # names an object of the vision team: 404 for the outsider
    method: str = "get"  # how the outsider asks (a POST-only route is asked with POST)


def _none(world: World) -> dict[str, Any]:
    return {}


def _pk(attribute: str) -> Fill:
    return lambda world: {"pk": getattr(world, attribute).pk}


TEAM = Expect(lambda w: {"slug": "vision"}, scoped=True)
NONE = Expect(_none)

# Routes anyone may call. (/healthz, /readyz and /metrics are answered by middleware
# before the URL configuration; static files by WhiteNoise.)
PUBLIC = {"login", "logout", "set_language", "webhook-suspend-jobs", "admin:login"}

EXPECTATIONS: dict[str, Expect] = {
    # --- portal: tenants
    "portal-home": NONE,
    "portal-tenant": TEAM,
    "portal-member-add": Expect(lambda w: {"slug": "vision"}, scoped=True, method="post"),
    "portal-member-remove": Expect(
        lambda w: {"slug": "vision", "membership_id": w.membership.pk}, scoped=True, method="post"
    ),
    "portal-binding-add": Expect(lambda w: {"slug": "vision"}, scoped=True, method="post"),
    "portal-binding-remove": Expect(
        lambda w: {"slug": "vision", "binding_id": w.binding.pk}, scoped=True, method="post"
    ),
    "portal-audit": NONE,
    "portal-audit-csv": NONE,
    # --- portal: clusters, queues, quotas, workloads
    "portal-clusters": NONE,
    "portal-cluster": Expect(lambda w: {"name": w.cluster.name}),
    "portal-priority-classes": NONE,
    "portal-quota-request-add": Expect(lambda w: {"slug": "vision"}, scoped=True, method="post"),
    "portal-quota-requests": NONE,
    "portal-quota-request-history": NONE,
    "portal-quota-request-withdraw": Expect(
        lambda w: {"request_id": w.quota_request.pk}, scoped=True, method="post"
    ),
    "portal-quota-request-decide": Expect(
        lambda w: {"request_id": w.quota_request.pk, "decision": "approve"},
        scoped=True,
        method="post",
    ),
    "portal-tenant-queue": TEAM,
    "portal-cluster-queue": Expect(lambda w: {"name": w.cluster.name}),
    "portal-workload": Expect(_pk("workload"), scoped=True),
    "portal-workload-cancel": Expect(_pk("workload"), scoped=True, method="post"),
    "portal-workload-standing": Expect(_pk("workload"), scoped=True),
    # --- portal: billing
    "billing-home": NONE,
    "billing-periods": NONE,
    "billing-statement": Expect(_pk("statement"), scoped=True),
    "portal-billing-statement-pdf": Expect(_pk("statement"), scoped=True),
    "billing-cost-centre": Expect(lambda w: {"name": w.period.name}),
    "billing-cost-centre-pdf": Expect(lambda w: {"name": w.period.name}),
    "billing-period-export": Expect(lambda w: {"name": w.period.name, "fmt": "csv"}),
    "portal-billing-period-close": Expect(lambda w: {"name": w.period.name}, method="post"),
    "billing-rate-cards": NONE,
    "billing-rate-card-edit": Expect(_pk("rate_card")),
    "billing-exchange-rates": NONE,
    "billing-budgets": NONE,
    "billing-budget-edit": Expect(_pk("budget"), scoped=True),
    "billing-budget-new": NONE,  # the tenants offered are the reader's own
    "portal-landing": NONE,
    "billing-budget-panel": TEAM,
    "billing-idle": NONE,
    "billing-trend": NONE,
    "billing-allocation": NONE,
    "billing-whatif": NONE,
    "billing-whatif-run": Expect(_pk("whatif_run")),  # what-if runs: no tenant
    "billing-whatif-progress": Expect(_pk("whatif_run")),
    "billing-whatif-again": Expect(_pk("whatif_run"), method="post"),
    # --- portal: dashboards
    "dashboard-home": NONE,
    "dashboard": TEAM,
    "dashboard-part": Expect(lambda w: {"slug": "vision", "part": "holdings"}, scoped=True),
    # --- sign-in, language, webhook
    "login": NONE,
    "logout": NONE,
    "password-change": NONE,  # one's own password
    "set_language": NONE,
    "webhook-suspend-jobs": NONE,
    # --- API: tenants
    "api-root": NONE,
    "api-me": NONE,
    "tenant-list": NONE,
    "tenant-detail": TEAM,
    "membership-list": NONE,
    "membership-detail": Expect(_pk("membership"), scoped=True),
    "binding-list": NONE,
    "binding-detail": Expect(_pk("binding"), scoped=True),
    "audit-event-list": NONE,
    "audit-event-detail": Expect(_pk("audit_event"), scoped=True),
    "api-token-list": NONE,
    "api-token-detail": Expect(_pk("token"), scoped=True),  # the lead's own
    # --- API: scheduler bridge
    "cluster-list": NONE,
    "cluster-detail": Expect(lambda w: {"name": w.cluster.name}),
    "cluster-mig-plan": Expect(lambda w: {"name": w.cluster.name}),
    "cluster-sync": Expect(lambda w: {"name": w.cluster.name}, method="post"),
    "node-list": NONE,
    "node-detail": Expect(_pk("node")),
    "node-pin": Expect(_pk("node"), method="post"),
    "flavour-list": NONE,
    "flavour-detail": Expect(_pk("flavour")),
    "quota-list": NONE,
    "quota-detail": Expect(_pk("quota"), scoped=True),
    "quota-request-list": NONE,
    "quota-request-detail": Expect(_pk("quota_request"), scoped=True),
    "quota-request-approve": Expect(_pk("quota_request"), scoped=True, method="post"),
    "quota-request-cancel": Expect(_pk("quota_request"), scoped=True, method="post"),
    "quota-request-reject": Expect(_pk("quota_request"), scoped=True, method="post"),
    "workload-list": NONE,
    "workload-detail": Expect(_pk("workload"), scoped=True),
    "workload-cancel": Expect(_pk("workload"), scoped=True, method="post"),
    "workload-finish": Expect(_pk("workload"), scoped=True, method="post"),
    "priority-class-list": NONE,
    "priority-class-detail": Expect(lambda w: {"name": w.priority_class.name}),
    # --- API: billing
    "billing-rate-card-list": NONE,
    "billing-rate-card-detail": Expect(_pk("rate_card")),
    "billing-exchange-rate-list": NONE,
    "billing-exchange-rate-detail": Expect(_pk("exchange_rate")),
    "billing-policy-list": NONE,
    "billing-tenant-settings-list": NONE,
    "billing-tenant-settings-detail": Expect(lambda w: {"tenant": "vision"}, scoped=True),
    "billing-usage-list": NONE,
    "billing-usage-detail": Expect(_pk("usage"), scoped=True),
    "billing-period-list": NONE,
    "billing-period-detail": Expect(lambda w: {"name": w.period.name}),
    "billing-period-close": Expect(lambda w: {"name": w.period.name}, method="post"),
    "billing-period-reopen": Expect(lambda w: {"name": w.period.name}, method="post"),
    "billing-statement-list": NONE,
    "billing-statement-detail": Expect(_pk("statement"), scoped=True),
    "billing-statement-pdf": Expect(_pk("statement"), scoped=True),
    "billing-statement-workloads": Expect(_pk("statement"), scoped=True),
    "billing-adjustment-list": NONE,
    "billing-adjustment-detail": Expect(_pk("adjustment"), scoped=True),
    "billing-budget-list": NONE,
    "billing-budget-detail": Expect(_pk("budget"), scoped=True),
    "billing-budget-alert-list": NONE,
    "billing-budget-alert-detail": Expect(_pk("budget_alert"), scoped=True),
    "billing-report-spend-list": NONE,
    "billing-report-efficiency-list": NONE,
    "billing-report-idle-list": NONE,
    "billing-report-workloads-list": NONE,
    "billing-export-list": NONE,
    "billing-export-cost-centre": NONE,
    "billing-collection-list": NONE,
    "allocation-list": NONE,
    "what-if-list": NONE,
    "what-if-detail": Expect(_pk("whatif_run")),
    "what-if-rerun": Expect(_pk("whatif_run"), method="post"),
    # --- API schema and its documentation pages
    "api-schema": NONE,
    "api-docs": NONE,
    "api-redoc": NONE,
}

# The Django admin: every route is the admin's own (staff only; others are sent to its
# login page), filled with these values by parameter name.
PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>")
ADMIN_VALUES = {
    "app_label": "tenants",
    "object_id": "0",
    "id": "0",
    "content_type_id": "1",
    "url": "x",
}


@dataclass(frozen=True)
class Route:
    name: str
    pattern: str
    admin: bool


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[Route]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern), inner)
        elif isinstance(entry, URLPattern):
            pattern = prefix + str(entry.pattern)
            if "(?P<format>" in pattern:
                continue  # DRF's ".json" variant of a route listed without it
            yield Route(f"{namespace}{entry.name or ''}", pattern, namespace == "admin:")


def routes() -> list[Route]:
    return list(_walk(get_resolver().url_patterns))


def test_every_route_has_an_expectation() -> None:
    missing = [
        f"{route.pattern} (name {route.name or 'none'!r})"
        for route in routes()
        if not route.admin and route.name not in EXPECTATIONS
    ]
    assert not missing, (
        f"routes without an expectation in the authorisation matrix: {missing}. Add each "
        f"to EXPECTATIONS in {THIS_FILE}: how its path is filled, whether it names an "
        "object of a tenant (scoped=True: the outsider gets 404) and, for a POST-only "
        "route, method='post'. A route for anonymous callers also goes in PUBLIC."
    )
    unnamed = [route.pattern for route in routes() if not route.name and not route.admin]
    assert not unnamed, f"give these routes a name (the matrix keys on it): {unnamed}"


def test_expectations_name_only_routes_that_exist() -> None:
    names = {route.name for route in routes()}
    assert not set(EXPECTATIONS) - names, "stale entries in EXPECTATIONS"


@pytest.fixture(scope="module")
def built_world(django_db_setup: Any, django_db_blocker: Any) -> Iterator[World]:
    """The demo and an outsider, built once for the module and rolled back after it
    (each test runs inside it, in a transaction of its own)."""
    with django_db_blocker.unblock(), transaction.atomic():
        yield _build_world()
        transaction.set_rollback(True)


@pytest.fixture
def world(built_world: World, db: Any) -> World:
    return built_world


def _build_world() -> World:
    seed_demo()
    globex = Tenant.objects.create(slug="globex", name="Globex", path="")
    globex.path = f"/{globex.pk}/"
    globex.save(update_fields=["path"])
    outsider = get_user_model().objects.create_user("globex-lead", password="pw")
    Membership.objects.create(user=outsider, tenant=globex, role=Role.LEAD)
    vision = Tenant.objects.get(slug="vision")
    lead = get_user_model().objects.get(username="vision-lead")
    cluster = Cluster.objects.order_by("pk").first()
    flavour = Flavour.objects.order_by("pk").first()
    period = BillingPeriod.objects.filter(state=BillingPeriod.State.CLOSED).first()
    budget = Budget.objects.filter(tenant=vision).first()
    assert cluster and flavour and period and budget, "the demo changed: fill the world"
    QuotaRequest.objects.create(
        tenant=vision, flavour=flavour, guaranteed=1, justification="more", requested_by=lead
    )
    WhatIfRun.objects.create(
        kind=WhatIfRun.Kind.WHATIF,
        cluster=cluster,
        params=WhatIfParams(days=7).as_json(),
        requested_by=lead,
    )
    ExchangeRate.objects.get_or_create(
        month=period.name, from_currency="EUR", to_currency="USD", defaults={"rate": "1.1"}
    )
    Adjustment.objects.create(
        tenant=vision, period=period, amount="-5", currency="USD", reason="goodwill"
    )
    BudgetAlert.objects.create(
        budget=budget,
        period_name=period.name,
        threshold=80,
        spent="80",
        amount="100",
        currency="USD",
    )
    values: dict[str, Any] = {
        "membership": Membership.objects.get(user__username="vision-member"),
        "binding": NamespaceBinding.objects.filter(tenant=vision).first(),
        "audit_event": AuditEvent.objects.filter(tenant=vision).first(),
        "token": token_create(user=lead, name="matrix")[0],
        "cluster": Cluster.objects.first(),
        "node": Node.objects.first(),
        "flavour": Flavour.objects.first(),
        "quota": Quota.objects.filter(tenant=vision).first(),
        "quota_request": QuotaRequest.objects.filter(tenant=vision).first(),
        "workload": Workload.objects.filter(tenant=vision).first(),
        "priority_class": PriorityClass.objects.first(),
        "rate_card": RateCard.objects.first(),
        "exchange_rate": ExchangeRate.objects.first(),
        "usage": UsageRecord.objects.filter(tenant=vision).first(),
        "period": BillingPeriod.objects.filter(state=BillingPeriod.State.CLOSED).first(),
        "statement": Statement.objects.filter(tenant=vision).first(),
        "adjustment": Adjustment.objects.filter(tenant=vision).first(),
        "budget": Budget.objects.filter(tenant=vision).first(),
        "budget_alert": BudgetAlert.objects.filter(budget__tenant=vision).first(),
        "whatif_run": WhatIfRun.objects.filter(requested_by=lead).first(),
    }
    return World(values)


def _url(route: Route, world: World) -> str | None:
    """The route's path with its parameters filled; None when the world lacks the object."""
    if route.admin:
        kwargs = {key: ADMIN_VALUES[key] for key in _parameters(route)}
    else:
        try:
            kwargs = EXPECTATIONS[route.name].fill(world)
        except AttributeError:
            return None
        if any(value is None for value in kwargs.values()):
            return None
    return reverse(route.name, kwargs=kwargs)


def _parameters(route: Route) -> list[str]:
    return [a or b for a, b in PARAMETER.findall(route.pattern)]


def _client(role: str) -> Client:
    client = Client()
    if role != "anonymous":
        client.force_login(get_user_model().objects.get(username=USERS[role]))
    return client


def _is_api(route: Route) -> bool:
    return route.pattern.startswith("api/")


def _verdict(route: Route, role: str, method: str, response: Any) -> str | None:
    """What is wrong with ``response``, or None."""
    code = response.status_code
    if code >= 500:
        return f"{code}"
    if route.name in PUBLIC:
        return None
    if role == "anonymous":
        if _is_api(route):
            return None if code in (401, 403) else f"{code}, not 401/403"
        location = response.get("Location", "")
        login = "/admin/login/" if route.admin else "/accounts/login/"
        if code != 302 or not location.startswith(login):
            return f"{code} {location}, not a redirect to {login}"
        return None
    if role == "outsider" and not route.admin and EXPECTATIONS[route.name].scoped:
        return None if code == 404 else f"{code}, not 404"
    if route.admin and role not in ("platform_admin",) and code != 302:
        return f"{code}: the admin is for platform administrators"
    return None


@pytest.mark.parametrize("role", ROLES)
def test_every_route_answers_each_role_as_expected(world: World, role: str) -> None:
    client = _client(role)
    wrong: list[str] = []
    unfilled: list[str] = []
    for route in routes():
        if route.admin and (route.name == "admin:" or route.name == "admin:logout"):
            continue  # the admin's unnamed catch-all; its logout would end the walk
        if route.name == "logout" and role != "anonymous":
            continue  # would sign the rest of the walk out
        url = _url(route, world)
        if url is None:
            unfilled.append(route.name)
            continue
        expect = None if route.admin else EXPECTATIONS[route.name]
        methods = ["get"]
        if role == "anonymous":
            methods = ["get", "post"]
        elif role == "outsider" and expect is not None and expect.method == "post":
            methods = ["post"]
        for method in methods:
            response = getattr(client, method)(url)
            problem = _verdict(route, role, method, response)
            if problem:
                wrong.append(f"{method.upper()} {url} ({route.name}): {problem}")
    assert not unfilled, f"the matrix's world has no object for {unfilled}"
    assert not wrong, f"{role}:\n" + "\n".join(wrong)
