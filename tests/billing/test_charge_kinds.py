"""Every charge kind has its facts in one table (billing.charging.pricing.KIND_FACTS), and every
place that shows or sums lines reads them from there."""

from __future__ import annotations

import pytest
from django.utils import translation

from billing.charging import pricing
from billing.portal.common import line_kind
from billing.reporting import allocation_core
from billing.statements import exports


def test_every_kind_has_its_facts() -> None:
    assert set(pricing.KIND_FACTS) == set(pricing.Kind)


@pytest.mark.parametrize("kind", list(pricing.Kind))
def test_each_view_names_every_kind_from_the_one_table(kind: pricing.Kind) -> None:
    facts = pricing.KIND_FACTS[kind]
    assert exports.line_type(kind) == facts.export_type
    assert allocation_core.LINE_TYPES[kind] == facts.allocation_type
    assert (kind in allocation_core.IDLE_KINDS) == facts.idle
    with translation.override("en"):
        assert line_kind(kind) == facts.label
        assert exports.line_type_label(kind) in {
            f.label for f in pricing.KIND_FACTS.values() if f.export_type == facts.export_type
        }


def test_labels_are_said_in_chinese() -> None:
    with translation.override("zh-hans"):
        said = {line_kind(kind) for kind in pricing.Kind}
        types = {exports.line_type_label(t) for t in exports.LINE_TYPE_ORDER}
    english = {f.label for f in pricing.KIND_FACTS.values()}
    assert not said & english
    assert not types & english


def test_a_code_that_is_no_kind_is_shown_as_it_is() -> None:
    assert line_kind("h100-80gb") == "h100-80gb"
    assert exports.line_type_label("h100-80gb") == "h100-80gb"


def test_late_borrowed_usage_keeps_its_own_export_type_but_shares_the_allocation_column() -> None:
    late = pricing.KIND_FACTS[pricing.Kind.LATE_ON_DEMAND]
    assert (late.export_type, late.allocation_type) == ("late_borrowed", "late_usage")


def test_a_statements_usage_sums_held_hours_not_idle_or_adjustments() -> None:
    usage = {kind for kind, facts in pricing.KIND_FACTS.items() if facts.usage}
    assert usage == {
        pricing.Kind.USAGE,
        pricing.Kind.ON_DEMAND,
        pricing.Kind.RESERVED_CAPACITY,
        pricing.Kind.LATE_USAGE,
        pricing.Kind.LATE_ON_DEMAND,
    }
