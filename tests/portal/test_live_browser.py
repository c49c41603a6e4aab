"""The lead dashboard and the queue pages in real Chromium: charts draw in both languages,
and what one user does shows on another user's open page without a reload."""

from __future__ import annotations

import re
from typing import Any

import pytest

from scheduler_bridge.workloads.models import Workload
from tenants.demo import DEMO_PASSWORD, seed_demo
from tests.portal.browser import browser

__all__ = ["browser"]

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]

# the pages poll every 5 s; a generous bound for a loaded machine
LIVE_TIMEOUT_MS = 30_000


@pytest.fixture
def demo(transactional_db: Any) -> None:
    seed_demo()


def signed_in(browser: Any, base_url: str, username: str, language: str = "en") -> Any:
    """A page of its own browser context (its own cookies: one user per context)."""
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    context.add_cookies([{"name": "django_language", "value": language, "url": base_url}])
    page = context.new_page()
    page.goto(f"{base_url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", DEMO_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    return page


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_dashboard_draws_its_charts_in_both_languages(
    demo: None, live_server: Any, browser: Any, language: str
) -> None:
    page = signed_in(browser, live_server.url, "vision-lead", language)
    page.goto(f"{live_server.url}/dashboard/")
    page.wait_for_load_state("networkidle")
    assert page.url.endswith("/dashboard/vision/")
    assert page.locator("html").get_attribute("lang") == language
    page.wait_for_selector("#usage-chart .main-svg")
    assert page.locator("#usage-chart .main-svg").count() > 0
    assert page.locator("#efficiency-chart .main-svg").count() > 0
    buttons = page.locator("#usage-chart .rangeselector .button").all_text_contents()
    assert buttons == (
        ["1 day", "7 days", "30 days", "all"]
        if language == "en"
        else ["1 天", "7 天", "30 天", "全部"]
    )
    heading = page.locator("#holdings h2").inner_text()
    assert heading == ("GPUs held now" if language == "en" else "当前持有的 GPU")
    ticks = " ".join(page.locator("#usage-chart .xtick text").all_text_contents())
    months = re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\b")
    # plotly.js names months in English: Chinese pages get numeric dates (2026-11-29)
    assert bool(months.search(ticks)) == (language == "en"), ticks
    page.context.close()


def test_a_cancel_by_one_user_shows_on_anothers_open_pages_without_reload(
    demo: None, live_server: Any, browser: Any
) -> None:
    job = Workload.objects.get(name="llm-finetune")  # nlp's, waiting; both users see it
    watcher = signed_in(browser, live_server.url, "research-admin")
    watcher.goto(f"{live_server.url}/clusters/demo/queue/")
    dashboard = watcher.context.new_page()
    dashboard.goto(f"{live_server.url}/dashboard/nlp/")
    for page, region in ((watcher, "#queue-live"), (dashboard, "#queue")):
        assert "llm-finetune" in page.locator(region).inner_text()
        page.evaluate("window.notReloaded = true")
    detail = watcher.context.new_page()
    detail.goto(f"{live_server.url}/workloads/{job.pk}/")
    assert detail.locator("#state-badge").inner_text() == "Pending"
    detail.evaluate("window.notReloaded = true")

    canceller = signed_in(browser, live_server.url, "nlp-lead")
    canceller.goto(f"{live_server.url}/workloads/{job.pk}/")
    canceller.on("dialog", lambda dialog: dialog.accept())
    canceller.click("#standing button[type=submit]")
    canceller.wait_for_load_state("networkidle")
    assert "Workload cancelled" in canceller.content()

    for page, region in ((watcher, "#queue-live"), (dashboard, "#queue")):
        page.wait_for_function(
            "([region, name]) => !document.querySelector(region).innerText.includes(name)",
            arg=[region, "llm-finetune"],
            timeout=LIVE_TIMEOUT_MS,
        )
        assert page.evaluate("window.notReloaded") is True  # swapped in, not reloaded
    assert "llm-finetune" not in dashboard.locator("#queue").inner_text()
    # the watcher's open page of the workload says so too, heading and all
    detail.wait_for_function(
        "() => document.querySelector('#standing h2').innerText.includes('Cancelled')",
        timeout=LIVE_TIMEOUT_MS,
    )
    assert detail.locator("#state-badge").inner_text() == "Cancelled"
    assert detail.evaluate("window.notReloaded") is True
    canceller.context.close()
    watcher.context.close()


def test_the_queue_pages_chart_counts_and_table_refresh_together(
    demo: None, live_server: Any, browser: Any
) -> None:
    """The queue page's chart, its counts and its table are one live part: when a running
    workload is cancelled, the chart stops showing its GPUs in the same refresh that takes
    it off the table (the chart stayed as it was when the page opened)."""
    job = Workload.objects.filter(state="running", tenant__slug="vision").order_by("-gpus").first()
    assert job is not None
    watcher = signed_in(browser, live_server.url, "research-admin")
    watcher.goto(f"{live_server.url}/clusters/demo/queue/")
    watcher.wait_for_selector("#queue-chart .main-svg")
    watcher.evaluate("window.notReloaded = true")
    chart_before = watcher.evaluate(
        "() => JSON.stringify(document.querySelector('#queue-chart .js-plotly-plot').data"
        ".map(t => t.y))"
    )
    counts_before = watcher.locator("#queue-counts").inner_text()

    lead = signed_in(browser, live_server.url, "vision-lead")
    lead.goto(f"{live_server.url}/workloads/{job.pk}/")
    lead.on("dialog", lambda dialog: dialog.accept())
    lead.click("#standing button[type=submit]")
    lead.wait_for_load_state("networkidle")

    watcher.wait_for_function(
        "(before) => document.querySelector('#queue-counts').innerText !== before",
        arg=counts_before,
        timeout=LIVE_TIMEOUT_MS,
    )
    watcher.wait_for_selector("#queue-chart .main-svg")
    chart_after = watcher.evaluate(
        "() => JSON.stringify(document.querySelector('#queue-chart .js-plotly-plot').data"
        ".map(t => t.y))"
    )
    assert chart_after != chart_before
    assert job.name not in watcher.locator("#queue-live table").inner_text()
    assert watcher.evaluate("window.notReloaded") is True
    lead.context.close()
    watcher.context.close()


def test_the_audit_trails_short_columns_keep_their_words_on_one_line_in_chinese(
    demo: None, live_server: Any, browser: Any
) -> None:
    """Its "操作" (what) header was squeezed to one character per line by the message
    column beside it."""
    page = signed_in(browser, live_server.url, "admin", "zh-hans")
    page.goto(f"{live_server.url}/audit/")
    header = page.locator("#audit thead th").nth(3)
    assert header.inner_text() == "操作"
    box = header.bounding_box()
    line = page.evaluate(
        "el => parseFloat(getComputedStyle(el).lineHeight) || 20", header.element_handle()
    )
    assert box is not None and box["height"] < 2 * line  # one line, not two
    page.context.close()


def test_double_clicking_cancel_asks_once_and_cancels_once(
    demo: None, live_server: Any, browser: Any
) -> None:
    from django.contrib.auth import get_user_model

    from tests.conftest import client_for

    lead = get_user_model().objects.get(username="vision-lead")
    submitted = client_for(lead).post(
        "/api/v1/workloads/",
        {
            "cluster": "demo",
            "tenant": "vision",
            "name": "to-cancel",
            "pod_sets": [{"count": 4, "gpus_per_pod": 8, "flavour": "h100-80gb"}],
        },
        format="json",
    )
    assert submitted.status_code == 201, submitted.content
    job = Workload.objects.get(pk=submitted.json()["id"])
    page = signed_in(browser, live_server.url, "vision-lead")
    page.goto(f"{live_server.url}/workloads/{job.pk}/")
    asked: list[str] = []

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    page.dblclick("#standing button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert len(asked) == 1, asked
    job.refresh_from_db()
    assert job.state == "cancelled"
    page.context.close()


def test_the_admins_navigation_fits_one_line_at_1366_pixels(
    demo: None, live_server: Any, browser: Any
) -> None:
    for language in ("en", "zh-hans"):
        page = signed_in(browser, live_server.url, "admin", language)
        page.goto(f"{live_server.url}/")
        links = page.locator("header nav a")
        tops = {
            round(box["y"])
            for box in (links.nth(i).bounding_box() for i in range(links.count()))
            if box
        }
        assert len(tops) == 1, (language, tops)
        page.context.close()


def test_a_newcomer_sees_what_they_can_do_about_work_that_cannot_run(
    demo: None, live_server: Any, browser: Any
) -> None:
    """In the demo, vision's lead submits work that cannot be preempted and needs more
    H100s than vision is guaranteed. The lead's page offers only what vision can ask for;
    a member's page says who can ask; the idle-GPU panel lists only what can be stopped."""
    from django.contrib.auth import get_user_model

    from scheduler_bridge.inventory.models import Cluster
    from scheduler_bridge.workloads.cycle import admission_cycle
    from tests.conftest import client_for

    lead = get_user_model().objects.get(username="vision-lead")
    submitted = client_for(lead).post(
        "/api/v1/workloads/",
        {
            "cluster": "demo",
            "tenant": "vision",
            "name": "too-big-for-vision",
            "priority_class": "prod",
            "pod_sets": [{"count": 4, "gpus_per_pod": 8, "flavour": "h100-80gb"}],
        },
        format="json",
    )
    assert submitted.status_code == 201, submitted.content
    admission_cycle(Cluster.objects.get(name="demo"))
    job = Workload.objects.get(pk=submitted.json()["id"])
    assert job.inadmissible, job.reason

    page = signed_in(browser, live_server.url, "vision-lead")
    page.goto(f"{live_server.url}/workloads/{job.pk}/")
    from scheduler_bridge.inventory.models import Flavour
    from scheduler_bridge.quotas.services import largest_ask
    from tenants.models import Tenant

    h100 = Flavour.objects.get(cluster__name="demo", name="h100-80gb")
    most = largest_ask(Tenant.objects.get(slug="vision"), h100)
    assert most is not None and most < 32
    offer = page.locator("#quota-offer").inner_text()
    href = page.locator("#quota-offer a").get_attribute("href") or ""
    assert f"guaranteed={most}#" in href, href  # what the request would accept, not 32
    assert f"Ask for a quota of {most} GPUs" in offer
    assert "must grow first" in offer  # the rest is research's to give
    page.context.close()

    member = signed_in(browser, live_server.url, "vision-member")
    member.goto(f"{live_server.url}/workloads/{job.pk}/")
    text = member.locator("#quota-offer").inner_text()
    assert "only a lead or admin of vision can ask for it" in text and "vision-lead" in text
    assert member.locator("#quota-offer a").count() == 0
    member.context.close()
