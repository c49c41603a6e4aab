"""What each tenant holds of one flavour now: guaranteed, in use, borrowed and lent.

A pure core (no Django): it takes the tenant tree, each tenant's quota of the flavour and
the GPUs its own admitted and running work holds, and returns one :class:`Holding` per
tenant. Quotas nest: a tenant's guarantee covers its sub-teams' guarantees, and what a
parent guarantees beyond its children's is a pool its subtree shares.

The rules, for a tenant ``t`` with guarantee ``G(t)`` (its quota, but never less than its
sub-teams' guarantees together, as the admission queue counts it) and subtree use ``U(t)``
(its own work plus all its sub-teams' work):

* **in use** ``U(t)``;
* **borrowed** ``max(0, U(t) - G(t))``: held beyond its own guarantee. For a team
  without sub-teams this is what its workloads recorded as borrowed (``Workload.borrowed``);
  for a department it counts only what the department as a whole takes from outside
  (a team using its sister team's idle guarantee is borrowing inside the department);
* **lent**: the part of its idle guarantee ``max(0, G(t) - U(t))`` that others in its
  cohort hold now. Worked out top-down, parent by parent: under a parent ``p`` the
  demand on idle guarantee is what its children hold beyond their guarantees, plus
  what ``p``'s own work holds, plus what ``p`` itself lends upward. The parent's
  unassigned guarantee (``G(p)`` minus its children's guarantees, nobody's to lend)
  meets that demand first; the rest is taken from the children's idle guarantee (each
  capped by its lend limit) in proportion to what each has idle. A tenant whose
  subtree holds more than its guarantee therefore has all its children's lendable idle
  guarantee lent, and a root tenant lends nothing (there is nobody above to lend to).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class TenantNode:
    id: int
    parent_id: int | None


@dataclass(frozen=True)
class Share:
    """A tenant's quota of the flavour (``lend_limit`` None: all unused may be lent)."""

    guaranteed: int
    lend_limit: int | None = None


@dataclass(frozen=True)
class Holding:
    guaranteed: int
    in_use: int
    borrowed: int
    lent: int

    @property
    def idle(self) -> int:
        """Guarantee neither used by the subtree nor lent."""
        return max(0, self.guaranteed - self.in_use - self.lent)


def holdings(
    nodes: Iterable[TenantNode], shares: Mapping[int, Share], own_use: Mapping[int, int]
) -> dict[int, Holding]:
    """One :class:`Holding` per tenant in ``nodes`` (the whole tree, so that what a
    subtree lends upward is known), from ``shares`` (tenant id -> quota; missing means
    no guarantee) and ``own_use`` (tenant id -> GPUs its own work holds)."""
    nodes = list(nodes)
    known = {n.id for n in nodes}
    children: dict[int | None, list[int]] = defaultdict(list)
    for node in nodes:
        parent = node.parent_id if node.parent_id in known else None
        children[parent].append(node.id)
    use: dict[int, int] = {}
    guarantee: dict[int, int] = {}

    def sum_up(tenant: int) -> None:
        # iterative post-order: trees may be deep
        stack = [(tenant, False)]
        while stack:
            current, expanded = stack.pop()
            if expanded:
                kids = children[current]
                use[current] = own_use.get(current, 0) + sum(use[c] for c in kids)
                share = shares.get(current)
                # as the queue counts it: at least what its sub-teams are guaranteed
                guarantee[current] = max(
                    share.guaranteed if share else 0, sum(guarantee[c] for c in kids)
                )
            else:
                stack.append((current, True))
                stack.extend((c, False) for c in children[current])

    for root in children[None]:
        sum_up(root)
    guaranteed = guarantee.__getitem__
    lent: dict[int, int] = {root: 0 for root in children[None]}
    queue = list(children[None])
    while queue:
        parent = queue.pop()
        kids = children[parent]
        if not kids:
            continue
        unassigned = max(0, guaranteed(parent) - sum(guaranteed(k) for k in kids))
        demand = (
            sum(max(0, use[k] - guaranteed(k)) for k in kids)
            + own_use.get(parent, 0)
            + lent[parent]
        )
        lendable = {k: _lendable(guaranteed(k), shares.get(k), use[k]) for k in kids}
        taken = min(sum(lendable.values()), max(0, demand - unassigned))
        lent.update(split(taken, lendable))
        queue.extend(kids)
    return {
        tenant: Holding(
            guaranteed=guaranteed(tenant),
            in_use=use[tenant],
            borrowed=max(0, use[tenant] - guaranteed(tenant)),
            lent=lent.get(tenant, 0),
        )
        for tenant in use
    }


def _lendable(guaranteed: int, share: Share | None, used: int) -> int:
    idle = max(0, guaranteed - used)
    limit = share.lend_limit if share else None
    return idle if limit is None else min(idle, limit)


def split(total: int, weights: Mapping[int, int]) -> dict[int, int]:
    """``total`` (at most the sum of ``weights``) shared out in whole GPUs in proportion
    to ``weights``: floors first, then one more each for the largest remainders."""
    whole = sum(weights.values())
    if whole <= 0 or total <= 0:
        return dict.fromkeys(weights, 0)
    out = {key: total * weight // whole for key, weight in weights.items()}
    left = total - sum(out.values())
    by_remainder = sorted(weights, key=lambda key: (-(total * weights[key] % whole), key))
    for key in by_remainder[:left]:
        out[key] += 1
    return out
