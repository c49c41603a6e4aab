"""Weighted dominant share and decayed usage.

Share of a tenant = ((1 - b) x current + b x history) / weight, where

* current = max over flavours of held / max(guaranteed, 1): the dominant resource
  (DRF, Ghodsi et al. 2011) measured against what the tenant is entitled to, so a team
  at 10 % of its guarantee goes before one at 90 %, and a team without guarantee
  competes by what it holds (the max(.., 1) keeps zero-guarantee tenants comparable);
* history = decayed GPU-equivalent-hours / (max(guaranteed GPU-equivalents, 1) x tau),
  tau = half_life / ln 2 being the mean life of the decay. A tenant that held a constant
  share for a long time has history equal to that share, so both terms are in the same
  unit and the blend ``b`` (EngineConfig.usage_blend) is a plain weight. This is
  Slurm's PriorityDecayHalfLife and KAI's time-based fair share, folded into one number.

Lower share goes first; equal weights converge to equal shares, 3:1 weights to 3:1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

from .quota import QuotaTree

LN2: Final = math.log(2.0)


def decay_factor(elapsed_s: float, half_life_s: float) -> float:
    """Weight left after ``elapsed_s`` of a sample that halves every ``half_life_s``."""
    if half_life_s <= 0:
        return 0.0
    return 2.0 ** (-max(0.0, elapsed_s) / half_life_s)


def mean_life_hours(half_life_s: float) -> float:
    """tau of the exponential decay, in hours."""
    return half_life_s / LN2 / 3600.0


def decay_usage(
    previous_gpu_hours: float, held_gpu_equivalents: float, elapsed_s: float, half_life_s: float
) -> float:
    """Decayed usage after holding ``held_gpu_equivalents`` for ``elapsed_s``.

    Exact integral of dU/dt = held - U ln2 / half_life (U in GPU-hours, t in hours), so
    the result does not depend on how often it is called, and a constant holding H
    converges to H x tau.
    """
    keep = decay_factor(elapsed_s, half_life_s)
    return previous_gpu_hours * keep + held_gpu_equivalents * mean_life_hours(half_life_s) * (
        1.0 - keep
    )


class ShareCalculator:
    """Share of each workload node of a QuotaTree for the current usage."""

    def __init__(
        self,
        tree: QuotaTree,
        gpu_equivalents: Sequence[float],
        history: Mapping[str, float],
        half_life_s: float,
        blend: float,
    ) -> None:
        self.flavours = range(len(gpu_equivalents))
        self.current_weight = 1.0 - blend
        tau = max(mean_life_hours(half_life_s), 1e-9)
        size = tree.size
        self.denominator = [[float(max(g, 1)) for g in tree.guaranteed[f]] for f in self.flavours]
        self.weight = [tree.tenant_weight[tree.tenant_of[n]] for n in range(size)]
        self.history_term = [0.0] * size
        for node in range(size):
            if not tree.is_workload_node[node]:
                continue
            tenant = tree.tenant_ids[tree.tenant_of[node]]
            used = history.get(tenant, 0.0)
            if used:
                basis = sum(tree.guaranteed[f][node] * gpu_equivalents[f] for f in self.flavours)
                self.history_term[node] = blend * used / (max(basis, 1.0) * tau)

    def share(self, node: int, usage: Sequence[Sequence[int]]) -> float:
        current = 0.0
        for f in self.flavours:
            held = usage[f][node]
            if held:
                ratio = held / self.denominator[f][node]
                if ratio > current:
                    current = ratio
        return (self.current_weight * current + self.history_term[node]) / self.weight[node]
