"""The typed records a what-if run keeps in its JSON fields: what was asked (``WhatIfParams``)
and what came out (``WhatIfResult`` or ``SavingsResult``). Each has one ``from_json`` and one
``as_json``; nothing else reads the raw dicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from scheduler_bridge.replay.figures import WaitFigures
from scheduler_bridge.replay.policies import ReplayFigures, ReplayOptions

DEFAULT_POLICY = "fair-share"


@dataclass(frozen=True)
class QuotaEntry:
    tenant: str
    flavour: str
    guaranteed: int


@dataclass(frozen=True)
class Proposal:
    """Guarantees and weights that replace today's where given (the rest stay as they
    are), a reclaim minimum run and a reclaim wait for the proposed run (None: today's),
    and the policy both runs (and the savings search's target) replay under."""

    quotas: tuple[QuotaEntry, ...] = ()
    weights: Mapping[str, float] = field(default_factory=dict)
    reclaim_min_run_s: float | None = None
    policy: str = DEFAULT_POLICY
    reclaim_wait_s: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "quotas": [asdict(q) for q in self.quotas],
            "weights": dict(self.weights),
            "reclaim_min_run_s": self.reclaim_min_run_s,
            "policy": self.policy,
            "reclaim_wait_s": self.reclaim_wait_s,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Proposal:
        return cls(
            quotas=tuple(
                QuotaEntry(str(q["tenant"]), str(q["flavour"]), int(q["guaranteed"]))
                for q in data.get("quotas") or ()
            ),
            weights={str(k): float(v) for k, v in (data.get("weights") or {}).items()},
            reclaim_min_run_s=(
                None if data.get("reclaim_min_run_s") is None else float(data["reclaim_min_run_s"])
            ),
            policy=str(data.get("policy") or DEFAULT_POLICY),
            reclaim_wait_s=(  # (absent from runs kept before it could be proposed)
                None if data.get("reclaim_wait_s") is None else float(data["reclaim_wait_s"])
            ),
        )


@dataclass(frozen=True)
class WhatIfParams:
    days: int
    proposal: Proposal = field(default_factory=Proposal)

    def as_json(self) -> dict[str, Any]:
        return {"days": self.days, "proposal": self.proposal.as_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WhatIfParams:
        return cls(days=int(data["days"]), proposal=Proposal.from_json(data.get("proposal") or {}))


def figures_from_json(data: Mapping[str, Any]) -> ReplayFigures:
    """Figures kept with a run; a figure this version does not know (kept by a newer
    one, during a rolling upgrade) is left out rather than refused."""
    known = {f.name for f in fields(ReplayFigures)}
    values = {name: value for name, value in data.items() if name in known}
    values["tenant_waits"] = {
        tenant: WaitFigures(**waits) for tenant, waits in (data.get("tenant_waits") or {}).items()
    }
    return ReplayFigures(**values)


@dataclass(frozen=True)
class HistoryWindow:
    """The history a run replayed."""

    since: str  # ISO 8601, UTC
    until: str
    jobs: int
    tenants: int
    capacity_gpus: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryWindow:
        return cls(**data)


@dataclass(frozen=True)
class RunSettings:
    """The queue settings a replay ran under, kept with its result: what "today" meant
    when the run was made, whatever the settings are now."""

    half_life_h: float
    reclaim_min_run_s: float
    reclaim_wait_s: float
    share_packing: str
    priority_preemption: bool

    @classmethod
    def of(cls, options: ReplayOptions) -> RunSettings:
        return cls(
            half_life_h=options.half_life_h,
            reclaim_min_run_s=options.reclaim_min_run_s,
            reclaim_wait_s=options.reclaim_wait_s,
            share_packing=options.share_packing,
            priority_preemption=options.priority_preemption,
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RunSettings | None:
        return None if not data else cls(**data)


@dataclass(frozen=True)
class WhatIfResult:
    """Both runs' figures; the guarantees (GPUs per tenant and flavour) and the settings
    each ran under (no settings: a run kept before they were recorded)."""

    history: HistoryWindow
    today: ReplayFigures
    proposed: ReplayFigures
    today_quotas: tuple[QuotaEntry, ...]
    proposed_quotas: tuple[QuotaEntry, ...]
    today_settings: RunSettings | None = None
    proposed_settings: RunSettings | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "history": asdict(self.history),
            "today": self.today.as_json(),
            "proposed": self.proposed.as_json(),
            "today_quotas": [asdict(q) for q in self.today_quotas],
            "proposed_quotas": [asdict(q) for q in self.proposed_quotas],
            "today_settings": asdict(self.today_settings) if self.today_settings else None,
            "proposed_settings": (
                asdict(self.proposed_settings) if self.proposed_settings else None
            ),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WhatIfResult:
        return cls(
            history=HistoryWindow.from_json(data["history"]),
            today=figures_from_json(data["today"]),
            proposed=figures_from_json(data["proposed"]),
            today_quotas=tuple(QuotaEntry(**q) for q in data.get("today_quotas") or ()),
            proposed_quotas=tuple(QuotaEntry(**q) for q in data.get("proposed_quotas") or ()),
            today_settings=RunSettings.from_json(data.get("today_settings")),
            proposed_settings=RunSettings.from_json(data.get("proposed_settings")),
        )


@dataclass(frozen=True)
class SearchPoint:
    """One static replay of the search: its capacity and what it gave."""

    capacity_gpus: int
    wait_p95_s: float
    never_started: int
    meets: bool


@dataclass(frozen=True)
class PricedProduct:
    """The extra GPUs of one flavour and what they cost a month at the card's reserved
    price (``monthly`` None: no rate card prices the flavour)."""

    flavour: str
    extra_gpus: int
    currency: str | None
    price_per_gpu_hour: str | None  # a Decimal as text
    monthly: str | None  # a Decimal as text


@dataclass(frozen=True)
class SavingsResult:
    """The capacity static slices need for the target's p95 wait (None: not reached
    within ``max_capacity_gpus``), the extra GPUs over today's and their price."""

    history: HistoryWindow
    policy: str
    target: ReplayFigures  # the policy at today's capacity and quotas
    static_today: ReplayFigures  # static slices at today's capacity
    capacity_gpus: int
    max_capacity_gpus: int
    step_gpus: int
    needed_gpus: int | None
    extra_gpus: int | None
    points: tuple[SearchPoint, ...]
    products: tuple[PricedProduct, ...] = ()
    monthly_by_currency: Mapping[str, str] = field(default_factory=dict)

    @property
    def reached(self) -> bool:
        return self.needed_gpus is not None

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["history"] = asdict(self.history)
        data["target"] = self.target.as_json()
        data["static_today"] = self.static_today.as_json()
        data["monthly_by_currency"] = dict(self.monthly_by_currency)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SavingsResult:
        return cls(
            history=HistoryWindow.from_json(data["history"]),
            policy=str(data["policy"]),
            target=figures_from_json(data["target"]),
            static_today=figures_from_json(data["static_today"]),
            capacity_gpus=int(data["capacity_gpus"]),
            max_capacity_gpus=int(data["max_capacity_gpus"]),
            step_gpus=int(data["step_gpus"]),
            needed_gpus=data.get("needed_gpus"),
            extra_gpus=data.get("extra_gpus"),
            points=tuple(SearchPoint(**p) for p in data.get("points") or ()),
            products=tuple(PricedProduct(**p) for p in data.get("products") or ()),
            monthly_by_currency=dict(data.get("monthly_by_currency") or {}),
        )
