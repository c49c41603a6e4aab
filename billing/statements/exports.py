"""Chargeback exports: CSV, XLSX (openpyxl) and PDF (reportlab), one table export path.

The CSV has exactly the columns finance loads elsewhere (``CSV_COLUMNS``)::

    period,revision,statement,tenant,cost_center,line_type,usage_period,flavor,
    gpu_hours_allocated,gpu_hours_busy,rate,multiplier,amount,currency,mode

``line_type`` is a stable machine word made from the line's kind (``LINE_TYPES``); late
borrowed usage is ``late_borrowed`` (not folded into ``late_usage``) so its on-demand rate
stays visible, and both late types carry the month the usage belongs to in
``usage_period``. ``revision`` and ``statement`` name the frozen statement a line is on;
while a period is open there is none: ``revision`` is ``provisional`` and ``statement``
empty. ``mode`` is the line's statement's mode (chargeback or showback), so a sum over a
file never mixes showback into a chargeback total unseen.

An open period's export is provisional: the file name says so, the ``X-Tidegate-Provisional``
header says so (set by the views), the XLSX summary and the PDF say so in their titles.

The CSV and the XLSX data sheets keep these machine column names in every language (other
systems load them). What people read is in their language: the XLSX "about" sheet (which
also explains each column), and the PDF's title and column headers. PDFs in Chinese use
ReportLab's built-in CID font STSong-Light (no font files needed). The invoice-grade PDFs
of one statement or one cost centre are ``billing.statements.invoices``.

Text cells that a spreadsheet would run as a formula (starting with = + - @ tab or CR)
get a leading apostrophe (OWASP "CSV injection"); numbers are written as numbers, with
number formats in the XLSX (hours to 4 places, rates to 6, multipliers to 3, amounts to
cents with their currency).
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from django.utils.translation import get_language, gettext_lazy
from django.utils.translation import gettext as _

from billing.charging.pricing import IDLE_TENANT, KIND_FACTS, PLATFORM_COST, charge_class
from billing.reporting.reports import PeriodReport, ReportRow

CSV_COLUMNS = (
    "period",
    "revision",
    "statement",
    "tenant",
    "cost_center",
    "line_type",
    "usage_period",
    "flavor",
    "gpu_hours_allocated",
    "gpu_hours_busy",
    "rate",
    "multiplier",
    "amount",
    "currency",
    "mode",
)
PROVISIONAL_REVISION = "provisional"
# Statement line kind -> the CSV's line_type, and the line types in statement order
# (billing.charging.pricing.KIND_FACTS).
LINE_TYPES = {kind.value: facts.export_type for kind, facts in KIND_FACTS.items()}
LINE_TYPE_ORDER = tuple(dict.fromkeys(LINE_TYPES.values()))
# A line type in words: the label of the first kind of that type (idle: "idle capacity").
LINE_TYPE_LABELS = {
    export_type: next(f.label for f in KIND_FACTS.values() if f.export_type == export_type)
    for export_type in LINE_TYPE_ORDER
}
# Column headers for people (the PDF, the XLSX "about" sheet), in the reader's language.
COLUMN_LABELS = {
    "period": gettext_lazy("Period"),
    "revision": gettext_lazy("Revision"),
    "statement": gettext_lazy("Statement"),
    "tenant": gettext_lazy("Tenant"),
    "cost_center": gettext_lazy("Cost centre"),
    "line_type": gettext_lazy("Line type"),
    "usage_period": gettext_lazy("Usage period"),
    "flavor": gettext_lazy("Flavour"),
    "gpu_hours_allocated": gettext_lazy("GPU-hours"),
    "gpu_hours_busy": gettext_lazy("Busy GPU-hours"),
    "rate": gettext_lazy("Rate"),
    "multiplier": gettext_lazy("Multiplier"),
    "amount": gettext_lazy("Amount"),
    "currency": gettext_lazy("Currency"),
    "mode": gettext_lazy("Mode"),
}
COLUMN_HELP = {
    "period": gettext_lazy("Billing period (calendar month, UTC)"),
    "revision": gettext_lazy(
        "Revision of the statement (2 and up after a re-open); provisional while the period is open"
    ),
    "statement": gettext_lazy("Statement number to quote; empty while the period is open"),
    "tenant": gettext_lazy("Tenant slug; __idle__ is capacity no tenant held"),
    "cost_center": gettext_lazy("Cost centre of the tenant"),
    "line_type": gettext_lazy(
        "in_quota, borrowed, reserved, idle, late_usage, late_borrowed or adjustment"
    ),
    "usage_period": gettext_lazy(
        "Late usage: the month the usage belongs to (billed in this period)"
    ),
    "flavor": gettext_lazy("GPU flavour, or the kind of charge for lines without one"),
    "gpu_hours_allocated": gettext_lazy("GPU-hours held, in whole-GPU equivalents"),
    "gpu_hours_busy": gettext_lazy("GPU-hours the GPUs were busy (empty: not measured)"),
    "rate": gettext_lazy("Price of one GPU-hour on this line"),
    "multiplier": gettext_lazy("Priority multiplier included in the rate"),
    "amount": gettext_lazy("Amount charged (or shown, in showback)"),
    "currency": gettext_lazy("ISO 4217 currency code"),
    "mode": gettext_lazy(
        "chargeback (charged to the cost centre), showback (shown only) or platform (idle "
        "capacity: the platform's unrecovered cost, charged to nobody)"
    ),
}
HOURS_FORMAT = "0.0000"
RATE_FORMAT = "0.000000"
MULTIPLIER_FORMAT = "0.000"
# Excel number formats of the data sheets' numeric columns (amounts: ``amount_format``).
NUMBER_FORMATS = {
    "gpu_hours_allocated": HOURS_FORMAT,
    "gpu_hours_busy": HOURS_FORMAT,
    "rate": RATE_FORMAT,
    "multiplier": MULTIPLIER_FORMAT,
}
COLUMN_WIDTHS = (9, 10, 24, 18, 14, 14, 12, 28, 12, 12, 12, 10, 16, 9, 11)
# The period PDF's table (landscape A4 holds twelve columns at 7 points).
PDF_COLUMNS = (
    "tenant",
    "cost_center",
    "line_type",
    "usage_period",
    "flavor",
    "gpu_hours_allocated",
    "gpu_hours_busy",
    "rate",
    "multiplier",
    "amount",
    "currency",
    "mode",
)
SUMMARY_SHEET = "Summary"
ABOUT_SHEET = "about"
SHEET_NAME_BAD = re.compile(r"[\[\]:*?/\\]")
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


def line_type(kind: str) -> str:
    """The CSV's ``line_type`` of a statement line kind (unknown kinds pass through)."""
    return LINE_TYPES.get(kind, kind)


def line_type_label(kind_or_type: str) -> str:
    """What a line type (or kind) is, in the reader's language."""
    key = LINE_TYPES.get(kind_or_type, kind_or_type)
    label = LINE_TYPE_LABELS.get(key)
    return _(label) if label is not None else key


MODE_LABELS = {
    "chargeback": gettext_lazy("Chargeback"),
    "showback": gettext_lazy("Showback"),
    PLATFORM_COST: gettext_lazy("Platform cost (not charged)"),
}


def mode_label(mode: str) -> str:
    """A statement's mode in the reader's language."""
    label = MODE_LABELS.get(mode)
    return str(label) if label is not None else mode


def _readable_cells(row: ReportRow) -> dict[str, str | Decimal | None]:
    """One row by column name, codes as the reader's words (PDF and XLSX; the CSV keeps
    its machine codes in every language)."""
    named = dict(zip(CSV_COLUMNS, _cells(row), strict=True))
    named["line_type"] = line_type_label(row.kind)
    named["mode"] = mode_label(row.mode)
    if row.tenant == IDLE_TENANT:
        named["tenant"] = _("Idle capacity")
    return named


def _cells(row: ReportRow) -> list[str | Decimal | None]:
    """One row in ``CSV_COLUMNS`` order."""
    return [
        safe_text(row.period),
        row.revision or PROVISIONAL_REVISION,
        safe_text(row.statement),
        safe_text(row.tenant),
        safe_text(row.cost_center),
        line_type(row.kind),
        safe_text(row.usage_period),
        safe_text(row.flavor),
        row.gpu_hours_allocated,
        row.gpu_hours_busy,
        row.rate,
        row.multiplier,
        row.amount,
        safe_text(row.currency),
        row.mode,
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


def amount_format(currency: str) -> str:
    """Excel number format of an amount in ``currency``: cents, then the ISO code."""
    code = re.sub(r"[^A-Za-z]", "", currency)[:3]
    return f'#,##0.00 "{code}"' if code else "#,##0.00"


def sheet_name(name: str, taken: Iterable[str] = ()) -> str:
    """``name`` as a valid Excel sheet name: none of []:*?/\\, no leading or trailing
    apostrophe, at most 31 characters, and unlike every name in ``taken`` (any case)."""
    base = SHEET_NAME_BAD.sub("_", name).strip("'")[:31] or "_"
    used = {t.lower() for t in taken}
    candidate, n = base, 1
    while candidate.lower() in used:
        n += 1
        suffix = f" ({n})"
        candidate = base[: 31 - len(suffix)] + suffix
    return candidate


def cost_centre_key(row: ReportRow) -> str:
    """The cost centre a row is filed under: idle capacity is the platform's own."""
    if row.tenant == IDLE_TENANT:
        return IDLE_TENANT
    return row.cost_center


def _cost_centre_title(code: str) -> str:
    if code == IDLE_TENANT:
        return _("Idle capacity")
    return code or _("(no cost centre)")


def to_xlsx(report: PeriodReport) -> bytes:
    """A Summary sheet (totals per cost centre and per tenant, chargeback apart from
    showback), one data sheet per cost centre in ``CSV_COLUMNS``, and the about sheet."""
    from openpyxl import Workbook

    book = Workbook()
    summary = book.active
    assert summary is not None
    summary.title = SUMMARY_SHEET
    by_centre: dict[str, list[ReportRow]] = defaultdict(list)
    for row in report.rows:
        by_centre[cost_centre_key(row)].append(row)
    _summary_sheet(summary, report, by_centre)
    taken = [SUMMARY_SHEET, ABOUT_SHEET]
    for code in sorted(by_centre):
        name = sheet_name(_cost_centre_title(code), taken)
        taken.append(name)
        _data_sheet(book.create_sheet(name), by_centre[code])
    _about_sheet(book.create_sheet(ABOUT_SHEET), report)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def _data_sheet(sheet: Any, rows: list[ReportRow]) -> None:
    from openpyxl.styles import Font

    # headers and codes in the reader's language (the about sheet names each column's
    # machine name, which the CSV keeps)
    sheet.append([str(COLUMN_LABELS[name]) for name in CSV_COLUMNS])
    for cell in sheet[1]:
        cell.font = Font(bold=True)
    index = {name: i for i, name in enumerate(CSV_COLUMNS)}
    for row in rows:
        # Decimals go in as numbers (exact to the cent in the file's text form).
        named = _readable_cells(row)
        values: list[Any] = ["" if named[n] is None else named[n] for n in CSV_COLUMNS]
        if str(values[1]).isdigit():
            values[1] = int(values[1])
        sheet.append(values)
        cells = sheet[sheet.max_row]
        for name, number_format in NUMBER_FORMATS.items():
            cells[index[name]].number_format = number_format
        cells[index["amount"]].number_format = amount_format(row.currency)
    for column, width in enumerate(COLUMN_WIDTHS, start=1):
        sheet.column_dimensions[_letter(column)].width = width
    sheet.freeze_panes = "A2"


def _summary_sheet(sheet: Any, report: PeriodReport, by_centre: dict[str, list[ReportRow]]) -> None:
    from openpyxl.styles import Font

    bold = Font(bold=True)
    title = _("Chargeback statement %(period)s") % {"period": report.period.name}
    if report.provisional:
        title = f"{title} · {_('PROVISIONAL: the period is still open; amounts will change.')}"
    sheet.append([title])
    sheet["A1"].font = Font(bold=True, size=13)
    sheet.append([])
    heading = [_("Chargeback"), _("Showback"), _("Platform cost (idle, not charged)"), _("Total")]
    _summary_table(
        sheet,
        [_("Cost centre"), _("Currency"), *heading],
        [
            ([_cost_centre_title(code)], row_total)
            for code in sorted(by_centre)
            for row_total in _split_totals(by_centre[code])
        ],
        bold,
    )
    by_tenant: dict[tuple[str, str, str], list[ReportRow]] = defaultdict(list)
    for row in report.rows:
        by_tenant[(row.tenant, row.tenant_name, _cost_centre_title(cost_centre_key(row)))].append(
            row
        )
    _summary_table(
        sheet,
        [_("Tenant"), _("Name"), _("Cost centre"), _("Currency"), *heading],
        [
            (list(key), row_total)
            for key in sorted(by_tenant)
            for row_total in _split_totals(by_tenant[key])
        ],
        bold,
    )
    _summary_table(
        sheet,
        [_("All cost centres"), _("Currency"), *heading],
        [([_("Total")], row_total) for row_total in _split_totals(report.rows)],
        bold,
    )
    for column, width in zip("ABCDEFG", (24, 24, 18, 10, 16, 16, 16), strict=True):
        sheet.column_dimensions[column].width = width


Totals = tuple[str, Decimal, Decimal, Decimal]
"""(currency, chargeback, showback, platform cost): what is charged, what is only shown
and the platform's unrecovered cost (idle capacity), never one mixed sum."""
_CLASSES = ("chargeback", "showback", PLATFORM_COST)


def _split_totals(rows: Iterable[ReportRow]) -> list[Totals]:
    """The three totals per currency of ``rows``."""
    sums: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal("0.00")] * 3)
    for row in rows:
        sums[row.currency][_CLASSES.index(charge_class(row.mode))] += row.amount
    return [(currency, c, s, p) for currency, (c, s, p) in sorted(sums.items())]


def _summary_table(
    sheet: Any,
    header: list[str],
    body: Iterable[tuple[list[str], Totals]],
    bold: Any,
) -> None:
    sheet.append(header)
    for cell in sheet[sheet.max_row]:
        cell.font = bold
    for labels, (currency, chargeback, showback, platform) in body:
        total = chargeback + showback + platform
        sheet.append(
            [*(safe_text(x) for x in labels), currency, chargeback, showback, platform, total]
        )
        for cell in sheet[sheet.max_row][-4:]:
            cell.number_format = amount_format(currency)
    sheet.append([])


def _about_sheet(about: Any, report: PeriodReport) -> None:
    about.append([_("Period"), report.period.name])
    about.append([_("State"), _("provisional") if report.provisional else _("closed")])
    for currency, chargeback, showback, platform in _split_totals(report.rows):
        for label, amount in (
            (_("Chargeback"), chargeback),
            (_("Showback"), showback),
            (_("Platform cost (idle, not charged)"), platform),
        ):
            about.append([label, amount, currency])
            about.cell(about.max_row, 2).number_format = amount_format(currency)
    if report.provisional:
        about.append([_("Provisional: the period is still open; amounts will change.")])
    about.append([_("Sheets: Summary (totals), one per cost centre (its lines), about.")])
    about.append([])
    about.append([_("Column"), _("Name"), _("Meaning")])
    for name in CSV_COLUMNS:
        about.append([name, str(COLUMN_LABELS[name]), str(COLUMN_HELP[name])])
    about.append([])
    about.append([_("Line type"), _("Name")])
    for key in LINE_TYPE_ORDER:
        about.append([key, line_type_label(key)])
    for column, width in zip("ABC", (22, 18, 60), strict=True):
        about.column_dimensions[column].width = width


def _letter(column: int) -> str:
    from openpyxl.utils import get_column_letter

    return str(get_column_letter(column))


def to_pdf(report: PeriodReport) -> bytes:
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4, landscape
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    font, bold = pdf_fonts()
    buffer = io.BytesIO()
    title = _("Chargeback statement %(period)s") % {"period": report.period.name}
    document = SimpleDocTemplate(buffer, pagesize=landscape(A4), title=title)
    styles = getSampleStyleSheet()
    for style in ("Title", "Heading2", "Normal"):
        styles[style].fontName = bold if style != "Normal" else font
    story = [Paragraph(pdf_escape(title), styles["Title"])]
    if report.provisional:
        story.append(
            Paragraph(
                pdf_escape(_("PROVISIONAL: the period is still open; amounts will change.")),
                styles["Heading2"],
            )
        )
    for currency, chargeback, showback, platform in _split_totals(report.rows) or [
        (report.currency, Decimal("0.00"), Decimal("0.00"), Decimal("0.00"))
    ]:
        story.append(
            Paragraph(
                pdf_escape(_totals_text(currency, chargeback, showback, platform)),
                styles["Normal"],
            )
        )
    rates_used = sorted({row.exchange for row in report.rows if row.exchange})
    if rates_used:
        story.append(
            Paragraph(
                pdf_escape(_("Exchange rates used: %(rates)s") % {"rates": "; ".join(rates_used)}),
                styles["Normal"],
            )
        )
    story.append(Spacer(1, 12))
    data: list[list[str]] = [[str(COLUMN_LABELS[name]) for name in PDF_COLUMNS]]
    for row in report.rows:
        named = _readable_cells(row)
        data.append(["" if named[name] is None else str(named[name]) for name in PDF_COLUMNS])
    table = Table(data, repeatRows=1)
    table.setStyle(
        TableStyle(
            [
                ("FONT", (0, 0), (-1, -1), font),
                ("FONT", (0, 0), (-1, 0), bold),
                ("FONTSIZE", (0, 0), (-1, -1), 7),
                ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
                ("ALIGN", (5, 1), (9, -1), "RIGHT"),
                ("BACKGROUND", (0, 0), (-1, 0), colors.lightgrey),
            ]
        )
    )
    story.append(table)
    document.build(story, canvasmaker=numbered_canvas(font))
    return buffer.getvalue()


def _totals_text(
    currency: str, chargeback: Decimal, showback: Decimal, platform: Decimal = Decimal(0)
) -> str:
    """Chargeback, showback and the platform's idle cost apart: neither a showback amount
    nor idle capacity is ever part of what is charged."""
    if not showback and not platform:
        return _("Total: %(total)s %(currency)s") % {"total": chargeback, "currency": currency}
    parts = [
        _("Total charged: %(amount)s %(currency)s") % {"amount": chargeback, "currency": currency}
    ]
    if showback:
        parts.append(
            _("shown only (showback): %(amount)s %(currency)s")
            % {"amount": showback, "currency": currency}
        )
    if platform:
        parts.append(
            _(
                "unrecovered platform cost (idle capacity, charged to nobody): %(amount)s %(currency)s"
            )
            % {"amount": platform, "currency": currency}
        )
    return "; ".join(parts)


def pdf_fonts() -> tuple[str, str]:
    """(body, bold) fonts for the current language: Helvetica cannot draw Chinese, so
    Chinese PDFs use the CID font every PDF reader has (no bold variant)."""
    if (get_language() or "").lower().startswith("zh"):
        from reportlab.pdfbase import pdfmetrics
        from reportlab.pdfbase.cidfonts import UnicodeCIDFont

        if CJK_FONT not in pdfmetrics.getRegisteredFontNames():
            pdfmetrics.registerFont(UnicodeCIDFont(CJK_FONT))
        return CJK_FONT, CJK_FONT
    return "Helvetica", "Helvetica-Bold"


def pdf_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def numbered_canvas(font: str) -> Any:
    """A canvas class that writes "Page N of M" once it knows M (pages are kept until
    the document is saved, then each is drawn with the count)."""
    from reportlab.pdfgen.canvas import Canvas

    class NumberedCanvas(Canvas):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._pages: list[dict[str, Any]] = []

        def showPage(self) -> None:  # noqa: N802 (ReportLab's name)
            self._pages.append(dict(self.__dict__))
            self._startPage()

        def save(self) -> None:
            total = len(self._pages)
            for state in self._pages:
                self.__dict__.update(state)
                self.setFont(font, 8)
                width = self._pagesize[0]
                self.drawRightString(
                    width - 40,
                    25,
                    _("Page %(n)s of %(total)s") % {"n": self._pageNumber, "total": total},
                )
                super().showPage()
            super().save()

    return NumberedCanvas
