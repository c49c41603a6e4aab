"""Chargeback exports: CSV, XLSX (openpyxl) and PDF (reportlab), one table export path.

The CSV has exactly the columns finance loads elsewhere:
``period,tenant,cost_center,flavor,gpu_hours_allocated,gpu_hours_busy,rate,amount,currency``.
An open period's export is provisional: the file name says so, the ``X-Tidegate-Provisional``
header says so (set by the views), the XLSX sheet and the PDF say so in their titles.

The CSV and the XLSX data sheet keep these machine column names in every language (other
systems load them). What people read is in their language: the XLSX "about" sheet (which
also explains each column), and the PDF's title and column headers. PDFs in Chinese use
ReportLab's built-in CID font STSong-Light (no font files needed).

Text cells that a spreadsheet would run as a formula (starting with = + - @ tab or CR)
get a leading apostrophe (OWASP "CSV injection"); numbers are written as numbers, with
number formats in the XLSX (hours to 4 places, rates to 6, amounts to cents).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from decimal import Decimal

from django.utils.translation import get_language, gettext_lazy
from django.utils.translation import gettext as _

from billing.pricing import IDLE_TENANT
from billing.reports import PeriodReport, ReportRow

CSV_COLUMNS = (
    "period",
    "tenant",
    "cost_center",
    "flavor",
    "gpu_hours_allocated",
    "gpu_hours_busy",
    "rate",
    "amount",
    "currency",
)
# Column headers for people (the PDF, the XLSX "about" sheet), in the reader's language.
COLUMN_LABELS = {
    "period": gettext_lazy("Period"),
    "tenant": gettext_lazy("Tenant"),
    "cost_center": gettext_lazy("Cost centre"),
    "flavor": gettext_lazy("Flavour"),
    "gpu_hours_allocated": gettext_lazy("GPU-hours"),
    "gpu_hours_busy": gettext_lazy("Busy GPU-hours"),
    "rate": gettext_lazy("Rate"),
    "amount": gettext_lazy("Amount"),
    "currency": gettext_lazy("Currency"),
}
COLUMN_HELP = {
    "period": gettext_lazy("Billing period (calendar month, UTC)"),
    "tenant": gettext_lazy("Tenant slug; __idle__ is capacity no tenant held"),
    "cost_center": gettext_lazy("Cost centre of the tenant"),
    "flavor": gettext_lazy("GPU flavour, or the kind of charge for lines without one"),
    "gpu_hours_allocated": gettext_lazy("GPU-hours held, in whole-GPU equivalents"),
    "gpu_hours_busy": gettext_lazy("GPU-hours the GPUs were busy (empty: not measured)"),
    "rate": gettext_lazy("Price of one GPU-hour on this line"),
    "amount": gettext_lazy("Amount charged (or shown, in showback)"),
    "currency": gettext_lazy("ISO 4217 currency code"),
}
# Excel number formats of the numeric columns (E..H).
NUMBER_FORMATS = {"E": "#,##0.0000", "F": "#,##0.0000", "G": "#,##0.000000", "H": "#,##0.00"}
CJK_FONT = "STSong-Light"
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "pdf": "application/pdf",
}


def safe_text(value: str) -> str:
    """``value`` made inert in a spreadsheet: a leading ' before formula characters."""
    return f"'{value}" if value.startswith(FORMULA_PREFIXES) else value


def _cells(row: ReportRow) -> list[str | Decimal | None]:
    return [
        safe_text(row.period),
        safe_text(row.tenant),
        safe_text(row.cost_center),
        safe_text(row.flavor),
        row.gpu_hours_allocated,
        row.gpu_hours_busy,
        row.rate,
        row.amount,
        safe_text(row.currency),
    ]


def filename(report: PeriodReport, fmt: str) -> str:
    marker = "-PROVISIONAL" if report.provisional else ""
    return f"chargeback-{report.period.name}{marker}.{fmt}"


def export(report: PeriodReport, fmt: str) -> bytes:
    """The report as ``fmt`` (csv, xlsx or pdf); ValueError for another format."""
    if fmt == "csv":
        return to_csv(report.rows)
    if fmt == "xlsx":
        return to_xlsx(report)
    if fmt == "pdf":
        return to_pdf(report)
    raise ValueError(f"unknown export format {fmt!r}; use csv, xlsx or pdf")


def to_csv(rows: Iterable[ReportRow]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow(["" if cell is None else cell for cell in _cells(row)])
    return out.getvalue().encode("utf-8")


def to_xlsx(report: PeriodReport) -> bytes:
    from openpyxl import Workbook
    from openpyxl.styles import Font

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = f"{report.period.name}{' PROVISIONAL' if report.provisional else ''}"[:31]
    sheet.append(list(CSV_COLUMNS))
    for cell in sheet[1]:
        cell.font = Font(bold=True)
    for row in report.rows:
        # Decimals go in as numbers (exact to the cent in the file's text form).
        sheet.append(["" if cell is None else cell for cell in _cells(row)])
    for column, number_format in NUMBER_FORMATS.items():
        for cell in sheet[column][1:]:
            cell.number_format = number_format
    for column, width in zip("ABCDEFGHI", (9, 18, 14, 28, 12, 12, 12, 14, 9), strict=True):
        sheet.column_dimensions[column].width = width
    sheet.freeze_panes = "A2"
    about = book.create_sheet("about")
    about.append([_("Period"), report.period.name])
    about.append([_("State"), _("provisional") if report.provisional else _("closed")])
    # one total per currency: amounts of two currencies are never added
    for currency, total in (report.totals_by_currency() or {report.currency: report.total}).items():
        about.append([_("Total"), total, currency])
        about.cell(row=about.max_row, column=2).number_format = "#,##0.00"
    if report.provisional:
        about.append([_("Provisional: the period is still open; amounts will change.")])
    about.append([])
    about.append([_("Column"), _("Name"), _("Meaning")])
    for name in CSV_COLUMNS:
        about.append([name, str(COLUMN_LABELS[name]), str(COLUMN_HELP[name])])
    for column, width in zip("ABC", (22, 18, 60), strict=True):
        about.column_dimensions[column].width = width
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def to_pdf(report: PeriodReport) -> bytes:
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4, landscape
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    font, bold = _pdf_fonts()
    buffer = io.BytesIO()
    title = _("Chargeback statement %(period)s") % {"period": report.period.name}
    document = SimpleDocTemplate(buffer, pagesize=landscape(A4), title=title)
    styles = getSampleStyleSheet()
    for style in ("Title", "Heading2", "Normal"):
        styles[style].fontName = bold if style != "Normal" else font
    story = [Paragraph(_escape(title), styles["Title"])]
    if report.provisional:
        story.append(
            Paragraph(
                _escape(_("PROVISIONAL: the period is still open; amounts will change.")),
                styles["Heading2"],
            )
        )
    for currency, total in (report.totals_by_currency() or {report.currency: report.total}).items():
        story.append(
            Paragraph(
                _escape(
                    _("Total: %(total)s %(currency)s") % {"total": total, "currency": currency}
                ),
                styles["Normal"],
            )
        )
    rates_used = sorted({row.exchange for row in report.rows if row.exchange})
    if rates_used:
        story.append(
            Paragraph(
                _escape(_("Exchange rates used: %(rates)s") % {"rates": "; ".join(rates_used)}),
                styles["Normal"],
            )
        )
    story.append(Spacer(1, 12))
    data: list[list[str]] = [[str(COLUMN_LABELS[name]) for name in CSV_COLUMNS]]
    for row in report.rows:
        cells = ["" if cell is None else str(cell) for cell in _cells(row)]
        if row.tenant == IDLE_TENANT:
            cells[1] = _("Idle capacity")
        data.append(cells)
    table = Table(data, repeatRows=1)
    table.setStyle(
        TableStyle(
            [
                ("FONT", (0, 0), (-1, -1), font),
                ("FONT", (0, 0), (-1, 0), bold),
                ("FONTSIZE", (0, 0), (-1, -1), 7),
                ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
                ("ALIGN", (4, 1), (7, -1), "RIGHT"),
                ("BACKGROUND", (0, 0), (-1, 0), colors.lightgrey),
            ]
        )
    )
    story.append(table)
    document.build(story)
    return buffer.getvalue()


def _pdf_fonts() -> tuple[str, str]:
    """(body, bold) fonts for the current language: Helvetica cannot draw Chinese, so
    Chinese PDFs use the CID font every PDF reader has (no bold variant)."""
    if (get_language() or "").lower().startswith("zh"):
        from reportlab.pdfbase import pdfmetrics
        from reportlab.pdfbase.cidfonts import UnicodeCIDFont

        if CJK_FONT not in pdfmetrics.getRegisteredFontNames():
            pdfmetrics.registerFont(UnicodeCIDFont(CJK_FONT))
        return CJK_FONT, CJK_FONT
    return "Helvetica", "Helvetica-Bold"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
