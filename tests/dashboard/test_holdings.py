"""What a team holds, borrows and lends, as the dashboard counts it (dashboard.holdings)."""

from __future__ import annotations

from dashboard.holdings import Share, TenantNode, holdings, split

# acme (12) > research (10) > vision (6), speech (2); globex (4) is another cohort
TREE = [
    TenantNode(1, None),
    TenantNode(2, 1),
    TenantNode(3, 2),
    TenantNode(4, 2),
    TenantNode(5, None),
]
SHARES = {1: Share(12), 2: Share(10), 3: Share(6), 4: Share(2), 5: Share(4)}


def test_a_team_borrowing_its_sisters_idle_guarantee_makes_the_sister_a_lender() -> None:
    held = holdings(TREE, SHARES, {4: 8})  # speech runs 8, vision is idle
    speech, vision, research, acme = held[4], held[3], held[2], held[1]
    assert (speech.guaranteed, speech.in_use, speech.borrowed, speech.lent) == (2, 8, 6, 0)
    # the department's unassigned 2 GPUs go first; the other 4 are vision's
    assert (vision.guaranteed, vision.in_use, vision.borrowed, vision.lent) == (6, 0, 0, 4)
    # inside its guarantee as a whole: the department neither borrows nor lends
    assert (research.in_use, research.borrowed, research.lent) == (8, 0, 0)
    assert (acme.in_use, acme.borrowed, acme.lent) == (8, 0, 0)
    assert held[5].lent == 0  # another cohort lends nothing to acme


def test_a_department_over_its_guarantee_lends_upward_what_its_idle_teams_hold_back() -> None:
    tree = [*TREE, TenantNode(6, 1)]  # a second department "product" (guarantee 2)
    shares = {**SHARES, 1: Share(12), 6: Share(2)}
    held = holdings(tree, shares, {6: 8, 4: 2})  # product borrows 6; speech uses its own
    assert held[6].borrowed == 6
    # acme has nothing unassigned (10 + 2 = 12): research's idle 8 is taken by product ...
    assert held[2].lent == 6
    # ... inside research its own unassigned 2 first, then vision's idle guarantee
    assert held[3].lent == 4 and held[4].lent == 0


def test_a_lend_limit_caps_what_is_counted_as_lent() -> None:
    shares = {**SHARES, 3: Share(6, lend_limit=1), 2: Share(8)}  # nothing unassigned
    held = holdings(TREE, shares, {4: 8})
    assert held[3].lent == 1


def test_nothing_is_lent_when_nobody_borrows() -> None:
    held = holdings(TREE, SHARES, {3: 2, 4: 1})
    assert all(h.lent == 0 for h in held.values())
    assert held[3].idle == 4 and held[2].in_use == 3


def test_whole_gpus_are_shared_out_by_largest_remainder() -> None:
    assert split(5, {1: 1, 2: 1, 3: 1}) == {1: 2, 2: 2, 3: 1}
    assert split(0, {1: 3}) == {1: 0}
    assert sum(split(7, {1: 3, 2: 5, 3: 1}).values()) == 7


def test_a_parent_without_a_quota_row_is_guaranteed_what_its_teams_are() -> None:
    shares = {k: v for k, v in SHARES.items() if k != 2}  # research has no row
    held = holdings(TREE, shares, {4: 8})
    assert held[2].guaranteed == 8  # vision 6 + speech 2
    assert held[3].lent == 6  # nothing unassigned in research: all of vision's idle 6
