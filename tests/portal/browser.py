"""Headless Chromium (Debian's /usr/bin/chromium) driven by Playwright, for portal tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = os.environ.get("TIDEGATE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls made by the
    # test itself are still synchronous and safe.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield instance
            finally:
                instance.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def log_in(browser: Any, base_url: str, username: str, password: str) -> Any:
    page = browser.new_page()
    page.goto(f"{base_url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    return page


# every chart of the page drawn whole: static/tidegate/charts.js marks a chart once plotly
# has drawn it (newPlot's promise resolved), after its traces, axes and legend
CHARTS_DRAWN = (
    "() => Array.from(document.querySelectorAll('[data-plotly-figure]'))"
    ".every(chart => chart.dataset.plotlyReady === '1')"
)


def until_drawn(page: Any) -> None:
    """Wait, once a navigation has loaded (``goto`` and ``reload`` wait for the load
    event), until every chart of the page is drawn whole. Faster than waiting for the
    network to stay idle for half a second; a chart that never draws times the wait out."""
    page.wait_for_function(CHARTS_DRAWN)
