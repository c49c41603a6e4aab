"""The rate cards page: platform billing managers create and change cards through the
service (validated, audited, one transaction); an overlapping card is refused with a field
error naming the card it overlaps and how to fix it, nothing written, the input kept."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import pytest

from billing.models import RateCard
from tenants.models import AuditEvent
from tests.billing.conftest import GpuCluster
from tests.conftest import Cast
from tests.factories import MembershipFactory
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db


def form(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "H100 2027",
        "product": "H100-80GB",
        "mig_profile": "",
        "flavour": "",
        "currency": "USD",
        "reserved_price": "2.5",
        "on_demand_price": "4",
        "priority_multipliers": "spot=0.6",
        "valid_from": "2027-01-01",
        "valid_to": "",
    } | overrides


@pytest.fixture
def finance(cast: Cast) -> Any:
    """Finance on every top-level tenant: it manages the platform's prices."""
    MembershipFactory(user=cast.finance, tenant=cast.other_org, role="finance")
    return logged_in(cast.finance)


def test_finance_creates_a_card_with_validity_dates_and_it_is_audited(
    finance: Any, gpu: GpuCluster
) -> None:
    response = finance.post("/billing/rate-cards/", form(valid_to="2027-07-01"), follow=True)
    assert response.redirect_chain[-1][0] == "/billing/rate-cards/"
    page = response.content.decode()
    assert "Rate card “H100 2027” created." in page
    card = RateCard.objects.get(name="H100 2027")
    assert (card.valid_from, card.valid_to) == (date(2027, 1, 1), date(2027, 7, 1))
    assert (card.reserved_price, card.priority_multipliers) == (Decimal("2.5"), {"spot": "0.6"})
    future = page[page.index('id="cards-future"') :]
    assert f'id="card-{card.pk}"' in future[: future.index("</section>")]
    event = AuditEvent.objects.get(object_type__icontains="ratecard", object_id=str(card.pk))
    assert (event.action, event.source) == ("create", "portal")


def test_the_page_explains_the_overlap_rule_in_plain_words(finance: Any, gpu: GpuCluster) -> None:
    page = finance.get("/billing/rate-cards/").content.decode()
    rule = page[page.index('id="overlap-rule"') :]
    assert "may not be valid on the same day" in rule
    assert "up to, but not including" in rule
    current = page[page.index('id="cards-current"') :]
    assert f'id="card-{gpu.card.pk}"' in current[: current.index("</section>")]


def test_an_overlapping_card_is_refused_with_a_field_error_and_nothing_written(
    finance: Any, gpu: GpuCluster
) -> None:
    # The fixture's "Standard" card prices every GPU from 2026-01-01 with no end.
    before = RateCard.objects.count()
    events = AuditEvent.objects.count()
    response = finance.post(
        "/billing/rate-cards/", form(name="Cheaper", product="", valid_from="2026-06-01")
    )
    assert response.status_code == 400
    page = response.content.decode()
    error = page[page.index('id="id_valid_from-error"') :]
    error = error[: error.index("</span>")]
    assert "Overlaps rate card “Standard” (any GPU), valid from 2026-01-01 with no end." in error
    assert "“valid until” of 2026-06-01" in error  # how to fix it
    assert RateCard.objects.count() == before and AuditEvent.objects.count() == events
    assert 'value="Cheaper"' in page and 'value="2026-06-01"' in page  # what was typed stays


def test_ending_the_current_card_then_starting_a_new_one_is_allowed(
    finance: Any, gpu: GpuCluster
) -> None:
    edited = finance.post(
        f"/billing/rate-cards/{gpu.card.pk}/edit/",
        form(
            name="Standard",
            product="",
            priority_multipliers="spot=0.5",
            reserved_price="2",
            on_demand_price="3",
            valid_from="2026-01-01",
            valid_to="2026-06-01",
        ),
        follow=True,
    )
    assert "Rate card “Standard” saved." in edited.content.decode()
    gpu.card.refresh_from_db()
    assert gpu.card.valid_to == date(2026, 6, 1)
    created = finance.post(
        "/billing/rate-cards/", form(name="Cheaper", product="", valid_from="2026-06-01")
    )
    assert created.status_code == 302 and RateCard.objects.filter(name="Cheaper").exists()


def test_an_edit_that_would_overlap_is_refused_on_its_dates(finance: Any, gpu: GpuCluster) -> None:
    later = RateCard.objects.create(
        name="Later",
        currency="USD",
        reserved_price=Decimal(1),
        on_demand_price=Decimal(1),
        valid_from=date(2030, 1, 1),
        valid_to=date(2030, 2, 1),
    )
    response = finance.post(
        f"/billing/rate-cards/{later.pk}/edit/",
        form(name="Later", product="", valid_from="2029-12-01", valid_to="2030-02-01"),
    )
    assert response.status_code == 400
    assert "Overlaps rate card “Standard”" in response.content.decode()
    later.refresh_from_db()
    assert later.valid_from == date(2030, 1, 1)


@pytest.mark.parametrize(
    "overrides, field, words",
    [
        ({"reserved_price": "-1"}, "reserved_price", "greater than or equal to 0"),
        ({"valid_to": "2026-12-01"}, "valid_to", "must be after “valid from”"),
        ({"currency": "usd"}, "currency", "three-letter"),
        ({"mig_profile": "1g.10gb", "product": ""}, "product", "needs the product"),
        ({"priority_multipliers": "spot"}, "priority_multipliers", "class=multiplier"),
        ({"valid_from": "someday"}, "valid_from", "valid date"),
    ],
)
def test_bad_input_is_a_field_error_in_place(
    finance: Any, gpu: GpuCluster, overrides: dict[str, str], field: str, words: str
) -> None:
    before = RateCard.objects.count()
    response = finance.post("/billing/rate-cards/", form(**overrides))
    assert response.status_code == 400
    page = response.content.decode()
    error = page[page.index(f'id="id_{field}-error"') :]
    assert words in error[: error.index("</span>")]
    assert RateCard.objects.count() == before


def test_a_chinese_reader_gets_the_overlap_error_in_chinese(finance: Any, gpu: GpuCluster) -> None:
    response = finance.post(
        "/billing/rate-cards/",
        form(name="Cheaper", product="", valid_from="2026-06-01"),
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    )
    assert response.status_code == 400
    assert "与费率卡“Standard”（any GPU）重叠" in response.content.decode()


def test_finance_without_every_top_level_tenant_reads_but_cannot_write(
    cast: Cast, gpu: GpuCluster
) -> None:
    client = logged_in(cast.finance)  # finance on acme only; globex is another organisation
    page = client.get("/billing/rate-cards/").content.decode()
    assert 'id="rate-card-form"' not in page and "Standard" in page
    assert client.post("/billing/rate-cards/", form()).status_code == 404
    assert client.get(f"/billing/rate-cards/{gpu.card.pk}/edit/").status_code == 404
    assert not RateCard.objects.filter(name="H100 2027").exists()
