"""Chargeback exports: CSV, XLSX (openpyxl) and PDF (reportlab), one table export path.

The CSV has exactly the columns finance loads elsewhere:
``period,tenant,cost_center,flavor,gpu_hours_allocated,gpu_hours_busy,rate,amount,currency``.
An open period's export is provisional: the file name says so, the ``X-Tidegate-Provisional``
header says so (set by the views), the XLSX sheet and the PDF say so in their titles.

Text cells that a spreadsheet would run as a formula (starting with = + - @ tab or CR)
get a leading apostrophe (OWASP "CSV injection"); numbers are written as numbers.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from decimal import Decimal

from django.utils.translation import gettext as _

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
    for column, width in zip("ABCDEFGHI", (9, 18, 14, 28, 12, 12, 12, 14, 9), strict=True):
        sheet.column_dimensions[column].width = width
    about = book.create_sheet("about")
    about.append([_("Period"), report.period.name])
    about.append([_("State"), _("provisional") if report.provisional else _("closed")])
    about.append([_("Total"), report.total, report.currency])
    if report.provisional:
        about.append([_("Provisional: the period is still open; amounts will change.")])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def to_pdf(report: PeriodReport) -> bytes:
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4, landscape
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    buffer = io.BytesIO()
    document = SimpleDocTemplate(
        buffer, pagesize=landscape(A4), title=f"Chargeback {report.period.name}"
    )
    styles = getSampleStyleSheet()
    title = _("Chargeback statement %(period)s") % {"period": report.period.name}
    story = [Paragraph(_escape(title), styles["Title"])]
    if report.provisional:
        story.append(
            Paragraph(
                _escape(_("PROVISIONAL: the period is still open; amounts will change.")),
                styles["Heading2"],
            )
        )
    story.append(
        Paragraph(
            _escape(
                _("Total: %(total)s %(currency)s")
                % {"total": report.total, "currency": report.currency}
            ),
            styles["Normal"],
        )
    )
    story.append(Spacer(1, 12))
    data: list[list[str]] = [list(CSV_COLUMNS)]
    for row in report.rows:
        data.append(["" if cell is None else str(cell) for cell in _cells(row)])
    table = Table(data, repeatRows=1)
    table.setStyle(
        TableStyle(
            [
                ("FONT", (0, 0), (-1, 0), "Helvetica-Bold"),
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


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
