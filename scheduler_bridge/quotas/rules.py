"""Quota rules, pure: what a proposed quota may be, given the numbers around it.

- every amount is a whole number >= 0 (the model enforces the type);
- a tenant lends only its own guarantee: lend_limit <= guaranteed;
- children's guarantees never sum above their parent's guarantee (a missing parent quota
  counts as 0: guarantees are handed down the tree, organisation -> department -> team);
- a parent's guarantee never drops below what its children already hold;
- top-level guarantees never sum above the cluster's capacity of the flavour, unless a
  platform admin allowed an explicit overcommit on this quota.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuotaContext:
    tenant: str
    flavour: str
    parent: str | None
    parent_guaranteed: int  # 0 when the parent holds no quota of this flavour
    siblings_guaranteed: int  # what the parent's other children hold
    children_guaranteed: int  # what this tenant's own children hold
    capacity: int  # the cluster's capacity of the flavour
    other_top_level_guaranteed: int  # top-level tenants other than this one


@dataclass(frozen=True)
class QuotaViolation:
    field: str
    message: str
    # which rule: lend_above_guarantee, parent_room, below_children, above_capacity
    code: str = ""


def quota_violations(
    context: QuotaContext,
    *,
    guaranteed: int,
    lend_limit: int | None,
    overcommit_allowed: bool,
) -> list[QuotaViolation]:
    """Every rule the proposed numbers break, each with the figures that explain it."""
    found: list[QuotaViolation] = []
    c = context
    if lend_limit is not None and lend_limit > guaranteed:
        found.append(
            QuotaViolation(
                "lend_limit",
                f"lend_limit {lend_limit} exceeds guaranteed {guaranteed}: a tenant can lend "
                "only its own guarantee.",
                "lend_above_guarantee",
            )
        )
    if c.parent is not None:
        room = c.parent_guaranteed - c.siblings_guaranteed
        if guaranteed > room:
            found.append(
                QuotaViolation(
                    "guaranteed",
                    f"{c.tenant} asks {guaranteed} {c.flavour}, parent {c.parent} has "
                    f"{max(room, 0)} unassigned (guaranteed {c.parent_guaranteed}, "
                    f"{c.siblings_guaranteed} given to other sub-tenants).",
                    "parent_room",
                )
            )
    if guaranteed < c.children_guaranteed:
        found.append(
            QuotaViolation(
                "guaranteed",
                f"{c.tenant}'s sub-tenants already hold {c.children_guaranteed} {c.flavour}; "
                f"its guarantee cannot go below that (asked {guaranteed}). Lower theirs first.",
                "below_children",
            )
        )
    if c.parent is None and not overcommit_allowed:
        total = c.other_top_level_guaranteed + guaranteed
        if total > c.capacity:
            found.append(
                QuotaViolation(
                    "guaranteed",
                    f"top-level guarantees would total {total} {c.flavour} but the cluster has "
                    f"{c.capacity}; lower them, or have a platform admin allow an explicit "
                    "overcommit on this quota.",
                    "above_capacity",
                )
            )
    return found


def largest_guarantee(context: QuotaContext, *, overcommit_allowed: bool) -> int | None:
    """The largest guarantee the tenant may hold now (None: no ceiling, an allowed
    overcommit of a top-level tenant): what its parent has unassigned, or what the
    cluster has beyond the other top-level guarantees."""
    c = context
    if c.parent is not None:
        return max(c.parent_guaranteed - c.siblings_guaranteed, 0)
    if overcommit_allowed:
        return None
    return max(c.capacity - c.other_top_level_guaranteed, 0)


def is_overcommitted(*, top_level_guaranteed: int, capacity: int) -> bool:
    """Top-level guarantees of a flavour promise more than the cluster has."""
    return top_level_guaranteed > capacity
