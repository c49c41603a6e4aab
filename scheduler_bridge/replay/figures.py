"""The figures of one replay, computed from the simulation (docs/replay.md#figures).

- ``utilization``: allocated GPU-hours over capacity GPU-hours, from the first submit to
  the last finish.
- ``goodput``: GPU-hours of work that counted (allocated minus ``wasted_gpu_hours``, the
  work preemption threw away and elastic resize pauses).
- waits: from submit to first start, over the jobs that started; per tenant too.
- ``owner_wait_ratio``: the mean wait of *owner work* (a job of a tenant whose guarantee
  holds it whole) under this policy over the same under static slices; below 1, owners
  wait less than with static slices.
- ``share_fairness``: Jain's index over tenants of the GPU-hours each received divided by
  its fair entitlement while it had demand. The entitlement, re-taken at every cycle, is
  its guarantee (up to its demand) plus a weighted max-min share of what the others leave.
- ``jain_fairness``: Jain's index of each tenant's mean slowdown (the older figure).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler_bridge.admission.simulator import JobOutcome

EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class WaitFigures:
    jobs: int
    mean_s: float
    p50_s: float
    p95_s: float
    p99_s: float


def waits_of(seconds: Sequence[float]) -> WaitFigures:
    ordered = sorted(seconds)
    if not ordered:
        return WaitFigures(0, 0.0, 0.0, 0.0, 0.0)
    return WaitFigures(
        jobs=len(ordered),
        mean_s=round(sum(ordered) / len(ordered), 1),
        p50_s=round(percentile(ordered, 0.50), 1),
        p95_s=round(percentile(ordered, 0.95), 1),
        p99_s=round(percentile(ordered, 0.99), 1),
    )


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ordered sequence."""
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def tenant_waits(outcomes: Sequence[JobOutcome]) -> dict[str, WaitFigures]:
    by_tenant: dict[str, list[float]] = {}
    for outcome in outcomes:
        if outcome.wait_s is not None:
            by_tenant.setdefault(outcome.tenant_id, []).append(outcome.wait_s)
    return {tenant: waits_of(waits) for tenant, waits in sorted(by_tenant.items())}


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when every value is the same, 1/n when one takes all."""
    if not values:
        return 1.0
    squares = sum(v * v for v in values)
    return sum(values) ** 2 / (len(values) * squares) if squares > 0 else 1.0


def entitlement(
    capacity: float,
    demand: Mapping[str, float],
    guarantee: Mapping[str, float],
    weights: Mapping[str, float],
) -> dict[str, float]:
    """What each tenant with demand is fairly entitled to now (GPU-equivalents): its
    guarantee up to its demand, then what is left split by weight, max-min, capped at
    each tenant's demand."""
    active = {t: d for t, d in demand.items() if d > EPSILON}
    given = {t: min(d, guarantee.get(t, 0.0)) for t, d in active.items()}
    left = max(0.0, capacity - sum(given.values()))
    wanting = [t for t in active if active[t] - given[t] > EPSILON]
    # max-min by weight: serve the tenants whose need per unit of weight is smallest first
    wanting.sort(key=lambda t: ((active[t] - given[t]) / weights.get(t, 1.0), t))
    weight_left = sum(weights.get(t, 1.0) for t in wanting)
    for tenant in wanting:
        weight = weights.get(tenant, 1.0)
        share = left * weight / weight_left if weight_left > 0 else 0.0
        extra = min(active[tenant] - given[tenant], share)
        given[tenant] += extra
        left -= extra
        weight_left -= weight
    return given


@dataclass
class FairnessMeter:
    """Integrates each tenant's entitlement between cycles (an observer of the simulator)."""

    capacity: float
    guarantee: Mapping[str, float]
    weights: Mapping[str, float]
    entitled_s: dict[str, float] = field(default_factory=dict)
    _since: float | None = None
    _now: dict[str, float] = field(default_factory=dict)

    def observe(self, now: float, held: Mapping[str, float], demand: Mapping[str, float]) -> None:
        self.close(now)
        self._now = entitlement(self.capacity, demand, self.guarantee, self.weights)

    def close(self, now: float) -> None:
        if self._since is not None and now > self._since:
            span = now - self._since
            for tenant, amount in self._now.items():
                self.entitled_s[tenant] = self.entitled_s.get(tenant, 0.0) + amount * span
        self._since = now

    def index(self, received_s: Mapping[str, float]) -> float:
        ratios = [
            received_s.get(tenant, 0.0) / entitled
            for tenant, entitled in self.entitled_s.items()
            if entitled > EPSILON
        ]
        return jain(ratios)


@dataclass
class Timeline:
    """Cluster utilisation and each tenant's holdings, sampled at most every ``step_s``."""

    capacity: float
    step_s: float
    times: list[float] = field(default_factory=list)
    utilization: list[float] = field(default_factory=list)
    held: dict[str, list[float]] = field(default_factory=dict)

    def observe(self, now: float, held: Mapping[str, float], demand: Mapping[str, float]) -> None:
        if self.times and now < self.times[-1] + self.step_s:
            return
        index = len(self.times)
        self.times.append(now)
        self.utilization.append(sum(held.values()) / self.capacity if self.capacity else 0.0)
        for tenant, amount in held.items():
            series = self.held.setdefault(tenant, [0.0] * index)
            series.append(amount)
        for series in self.held.values():
            if len(series) < index + 1:
                series.append(0.0)
