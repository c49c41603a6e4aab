"""Admins in real Chromium: a lead asks for more quota from the tenant page, the
department admin approves it from the inbox, the lead sees the new quota with its
borrow limit kept."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.quotas.services import largest_ask
from tenants.demo import DEMO_PASSWORD, seed_demo
from tenants.models import Tenant
from tests.portal.browser import browser, log_in

__all__ = ["browser"]

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]


@pytest.fixture
def demo(transactional_db: Any) -> None:
    seed_demo()


def quota_row(page: Any, flavour: str) -> dict[str, str]:
    row = page.locator("#quotas table").first.locator(
        "tr", has=page.locator(f"td:text-is('{flavour}')")
    )
    return {
        "guaranteed": row.locator("td.guaranteed").inner_text(),
        "borrow_limit": row.locator("td.borrow-limit").inner_text(),
    }


def test_a_lead_asks_the_department_admin_approves_from_the_inbox_and_the_borrow_limit_stays(
    demo: None, live_server: Any, browser: Any
) -> None:
    vision = Tenant.objects.get(slug="vision")
    flavour = Flavour.objects.get(cluster__name="demo", name="h100-80gb")
    quota = Quota.objects.get(tenant=vision, flavour=flavour)
    assert quota.borrow_limit is not None
    largest = largest_ask(vision, flavour)
    wanted = quota.guaranteed + 1 if largest is None or largest > quota.guaranteed else 1

    lead = log_in(browser, live_server.url, "vision-lead", DEMO_PASSWORD)
    lead.goto(f"{live_server.url}/tenants/vision/")
    lead.select_option("#quota-request-form select[name=flavour]", str(flavour.pk))
    lead.fill("#quota-request-form input[name=guaranteed]", str(wanted))
    lead.fill("#quota-request-form textarea[name=justification]", "vit-huge needs one more")
    lead.click("#quota-request-form button[type=submit]")
    lead.wait_for_load_state("networkidle")
    assert "Quota request sent" in lead.content()
    assert "vit-huge needs one more" in lead.locator("#quota-requests").inner_text()

    admin = log_in(browser, live_server.url, "research-admin", DEMO_PASSWORD)
    assert "Quota requests (1 waiting)" in admin.locator("header nav").inner_text()
    admin.click("header nav a[href='/quota-requests/']")
    admin.wait_for_load_state("networkidle")
    row = admin.locator("article.inbox-row")
    assert row.count() == 1 and "vit-huge needs one more" in row.inner_text()
    row.locator("textarea[name=comment]").fill("approved for the vit-huge run")
    row.locator("button:text-is('Approve')").click()
    admin.wait_for_load_state("networkidle")
    assert admin.url.endswith("/quota-requests/")
    assert "Quota request approved." in admin.content()
    assert admin.locator("#inbox-empty").count() == 1

    lead.goto(f"{live_server.url}/tenants/vision/")
    assert quota_row(lead, "h100-80gb") == {
        "guaranteed": str(wanted),
        "borrow_limit": str(quota.borrow_limit),
    }
    assert "approved for the vit-huge run" in lead.locator("#quota-requests").inner_text()
    admin.close()
    lead.close()
