"""Invoice-grade exports: every line type in the CSV with its statement, revision, usage
period and mode; the XLSX with a sheet per cost centre, a summary that keeps showback apart
and number formats per column; statement and cost-centre PDFs that a reader can print
(issuer, recipient, number, revision, subtotals, page numbers) in English and Chinese.
Nobody outside a tenant downloads its PDFs."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.utils import translation
from openpyxl import load_workbook

from billing.charging.pricing import Kind
from billing.models import Adjustment, BillingPeriod, Statement, TenantBillingSettings
from billing.statements.exports import COLUMN_LABELS, CSV_COLUMNS, LINE_TYPES, line_type, sheet_name
from billing.statements.periods import period_close
from tests.billing.conftest import FEB, MAR, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast, client_for
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db
ISSUER = {
    "name": "Example GPU Platform Ltd",
    "address": ["1 Harbour Road", "Tidetown"],
    "contact": "billing@example.com",
    "tax_id": "GB123456789",
}


@pytest.fixture(autouse=True)
def issuer(settings: Any) -> None:
    settings.TIDEGATE_BILLING = {"ISSUER": ISSUER, "PAYMENT_TERMS": "Net 30 by internal transfer."}


@pytest.fixture
def two_months(cast: Cast, gpu: GpuCluster) -> tuple[BillingPeriod, BillingPeriod]:
    """February: vision in quota, speech (showback, reserved charging) borrows; closed.
    Then February usage arrives late (vision in quota, speech borrowed) and finance
    corrects vision by -10.00: all billed in March, closed too."""
    cast.team_a.cost_center = "CC-100"
    cast.team_a.save()
    cast.team_b.cost_center = "CC-200"
    cast.team_b.save()
    TenantBillingSettings.objects.create(tenant=cast.team_b, mode="showback", charge_reserved=True)
    record_usage(cast.team_a, gpu.h100, FEB, hours=3, devices=2, busy_ratio="0.5")
    record_usage(cast.team_b, gpu.h100, FEB, hours=5, borrowed=1, pod="b")
    feb = period_close(actor=None, period=BillingPeriod.objects.get(name="2026-02"))
    record_usage(cast.team_a, gpu.h100, FEB + timedelta(days=19), hours=2, pod="late")
    record_usage(cast.team_b, gpu.h100, FEB + timedelta(days=19), hours=1, borrowed=1, pod="late-b")
    record_usage(cast.team_a, gpu.h100, MAR, hours=1, pod="march")
    Adjustment.objects.create(
        tenant=cast.team_a,
        period=BillingPeriod.objects.get(name="2026-03"),
        amount=Decimal("-10.00"),
        currency="USD",
        reason="node h100-1 was faulty for 5 h",
        corrects=Statement.objects.get(period=feb, tenant_slug="vision"),
    )
    march = period_close(actor=None, period=BillingPeriod.objects.get(name="2026-03"))
    return feb, march


def csv_rows(user: Any, period: str) -> list[dict[str, str]]:
    response = client_for(user).get(f"/api/v1/billing/exports/?period={period}&as=csv")
    assert response.status_code == 200
    text = response.content.decode()
    assert text.splitlines()[0] == ",".join(CSV_COLUMNS)
    return list(csv.DictReader(io.StringIO(text)))


def test_every_line_kind_has_a_stable_line_type() -> None:
    assert {kind.value: line_type(kind.value) for kind in Kind} == {
        "usage": "in_quota",
        "on_demand": "borrowed",
        "reserved_capacity": "reserved",
        "idle": "idle",
        "idle_share": "idle",
        "late_usage": "late_usage",
        "late_on_demand": "late_borrowed",
        "adjustment": "adjustment",
    }
    assert set(LINE_TYPES) == {kind.value for kind in Kind}


def test_the_csv_names_statement_revision_line_type_and_mode_of_every_line(
    cast: Cast, two_months: tuple[BillingPeriod, BillingPeriod]
) -> None:
    feb = {(r["tenant"], r["line_type"]): r for r in csv_rows(cast.platform_admin, "2026-02")}
    assert set(feb) >= {
        ("vision", "in_quota"),
        ("speech", "borrowed"),
        ("speech", "reserved"),
        ("__idle__", "idle"),
    }
    assert feb[("vision", "in_quota")] == {
        "period": "2026-02",
        "revision": "1",
        "statement": "2026-02-vision",
        "tenant": "vision",
        "cost_center": "CC-100",
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
    borrowed = feb[("speech", "borrowed")]
    assert (borrowed["rate"], borrowed["amount"], borrowed["mode"]) == (
        "3.000000",
        "15.00",
        "showback",
    )
    assert feb[("speech", "reserved")]["mode"] == "showback"
    assert feb[("__idle__", "idle")]["statement"] == "2026-02-__idle__"

    march = {(r["tenant"], r["line_type"]): r for r in csv_rows(cast.platform_admin, "2026-03")}
    late = march[("vision", "late_usage")]
    assert (late["usage_period"], late["amount"], late["statement"]) == (
        "2026-02",
        "4.00",
        "2026-03-vision",
    )
    late_borrowed = march[("speech", "late_borrowed")]
    assert (late_borrowed["usage_period"], late_borrowed["amount"]) == ("2026-02", "3.00")
    adjustment = march[("vision", "adjustment")]
    assert (adjustment["amount"], adjustment["usage_period"], adjustment["mode"]) == (
        "-10.00",
        "",
        "chargeback",
    )
    assert march[("vision", "in_quota")]["usage_period"] == ""


def test_an_open_period_has_provisional_lines_without_a_statement(
    cast: Cast, gpu: GpuCluster
) -> None:
    record_usage(cast.team_a, gpu.h100, MAR, hours=2)
    rows = csv_rows(cast.finance, "2026-03")
    assert [(r["revision"], r["statement"], r["line_type"]) for r in rows] == [
        ("provisional", "", "in_quota")
    ]


def test_the_xlsx_has_a_summary_a_sheet_per_cost_centre_and_formats_per_column(
    cast: Cast, two_months: tuple[BillingPeriod, BillingPeriod]
) -> None:
    response = client_for(cast.platform_admin).get(
        "/api/v1/billing/exports/?period=2026-02&as=xlsx"
    )
    book = load_workbook(io.BytesIO(response.content))
    assert book.sheetnames[0] == "Summary" and book.sheetnames[-1] == "about"
    assert {"CC-100", "CC-200", "Idle capacity"} <= set(book.sheetnames)
    sheet = book["CC-100"]
    assert [c.value for c in sheet[1]] == [str(COLUMN_LABELS[n]) for n in CSV_COLUMNS]
    row = {name: cell for name, cell in zip(CSV_COLUMNS, sheet[2], strict=True)}
    assert (row["tenant"].value, row["revision"].value) == ("vision", 1)
    assert row["gpu_hours_allocated"].value == 6
    assert row["gpu_hours_allocated"].number_format == "0.0000"
    assert row["gpu_hours_busy"].number_format == "0.0000"
    assert row["rate"].number_format == "0.000000"
    assert row["multiplier"].number_format == "0.000"
    assert row["amount"].value == 12 and row["amount"].number_format == '#,##0.00 "USD"'
    assert (row["line_type"].value, row["mode"].value) == ("in quota", "Chargeback")
    assert {r[3].value for r in book["CC-200"].iter_rows(min_row=2)} == {"speech"}
    # Summary: speech's showback never lands in the chargeback column.
    summary = [[c.value for c in r] for r in book["Summary"].iter_rows()]
    cc200 = next(r for r in summary if r[0] == "CC-200")
    # columns: chargeback, showback, platform cost (idle), total
    assert cc200[1] == "USD" and cc200[2] == 0 and cc200[3] > 0 and cc200[4] == 0
    assert cc200[5] == cc200[3]
    vision = next(r for r in summary if r[0] == "vision")
    assert vision[2:8] == ["CC-100", "USD", 12, 0, 0, 12]
    about = [[c.value for c in r] for r in book["about"].iter_rows()]
    assert ["late_borrowed", "late borrowed usage"] in [r[:2] for r in about]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("CC-100", "CC-100"),
        ("a/b\\c[d]e:f*g?h", "a_b_c_d_e_f_g_h"),
        ("x" * 40, "x" * 31),
        ("'quoted'", "quoted"),
    ],
)
def test_sheet_names_are_valid_for_excel(name: str, expected: str) -> None:
    assert sheet_name(name) == expected
    assert sheet_name("CC-100", ["cc-100"]) == "CC-100 (2)"


def pdf_tool(tool: str, *args: str, data: bytes, tmp_path: Path) -> str:
    """Run a poppler tool on ``data``; its standard output."""
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} is missing: install poppler-utils (.ci/ensure_services.sh)")
    path = tmp_path / "doc.pdf"
    path.write_bytes(data)
    result = subprocess.run(
        [tool, *args, str(path), *(["-"] if tool == "pdftotext" else [])],
        capture_output=True,
        check=True,
    )
    return result.stdout.decode("utf-8")


def renders(data: bytes, tmp_path: Path) -> bool:
    """pdftoppm draws every page of ``data`` into a non-empty PNG."""
    if shutil.which("pdftoppm") is None:
        pytest.fail("pdftoppm is missing: install poppler-utils (.ci/ensure_services.sh)")
    path = tmp_path / "render.pdf"
    path.write_bytes(data)
    subprocess.run(["pdftoppm", "-png", "-r", "40", str(path), str(tmp_path / "page")], check=True)
    pages = list(tmp_path.glob("page*.png"))
    return bool(pages) and all(p.stat().st_size > 1000 for p in pages)


def test_a_statement_pdf_is_an_invoice_in_english(
    cast: Cast, two_months: tuple[BillingPeriod, BillingPeriod], tmp_path: Path
) -> None:
    statement = Statement.objects.get(period__name="2026-03", tenant_slug="vision")
    response = client_for(cast.finance).get(f"/api/v1/billing/statements/{statement.pk}/pdf/")
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert 'filename="statement-2026-03-vision.pdf"' in response["Content-Disposition"]
    assert renders(response.content, tmp_path)
    text = " ".join(pdf_tool("pdftotext", data=response.content, tmp_path=tmp_path).split())
    for expected in [
        "Statement 2026-03-vision",
        "Example GPU Platform Ltd",
        "1 Harbour Road",
        "Tax ID: GB123456789",
        "Vision",  # the recipient
        "Cost centre: CC-100",
        "money <money@example.com>",  # finance on the organisation above vision
        "Revision: 1",
        "Period: 2026-03-01 – 2026-03-31",
        "Subtotal late usage",
        "Subtotal adjustment -10.00 USD",
        "Net 30 by internal transfer.",
        "Page 1 of 1",
    ]:
        assert expected in text, expected
    assert "PROVISIONAL" not in text


def test_a_cost_centre_pdf_of_an_open_period_is_provisional_and_in_chinese(
    cast: Cast, gpu: GpuCluster, tmp_path: Path
) -> None:
    cast.team_a.cost_center = "CC-100"
    cast.team_a.save()
    record_usage(cast.team_a, gpu.h100, MAR, hours=2)
    response = logged_in(cast.finance).get(
        "/billing/periods/2026-03/cost-centre/pdf/?code=CC-100", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert response.status_code == 200 and response["X-Tidegate-Provisional"] == "true"
    assert "statement-2026-03-cc-CC-100-PROVISIONAL.pdf" in response["Content-Disposition"]
    assert renders(response.content, tmp_path)
    fonts = pdf_tool("pdffonts", data=response.content, tmp_path=tmp_path)
    assert "STSong-Light" in fonts
    text = " ".join(pdf_tool("pdftotext", data=response.content, tmp_path=tmp_path).split())
    with translation.override("zh-hans"):
        page = translation.gettext("Page %(n)s of %(total)s") % {"n": 1, "total": 1}
        subtotal = translation.gettext("Subtotal %(type)s") % {
            "type": translation.gettext("in quota")
        }
        title = translation.gettext("PROVISIONAL statement %(number)s") % {
            "number": "2026-03-cc-CC-100"
        }
    assert title != "PROVISIONAL statement 2026-03-cc-CC-100"  # translated
    for expected in ["Example GPU Platform Ltd", "CC-100", title, page, subtotal]:
        assert expected in text, expected
    assert "Page 1 of" not in text


def test_a_cost_centre_pdf_in_english_keeps_showback_out_of_the_charged_total(
    cast: Cast, two_months: tuple[BillingPeriod, BillingPeriod], tmp_path: Path
) -> None:
    response = client_for(cast.finance).get(
        "/api/v1/billing/exports/cost-centre/?period=2026-02&code=CC-200"
    )
    assert response.status_code == 200 and response["X-Tidegate-Provisional"] == "false"
    text = " ".join(pdf_tool("pdftotext", data=response.content, tmp_path=tmp_path).split())
    assert "Statement 2026-02-cc-CC-200" in text and "Page 1 of 1" in text
    assert "Total (showback, not charged)" in text
    assert "Subtotal reserved capacity" in text and "Subtotal borrowed" in text


def test_a_cost_centre_needs_its_code(cast: Cast, two_months: Any) -> None:
    response = client_for(cast.finance).get("/api/v1/billing/exports/cost-centre/?period=2026-02")
    assert response.status_code == 400 and "code" in str(response.json())


def test_outsiders_get_404_for_every_invoice_pdf(
    cast: Cast, two_months: tuple[BillingPeriod, BillingPeriod]
) -> None:
    statement = Statement.objects.get(period__name="2026-02", tenant_slug="vision")
    api = client_for(cast.outsider)
    portal = logged_in(cast.outsider)
    assert api.get(f"/api/v1/billing/statements/{statement.pk}/pdf/").status_code == 404
    assert portal.get(f"/billing/statements/{statement.pk}/pdf/").status_code == 404
    cost_centre = "period=2026-02&code=CC-100"
    assert api.get(f"/api/v1/billing/exports/cost-centre/?{cost_centre}").status_code == 404
    assert portal.get("/billing/periods/2026-02/cost-centre/pdf/?code=CC-100").status_code == 404
    # Idle capacity is the platform's: finance of one organisation does not read it.
    idle = "/billing/periods/2026-02/cost-centre/pdf/?code=__idle__"
    assert logged_in(cast.finance).get(idle).status_code == 404
    assert logged_in(cast.platform_admin).get(idle).status_code == 200


def test_statement_and_cost_centre_pages_link_their_pdfs(
    cast: Cast, two_months: tuple[BillingPeriod, BillingPeriod]
) -> None:
    statement = Statement.objects.get(period__name="2026-02", tenant_slug="vision")
    client = logged_in(cast.lead)
    page = client.get(f"/billing/statements/{statement.pk}/").content.decode()
    link = f'href="/billing/statements/{statement.pk}/pdf/"'
    assert link in page
    pdf = client.get(f"/billing/statements/{statement.pk}/pdf/")
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
    centre = logged_in(cast.finance).get("/billing/periods/2026-02/cost-centre/?code=CC-100")
    assert 'href="/billing/periods/2026-02/cost-centre/pdf/?code=CC-100"' in centre.content.decode()
    # The lead of vision reads vision's cost centre, not speech's.
    assert client.get("/billing/periods/2026-02/cost-centre/pdf/?code=CC-100").status_code == 200
    assert client.get("/billing/periods/2026-02/cost-centre/pdf/?code=CC-200").status_code == 404
