"""Every portal page each demo user can reach, found by following links as a person would:
each speaks Chinese but for its data, an outsider gets 404 on each, and axe-core finds no
accessibility violation on any of them in Chromium, in English and in Chinese, at
laptop size (1366x900), and each fits a tablet's width."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from billing.models import RateCard
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.workloads.models import PriorityClass
from tenants.demo import DEMO_PASSWORD, DEMO_USERS, seed_demo
from tenants.models import Membership, NamespaceBinding, Role, Tenant
from tests.portal.browser import browser, log_in, until_drawn
from tests.portal.crawl import crawl, kind_of
from tests.workloads.test_portal_languages import data_values, untranslated, visible_text

__all__ = ["browser"]

ROLES = [username for username, *_ in DEMO_USERS]
LAPTOP = {"width": 1366, "height": 900}
TABLET = {"width": 820, "height": 1180}
# pages that name no tenant: every signed-in user (or every lead) has them, showing only
# their own tenants' data
EVERYONE_S = {
    "/",
    "/clusters/",
    "/dashboard/",
    "/priority-classes/",
    "/billing/",
    "/billing/periods/",
    "/billing/budgets/",
    "/billing/trend/",
    "/billing/allocation/",
}


def client_for(username: str, language: str) -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(get_user_model().objects.get(username=username))
    return client


def fetcher(client: Client) -> Any:
    def fetch(url: str) -> tuple[int, str]:
        response = client.get(url, follow=True)
        return response.status_code, response.content.decode()

    return fetch


@cache
def _outsider() -> Any:
    tenant = Tenant.objects.create(slug="outsiders", name="Outsiders", path="")
    tenant.path = f"/{tenant.pk}/"
    tenant.save(update_fields=["path"])
    user = get_user_model().objects.create_user(username="outsider", password=DEMO_PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role=Role.LEAD)
    return user


@pytest.fixture
def demo(db: Any) -> None:
    seed_demo()
    _outsider.cache_clear()


@pytest.mark.django_db
def test_every_page_of_every_role_speaks_chinese_and_is_404_to_an_outsider(demo: None) -> None:
    # a cluster's display name, a priority class's description and a rate card's name are
    # what admins wrote
    data = data_values() | set(Cluster.objects.values_list("display_name", flat=True))
    data |= set(PriorityClass.objects.values_list("description", flat=True))
    data |= set(RateCard.objects.values_list("name", flat=True))
    data |= {"Kubernetes Job"}  # a kind's name stays as Kubernetes spells it
    # the allocation page's grouping keys stay as the API spells them
    data |= {"namespace,label:team", "label:KEY", "annotation:KEY"}
    pages: dict[str, str] = {}
    left: list[str] = []
    for username in ROLES:
        client = client_for(username, "zh-hans")
        for url in crawl(fetcher(client)):
            pages.setdefault(url, username)
            page = client.get(url, follow=True).content.decode()
            assert '<html lang="zh-hans">' in page, url
            left += [f"{username} {url}: {t}" for t in visible_text(page) if untranslated(t, data)]
    kinds = {kind_of(url) for url in pages}
    assert len(kinds) >= 12, sorted(kinds)  # the walk reaches the portal, not one page
    assert left == [], "\n".join(left)

    outsider = Client()
    outsider.force_login(_outsider())
    private = sorted(set(NamespaceBinding.objects.values_list("namespace", flat=True)))
    private += [
        f'"/tenants/{slug}/'
        for slug in Tenant.objects.exclude(slug="outsiders").values_list("slug", flat=True)
    ]
    leaked = []
    for url, reached_by in sorted(pages.items()):
        response = outsider.get(url)
        if url.split("?")[0] in EVERYONE_S:
            content = response.content.decode()
            assert response.status_code in (200, 302, 404), url  # 404: it names a tenant
            leaked += [f"{url}: {name}" for name in private if name in content]
        elif response.status_code != 404:
            leaked.append(f"{url} (reached by {reached_by}) answered {response.status_code}")
    assert leaked == [], "\n".join(leaked)


@pytest.mark.browser
@pytest.mark.xdist_group("browser")
@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_axe_finds_no_violation_on_any_page(
    transactional_db: Any, live_server: Any, browser: Any, language: str
) -> None:
    from axe_playwright_python.sync_playwright import Axe

    seed_demo()
    axe = Axe()
    found: list[str] = []
    checked: set[str] = set()
    for username in ("admin", "vision-lead", "finance", "research-admin"):
        urls = [u for u in crawl(fetcher(client_for(username, language))) if u not in checked]
        checked |= set(urls)
        page = log_in(browser, live_server.url, username, DEMO_PASSWORD)
        page.context.add_cookies(
            [{"name": "django_language", "value": language, "url": live_server.url}]
        )
        page.set_viewport_size(LAPTOP)
        for url in urls:
            page.goto(f"{live_server.url}{url}")
            until_drawn(page)
            for violation in axe.run(page).response["violations"]:
                targets = [str(node["target"]) for node in violation["nodes"][:3]]
                found.append(f"{url} [{violation['id']}] {violation['help']}: {targets}")
            # on a tablet held upright the page still fits: wide tables scroll in their card
            page.set_viewport_size(TABLET)
            page.reload()
            until_drawn(page)
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > TABLET["width"]:
                found.append(f"{url} is {width} px wide on a {TABLET['width']} px tablet")
            page.set_viewport_size(LAPTOP)
        page.close()
    assert len(checked) >= 12
    assert found == [], "\n".join(found)
