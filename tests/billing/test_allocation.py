"""Cost allocation: any grouping of a period adds up to its statements, idle capacity is
shared out evenly, by guarantee or by usage to the cent, efficiency and the month-over-month
trend per group, CSV, field errors for bad parameters, and who sees which rows."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from billing.charging.charges import price_period
from billing.models import BillingPeriod, BillingPolicy, Statement, StatementLine
from billing.reporting import allocation
from billing.statements.periods import period_close
from scheduler_bridge.workloads.models import Workload
from tests.billing.conftest import FEB, MAR, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast, client_for

pytestmark = pytest.mark.django_db

JAN = datetime(2026, 1, 1, tzinfo=UTC)
URL = "/api/v1/allocation/"


def workload(gpu: GpuCluster, tenant: Any, name: str, **meta: Any) -> Workload:
    return Workload.objects.create(
        cluster=gpu.cluster,
        tenant=tenant,
        name=name,
        job_name=name,
        pod_sets=[],
        submitted_at=FEB,
        state=Workload.State.FINISHED,
        flavour=gpu.h100,
        **meta,
    )


@pytest.fixture
def february(cast: Cast, gpu: GpuCluster) -> BillingPeriod:
    """vision: 4 H100-hours (half busy) of a job labelled team=cv, plus 2 borrowed spot hours
    in vision-dev; speech: 3 H100-hours; globex: 1 H100-hour, unmeasured. 10 in all."""
    resnet = workload(
        gpu, cast.team_a, "resnet", labels={"team": "cv"}, annotations={"owner": "=ada"}
    )
    record_usage(
        cast.team_a,
        gpu.h100,
        FEB,
        hours=2,
        devices=2,
        busy_ratio="0.5",
        job="resnet",
        workload_id=resnet.pk,
    )
    record_usage(
        cast.team_a,
        gpu.h100,
        FEB,
        hours=2,
        borrowed=1,
        pod="spot",
        namespace="vision-dev",
        priority="spot",
        busy_ratio="1",
    )
    record_usage(cast.team_b, gpu.h100, FEB, hours=3, pod="asr", busy_ratio="0.25")
    record_usage(cast.other_org, gpu.h100, FEB, hours=1, pod="g", namespace="globex-train")
    return BillingPeriod.objects.get(name="2026-02")


@pytest.fixture
def closed(february: BillingPeriod) -> BillingPeriod:
    return period_close(actor=None, period=february)


def statements_total(period: BillingPeriod) -> Decimal:
    return sum(
        Statement.objects.filter(period=period, revision=period.revision).values_list(
            "total", flat=True
        ),
        Decimal("0.00"),
    )


def get(user: Any, **params: str) -> Any:
    return client_for(user).get(URL, params)


def rows_by(body: dict[str, Any], *keys: str) -> dict[Any, dict[str, Any]]:
    return {
        tuple(row[k] for k in keys) if len(keys) > 1 else row[keys[0]]: row for row in body["rows"]
    }


@pytest.mark.parametrize(
    "aggregate",
    [
        "namespace",
        "label:team",
        "annotation:owner",
        "flavour",
        "line_type",
        "workload",
        "tenant,namespace",
    ],
)
@pytest.mark.parametrize("idle", ["even", "guarantee", "usage"])
def test_any_grouping_of_a_closed_period_adds_up_to_its_statements(
    closed: BillingPeriod, cast: Cast, aggregate: str, idle: str
) -> None:
    response = get(cast.platform_admin, window="2026-02", aggregate=aggregate, idle=idle)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["provisional"] is False
    total = sum(Decimal(row["total"]) for row in body["rows"])
    assert total == statements_total(closed) == Decimal(body["totals"]["total"])
    cost = sum(Decimal(row["cost"]) for row in body["rows"])
    idle_statement = Statement.objects.get(period=closed, tenant__isnull=True)
    assert cost == statements_total(closed) - idle_statement.total


def test_rows_carry_the_keys_they_are_grouped_by(closed: BillingPeriod, cast: Cast) -> None:
    body = get(cast.platform_admin, window="2026-02", aggregate="namespace,label:team").json()
    keys = set(rows_by(body, "namespace", "label:team"))
    # usage of workloads without a team label is "__none__", never "__unallocated__"
    # (money no usage makes up: adjustments, reservations nobody used)
    assert {
        ("vision-train", "cv"),
        ("vision-dev", "__none__"),
        ("speech-train", "__none__"),
        ("globex-train", "__none__"),
    } <= keys
    assert not any(value == "__unallocated__" for _ns, value in keys)
    by_type = rows_by(
        get(cast.platform_admin, window="2026-02", aggregate="line_type").json(), "line_type"
    )
    # the borrowed spot hour is charged at the on-demand rate x 0.5, twice
    assert Decimal(by_type["borrowed"]["cost"]) == Decimal("3.00")
    assert by_type["borrowed"]["gpu_hours_allocated"] == "2.0000"


def test_an_open_period_adds_up_to_what_it_would_be_charged_now(
    february: BillingPeriod, cast: Cast
) -> None:
    report = allocation.allocation_report(
        cast.platform_admin,
        allocation.month_window("2026-02"),
        aggregate=["namespace", "flavour"],
        now=MAR,
    )
    priced = price_period(february, as_of=MAR)
    assert report.provisional
    assert report.totals.total == sum((ln.amount for ln in priced.lines), Decimal("0.00"))


@pytest.mark.parametrize(
    ("idle", "expected"),
    [
        # 8 H100s x 672 h, 10 GPU-hours held: 5366 idle GPU-hours at 2.00; the odd cent
        # of an even split goes to the first group
        ("even", {"vision": "3577.33", "speech": "3577.33", "globex": "3577.34"}),
        ("guarantee", {"vision": "5366.00", "speech": "2683.00", "globex": "2683.00"}),
        ("usage", {"vision": "6439.20", "speech": "3219.60", "globex": "1073.20"}),
    ],
)
def test_idle_capacity_is_shared_by_the_chosen_policy_to_the_cent(
    closed: BillingPeriod, cast: Cast, gpu: GpuCluster, idle: str, expected: dict[str, str]
) -> None:
    h100_idle = StatementLine.objects.get(
        statement__period=closed, statement__tenant__isnull=True, flavour=gpu.h100
    ).amount
    assert h100_idle == Decimal("10732.00")
    body = get(cast.platform_admin, window="2026-02", aggregate="tenant", idle=idle).json()
    rows = rows_by(body, "tenant")
    assert {slug: rows[slug]["idle_cost"] for slug in expected} == expected
    for slug in expected:
        row = rows[slug]
        assert Decimal(row["total"]) == Decimal(row["cost"]) + Decimal(row["idle_cost"])
    # the MIG slices nobody used (nor holds a guarantee of) stay the platform's
    mig_idle = Statement.objects.get(period=closed, tenant__isnull=True).total - h100_idle
    assert Decimal(rows["__idle__"]["idle_cost"]) == mig_idle


def test_the_billing_policy_chooses_how_idle_is_shared_unless_the_query_does(
    closed: BillingPeriod, cast: Cast
) -> None:
    policy = BillingPolicy.current()
    policy.allocation_idle = BillingPolicy.AllocationIdle.GUARANTEE
    policy.save()
    body = get(cast.platform_admin, window="2026-02", aggregate="tenant").json()
    assert body["idle"] == "guarantee"
    assert rows_by(body, "tenant")["speech"]["idle_cost"] == "2683.00"
    body = get(cast.platform_admin, window="2026-02", aggregate="tenant", idle="even").json()
    assert body["idle"] == "even"


def test_efficiency_is_busy_over_allocated_and_empty_when_not_measured(
    closed: BillingPeriod, cast: Cast
) -> None:
    rows = rows_by(
        get(cast.platform_admin, window="2026-02", aggregate="namespace").json(), "namespace"
    )
    assert rows["vision-train"]["efficiency"] == "0.5000"
    assert rows["vision-train"]["gpu_hours_busy"] == "2.0000"
    assert rows["speech-train"]["efficiency"] == "0.2500"
    assert rows["globex-train"]["efficiency"] is None
    assert rows["globex-train"]["gpu_hours_allocated"] == "1.0000"


def test_each_group_shows_the_previous_month_beside_it(
    closed: BillingPeriod, cast: Cast, gpu: GpuCluster
) -> None:
    record_usage(cast.team_b, gpu.h100, JAN, hours=10, pod="asr-jan")
    body = get(cast.lead, window="2026-02", aggregate="namespace").json()
    assert body["previous_window"] == "2026-01"
    speech = get(cast.dept_admin, window="2026-02", aggregate="namespace").json()
    row = rows_by(speech, "namespace")["speech-train"]
    assert row["previous_total"] == "20.00"
    assert Decimal(row["change"]) == Decimal(row["total"]) - Decimal("20.00")
    january = rows_by(
        get(cast.dept_admin, window="2026-01", aggregate="namespace").json(), "namespace"
    )
    assert january["speech-train"]["total"] == "20.00"
    assert january["speech-train"]["previous_total"] == "0.00"


def test_a_date_range_is_priced_from_the_ledger(february: BillingPeriod, cast: Cast) -> None:
    body = get(
        cast.dept_admin, start="2026-02-01", end="2026-02-01T02:00:00Z", aggregate="namespace"
    ).json()
    rows = rows_by(body, "namespace")
    assert body["provisional"] is True
    assert rows["speech-train"]["gpu_hours_allocated"] == "2.0000"
    assert rows["speech-train"]["cost"] == "4.00"


def test_csv_download_has_one_line_per_group_and_inert_text(
    closed: BillingPeriod, cast: Cast
) -> None:
    response = get(
        cast.platform_admin, window="2026-02", aggregate="annotation:owner", format="csv"
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "allocation-2026-02-annotation-owner.csv" in response["Content-Disposition"]
    table = list(csv.reader(io.StringIO(response.content.decode())))
    assert table[0] == ["annotation:owner", *allocation.VALUE_COLUMNS]
    owners = {line[0] for line in table[1:]}
    assert "'=ada" in owners and "=ada" not in owners
    total = sum(Decimal(line[table[0].index("total")]) for line in table[1:])
    assert total == statements_total(closed)


# 400: the schema refuses the parameter (type, enum, pattern); 422: it matches the schema,
# and what it asks cannot be done (an unknown aggregate, a window that ends before it starts)
@pytest.mark.parametrize(
    ("params", "field", "hint", "status"),
    [
        ({"window": "2026-02", "aggregate": "colour"}, "aggregate", "label:<key>", 422),
        ({"window": "2026-02", "aggregate": "label:"}, "aggregate", "label:<key>", 422),
        ({"window": "2026-13"}, "window", "YYYY-MM", 400),
        ({}, "window", "window=YYYY-MM", 422),
        ({"window": "2026-02", "idle": "fair"}, "idle", "idle=even", 400),
        ({"window": "2026-02", "format": "xml"}, "format", "format=csv", 400),
        ({"start": "2026-02-01"}, "end", "start and end", 422),
        ({"start": "yesterday", "end": "2026-02-02"}, "start", "ISO 8601", 400),
        ({"start": "2026-02-02", "end": "2026-02-01"}, "end", "after start", 422),
        ({"start": "2025-01-01", "end": "2026-02-01"}, "end", "366 days", 422),
        (
            {"window": "2026-02", "start": "2026-02-01", "end": "2026-02-02"},
            "window",
            "not both",
            422,
        ),
    ],
)
def test_bad_parameters_are_refused_saying_how_to_fix_them(
    february: BillingPeriod,
    cast: Cast,
    params: dict[str, str],
    field: str,
    hint: str,
    status: int,
) -> None:
    response = get(cast.finance, **params)
    assert response.status_code == status, response.content
    assert hint in str(response.json()), response.json()
    assert field in response.json()


def test_readers_see_only_their_tenants_and_no_idle(closed: BillingPeriod, cast: Cast) -> None:
    body = get(cast.lead, window="2026-02", aggregate="tenant,namespace").json()
    assert {row["tenant"] for row in body["rows"]} == {"vision"}
    assert all("idle_cost" not in row for row in body["rows"]) and body["idle"] is None
    vision = Statement.objects.get(period=closed, tenant=cast.team_a)
    assert Decimal(body["totals"]["total"]) == vision.total
    outsider = get(cast.outsider, window="2026-02", aggregate="tenant").json()
    assert {row["tenant"] for row in outsider["rows"]} == {"globex"}
    csv_text = get(cast.outsider, window="2026-02", aggregate="namespace", format="csv").content
    assert b"vision" not in csv_text and b"idle_cost" not in csv_text


def test_a_tenant_filter_reads_one_subtree_and_is_a_404_to_outsiders(
    closed: BillingPeriod, cast: Cast
) -> None:
    body = get(cast.finance, window="2026-02", aggregate="tenant", tenant="speech").json()
    assert {row["tenant"] for row in body["rows"]} == {"speech"}
    assert (
        get(cast.outsider, window="2026-02", aggregate="tenant", tenant="vision").status_code == 404
    )
    assert get(cast.member, window="2026-02").status_code == 404
    assert client_for(cast.outsider).get(URL, {"window": "2026-02"}).status_code == 200


PAGE = "/billing/allocation/"


@pytest.mark.parametrize("role", ["platform_admin", "finance", "lead"])
def test_the_allocation_page_speaks_chinese_but_for_its_data(
    closed: BillingPeriod, cast: Cast, gpu: GpuCluster, role: str
) -> None:
    from tests.tenants.test_portal import logged_in
    from tests.workloads.test_portal_languages import data_values, untranslated, visible_text

    data = data_values() | {"vision-train", "vision-dev", "speech-train", "globex-train", "cv"}
    data |= {"2026-02", "2026-01", "namespace,label:team", "USD", gpu.h100.name}
    data |= {"label:KEY", "annotation:KEY"}  # the grouping keys as the API spells them
    client = logged_in(cast.user(role))
    for query in (
        "?window=2026-02&aggregate=namespace,label:team",
        "?window=2026-02&aggregate=colour",
    ):
        response = client.get(PAGE + query, HTTP_ACCEPT_LANGUAGE="zh-hans")
        assert response.status_code in (200, 400)
        page = response.content.decode()
        left = [t for t in visible_text(page) if untranslated(t, data | {"colour"})]
        assert left == [], query
    page = client.get(PAGE + "?window=2026-02", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "成本分配" in page and 'id="allocation-chart"' in page


def test_the_allocation_page_shows_groups_chart_and_csv_link(
    closed: BillingPeriod, cast: Cast
) -> None:
    from tests.tenants.test_portal import logged_in

    admin = logged_in(cast.platform_admin)
    page = admin.get(PAGE, {"window": "2026-02", "aggregate": "label:team", "idle": "guarantee"})
    text = page.content.decode()
    assert page.status_code == 200
    assert "Label team" in text and ">cv<" in text and "(unallocated)" in text
    assert "Idle capacity shared by guarantee." in text and "plotly" in text
    assert "as=csv" in text
    download = admin.get(PAGE, {"window": "2026-02", "aggregate": "label:team", "as": "csv"})
    assert download["Content-Type"].startswith("text/csv")
    table = list(csv.reader(io.StringIO(download.content.decode())))
    assert sum(Decimal(line[6]) for line in table[1:]) == statements_total(closed)
    finance_nav = admin.get("/billing/").content.decode()
    assert 'href="/billing/allocation/"' in finance_nav


def test_the_allocation_page_is_scoped_like_the_api(closed: BillingPeriod, cast: Cast) -> None:
    from tests.tenants.test_portal import logged_in

    lead = logged_in(cast.lead).get(PAGE, {"window": "2026-02", "aggregate": "tenant"})
    text = lead.content.decode()
    assert lead.status_code == 200 and "vision" in text and "globex" not in text
    assert "Idle capacity shared" not in text
    outsider = logged_in(cast.outsider)
    assert outsider.get(PAGE, {"window": "2026-02", "tenant": "vision"}).status_code == 404
    assert "vision" not in outsider.get(PAGE, {"window": "2026-02"}).content.decode()
    assert logged_in(cast.member).get(PAGE).status_code == 404
    bad = logged_in(cast.finance).get(PAGE, {"window": "2026-02", "aggregate": "colour"})
    assert bad.status_code == 400 and "label:&lt;key&gt;" in bad.content.decode()


def test_reservations_and_adjustments_land_with_their_tenant_and_still_add_up(
    february: BillingPeriod, cast: Cast
) -> None:
    from billing.models import Adjustment, TenantBillingSettings

    TenantBillingSettings.objects.create(tenant=cast.team_b, charge_reserved=True)
    TenantBillingSettings.objects.create(tenant=cast.other_org, charge_reserved=True)
    Adjustment.objects.create(
        tenant=cast.team_a, period=february, amount=Decimal("-7.50"), currency="USD", reason="x"
    )
    closed = period_close(actor=None, period=february)
    body = get(cast.platform_admin, window="2026-02", aggregate="tenant,namespace").json()
    rows = rows_by(body, "tenant", "namespace")
    assert sum(Decimal(r["total"]) for r in body["rows"]) == statements_total(closed)
    # speech's 2 reserved H100s for 672 hours cover its usage: all of it is speech-train's
    assert rows[("speech", "speech-train")]["cost"] == "2688.00"
    # globex reserved 2 too; its one hour is covered, so the whole reservation is its namespace's
    assert rows[("globex", "globex-train")]["cost"] == "2688.00"
    assert rows[("vision", "__unallocated__")]["cost"] == "-7.50"
    by_type = rows_by(
        get(cast.platform_admin, window="2026-02", aggregate="line_type").json(), "line_type"
    )
    assert by_type["reserved"]["cost"] == "5376.00"
    assert by_type["adjustment"]["cost"] == "-7.50"


def test_platform_billing_sets_the_allocation_idle_policy_through_the_api(
    closed: BillingPeriod, cast: Cast
) -> None:
    admin = client_for(cast.platform_admin)
    changed = admin.post("/api/v1/billing/policy/", {"allocation_idle": "even"}, format="json")
    assert changed.status_code == 200 and changed.json()["allocation_idle"] == "even"
    assert get(cast.platform_admin, window="2026-02", aggregate="tenant").json()["idle"] == "even"
    bad = admin.post("/api/v1/billing/policy/", {"allocation_idle": "fair"}, format="json")
    assert bad.status_code == 400 and "allocation_idle" in str(bad.json())


def test_a_month_under_way_is_compared_with_as_many_days_of_the_month_before(
    cast: Cast, gpu: GpuCluster
) -> None:
    """Five days into March the change column compares with February's first five days,
    not with all of February (it compared five days with a whole month)."""
    from datetime import timedelta

    record_usage(cast.team_a, gpu.h100, FEB + timedelta(days=1), hours=2, pod="early")
    record_usage(cast.team_a, gpu.h100, FEB + timedelta(days=20), hours=5, pod="late")
    record_usage(cast.team_a, gpu.h100, MAR + timedelta(days=1), hours=3, pod="now")
    report = allocation.allocation_report(
        cast.platform_admin,
        allocation.month_window("2026-03"),
        aggregate=["tenant"],
        now=MAR + timedelta(days=5, hours=7, minutes=30),
    )
    assert (report.previous.start, report.previous.end) == (FEB, FEB + timedelta(days=5, hours=7))
    assert "2026-02, its first 5 days 7 h" in str(report.previous.label)
    vision = next(r for r in report.rows if r.keys == ("vision",))
    same_days = allocation.allocation_report(
        cast.platform_admin,
        allocation.range_window("2026-02-01", "2026-02-06T07:00:00"),
        aggregate=["tenant"],
        now=MAR + timedelta(days=5, hours=7, minutes=30),
    )
    whole = allocation.allocation_report(
        cast.platform_admin,
        allocation.month_window("2026-02"),
        aggregate=["tenant"],
        now=MAR + timedelta(days=5, hours=7, minutes=30),
    )
    in_same_days = next(r for r in same_days.rows if r.keys == ("vision",)).total
    in_whole_month = next(r for r in whole.rows if r.keys == ("vision",)).total
    assert vision.previous_total == in_same_days < in_whole_month
