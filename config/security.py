"""Security headers on every response: a Content-Security-Policy whose scripts come from
Tidegate's own origin or carry this response's nonce (no inline script, event handler or
``javascript:`` URL runs), and a Permissions-Policy switching off the browser features
the portal never uses (camera, microphone, location, ...).

Templates give an inline ``<script>`` the nonce as ``nonce="{{ csp_nonce }}"`` (context
processor below); the portal's own behaviour lives in static files (static/tidegate/).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse

# Styles may be inline: plotly and the API's documentation pages set element styles
# from script, which a style nonce cannot cover; a style cannot run code.
CSP_TEMPLATE = (
    "default-src 'self'; "
    "script-src 'self' 'nonce-{nonce}'; "
    "style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; "
    "font-src 'self' data:; "
    "connect-src 'self'; "
    "worker-src 'self' blob:; "
    "object-src 'none'; "
    "base-uri 'self'; "
    "form-action 'self'; "
    "frame-ancestors 'none'"
)

PERMISSIONS_POLICY = ", ".join(
    f"{feature}=()"
    for feature in (
        "accelerometer",
        "autoplay",
        "camera",
        "display-capture",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "usb",
        "xr-spatial-tracking",
    )
)


def content_security_policy(nonce: str) -> str:
    return CSP_TEMPLATE.format(nonce=nonce)


def csp_nonce(request: HttpRequest) -> str:
    """This request's script nonce (made on first use)."""
    nonce: str | None = getattr(request, "_csp_nonce", None)
    if nonce is None:
        nonce = secrets.token_urlsafe(18)
        request._csp_nonce = nonce  # type: ignore[attr-defined]
    return nonce


class SecurityHeadersMiddleware:
    """Adds Content-Security-Policy and Permissions-Policy (unless a view set its own).
    TIDEGATE_CSP_REPORT_ONLY sends the policy as Content-Security-Policy-Report-Only."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        header = (
            "Content-Security-Policy-Report-Only"
            if getattr(settings, "TIDEGATE_CSP_REPORT_ONLY", False)
            else "Content-Security-Policy"
        )
        if header not in response:
            response[header] = content_security_policy(csp_nonce(request))
        if "Permissions-Policy" not in response:
            response["Permissions-Policy"] = PERMISSIONS_POLICY
        return response


def nonce_context(request: HttpRequest) -> dict[str, Any]:
    """Templates: ``{{ csp_nonce }}`` for an inline script that must stay inline."""
    return {"csp_nonce": csp_nonce(request)}
