"""A newcomer's tour in real Chromium: each demo role logs in and sees only its part."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenants.demo import DEMO_PASSWORD, seed_demo
from tests.portal.browser import browser, log_in

__all__ = ["browser"]

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]

EXPECTED = {
    # username: (tenants that must be listed, tenants that must not)
    "admin": ({"acme", "research", "vision", "search", "infra"}, set()),
    "finance": ({"acme", "research", "vision", "search", "infra"}, set()),
    "research-admin": ({"research", "vision", "nlp", "speech"}, {"acme", "search", "infra"}),
    "vision-lead": ({"vision"}, {"acme", "research", "nlp", "search"}),
    "vision-member": ({"vision"}, {"acme", "research", "nlp", "search"}),
    "search-member": ({"search"}, {"vision", "research", "product"}),
}


@pytest.fixture
def demo(transactional_db: Any) -> None:
    seed_demo()


@pytest.mark.parametrize("username", sorted(EXPECTED))
def test_each_role_sees_only_its_tenants(
    demo: None, live_server: Any, browser: Any, username: str, tmp_path: Path
) -> None:
    page = log_in(browser, live_server.url, username, DEMO_PASSWORD)
    if username == "finance":  # finance lands on the billing home; its tenants are listed
        assert page.url.endswith("/billing/"), page.url
        page.goto(f"{live_server.url}/")
    listed = {code.inner_text() for code in page.query_selector_all("#tenant-list code")}
    must, must_not = EXPECTED[username]
    assert must <= listed, listed
    assert not (must_not & listed), listed
    page.screenshot(path=str(tmp_path / f"{username}.png"))
    page.close()


def test_a_member_cannot_open_another_teams_page(
    demo: None, live_server: Any, browser: Any
) -> None:
    page = log_in(browser, live_server.url, "vision-member", DEMO_PASSWORD)
    response = page.goto(f"{live_server.url}/tenants/search/")
    assert response is not None and response.status == 404
    response = page.goto(f"{live_server.url}/tenants/vision/")
    assert response is not None and response.status == 200
    assert page.locator("#namespaces").inner_text().count("vision-") >= 2
    assert page.locator("#member-form").count() == 0  # members do not manage members
    page.close()


def test_a_lead_adds_a_member_through_the_form(demo: None, live_server: Any, browser: Any) -> None:
    page = log_in(browser, live_server.url, "vision-lead", DEMO_PASSWORD)
    page.goto(f"{live_server.url}/tenants/vision/")
    page.fill("#member-form input[name=username]", "search-member")
    page.select_option("#member-form select[name=role]", "member")
    page.click("#member-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "Member added." in page.content()
    assert "search-member" in page.locator("#members").inner_text()
    page.fill("#member-form input[name=username]", "nobody-by-this-name")
    page.click("#member-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "No active user named" in page.locator("#members").inner_text()
    page.close()


def test_login_with_a_wrong_password_says_so(demo: None, live_server: Any, browser: Any) -> None:
    page = log_in(browser, live_server.url, "vision-lead", "wrong")
    assert "didn't match" in page.content()
    page.close()


def test_a_lead_follows_a_job_from_the_queue_and_cancels_it(
    demo: None, live_server: Any, browser: Any
) -> None:
    page = log_in(browser, live_server.url, "vision-lead", DEMO_PASSWORD)
    page.goto(f"{live_server.url}/clusters/demo/queue/")
    assert page.locator("#holdings-chart .main-svg").count() > 0  # plotly drew the chart
    page.click("#queue a:text('resnet-sweep')")
    page.wait_for_load_state("networkidle")
    assert "What it asks for" in page.locator("#request").inner_text()
    assert "4×1 h100-80gb" in page.locator("#request").inner_text()
    assert "Running" in page.locator("#standing").inner_text()  # within vision's guarantee
    assert page.locator("#runs-chart .main-svg").count() > 0
    asked: list[str] = []

    def answer(dialog: Any) -> None:  # the confirmation a cancel asks for: accept it
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    page.click("#standing button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert asked and asked[0].startswith("Cancel resnet-sweep?")
    assert "Workload cancelled" in page.content()
    assert "Cancel this workload" not in page.content()
    page.close()
