"""The replays behind a what-if run, pure (no Django): today against a proposal, and the
savings search (docs/what-if.md#savings).

Savings: the target is the p95 wait of ``policy`` at today's capacity under today's
quotas. Static slices (each product's GPUs split among the tenants in proportion to the
GPU-hours each ran on it) are replayed at today's capacity, then at capacities growing
by ``step`` (a quarter of today's, at least 1 GPU) up to ``max`` (four times today's),
then bisected between the last capacity that missed and the first that met the target,
to the GPU. A capacity meets the target when every job started and the p95 wait is no
longer than the target's. The price is the extra GPUs of each flavour at the reserved
price of the rate card valid now, for 730 hours.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from billing.charging import pricing
from billing.charging.money import round_half_even
from billing.whatif.records import PricedProduct, Proposal, QuotaEntry, SearchPoint
from scheduler_bridge.replay.cluster import QuotaPlan, ReplayCluster, split
from scheduler_bridge.replay.policies import (
    PolicyRun,
    ReplayOptions,
    replay,
    replay_policies,
)
from scheduler_bridge.replay.trace import TraceJob

HOURS_PER_MONTH = 730
STEP_FRACTION = Fraction(1, 4)  # grow by a quarter of today's capacity per step
MAX_FACTOR = 4  # give up at four times today's capacity

Progress = Callable[[str, int], None]  # (what runs now, percent done)


def _quiet(message: str, percent: int) -> None:
    return None


def proposed_plan(today: QuotaPlan, proposal: Proposal) -> QuotaPlan:
    """Today's guarantees and weights with the proposal's put over them (today's tenant
    tree and borrow and lend limits stay)."""
    guaranteed = dict(today.guaranteed)
    for entry in proposal.quotas:
        guaranteed[(entry.tenant, entry.flavour)] = entry.guaranteed
    return replace(today, guaranteed=guaranteed, weights={**today.weights, **proposal.weights})


def quota_entries(plan: QuotaPlan) -> tuple[QuotaEntry, ...]:
    return tuple(
        QuotaEntry(tenant, flavour, gpus)
        for (tenant, flavour), gpus in sorted(plan.guaranteed.items())
    )


def what_if(
    jobs: Sequence[TraceJob],
    cluster: ReplayCluster,
    today: QuotaPlan,
    proposed: QuotaPlan,
    *,
    policy: str,
    today_options: ReplayOptions,
    proposed_options: ReplayOptions,
    progress: Progress = _quiet,
) -> tuple[PolicyRun, PolicyRun]:
    """``policy`` on the history under today's quotas and under the proposed ones (each
    with static slices under the same quotas first, for the owner wait ratio).
    Raises ReplayInputError for inputs a replay cannot run on."""
    runs: list[PolicyRun] = []
    for index, (label, plan, options) in enumerate(
        (("today", today, today_options), ("proposed", proposed, proposed_options))
    ):

        def tell(name: str, done: int, index: int = index, label: str = label) -> None:
            progress(f"{label}: {name}", (index * 2 + done) * 100 // 4)

        runs += replay_policies([policy], jobs, cluster, plan, options, tell)
    return runs[0], runs[1]


def static_slices(jobs: Iterable[TraceJob], cluster: ReplayCluster) -> QuotaPlan:
    """Each product's GPUs split among the tenants by the GPU-hours each ran on it: the
    fixed split that suits this history best."""
    demand: dict[str, dict[str, float]] = {}
    for job in jobs:
        flavour = job.flavor or cluster.default_flavor
        shares = demand.setdefault(flavour, {})
        shares[job.tenant] = shares.get(job.tenant, 0.0) + job.gpus * job.run_time_s / 3600
    guaranteed: dict[tuple[str, str], int] = {}
    for product in cluster.products:
        for tenant, gpus in split(product.gpus, demand.get(product.flavor, {})).items():
            guaranteed[(tenant, product.flavor)] = gpus
    return QuotaPlan(guaranteed)


@dataclass(frozen=True)
class SavingsSearch:
    target: PolicyRun
    static_today: PolicyRun
    capacity: int
    step: int
    maximum: int
    needed: int | None  # None: not reached by ``maximum``
    points: tuple[SearchPoint, ...]


def search_bounds(capacity: int) -> tuple[int, int]:
    """(step, maximum) of the search from today's ``capacity``."""
    step = max(1, math.ceil(capacity * STEP_FRACTION))
    return step, max(capacity * MAX_FACTOR, capacity + step)


def savings_search(
    jobs: Sequence[TraceJob],
    cluster: ReplayCluster,
    quotas: QuotaPlan,
    *,
    policy: str,
    options: ReplayOptions,
    progress: Progress = _quiet,
) -> SavingsSearch:
    """The least capacity at which static slices give the p95 wait ``policy`` gives at
    today's capacity (see the module docstring). Raises ReplayInputError."""
    capacity = cluster.capacity
    step, maximum = search_bounds(capacity)
    # replays expected: the target (2), growth steps, bisection within one step
    expected = 3 + math.ceil((maximum - capacity) / step) + math.ceil(math.log2(step + 1))
    done = 0

    def tell(message: str) -> None:
        progress(message, min(99, done * 100 // expected))

    tell(f"{policy} at {capacity} GPUs")
    target = replay_policies([policy], jobs, cluster, quotas, options)[0]
    goal = target.figures.wait_p95_s
    done += 2
    points: dict[int, SearchPoint] = {}
    runs: dict[int, PolicyRun] = {}

    def meets(gpus: int) -> bool:
        nonlocal done
        tell(f"static slices at {gpus} GPUs")
        scaled = cluster.scaled(gpus)
        run = replay("static", jobs, scaled, static_slices(jobs, scaled), options)
        done += 1
        figures = run.figures
        ok = figures.never_started == 0 and figures.wait_p95_s <= goal
        points[gpus] = SearchPoint(gpus, figures.wait_p95_s, figures.never_started, ok)
        runs[gpus] = run
        return ok

    missed, met = capacity, None
    if meets(capacity):
        met = capacity
    else:
        trying = capacity
        while trying < maximum:
            trying = min(trying + step, maximum)
            if meets(trying):
                met = trying
                break
            missed = trying
        if met is not None:
            while met - missed > 1:
                middle = (met + missed) // 2
                if meets(middle):
                    met = middle
                else:
                    missed = middle
    progress("done", 100)
    return SavingsSearch(
        target=target,
        static_today=runs[capacity],
        capacity=capacity,
        step=step,
        maximum=maximum,
        needed=met,
        points=tuple(points[gpus] for gpus in sorted(points)),
    )


def extra_per_flavour(cluster: ReplayCluster, capacity: int) -> dict[str, int]:
    """GPUs each product gains when the cluster grows to ``capacity``."""
    grown = cluster.scaled(capacity)
    today = {p.flavor: p.gpus for p in cluster.products}
    return {p.flavor: p.gpus - today.get(p.flavor, 0) for p in grown.products}


def price_extra(
    extra: Mapping[str, int],
    flavours: Mapping[str, pricing.Flavour],
    cards: Sequence[pricing.RateCard],
    at: datetime,
) -> tuple[tuple[PricedProduct, ...], dict[str, Decimal]]:
    """Each flavour's extra GPUs a month (730 h) at the reserved price of the card valid
    at ``at``, and the totals per currency (a flavour no card prices is left unpriced).
    A card priced per MIG instance prices each extra device whole; otherwise a device
    pays its fraction of a GPU."""
    priced: list[PricedProduct] = []
    totals: dict[str, Fraction] = {}
    for name, gpus in sorted(extra.items()):
        if gpus <= 0:
            continue
        flavour = flavours.get(name)
        card = pricing.resolve_card(cards, flavour, at) if flavour is not None else None
        if flavour is None or card is None:
            priced.append(PricedProduct(name, gpus, None, None, None))
            continue
        per_device_hour = Fraction(card.reserved_price)
        if not card.per_instance(flavour):
            per_device_hour *= flavour.fraction
        monthly = per_device_hour * gpus * HOURS_PER_MONTH
        totals[card.currency] = totals.get(card.currency, Fraction(0)) + monthly
        priced.append(
            PricedProduct(
                name,
                gpus,
                card.currency,
                str(card.reserved_price),
                str(round_half_even(monthly, 2)),
            )
        )
    return tuple(priced), {c: round_half_even(v, 2) for c, v in sorted(totals.items())}
