"""Finance in real Chromium: a rate card that overlaps is refused and explained, the card
it overlaps is ended and the new one created; a period is closed from the portal after the
confirmation; the CSV downloads with its columns; charts draw in English and Chinese."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from billing.models import BillingPeriod, RateCard, Statement
from billing.months import add_months, month_name, month_start
from billing.statements.exports import CSV_COLUMNS
from billing.usage.ledger import period_create
from tenants.demo import DEMO_PASSWORD, seed_demo
from tests.portal.browser import browser, log_in

__all__ = ["browser"]

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]


@pytest.fixture
def demo(transactional_db: Any) -> None:
    seed_demo()


def test_finance_manages_rate_cards_closes_a_period_and_downloads_the_csv(
    demo: None, live_server: Any, browser: Any, tmp_path: Path
) -> None:
    # The demo closed last month; the month before it has ended and is still open.
    older = period_create(add_months(month_start(timezone.now()), -2))
    page = log_in(browser, live_server.url, "finance", DEMO_PASSWORD)

    # A new H100 price from next year overlaps the demo's open-ended H100 card.
    page.goto(f"{live_server.url}/billing/rate-cards/")
    next_year = f"{timezone.now().year + 1}-01-01"
    page.fill("#id_name", "H100 next year")
    page.fill("#id_product", "H100-80GB")
    page.fill("#id_reserved_price", "2.80")
    page.fill("#id_on_demand_price", "4.00")
    page.fill("#id_valid_from", next_year)
    page.click("#rate-card-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    error = page.locator("#id_valid_from-error").inner_text()
    assert "Overlaps rate card “H100 80GB”" in error and f"“valid until” of {next_year}" in error
    assert page.input_value("#id_name") == "H100 next year"  # what was typed stays
    assert not RateCard.objects.filter(name="H100 next year").exists()

    # End the current card the day the new one starts, then create the new one.
    current = RateCard.objects.get(name="H100 80GB")
    page.goto(f"{live_server.url}/billing/rate-cards/")
    page.click(f"#card-{current.pk} a")
    page.wait_for_load_state("networkidle")
    page.fill("#id_valid_to", next_year)
    page.click("#rate-card-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "Rate card “H100 80GB” saved." in page.content()
    page.fill("#id_name", "H100 next year")
    page.fill("#id_product", "H100-80GB")
    page.fill("#id_reserved_price", "2.80")
    page.fill("#id_on_demand_price", "4.00")
    page.fill("#id_valid_from", next_year)
    page.click("#rate-card-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "Rate card “H100 next year” created." in page.content()
    assert "H100 next year" in page.locator("#cards-future").inner_text()

    # Close the older period from the billing periods page, accepting the confirmation.
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    page.goto(f"{live_server.url}/billing/periods/")
    page.click(f"#close-{older.name} button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert asked and asked[0].startswith(f"Closing {older.name} freezes ")
    assert page.url == f"{live_server.url}/billing/periods/"  # the portal, not the API
    assert f"Period {older.name} closed: its statements are frozen." in page.content()
    assert BillingPeriod.objects.get(pk=older.pk).state == BillingPeriod.State.CLOSED
    assert Statement.objects.filter(period=older).exists()

    # Download last month's CSV from the same page.
    last = month_name(add_months(month_start(timezone.now()), -1))
    with page.expect_download() as info:
        page.click(f"#period-{last} a:text('CSV')")
    download = info.value
    assert download.suggested_filename == f"chargeback-{last}.csv"
    target = tmp_path / download.suggested_filename
    download.save_as(str(target))
    rows = list(csv.DictReader(io.StringIO(target.read_text(encoding="utf-8"))))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    vision = [r for r in rows if r["tenant"] == "vision"]
    total = Statement.objects.get(period__name=last, tenant_slug="vision").total
    assert sum(float(r["amount"]) for r in vision) == pytest.approx(float(total))
    page.close()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_finance_charts_draw_in_each_language(
    demo: None, live_server: Any, browser: Any, language: str, tmp_path: Path
) -> None:
    page = log_in(browser, live_server.url, "finance", DEMO_PASSWORD)
    if language != "en":
        with page.expect_navigation():
            page.select_option("footer select[name=language]", language)
    page.goto(f"{live_server.url}/billing/trend/")
    page.wait_for_selector("#spend-trend .main-svg")
    assert page.locator("html").get_attribute("lang") == language
    title = page.locator("#spend-trend .gtitle").text_content()
    assert title == (
        "Spend per month, all cost centres" if language == "en" else "每月支出（全部成本中心）"
    )
    page.goto(f"{live_server.url}/billing/budgets/")
    page.wait_for_selector("#budget-heatmap .main-svg")
    page.goto(f"{live_server.url}/tenants/vision/")
    page.wait_for_selector("#budget-burn .main-svg")
    burn = page.locator("#burn").inner_text()
    assert ("/h" if language == "en" else "/小时") in burn
    page.screenshot(path=str(tmp_path / f"vision-{language}.png"), full_page=True)
    page.close()


def test_the_budget_panel_follows_new_spend_without_a_reload(
    demo: None, live_server: Any, browser: Any
) -> None:
    from billing.models import Budget

    page = browser.new_page()
    page.clock.install()  # htmx's "every 30s" runs on the page's clock: move it on
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "vision-lead")
    page.fill("#id_password", DEMO_PASSWORD)
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/tenants/vision/")
    before = page.locator("#budget-summary").inner_text()
    budget = Budget.objects.get(tenant__slug="vision")
    Budget.objects.filter(pk=budget.pk).update(amount=budget.amount + 1000)
    with page.expect_response(lambda r: "/billing/budgets/panel/vision/" in r.url):
        page.clock.fast_forward("00:31")
    page.wait_for_function(
        "before => document.querySelector('#budget-summary').innerText !== before", arg=before
    )
    assert f"{budget.amount + 1000:,.2f} USD" in page.locator("#budget-summary").inner_text()
    page.wait_for_selector("#budget-burn .main-svg")  # the chart is drawn again after the swap
    page.close()
