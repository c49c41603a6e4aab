"""Security headers on every page, and templates that keep to the policy: no inline
event handler, no ``javascript:`` URL, no inline script without the nonce."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.conftest import Cast

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted(
    path
    for folder in ("templates", "tenants", "billing", "scheduler_bridge", "dashboard")
    for path in (ROOT / folder).rglob("*.html")
)
HANDLER = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)
SCRIPT = re.compile(r"<script\b([^>]*)>", re.IGNORECASE)


def test_templates_have_no_inline_handlers_or_unnonced_scripts() -> None:
    assert len(TEMPLATES) > 20
    for path in TEMPLATES:
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        assert not HANDLER.search(text), f"{where}: inline event handler"
        assert "javascript:" not in text.lower(), f"{where}: javascript: URL"
        for attributes in SCRIPT.findall(text):
            assert "src=" in attributes or "csp_nonce" in attributes, f"{where}: inline script"


@pytest.mark.django_db
def test_pages_carry_a_fresh_nonce_and_the_permissions_policy(cast: Cast) -> None:
    browser = Client()
    browser.force_login(cast.lead)
    first = browser.get("/tenants/vision/")
    second = browser.get("/tenants/vision/")
    nonces = [
        re.search(r"'nonce-([^']+)'", r["Content-Security-Policy"]).group(1)  # type: ignore[union-attr]
        for r in (first, second)
    ]
    assert nonces[0] != nonces[1]
    policy = first["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "object-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    for feature in ("camera", "microphone", "geolocation", "payment", "usb"):
        assert f"{feature}=()" in first["Permissions-Policy"]


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/api/v1/me/", "/static/tidegate/portal.js"])
def test_every_kind_of_answer_carries_the_headers(path: str, api: Any) -> None:
    response = Client().get(path)
    assert "script-src 'self' 'nonce-" in response["Content-Security-Policy"]
    assert "camera=()" in response["Permissions-Policy"]


@pytest.mark.django_db
def test_charts_are_data_for_the_static_script_not_inline_code(cast: Cast) -> None:
    from tenants.plotly_div import plotly_div

    figure = {"data": [{"type": "bar", "y": [1], "name": "</script><script>x()"}]}
    html = str(plotly_div({**figure, "layout": {"height": 300}}, "c"))
    assert html.startswith('<div id="c" class="plotly-graph-div" style="height:300px; width:100%;"')
    assert 'data-plotly-figure="c-figure"' in html
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.S)
    assert scripts == [(' type="application/json" id="c-figure"', scripts[0][1])]
    assert "<" not in scripts[0][1] and "x()" in scripts[0][1]  # cannot end the block


@pytest.mark.django_db
def test_the_policy_can_be_tried_out_as_report_only(settings: Any) -> None:
    settings.TIDEGATE_CSP_REPORT_ONLY = True
    response = Client().get("/accounts/login/")
    assert "Content-Security-Policy" not in response
    assert "'nonce-" in response["Content-Security-Policy-Report-Only"]


def test_the_portal_script_asks_before_a_form_marked_data_confirm_is_sent() -> None:
    """What the removed onsubmit handlers did (real Chromium: the period close in
    test_finance_browser.py accepts the question)."""
    script = (ROOT / "static" / "tidegate" / "portal.js").read_text(encoding="utf-8")
    assert "form.dataset.confirm" in script and "window.confirm(" in script
    base = (ROOT / "templates" / "base.html").read_text(encoding="utf-8")
    assert "tidegate/portal.js" in base and "tidegate/charts.js" in base
