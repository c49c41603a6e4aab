"""The Content-Security-Policy in real Chromium: charts still draw (plotly from Tidegate's
static files, no inline script), the confirmation and language switch still work, and the
browser reports no violation."""

from __future__ import annotations

from typing import Any

import pytest

from tenants.demo import DEMO_PASSWORD, seed_demo
from tests.portal.browser import browser, log_in

__all__ = ["browser"]

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]

WATCH_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(event.violatedDirective + " " + event.blockedURI);
});
"""


@pytest.fixture
def demo(transactional_db: Any) -> None:
    seed_demo()


def test_chart_pages_draw_under_the_policy_without_a_violation(
    demo: None, live_server: Any, browser: Any
) -> None:
    page = log_in(browser, live_server.url, "finance", DEMO_PASSWORD)
    page.add_init_script(WATCH_VIOLATIONS)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    for path, chart in (
        ("/billing/trend/", "#spend-trend .main-svg"),
        ("/dashboard/", ".plotly-graph-div .main-svg"),
        ("/tenants/vision/", "#budget-burn .main-svg"),
    ):
        response = page.goto(f"{live_server.url}{path}")
        policy = response.headers["content-security-policy"]
        assert (
            "script-src 'self' 'nonce-" in policy
            and "unsafe-inline" not in policy.split("style-src")[0]
        )
        assert "camera=()" in response.headers["permissions-policy"]
        page.wait_for_selector(chart)
        assert page.evaluate("window.__violations") == [], path
    with page.expect_navigation():
        page.select_option("footer select[name=language]", "zh-hans")
    assert page.locator("html").get_attribute("lang") == "zh-hans"
    assert page.evaluate("window.__violations") == []
    assert not [line for line in console if "Content Security Policy" in line], console
    page.close()


def test_an_injected_inline_script_is_blocked(demo: None, live_server: Any, browser: Any) -> None:
    """What the policy is for: script in the page that does not carry the nonce."""
    page = log_in(browser, live_server.url, "finance", DEMO_PASSWORD)
    page.add_init_script(WATCH_VIOLATIONS)
    page.goto(f"{live_server.url}/billing/trend/")
    page.evaluate(
        """() => {
        const script = document.createElement("script");
        script.textContent = "window.__ran = true";
        document.body.appendChild(script);
    }"""
    )
    assert page.evaluate("window.__ran === undefined")
    assert any("script-src" in v for v in page.evaluate("window.__violations"))
    page.close()


def test_the_admin_and_the_api_documentation_keep_to_the_policy(
    demo: None, live_server: Any, browser: Any
) -> None:
    page = log_in(browser, live_server.url, "admin", DEMO_PASSWORD)
    page.add_init_script(WATCH_VIOLATIONS)
    page.goto(f"{live_server.url}/admin/tenants/tenant/")
    page.wait_for_selector("#result_list")
    assert page.evaluate("window.__violations") == []
    page.goto(f"{live_server.url}/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock", timeout=20_000)
    assert page.evaluate("window.__violations") == []
    page.close()
