"""Template filters that name billing codes in words (line kinds, the idle statement)."""

from __future__ import annotations

from typing import Any

from django import template

from billing.portal.common import can_read_rate_cards
from billing.portal.common import line_kind as _line_kind
from billing.portal.common import tenant_label as _tenant_label

register = template.Library()


@register.filter
def line_kind(kind: str) -> str:
    return _line_kind(kind)


@register.filter
def tenant_label(slug: str) -> str:
    return _tenant_label(slug)


@register.simple_tag
def finance_pages_visible(user: Any) -> bool:
    """Whether ``user`` reads the rate cards and idle capacity pages."""
    return can_read_rate_cards(user)
