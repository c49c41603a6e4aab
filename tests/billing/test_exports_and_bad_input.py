"""Exports (exact CSV columns, XLSX, PDF, provisional marking, formula injection) and bad
input that must be refused with a clear reason and nothing written."""

from __future__ import annotations

import csv
import io
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest
from openpyxl import load_workbook

from billing.models import BillingPeriod, RateCard
from billing.statements.exports import COLUMN_LABELS, safe_text
from billing.statements.periods import period_close
from tenants.history import record_setting, tenant_place
from tests.billing.conftest import FEB, MAR, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast, client_for

pytestmark = pytest.mark.django_db
COLUMNS = (
    "period,revision,statement,tenant,cost_center,line_type,usage_period,flavor,"
    "gpu_hours_allocated,gpu_hours_busy,rate,multiplier,amount,currency,mode"
)


@pytest.fixture
def closed_february(cast: Cast, gpu: GpuCluster) -> BillingPeriod:
    cast.team_a.cost_center = '=HYPERLINK("http://evil")'
    cast.team_a.save()
    # in force from February on (cost centres are effective-dated)
    record_setting("tenant", cast.team_a.pk, tenant_place(cast.team_a), at=FEB)
    record_usage(
        cast.team_a, gpu.h100, FEB + timedelta(days=1), hours=3, devices=2, busy_ratio="0.5"
    )
    record_usage(cast.team_b, gpu.mig_1g, FEB + timedelta(days=1), hours=7, pod="m")
    return period_close(actor=None, period=BillingPeriod.objects.get(name="2026-02"))


def test_csv_has_exactly_the_agreed_columns_and_cent_amounts(
    cast: Cast, closed_february: BillingPeriod
) -> None:
    response = client_for(cast.finance).get("/api/v1/billing/exports/?period=2026-02&as=csv")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["X-Tidegate-Provisional"] == "false"
    assert 'filename="chargeback-2026-02.csv"' in response["Content-Disposition"]
    text = response.content.decode()
    assert text.splitlines()[0] == COLUMNS
    rows = list(csv.DictReader(io.StringIO(text)))
    vision = next(r for r in rows if r["tenant"] == "vision")
    assert vision == {
        "period": "2026-02",
        "revision": "1",
        "statement": "2026-02-vision",
        "tenant": "vision",
        "cost_center": '\'=HYPERLINK("http://evil")',  # inert in a spreadsheet
        "line_type": "in_quota",
        "usage_period": "",
        "flavor": "h100-80gb",
        "gpu_hours_allocated": "6.0000",
        "gpu_hours_busy": "3.0000",
        "rate": "2.000000",
        "multiplier": "1.000",
        "amount": "12.00",
        "currency": "USD",
        "mode": "chargeback",
    }
    speech = next(r for r in rows if r["tenant"] == "speech")
    assert (speech["gpu_hours_allocated"], speech["amount"]) == ("1.0000", "2.00")


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"])
def test_formula_characters_are_neutralised(text: str) -> None:
    assert safe_text(text) == f"'{text}"
    assert safe_text("vision") == "vision"


def test_an_open_period_exports_as_provisional_in_every_format(cast: Cast, gpu: GpuCluster) -> None:
    record_usage(cast.team_a, gpu.h100, MAR, hours=2)
    client = client_for(cast.finance)
    csv_response = client.get("/api/v1/billing/exports/?period=2026-03&as=csv")
    assert csv_response["X-Tidegate-Provisional"] == "true"
    assert "chargeback-2026-03-PROVISIONAL.csv" in csv_response["Content-Disposition"]
    assert csv_response.content.decode().splitlines()[0] == COLUMNS
    xlsx = client.get("/api/v1/billing/exports/?period=2026-03&as=xlsx")
    book = load_workbook(io.BytesIO(xlsx.content))
    assert book.sheetnames[0] == "Summary"
    assert "PROVISIONAL" in book["Summary"]["A1"].value
    sheet = book["(no cost centre)"]
    # the XLSX speaks the reader's words; the CSV keeps the machine column names
    assert [c.value for c in sheet[1]] == [str(COLUMN_LABELS[n]) for n in COLUMNS.split(",")]
    assert sheet["B2"].value == "provisional"
    assert sheet["M2"].value == 4  # 2 GPU-hours x 2.00, as a number, not text
    pdf = client.get("/api/v1/billing/exports/?period=2026-03&as=pdf")
    assert pdf.content.startswith(b"%PDF") and pdf["Content-Type"] == "application/pdf"


def test_xlsx_and_pdf_of_a_closed_period(cast: Cast, closed_february: BillingPeriod) -> None:
    client = client_for(cast.finance)
    xlsx = client.get("/api/v1/billing/exports/?period=2026-02&as=xlsx")
    book = load_workbook(io.BytesIO(xlsx.content))
    sheet = book['=HYPERLINK("http___evil")']  # a sheet name is never run as a formula
    cells = {row[3]: row for row in sheet.iter_rows(min_row=2, values_only=True)}
    assert cells["vision"][4] == '\'=HYPERLINK("http://evil")'
    assert client.get("/api/v1/billing/exports/?period=2026-02&as=pdf").content.startswith(b"%PDF")


@pytest.mark.parametrize(
    "query, reason, status",
    [  # 400: the schema refuses the query; 422: it names a period there is not
        ("period=2031-01&as=csv", "no billing period 2031-01", 422),
        ("period=february&as=csv", "YYYY-MM", 400),
        ("as=csv", "period=2026-02", 400),
        ("period=2026-02&as=docx", "as=csv", 400),
    ],
)
def test_exporting_a_period_that_does_not_exist_is_refused_with_the_reason(
    cast: Cast, gpu: GpuCluster, query: str, reason: str, status: int
) -> None:
    record_usage(cast.team_a, gpu.h100, FEB)
    response = client_for(cast.finance).get(f"/api/v1/billing/exports/?{query}")
    assert response.status_code == status and reason in response.json()["detail"]


def card(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "H100 2027",
        "product": "H100-80GB",
        "currency": "USD",
        "reserved_price": "2.5",
        "on_demand_price": "4",
        "valid_from": "2027-01-01",
    } | overrides


@pytest.mark.parametrize(
    "body, field, words, status",
    [  # 400: the schema refuses it; 422: it matches the schema, the rule refuses it
        (card(reserved_price="-1"), "reserved_price", "may not be negative", 422),
        (card(on_demand_price="-0.01"), "on_demand_price", "may not be negative", 422),
        (card(valid_to="2026-12-01"), "valid_to", "must be after valid_from", 422),
        (card(currency="usd"), "currency", "three-letter", 400),
        (card(mig_profile="1g.10gb", product=""), "product", "needs the product", 422),
        (card(priority_multipliers={"spot": "-0.5"}), "priority_multipliers", "negative", 422),
        (card(priority_multipliers={"spot": "NaN"}), "priority_multipliers", "negative", 422),
    ],
)
def test_bad_rate_cards_are_refused_with_the_reason_and_nothing_written(
    cast: Cast, gpu: GpuCluster, body: dict[str, Any], field: str, words: str, status: int
) -> None:
    before = RateCard.objects.count()
    response = client_for(cast.platform_admin).post(
        "/api/v1/billing/rate-cards/", body, format="json"
    )
    assert response.status_code == status, response.content
    payload = response.json()
    assert field in payload and words in str(payload), payload
    assert RateCard.objects.count() == before


def test_overlapping_rate_cards_for_the_same_scope_are_refused(cast: Cast, gpu: GpuCluster) -> None:
    client = client_for(cast.platform_admin)
    assert (
        client.post(
            "/api/v1/billing/rate-cards/", card(valid_to="2027-07-01"), format="json"
        ).status_code
        == 201
    )
    overlap = client.post(
        "/api/v1/billing/rate-cards/", card(valid_from="2027-06-01"), format="json"
    )
    assert overlap.status_code == 422
    assert "already valid from 2027-01-01 to 2027-07-01" in overlap.json()["detail"]
    follow_on = client.post(
        "/api/v1/billing/rate-cards/", card(valid_from="2027-07-01"), format="json"
    )
    assert follow_on.status_code == 201  # back to back is fine
    other_scope = client.post(
        "/api/v1/billing/rate-cards/", card(product="A100-SXM4-80GB", currency="EUR"), format="json"
    )
    assert other_scope.status_code == 422 and "one currency" in other_scope.json()["detail"]
    assert RateCard.objects.count() == 3


def test_a_new_currency_must_start_on_the_first_of_a_month(cast: Cast, gpu: GpuCluster) -> None:
    client = client_for(cast.platform_admin)
    usd = card(valid_to="2027-03-15")
    assert client.post("/api/v1/billing/rate-cards/", usd, format="json").status_code == 201
    mid_month = card(name="H100 EUR", currency="EUR", valid_from="2027-03-15")
    response = client.post("/api/v1/billing/rate-cards/", mid_month, format="json")
    assert response.status_code == 422
    assert "first day of a month" in response.json()["detail"]
    assert RateCard.objects.filter(currency="EUR").count() == 0


def test_a_card_touches_every_calendar_month_it_is_valid_in() -> None:
    from datetime import date

    from billing.charging.rates import _month_span

    assert _month_span(date(2027, 3, 15), date(2027, 4, 1)) == (date(2027, 3, 1), date(2027, 4, 1))
    assert _month_span(date(2027, 3, 1), date(2027, 4, 2)) == (date(2027, 3, 1), date(2027, 5, 1))
    assert _month_span(date(2027, 12, 5), None) == (date(2027, 12, 1), None)


def test_a_rate_card_that_priced_a_closed_statement_cannot_be_deleted(
    cast: Cast, closed_february: BillingPeriod, gpu: GpuCluster
) -> None:
    response = client_for(cast.platform_admin).delete(f"/api/v1/billing/rate-cards/{gpu.card.pk}/")
    assert response.status_code == 409 and "valid_to" in response.json()["detail"]
    assert RateCard.objects.filter(pk=gpu.card.pk).exists()


def test_a_negative_price_is_refused_by_the_database_too(gpu: GpuCluster) -> None:
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        RateCard.objects.create(
            name="x",
            currency="USD",
            reserved_price=Decimal("-1"),
            on_demand_price=Decimal(1),
            valid_from=date(2030, 1, 1),
        )


def test_grouped_spend_report_of_a_closed_period(
    cast: Cast, closed_february: BillingPeriod
) -> None:
    body = (
        client_for(cast.finance)
        .get("/api/v1/billing/reports/spend/?period=2026-02&group_by=child&tenant=research")
        .json()
    )
    assert body["provisional"] is False and body["total"] == "14.00"
    assert {row["key"]: row["amount"] for row in body["rows"]} == {
        "vision": "12.00",
        "speech": "2.00",
    }
