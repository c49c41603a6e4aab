"""Invoice-grade PDFs: one tenant's statement, or one cost centre's lines of a period.

Each PDF carries the issuer (``TIDEGATE_BILLING["ISSUER"]``: name, address lines, contact,
tax id) and the payment terms (``TIDEGATE_BILLING["PAYMENT_TERMS"]``), the recipient
(tenant or cost centre, with the finance contacts of its tenants), the statement number
and revision, the issue date (when the period closed), the period's first and last day,
the lines grouped by line type with a subtotal per type, the total (chargeback apart
from showback), and "Page N of M" on every page. An open period (or a statement whose
period was re-opened) is marked provisional in the title and with a watermark.

The reader's language is the one active when ``render`` runs; Chinese uses the CID font
STSong-Light (``billing.statements.exports.pdf_fonts``). Issuer and terms are configuration and
print as written.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from django.utils.formats import date_format
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from billing.charging.pricing import IDLE_TENANT, PLATFORM_COST, charge_class
from billing.conf import billing_setting
from billing.models import BillingPeriod, Statement
from billing.permissions import can_manage_platform_billing
from billing.reporting.reports import PeriodReport, ReportRow, statement_rows
from billing.selectors import billing_tenants
from billing.statements.exports import (
    LINE_TYPE_ORDER,
    cost_centre_key,
    line_type,
    line_type_label,
    numbered_canvas,
    pdf_escape,
    pdf_fonts,
)
from tenants.models import Membership, Role, Tenant

ZERO = Decimal("0.00")


@dataclass(frozen=True)
class Issuer:
    """Who issues the statements, from ``TIDEGATE_BILLING["ISSUER"]``."""

    name: str
    address: tuple[str, ...] = ()
    contact: str = ""
    tax_id: str = ""

    @classmethod
    def from_settings(cls) -> Issuer:
        raw: dict[str, Any] = billing_setting("ISSUER") or {}
        address = raw.get("address") or ()
        return cls(
            name=str(raw.get("name") or ""),
            address=(address,) if isinstance(address, str) else tuple(map(str, address)),
            contact=str(raw.get("contact") or ""),
            tax_id=str(raw.get("tax_id") or ""),
        )


@dataclass(frozen=True)
class Invoice:
    """Everything one PDF shows; built by ``statement_invoice`` or ``cost_centre_invoice``."""

    number: str
    revision: str
    period: BillingPeriod
    issued: date | None
    provisional: bool
    recipient: str
    cost_center: str
    rows: list[ReportRow]
    contacts: list[str] = field(default_factory=list)
    tenants: list[str] = field(default_factory=list)  # cost centre: the tenants billed
    note: str = ""

    @property
    def first_day(self) -> date:
        return self.period.start.date()

    @property
    def last_day(self) -> date:
        return (self.period.end - timedelta(days=1)).date()


def statement_invoice(statement: Statement) -> Invoice:
    """The PDF of one frozen statement."""
    period = statement.period
    superseded = statement.revision != period.revision
    issued = (period.closed_at if not superseded else None) or statement.created_at
    tenants = [statement.tenant] if statement.tenant is not None else []
    note = ""
    if superseded:
        note = _(
            "Superseded: period %(period)s was re-opened; revision %(revision)s replaces this."
        ) % {
            "period": period.name,
            "revision": period.revision,
        }
    return Invoice(
        number=statement.number,
        revision=str(statement.revision),
        period=period,
        issued=issued.date() if issued else None,
        provisional=period.state != BillingPeriod.State.CLOSED,
        recipient=(
            _("Idle capacity") if statement.tenant_slug == IDLE_TENANT else statement.tenant_name
        ),
        cost_center=statement.cost_center,
        rows=statement_rows(statement),
        contacts=finance_contacts(tenants),
        note=note,
    )


def cost_centre_rows(report: PeriodReport, code: str) -> list[ReportRow]:
    """The report's rows billed to cost centre ``code`` (``__idle__``: idle capacity)."""
    return [row for row in report.rows if cost_centre_key(row) == code]


def cost_centre_visible(user: Any, code: str, rows: list[ReportRow]) -> bool:
    """Whether ``user`` reads cost centre ``code``: idle capacity is for platform billing
    managers; another cost centre needs a line, or a tenant of it, the user reads."""
    if code == IDLE_TENANT:
        return can_manage_platform_billing(user)
    return bool(rows) or billing_tenants(user).filter(cost_center=code).exists()


def cost_centre_invoice(report: PeriodReport, code: str, rows: list[ReportRow]) -> Invoice:
    """The PDF of one cost centre's ``rows`` in ``report``'s period (provisional while
    the period is open). Its number is ``<period>-cc-<code>``."""
    period = report.period
    slugs = sorted({row.tenant for row in rows if row.tenant != IDLE_TENANT})
    tenants = list(Tenant.objects.filter(slug__in=slugs))
    title = _("Idle capacity") if code == IDLE_TENANT else code or _("(no cost centre)")
    return Invoice(
        number=f"{period.name}-cc-{code or 'none'}",
        revision=_("provisional") if report.provisional else str(period.revision),
        period=period,
        issued=period.closed_at.date() if period.closed_at and not report.provisional else None,
        provisional=report.provisional,
        recipient=title,
        cost_center=code if code != IDLE_TENANT else "",
        rows=rows,
        contacts=finance_contacts(tenants),
        tenants=[f"{t.name} ({t.slug})" for t in sorted(tenants, key=lambda t: t.slug)],
    )


def finance_contacts(tenants: Iterable[Tenant]) -> list[str]:
    """Finance members of the tenants or of their ancestors: "Name <email>"."""
    ids: set[int] = set()
    for tenant in tenants:
        ids.update(int(part) for part in tenant.path.strip("/").split("/") if part)
    memberships = (
        Membership.objects.filter(tenant_id__in=ids, role=Role.FINANCE)
        .select_related("user")
        .order_by("user__username")
    )
    out: list[str] = []
    for membership in memberships:
        user = membership.user
        name = user.get_full_name() or user.get_username()
        text = f"{name} <{user.email}>" if user.email else name
        if text not in out:
            out.append(text)
    return out


def filename(invoice: Invoice) -> str:
    """The download's name: the number, with anything but letters, digits . _ - as _."""
    marker = "-PROVISIONAL" if invoice.provisional else ""
    number = re.sub(r"[^A-Za-z0-9._-]", "_", invoice.number)
    return f"statement-{number}{marker}.pdf"


def render(invoice: Invoice) -> bytes:
    """The invoice as a PDF (A4 portrait) in the active language."""
    from reportlab.lib.pagesizes import A4
    from reportlab.platypus import SimpleDocTemplate

    font, bold = pdf_fonts()
    buffer = io.BytesIO()
    title = _title(invoice)
    document = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        title=title,
        author=Issuer.from_settings().name,
        leftMargin=40,
        rightMargin=40,
        topMargin=40,
        bottomMargin=50,
    )
    page = _PageDecor(font, bold, _("PROVISIONAL") if invoice.provisional else "")
    document.build(
        _story(invoice, title, font, bold),
        onFirstPage=page.draw,
        onLaterPages=page.draw,
        canvasmaker=numbered_canvas(font),
    )
    return buffer.getvalue()


def _title(invoice: Invoice) -> str:
    title = _("Statement %(number)s") % {"number": invoice.number}
    if invoice.provisional:
        title = _("PROVISIONAL statement %(number)s") % {"number": invoice.number}
    return title


def _story(invoice: Invoice, title: str, font: str, bold: str) -> list[Any]:
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, Spacer

    styles = getSampleStyleSheet()
    for style in ("Title", "Heading2", "Heading4", "Normal"):
        styles[style].fontName = font if style == "Normal" else bold
    styles["Normal"].fontSize = 9
    styles["Normal"].leading = 12
    story: list[Any] = [Paragraph(pdf_escape(title), styles["Title"])]
    if invoice.provisional:
        story.append(
            Paragraph(
                pdf_escape(_("PROVISIONAL: the period is still open; amounts will change.")),
                styles["Heading4"],
            )
        )
    if invoice.note:
        story.append(Paragraph(pdf_escape(invoice.note), styles["Heading4"]))
    story.append(_parties(invoice, styles))
    story.append(Spacer(1, 10))
    story.append(_lines_table(invoice, font, bold))
    rates_used = sorted({row.exchange for row in invoice.rows if row.exchange})
    if rates_used:
        story.append(Spacer(1, 6))
        story.append(
            Paragraph(
                pdf_escape(_("Exchange rates used: %(rates)s") % {"rates": "; ".join(rates_used)}),
                styles["Normal"],
            )
        )
    story.append(Spacer(1, 12))
    story.append(Paragraph(pdf_escape(_("Terms")), styles["Heading4"]))
    for line in _terms(invoice):
        story.append(Paragraph(pdf_escape(line), styles["Normal"]))
    return story


def _parties(invoice: Invoice, styles: Any) -> Any:
    """Issuer | recipient | the statement's references, side by side."""
    from reportlab.platypus import Paragraph, Table, TableStyle

    issuer = Issuer.from_settings()
    issuer_lines = [issuer.name, *issuer.address]
    if issuer.contact:
        issuer_lines.append(issuer.contact)
    if issuer.tax_id:
        issuer_lines.append(_("Tax ID: %(id)s") % {"id": issuer.tax_id})
    recipient_lines = [invoice.recipient]
    if invoice.cost_center:
        recipient_lines.append(_("Cost centre: %(code)s") % {"code": invoice.cost_center})
    recipient_lines.extend(invoice.tenants)
    if invoice.contacts:
        recipient_lines.append(_("Finance contacts:"))
        recipient_lines.extend(invoice.contacts)
    issued = date_format(invoice.issued, "Y-m-d") if invoice.issued else _("not issued yet")
    reference_lines = [
        _("Statement number: %(number)s") % {"number": invoice.number},
        _("Revision: %(revision)s") % {"revision": invoice.revision},
        _("Issue date: %(date)s") % {"date": issued},
        _("Period: %(first)s – %(last)s")
        % {
            "first": date_format(invoice.first_day, "Y-m-d"),
            "last": date_format(invoice.last_day, "Y-m-d"),
        },
        _("Mode: %(mode)s") % {"mode": _mode_text(invoice.rows)},
    ]

    def block(heading: str, lines: list[str]) -> list[Any]:
        return [
            Paragraph(pdf_escape(heading), styles["Heading4"]),
            *(Paragraph(pdf_escape(line), styles["Normal"]) for line in lines if line),
        ]

    table = Table(
        [
            [
                block(_("Issuer"), issuer_lines),
                block(_("Bill to"), recipient_lines),
                block(_("Statement"), reference_lines),
            ]
        ],
        colWidths=["33%", "34%", "33%"],
    )
    table.setStyle(TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP")]))
    return table


def _mode_text(rows: list[ReportRow]) -> str:
    modes = {row.mode for row in rows} or {"chargeback"}
    if modes == {PLATFORM_COST}:
        return _("platform cost (idle capacity, not charged to anyone)")
    modes.discard(PLATFORM_COST)
    if modes == {"showback"}:
        return _("showback (shown only, not charged)")
    if modes == {"chargeback"}:
        return _("chargeback")
    return _("chargeback and showback")


def _lines_table(invoice: Invoice, font: str, bold: str) -> Any:
    """Lines grouped by line type, a subtotal per type and currency, then the totals."""
    from reportlab.lib import colors
    from reportlab.platypus import Table, TableStyle

    with_tenant = bool(invoice.tenants) or any(r.tenant == IDLE_TENANT for r in invoice.rows)
    header = [_("Description"), _("Usage period"), _("GPU-hours"), _("Rate"), _("Multiplier")]
    header += [_("Amount"), _("Currency")]
    if with_tenant:
        header.insert(0, _("Tenant"))
    pad = 1 if with_tenant else 0
    data: list[list[str]] = [header]
    style: list[tuple[Any, ...]] = [
        ("FONT", (0, 0), (-1, -1), font),
        ("FONT", (0, 0), (-1, 0), bold),
        ("FONTSIZE", (0, 0), (-1, -1), 8),
        ("LINEBELOW", (0, 0), (-1, 0), 0.5, colors.black),
        ("ALIGN", (2 + pad, 1), (5 + pad, -1), "RIGHT"),
        ("BACKGROUND", (0, 0), (-1, 0), colors.lightgrey),
    ]
    groups: dict[str, list[ReportRow]] = defaultdict(list)
    for row in invoice.rows:
        groups[line_type(row.kind)].append(row)
    order = [t for t in LINE_TYPE_ORDER if t in groups] + sorted(
        t for t in groups if t not in LINE_TYPE_ORDER
    )
    for key in order:
        data.append([capfirst(line_type_label(key))] + [""] * (len(header) - 1))
        style.append(("FONT", (0, len(data) - 1), (-1, len(data) - 1), bold))
        for row in groups[key]:
            # An adjustment is an amount only: no hours, rate or multiplier to show.
            quantities = (
                ["", "", ""]
                if key == "adjustment"
                else [
                    str(row.gpu_hours_allocated),
                    str(row.rate),
                    str(row.multiplier),
                ]
            )
            cells = [row.note or row.flavor, row.usage_period, *quantities]
            cells += [str(row.amount), row.currency]
            if with_tenant:
                cells.insert(0, _("Idle capacity") if row.tenant == IDLE_TENANT else row.tenant)
            data.append(cells)
        for currency, amount in _sums(groups[key]).items():
            label = _("Subtotal %(type)s") % {"type": line_type_label(key)}
            data.append(_sum_row(label, amount, currency, len(header)))
            style.append(("FONT", (0, len(data) - 1), (-1, len(data) - 1), bold))
            style.append(("LINEABOVE", (-2, len(data) - 1), (-2, len(data) - 1), 0.25, colors.grey))
    for label, amount, currency in _totals(invoice.rows):
        data.append(_sum_row(label, amount, currency, len(header)))
        style.append(("FONT", (0, len(data) - 1), (-1, len(data) - 1), bold))
        style.append(("LINEABOVE", (0, len(data) - 1), (-1, len(data) - 1), 0.75, colors.black))
    table = Table(data, repeatRows=1)
    table.setStyle(TableStyle(style))
    return table


def _sum_row(label: str, amount: Decimal, currency: str, width: int) -> list[str]:
    return [label] + [""] * (width - 3) + [str(amount), currency]


def _sums(rows: Iterable[ReportRow], mode: str | None = None) -> dict[str, Decimal]:
    sums: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for row in rows:
        if mode is None or charge_class(row.mode) == mode:
            sums[row.currency] += row.amount
    return dict(sorted(sums.items()))


def _totals(rows: list[ReportRow]) -> list[tuple[str, Decimal, str]]:
    """The total per currency; what is charged, what is only shown (showback) and the
    platform's unrecovered cost (idle capacity) are separate totals, never one sum."""
    if not rows:
        return [(_("Total"), ZERO, "")]
    classes = {charge_class(row.mode) for row in rows}
    labels = {
        "chargeback": _("Total charged") if len(classes) > 1 else _("Total"),
        "showback": _("Total shown (showback)")
        if len(classes) > 1
        else _("Total (showback, not charged)"),
        PLATFORM_COST: _("Unrecovered platform cost (idle capacity, not charged)"),
    }
    return [
        (labels[kind], amount, currency)
        for kind in ("chargeback", "showback", PLATFORM_COST)
        if kind in classes
        for currency, amount in _sums(rows, kind).items()
    ]


def _terms(invoice: Invoice) -> list[str]:
    terms = str(billing_setting("PAYMENT_TERMS") or "")
    lines = [line for line in terms.splitlines() if line.strip()]
    if invoice.rows and all(row.mode == PLATFORM_COST for row in invoice.rows):
        return [
            _(
                "Idle capacity: GPUs no tenant held. It is the platform's unrecovered cost "
                "and is charged to nobody."
            )
        ]
    if all(row.mode == "showback" for row in invoice.rows) and invoice.rows:
        lines.insert(0, _("Showback: for information only; nothing is charged."))
    if not lines:
        lines.append(_("Charged to the cost centre as agreed with the platform's finance team."))
    if invoice.provisional:
        lines.append(_("Provisional amounts are not payable; the closed statement replaces them."))
    return lines


class _PageDecor:
    """The provisional watermark behind every page."""

    def __init__(self, font: str, bold: str, watermark: str) -> None:
        self.font, self.bold, self.watermark = font, bold, watermark

    def draw(self, canvas: Any, document: Any) -> None:
        if not self.watermark:
            return
        from reportlab.lib import colors

        width, height = document.pagesize
        canvas.saveState()
        canvas.setFillColor(colors.Color(0.85, 0.85, 0.85))
        canvas.setFont(self.bold, 72)
        canvas.translate(width / 2, height / 2)
        canvas.rotate(40)
        canvas.drawCentredString(0, 0, self.watermark)
        canvas.restoreState()
