"""Demo data for `manage.py seed_demo`: an organisation, departments, teams and one user
per role. Higher apps register further seeders (clusters, quotas, usage) that run after.

Everything is get-or-create, so running the seeder twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from tenants.models import Membership, NamespaceBinding, Role, Tenant

DEMO_PASSWORD = "tidegate-demo"  # noqa: S105 - printed to the newcomer on purpose
DEMO_CLUSTER = "demo"

ORGANISATION = ("acme", "Acme AI", "CC-1000")
DEPARTMENTS = {
    "research": ("Research", "CC-2100", ["vision", "nlp", "speech"]),
    "product": ("Product ML", "CC-2200", ["search", "recsys", "ads"]),
    "platform": ("Platform", "CC-2300", ["infra", "data"]),
}
TEAM_NAMES = {
    "vision": "Vision",
    "nlp": "Language",
    "speech": "Speech",
    "search": "Search",
    "recsys": "Recommendations",
    "ads": "Ads ranking",
    "infra": "ML infrastructure",
    "data": "Data engineering",
}
TEAM_WEIGHTS = {"vision": Decimal("2"), "nlp": Decimal("2")}

# (username, role, tenant slug, is_staff, description)
DEMO_USERS = [
    ("admin", None, None, True, "platform administrator (everything, Django admin)"),
    ("finance", Role.FINANCE, "acme", False, "finance for the whole organisation"),
    ("research-admin", Role.ADMIN, "research", False, "admin of the Research department"),
    ("vision-lead", Role.LEAD, "vision", False, "lead of the Vision team"),
    ("vision-member", Role.MEMBER, "vision", False, "member of the Vision team"),
    ("nlp-lead", Role.LEAD, "nlp", False, "lead of the Language team"),
    ("search-member", Role.MEMBER, "search", False, "member of the Search team"),
]


@dataclass
class DemoLogin:
    username: str
    password: str
    description: str


@dataclass
class DemoResult:
    logins: list[DemoLogin] = field(default_factory=list)
    created: int = 0


DemoSeeder = Callable[[DemoResult], None]
DEMO_SEEDERS: list[DemoSeeder] = []


def register_demo_seeder(seeder: DemoSeeder) -> None:
    if seeder not in DEMO_SEEDERS:
        DEMO_SEEDERS.append(seeder)


def _tenant(
    slug: str, name: str, cost_center: str, parent: Tenant | None, weight: Decimal
) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is not None:
        return tenant
    tenant = Tenant.objects.create(
        slug=slug, name=name, cost_center=cost_center, parent=parent, weight=weight
    )
    tenant.path = f"{parent.path if parent else '/'}{tenant.pk}/"
    tenant.depth = parent.depth + 1 if parent else 0
    tenant.save(update_fields=["path", "depth"])
    return tenant


def seed_tenants(result: DemoResult) -> None:
    org_slug, org_name, org_cc = ORGANISATION
    org = _tenant(org_slug, org_name, org_cc, None, Decimal("1"))
    for dept_slug, (dept_name, dept_cc, teams) in DEPARTMENTS.items():
        dept = _tenant(dept_slug, dept_name, dept_cc, org, Decimal("1"))
        for team in teams:
            team_tenant = _tenant(
                team, TEAM_NAMES[team], dept_cc, dept, TEAM_WEIGHTS.get(team, Decimal("1"))
            )
            for suffix in ("train", "dev"):
                NamespaceBinding.objects.get_or_create(
                    cluster_name=DEMO_CLUSTER,
                    namespace=f"{team}-{suffix}",
                    defaults={"tenant": team_tenant},
                )
    user_model: Any = get_user_model()
    for username, role, slug, is_staff, description in DEMO_USERS:
        user = user_model.objects.filter(username=username).first()
        if user is None:
            user = user_model.objects.create_user(
                username=username,
                email=f"{username}@example.com",
                password=DEMO_PASSWORD,
                is_staff=is_staff,
                is_superuser=is_staff,
            )
            result.created += 1
        if role and slug:
            Membership.objects.get_or_create(
                user=user, tenant=Tenant.objects.get(slug=slug), defaults={"role": role}
            )
        result.logins.append(DemoLogin(username, DEMO_PASSWORD, description))


def seed_demo() -> DemoResult:
    """Create (or complete) the demo data in one transaction; returns the demo logins."""
    result = DemoResult()
    with transaction.atomic():
        seed_tenants(result)
        for seeder in DEMO_SEEDERS:
            seeder(result)
    return result
