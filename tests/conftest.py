"""Standing cast for every test: one organisation tree and a user for every role, plus an
outsider who belongs to another tenant and must never see the others' data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings
from django.utils import translation
from rest_framework.test import APIClient

from tenants.models import Role, Tenant
from tests.factories import MembershipFactory, TenantFactory, UserFactory


@dataclass
class Cast:
    org: Tenant
    dept: Tenant
    team_a: Tenant
    team_b: Tenant
    other_org: Tenant
    platform_admin: Any
    dept_admin: Any
    finance: Any
    lead: Any
    member: Any
    outsider: Any

    def user(self, name: str) -> Any:
        return getattr(self, name)


@pytest.fixture(autouse=True)
def site_language() -> Any:
    """Every test starts in the site's language: a request in Chinese leaves Chinese active on
    its thread (Django's locale middleware activates and never deactivates), and messages built
    later on that thread outside a request would otherwise be translated."""
    with translation.override(settings.LANGUAGE_CODE):
        yield


ROLE_NAMES = ["platform_admin", "dept_admin", "finance", "lead", "member", "outsider"]


@pytest.fixture
def cast(db: Any) -> Cast:
    org = TenantFactory(slug="acme", name="Acme")
    dept = TenantFactory(slug="research", parent=org)
    team_a = TenantFactory(slug="vision", parent=dept)
    team_b = TenantFactory(slug="speech", parent=dept)
    other_org = TenantFactory(slug="globex", name="Globex")
    platform_admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    dept_admin = UserFactory(username="dept-admin")
    finance = UserFactory(username="money")
    lead = UserFactory(username="vision-lead")
    member = UserFactory(username="vision-member")
    outsider = UserFactory(username="globex-member")
    MembershipFactory(user=dept_admin, tenant=dept, role=Role.ADMIN)
    MembershipFactory(user=finance, tenant=org, role=Role.FINANCE)
    MembershipFactory(user=lead, tenant=team_a, role=Role.LEAD)
    MembershipFactory(user=member, tenant=team_a, role=Role.MEMBER)
    MembershipFactory(user=outsider, tenant=other_org, role=Role.LEAD)
    return Cast(
        org,
        dept,
        team_a,
        team_b,
        other_org,
        platform_admin,
        dept_admin,
        finance,
        lead,
        member,
        outsider,
    )


@pytest.fixture(autouse=True)
def empty_cache() -> Any:
    """Every test starts with an empty Django cache: rate-limit counts (and cached
    reads) of one test never reach the next."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def api() -> APIClient:
    return APIClient()


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def pytest_configure(config: Any) -> None:
    """The compiled catalogues are build output (``make`` writes them); a plain
    ``pytest`` builds any that are missing or stale before Django loads them."""
    from pathlib import Path

    from tenants.management.commands.compile_catalogues import compile_catalogue

    for po_path in sorted(
        (Path(__file__).resolve().parents[1] / "locale").glob("*/LC_MESSAGES/*.po")
    ):
        compile_catalogue(po_path)
    # Name the folder of this run's real control plane before any xdist worker starts, so
    # every worker finds the one the first of them starts.
    if not hasattr(config, "workerinput"):
        from tests.kube_real.plane import run_folder

        run_folder()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test on the real control plane joins one xdist group (so they run on one
    worker, one after another): the tests under tests/real_cluster, those that ask for the
    control plane, and the gateway behaviour tests' ``real`` backend. First, before xdist
    reads the groups."""
    from tests.kube_real.fixtures import real_cluster_group

    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        fixtures = getattr(item, "fixturenames", ())
        if (
            "real_cluster" in item.nodeid.split("::")[0]
            or "control_plane" in fixtures
            or params.get("backend") == "real"
        ):
            item.add_marker(real_cluster_group)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The process that started the run stops its control plane (workers leave it be)."""
    if not hasattr(config, "workerinput"):
        from tests.kube_real.plane import stop_after_run

        stop_after_run()
