"""Downloads from the portal: the CSV keeps its machine columns in every language, the
XLSX opens with numbers formatted as numbers, the PDF speaks the reader's language (and
Chinese PDFs carry a font that can draw Chinese). Readers of another organisation only
download their own rows; members none."""

from __future__ import annotations

import base64
import contextlib
import csv
import io
import re
import zlib

import pytest
from openpyxl import load_workbook

from billing.models import BillingPeriod
from billing.statements.exports import CSV_COLUMNS
from billing.statements.periods import period_close
from tests.billing.conftest import FEB, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import ROLE_NAMES, Cast
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def closed(cast: Cast, gpu: GpuCluster) -> BillingPeriod:
    record_usage(cast.team_a, gpu.h100, FEB, hours=3, devices=2, busy_ratio="0.5")
    record_usage(cast.other_org, gpu.h100, FEB, hours=1, pod="g", namespace="globex-train")
    return period_close(actor=None, period=BillingPeriod.objects.get(name="2026-02"))


def pdf_text(data: bytes) -> str:
    """The PDF's content streams decoded (ASCII85, then Flate, as ReportLab writes them):
    enough to find the strings drawn on its pages."""
    out = []
    for stream in re.findall(rb"stream\r?\n(.*?)endstream", data, re.S):
        raw = stream.strip()
        if raw.endswith(b"~>"):
            raw = base64.a85decode(raw[:-2])
        with contextlib.suppress(zlib.error):
            raw = zlib.decompress(raw)
        out.append(raw.decode("latin-1"))
    return "\n".join(out)


def drawn_unicode(data: bytes) -> str:
    """Strings drawn with a CID font (two bytes per character, UTF-16BE) made readable."""
    texts = []
    for literal in re.findall(r"\(((?:\\.|[^\\)])*)\) Tj", pdf_text(data)):
        raw = re.sub(
            r"\\([0-7]{1,3}|.)",
            lambda m: chr(int(m.group(1), 8)) if m.group(1).isdigit() else m.group(1),
            literal,
        ).encode("latin-1")
        texts.append(raw.decode("utf-16-be", errors="replace"))
    return "\n".join(texts)


@pytest.mark.parametrize("role", ROLE_NAMES)
@pytest.mark.parametrize("fmt", ["csv", "xlsx", "pdf"])
def test_every_format_downloads_for_readers_only(
    closed: BillingPeriod, cast: Cast, role: str, fmt: str
) -> None:
    response = logged_in(cast.user(role)).get(f"/billing/periods/2026-02/export/{fmt}/")
    assert response.status_code == (404 if role == "member" else 200)
    if response.status_code == 200:
        assert f'filename="chargeback-2026-02.{fmt}"' in response["Content-Disposition"]
        assert response.content


def test_the_csv_keeps_its_machine_columns_in_chinese_too(
    closed: BillingPeriod, cast: Cast
) -> None:
    response = logged_in(cast.lead).get(
        "/billing/periods/2026-02/export/csv/", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert {r[3] for r in rows[1:]} == {"vision"}  # the lead's own rows only
    vision = dict(zip(rows[0], rows[1], strict=True))
    assert (vision["gpu_hours_allocated"], vision["amount"]) == ("6.0000", "12.00")
    assert (vision["line_type"], vision["mode"]) == ("in_quota", "chargeback")


def test_the_xlsx_has_numbers_with_number_formats_and_explains_its_columns(
    closed: BillingPeriod, cast: Cast
) -> None:
    response = logged_in(cast.finance).get(
        "/billing/periods/2026-02/export/xlsx/", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    book = load_workbook(io.BytesIO(response.content))
    sheet = book["（无成本中心）"]
    # headers and codes in the reader's language; the about sheet names the columns
    assert "金额" in [c.value for c in sheet[1]]
    assert "amount" not in [c.value for c in sheet[1]]
    row = next(r for r in sheet.iter_rows(min_row=2) if r[3].value == "vision")
    assert row[12].value == 12 and row[12].number_format == '#,##0.00 "USD"'  # amount
    assert row[8].value == 6 and row[8].number_format == "0.0000"  # GPU-hours
    assert row[10].number_format == "0.000000"  # rate
    assert row[11].value == 1 and row[11].number_format == "0.000"  # multiplier
    assert row[CSV_COLUMNS.index("mode")].value == "成本分摊"  # not "chargeback"
    assert row[CSV_COLUMNS.index("line_type")].value != "in_quota"
    about = [[c.value for c in r] for r in book["about"].iter_rows()]
    assert ["amount", "金额", "收取的金额（展示模式下仅展示）"] in about
    # the line types in the reader's language too (billing.charging.pricing.KIND_FACTS)
    in_quota = next(r for r in about if r[0] == "in_quota")
    assert in_quota[1] and in_quota[1] != "in quota"


def test_an_english_pdf_has_english_headers(closed: BillingPeriod, cast: Cast) -> None:
    data = logged_in(cast.finance).get("/billing/periods/2026-02/export/pdf/").content
    assert data.startswith(b"%PDF") and len(data) > 1000
    text = pdf_text(data)
    assert "Chargeback statement 2026-02" in text and "GPU-hours" in text
    assert b"STSong-Light" not in data


def test_a_chinese_pdf_uses_a_chinese_font_for_its_chinese_headers(
    closed: BillingPeriod, cast: Cast
) -> None:
    data = (
        logged_in(cast.finance)
        .get("/billing/periods/2026-02/export/pdf/", HTTP_ACCEPT_LANGUAGE="zh-hans")
        .content
    )
    assert data.startswith(b"%PDF")
    assert b"/BaseFont /STSong-Light" in data  # a CID font every PDF reader has
    text = drawn_unicode(data)
    assert "成本分摊账单 2026-02" in text  # the title
    assert "金额" in text and "租户" in text and "GPU 小时" in text  # the column headers
    assert "Amount" not in pdf_text(data)


def test_idle_capacity_is_the_platforms_cost_and_never_part_of_what_is_charged(
    closed: BillingPeriod, cast: Cast
) -> None:
    """November's idle capacity was a "chargeback" statement with no cost centre whose
    terms said "charged to the cost centre", inside the PDF's "Total charged"."""
    from django.utils import translation

    from billing.models import Statement

    idle = Statement.objects.get(tenant_slug="__idle__")
    with translation.override("en"):
        assert (idle.mode, idle.get_mode_display()) == ("platform", "Platform cost (not charged)")
    assert idle.total > 0
    charged = sum(s.total for s in Statement.objects.filter(mode="chargeback"))
    reader = logged_in(cast.platform_admin)  # who sees idle capacity and every tenant
    period_pdf = pdf_text(reader.get("/billing/periods/2026-02/export/pdf/").content)
    assert f"Total charged: {charged} USD" in period_pdf
    assert f"charged to nobody\\): {idle.total} USD" in period_pdf  # ( ) escaped in the PDF
    statement_pdf = pdf_text(reader.get(f"/billing/statements/{idle.pk}/pdf/").content)
    assert "charged to nobody" in statement_pdf
    assert "Charged to the cost centre" not in statement_pdf
    assert "Total charged" not in statement_pdf
    home = reader.get("/billing/?period=2026-02").content.decode()
    assert "Idle capacity: platform cost, charged to nobody" in home
