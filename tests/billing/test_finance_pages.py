"""Finance pages by role (every new URL and the budget panel's partial: who gets 404),
and what each page tells finance: periods with states and totals, statements per cost
centre, drill-down from a statement to flavours and workloads, idle capacity explained,
the month-over-month trend, budgets with their heat map, and empty states."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.budgeting.budgets import budgets_evaluate
from billing.models import BillingPeriod, Budget, Statement, StatementLine
from billing.statements.periods import period_close
from billing.usage.metering import floor_hour
from scheduler_bridge.templatetags.tidegate import money
from scheduler_bridge.workloads.models import Workload
from tenants.history import record_setting, tenant_place
from tests.billing.conftest import FEB, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import ROLE_NAMES, Cast
from tests.factories import MembershipFactory
from tests.tenants.test_portal import logged_in
from tests.workloads.test_portal_languages import visible_text

pytestmark = pytest.mark.django_db

READERS = dict.fromkeys(ROLE_NAMES, 200) | {"member": 404}
FINANCE_ONLY = dict.fromkeys(ROLE_NAMES, 404) | {"platform_admin": 200, "finance": 200}
VISION_READERS = dict.fromkeys(ROLE_NAMES, 200) | {"member": 404, "outsider": 404}
PLATFORM_ONLY = dict.fromkeys(ROLE_NAMES, 404) | {"platform_admin": 200}


@pytest.fixture
def closed(cast: Cast, gpu: GpuCluster) -> BillingPeriod:
    cast.team_a.cost_center = "CC-VISION"
    cast.team_a.save()
    # in force from February on (cost centres are effective-dated)
    record_setting("tenant", cast.team_a.pk, tenant_place(cast.team_a), at=FEB)
    workload = Workload.objects.create(
        cluster=gpu.cluster,
        tenant=cast.team_a,
        name="resnet",
        pod_sets=[],
        submitted_at=FEB,
        state=Workload.State.FINISHED,
        flavour=gpu.h100,
        gpus=2,
    )
    record_usage(
        cast.team_a, gpu.h100, FEB, hours=2, devices=2, job="resnet", workload_id=workload.pk
    )
    record_usage(cast.other_org, gpu.h100, FEB, hours=1, pod="g", namespace="globex-train")
    return period_close(actor=None, period=BillingPeriod.objects.get(name="2026-02"))


def pages(cast: Cast, gpu: GpuCluster) -> dict[str, dict[str, int]]:
    return {
        "/billing/periods/": READERS,
        "/billing/trend/": READERS,
        "/billing/budgets/": READERS,
        "/billing/rate-cards/": FINANCE_ONLY,
        f"/billing/rate-cards/{gpu.card.pk}/edit/": PLATFORM_ONLY,
        "/billing/idle/?period=2026-02": FINANCE_ONLY,
        "/billing/budgets/panel/vision/": VISION_READERS,
        "/billing/periods/2026-02/cost-centre/?code=CC-VISION": VISION_READERS,
        "/billing/periods/2026-02/cost-centre/?code=__idle__": PLATFORM_ONLY,
        "/billing/periods/2026-02/export/csv/?tenant=vision": VISION_READERS,
        "/billing/periods/2031-01/export/csv/": dict.fromkeys(ROLE_NAMES, 404),
        "/billing/periods/2026-02/export/docx/": dict.fromkeys(ROLE_NAMES, 404),
    }


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_each_finance_page_answers_404_to_whoever_may_not_read_it(
    closed: BillingPeriod, cast: Cast, gpu: GpuCluster, role: str
) -> None:
    client = logged_in(cast.user(role))
    got = {url: client.get(url).status_code for url in pages(cast, gpu)}
    assert got == {url: expected[role] for url, expected in pages(cast, gpu).items()}


def test_outsiders_see_no_other_tenant_on_the_shared_pages(
    closed: BillingPeriod, cast: Cast, gpu: GpuCluster
) -> None:
    Budget.objects.create(tenant=cast.team_a, amount=Decimal("50.00"), currency="USD")
    budgets_evaluate()
    client = logged_in(cast.outsider)
    for url in ("/billing/periods/", "/billing/budgets/", "/billing/trend/"):
        page = client.get(url).content.decode()
        assert not re.search(r"\bvision\b", page) and "CC-VISION" not in page, url


def test_the_budget_panel_partial_refreshes_itself_every_30_seconds(
    cast: Cast, gpu: GpuCluster
) -> None:
    page = logged_in(cast.lead).get("/tenants/vision/").content.decode()
    panel = page[page.index('id="budget-panel"') - 40 :]
    assert 'hx-get="/billing/budgets/panel/vision/"' in panel
    assert 'hx-trigger="every 30s"' in panel and 'hx-swap="outerHTML"' in panel
    partial = logged_in(cast.lead).get("/billing/budgets/panel/vision/").content.decode()
    assert partial.lstrip().startswith('<section class="card" id="budget-panel"')
    assert "<html" not in partial  # only the panel, swapped in place


def test_the_periods_page_lists_states_totals_and_downloads(
    closed: BillingPeriod, cast: Cast
) -> None:
    period_create_now = logged_in(cast.platform_admin).get("/billing/")  # opens this month
    assert period_create_now.status_code == 200
    page = logged_in(cast.platform_admin).get("/billing/periods/").content.decode()
    row = page[page.index('id="period-2026-02"') :]
    row = row[: row.index("</tr>")]
    total = sum(
        Statement.objects.filter(period=closed, tenant__isnull=False).values_list(
            "total", flat=True
        )
    )
    assert "Closed" in row and f"{total:.2f} USD" in row
    assert "/billing/periods/2026-02/export/csv/" in row and "/export/pdf/" in row
    assert re.search(r"\d+ statements", row)
    current = timezone.now().strftime("%Y-%m")
    assert f'id="period-{current}"' in page and "provisional" in page


def test_closing_from_the_periods_page_says_what_freezes_then_comes_back(
    cast: Cast, gpu: GpuCluster
) -> None:
    record_usage(cast.team_a, gpu.h100, FEB, hours=3)
    admin = logged_in(cast.platform_admin)
    page = admin.get("/billing/periods/").content.decode()
    form = page[page.index('id="close-2026-02"') :]
    form = form[: form.index("</form>")]
    asked = re.search(
        r"Closing 2026-02 freezes (\d+) statements \((\d+) tenants and the idle capacity "
        r"statement\), their (\d+) lines and their totals: ([\d,.]+) USD in all",
        form,
    )
    assert asked is not None, form
    assert 'name="next" value="/billing/periods/"' in form
    done = admin.post("/billing/periods/2026-02/close/", {"next": "/billing/periods/"}, follow=True)
    assert done.redirect_chain[-1][0] == "/billing/periods/"
    assert "Period 2026-02 closed: its statements are frozen." in done.content.decode()
    period = BillingPeriod.objects.get(name="2026-02")
    statements = Statement.objects.filter(period=period)
    assert int(asked.group(1)) == statements.count()
    assert int(asked.group(2)) == statements.filter(tenant__isnull=False).count()
    assert int(asked.group(3)) == StatementLine.objects.filter(statement__in=statements).count()
    assert Decimal(asked.group(4).replace(",", "")) == sum(s.total for s in statements)
    again = admin.post("/billing/periods/2026-02/close/", follow=True).content.decode()
    assert "is already closed; its statements are frozen" in again  # in words, no 500


def test_a_close_that_points_elsewhere_returns_to_the_billing_page(
    cast: Cast, gpu: GpuCluster
) -> None:
    record_usage(cast.team_a, gpu.h100, FEB)
    done = logged_in(cast.platform_admin).post(
        "/billing/periods/2026-02/close/", {"next": "https://evil.example/"}
    )
    assert done["Location"] == "/billing/?period=2026-02"


def test_a_cost_centre_lists_its_statements_per_flavour_and_kind(
    closed: BillingPeriod, cast: Cast
) -> None:
    page = logged_in(cast.finance).get("/billing/periods/2026-02/cost-centre/?code=CC-VISION")
    text = page.content.decode()
    statement = Statement.objects.get(period=closed, tenant=cast.team_a)
    assert f'href="/billing/statements/{statement.pk}/"' in text
    assert "h100-80gb" in text and "in quota" in text
    assert f"{statement.total} USD" in text


def test_spend_rows_link_to_statements_and_cost_centres(closed: BillingPeriod, cast: Cast) -> None:
    page = logged_in(cast.finance).get("/billing/?period=2026-02").content.decode()
    statement = Statement.objects.get(period=closed, tenant=cast.team_a)
    table = page[page.index('id="spend-by-tenant"') :]
    assert f'<a href="/billing/statements/{statement.pk}/"><code>vision</code></a>' in table
    centres = page[page.index('id="spend-by-cost-centre"') :]
    assert '/billing/periods/2026-02/cost-centre/?code=CC-VISION">CC-VISION</a>' in centres


def test_a_statement_drills_down_to_flavours_and_workload_pages(
    closed: BillingPeriod, cast: Cast
) -> None:
    statement = Statement.objects.get(period=closed, tenant=cast.team_a)
    client = logged_in(cast.lead)
    page = client.get(f"/billing/statements/{statement.pk}/").content.decode()
    flavours = page[page.index('id="flavours"') :]
    assert '<a href="?flavour=h100-80gb#workloads">h100-80gb</a>' in flavours
    workload = Workload.objects.get(name="resnet")
    drilled = client.get(f"/billing/statements/{statement.pk}/?flavour=h100-80gb").content.decode()
    workloads = drilled[drilled.index('id="workloads"') :]
    assert f'<a href="/workloads/{workload.pk}/">resnet</a>' in workloads
    downloads = page[page.index('id="statement-downloads"') :]
    assert 'href="/billing/periods/2026-02/export/pdf/?tenant=vision"' in downloads
    pdf = client.get("/billing/periods/2026-02/export/pdf/?tenant=vision")
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
    other = client.get(f"/billing/statements/{statement.pk}/?flavour=nothing-like-it")
    assert "No metered workloads." in other.content.decode()


def test_idle_capacity_has_a_name_an_explanation_and_shares(
    closed: BillingPeriod, cast: Cast, gpu: GpuCluster
) -> None:
    admin = logged_in(cast.platform_admin)
    overview = admin.get("/billing/?period=2026-02").content.decode()
    words = " ".join(visible_text(overview)).replace("2026-02-__idle__", "")  # its number
    assert "__idle__" not in words
    assert "Idle capacity (held by no tenant)" in overview
    assert "Platform (idle capacity)" in overview
    idle = Statement.objects.get(period=closed, tenant__isnull=True)
    statement = admin.get(f"/billing/statements/{idle.pk}/").content.decode()
    assert 'id="idle-note"' in statement and "/billing/idle/?period=2026-02" in statement
    page = admin.get("/billing/idle/?period=2026-02").content.decode()
    assert "no tenant held" in page and "How it is computed" in page
    assert "Kept on the platform&#x27;s own statement" in page
    shares = page[page.index('id="idle-shares"') :]
    # vision and speech hold the H100 guarantees (4 and 2 of 6, net of what is handed down)
    assert "<code>vision</code>" in shares and "<code>speech</code>" in shares
    assert f"{money(idle.total)} USD" in page  # the platform-wide idle amount, for its managers


def test_the_trend_shows_chargeback_and_showback_per_period_and_cost_centre(
    closed: BillingPeriod, cast: Cast
) -> None:
    client = logged_in(cast.finance)
    page = client.get("/billing/trend/").content.decode()
    assert 'id="spend-trend"' in page and "tidegate/vendor/plotly.min.js" in page
    assert '<option value="CC-VISION"' in page
    vision = Statement.objects.get(period=closed, tenant=cast.team_a)
    one = client.get("/billing/trend/?cost_centre=CC-VISION").content.decode()
    row = one[one.index('href="/billing/?period=2026-02"') :]
    row = row[: row.index("</tr>")]
    assert f"{vision.total} USD" in row
    assert '"tickangle":-35' in one and '"automargin":true' in one  # labels do not overlap


def test_budgets_across_tenants_show_burn_forecast_and_a_heat_map(
    cast: Cast, gpu: GpuCluster
) -> None:
    hour = floor_hour(timezone.now()) - timedelta(hours=1)
    record_usage(cast.team_a, gpu.h100, hour, devices=2)
    Budget.objects.create(tenant=cast.team_a, amount=Decimal("40.00"), currency="USD")
    Budget.objects.create(tenant=cast.dept, amount=Decimal("400.00"), currency="USD")
    budgets_evaluate()
    page = logged_in(cast.finance).get("/billing/budgets/").content.decode()
    assert 'id="budget-heatmap"' in page and '"type":"heatmap"' in page
    assert "vision (Monthly)" in page and "research (Monthly)" in page
    assert "average of the last 72 h of metered spend" in page


@pytest.mark.parametrize(
    "url, words",
    [
        ("/billing/budgets/", "No budgets yet."),
        ("/billing/idle/", "No idle capacity in this period"),
        ("/billing/", "Nothing metered in this period yet"),
        ("/billing/rate-cards/", "No rate card is valid today"),
    ],
)
def test_pages_without_data_say_what_to_do(cast: Cast, url: str, words: str) -> None:
    response = logged_in(cast.platform_admin).get(url)
    assert response.status_code == 200 and words in response.content.decode()


def test_finance_navigation_shows_only_what_each_role_reads(cast: Cast) -> None:
    MembershipFactory(user=cast.finance, tenant=cast.other_org, role="finance")
    finance = logged_in(cast.finance).get("/").content.decode()
    nav = finance[finance.index("<nav") : finance.index("</nav>")]
    for href in ("/billing/periods/", "/billing/budgets/", "/billing/rate-cards/"):
        assert f'href="{href}"' in nav
    lead = logged_in(cast.lead).get("/").content.decode()
    nav = lead[lead.index("<nav") : lead.index("</nav>")]
    assert 'href="/billing/periods/"' in nav and 'href="/billing/rate-cards/"' not in nav
    member = logged_in(cast.member).get("/").content.decode()
    assert 'href="/billing/periods/"' not in member


@pytest.mark.parametrize("role", ["platform_admin", "finance", "lead"])
def test_every_finance_page_speaks_chinese_but_for_its_data(
    closed: BillingPeriod, cast: Cast, gpu: GpuCluster, role: str
) -> None:
    from tests.workloads.test_portal_languages import data_values, untranslated

    Budget.objects.create(tenant=cast.team_a, amount=Decimal("50.00"), currency="USD")
    budgets_evaluate()
    statement = Statement.objects.get(period=closed, tenant=cast.team_a)
    idle = Statement.objects.get(period=closed, tenant__isnull=True)
    data = data_values() | {gpu.card.name, "any GPU"}  # rate card names and scopes are data
    client = logged_in(cast.user(role))
    left = []
    for url in [
        "/billing/?period=2026-02",
        "/billing/periods/",
        "/billing/trend/",
        "/billing/budgets/",
        "/billing/rate-cards/",
        f"/billing/rate-cards/{gpu.card.pk}/edit/",
        "/billing/idle/?period=2026-02",
        f"/billing/statements/{statement.pk}/",
        f"/billing/statements/{idle.pk}/",
        "/billing/periods/2026-02/cost-centre/?code=CC-VISION",
        "/billing/budgets/panel/vision/",
    ]:
        response = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans")
        if response.status_code == 404:
            continue
        assert response.status_code == 200, url
        left += [
            f"{url}: {t}" for t in visible_text(response.content.decode()) if untranslated(t, data)
        ]
    assert left == []


def test_a_quarterly_budget_in_the_heat_map_counts_its_quarter_so_far(
    cast: Cast, gpu: GpuCluster
) -> None:
    from datetime import UTC, datetime

    from billing.portal.budgets import _heatmap

    record_usage(cast.team_a, gpu.h100, FEB + timedelta(days=3), hours=2)  # 4.00 in February
    budget = Budget.objects.create(
        tenant=cast.team_a, cadence="quarter", amount=Decimal("40.00"), currency="USD"
    )
    html = _heatmap([budget], datetime(2026, 3, 2, 12, tzinfo=UTC))
    # 4.00 of 40.00 spent before March: every March day so far starts at 10 %.
    assert '"z":[[10.0,10.0,null' in html


def test_a_lead_reading_part_of_a_cost_centre_is_told_its_total_is_a_share(
    closed: BillingPeriod, cast: Cast
) -> None:
    """Speech shares vision's cost centre; the vision lead reads vision's statement only:
    its "Total" was vision's share, said as the cost centre's."""
    cast.team_b.cost_center = "CC-VISION"
    cast.team_b.save()
    lead = logged_in(cast.lead).get("/billing/periods/2026-02/cost-centre/?code=CC-VISION")
    text = lead.content.decode()
    assert 'id="cost-centre-partial"' in text and "Your tenants' share" in text
    finance = logged_in(cast.finance).get("/billing/periods/2026-02/cost-centre/?code=CC-VISION")
    assert 'id="cost-centre-partial"' not in finance.content.decode()
