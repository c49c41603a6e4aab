"""Queue positions and pending reasons, computed once at the end of a cycle.

Reasons describe the state the cycle ended in (what the user will see until the next
cycle): the exact quota shortage, with numbers, or the node shortage. A workload whose
pods would have fitted on the GPUs free at the start of the cycle, but which lost them
to work ahead of it, is "waiting behind higher priority" or "waiting behind fair share". Decisions made for one workload (budget refusal, preemption under way,
reservation) are recorded by the engine and passed in. Everything is cached per
(tenant, shape) and per shape, so 50,000 pending workloads cost a sort and a loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from i18n.wording import Wording

from . import reasons
from .model import PendingDecision, Placement, ReasonCode, Topology
from .pending import ArrivalRanks, Group, Item, Option, Shape
from .quota import NO_LIMIT
from .state import CycleState

Outcome = tuple[ReasonCode, str, str | None]
# Shape-level verdict "lost the GPUs to work ahead"; refined per workload to
# WAITING_PRIORITY when higher-priority work got that flavour this cycle.
WAITING: Final = ReasonCode.WAITING_FAIR_SHARE
# composed reasons of several flavour options kept between cycles before starting over
WORDED_KEPT: Final = 100_000
# group verdicts kept between cycles before starting over
EXPLAINED_GROUPS_KEPT: Final = 200_000
# How far a group's verdict read the cycle's state (Explainer._stamp)
READS_NOTHING: Final = 0
READS_OWN: Final = 1
READS_PATH: Final = 2
# quota refusals worded from the tenant's own usage, limits and reclaims alone
READ_OWN: Final = frozenset((ReasonCode.QUOTA_LIMIT, ReasonCode.WAITING_RECLAIM))
# Not in line for anything until quotas, the cluster or the request change: no position.
INADMISSIBLE: Final = frozenset(
    {
        ReasonCode.NEVER_FITS,
        ReasonCode.NO_QUOTA,
        ReasonCode.UNKNOWN_TENANT,
        ReasonCode.UNKNOWN_FLAVOUR,
    }
)


class Explainer:
    def __init__(
        self,
        state: CycleState,
        ranks: ArrivalRanks,
        start_caps: dict[int, list[int]],
        admitted: set[str],
        admitted_priority: Mapping[int, int],
        outcomes: Mapping[str, Outcome],
        budget_blocked: Callable[[str], str | None] | None = None,
        holds: Mapping[str, tuple[Placement, ...]] | None = None,
    ) -> None:
        self.state = state
        # every item's rank by arrival (the engine's, kept between cycles), assigned
        self.ranks = ranks
        # where preemptors will start once their victims stop (PendingDecision.held)
        self.holds = holds or {}
        self.budget_blocked = budget_blocked
        self._blocked: dict[str, str | None] = {}  # per tenant, asked once a cycle
        self.start_caps = start_caps
        self.admitted = admitted
        self.admitted_priority = admitted_priority
        self.outcomes = outcomes
        self.names = state.static.flavour_names
        self._by_nodes: dict[tuple[int, int, int], tuple[ReasonCode, str, int]] = {}
        self._by_quota: dict[tuple[int, int, int], tuple[ReasonCode, str]] = {}
        self._labels: dict[tuple[int, ...], str] = {}
        # per flavour, by tree node: quota still available at the cycle's end (_available)
        # and what a quota verdict reads of the usage (_quota_view), worked out once
        size = state.tree.size
        self._room: list[list[int | None]] = [[None] * size for _ in state.usage]
        self._views: list[list[tuple[int, int, int, int] | None]] = [
            [None] * size for _ in state.usage
        ]
        # Fresh verdicts, shared within the cycle by the groups of one shape whose
        # tenants stand alike: the same quota settings and tree (Static.quota_classes)
        # and all a verdict may read of the usage the same (_stamp, READS_PATH). Of
        # 2,000 tenants many stand alike, and one workload ending changes what a whole
        # cohort can lend: most changed verdicts are shared. A verdict whose words name
        # its tenant (its own ceiling, its reclaims) is kept to its group.
        self._alike: dict[
            tuple, tuple[tuple[ReasonCode, str, str | None, int], tuple, int, bool]
        ] = {}
        self._quota_classes = state.static.quota_classes()
        self._stamps: dict[int, tuple] = {}  # _stamp's, this cycle
        # reasons worded once a cycle per tenant, flavour and need (_quota, _beyond_reach)
        self._reclaim_waits: dict[tuple[int, int, int, bool], str] = {}
        self._out_of_reach: dict[tuple[int, int, int], tuple[ReasonCode, str]] = {}
        self._tree_size = state.tree.size
        # reclaim protection words a window that moves with the clock into reasons
        self._protecting = state.config.reclaim and state.config.reclaim_min_run_s > 0
        # (what the guarantee class changes in a reason: reserved GPUs, protection)
        self._class_matters = bool(state.reservations) or self._protecting
        # per (tree, flavour): earliest end of reclaim protection among borrowed work
        self._protection: dict[tuple[int, int], float | None] = {}

    def _budget_spent(self, tenant: str) -> str | None:
        if self.budget_blocked is None:
            return None
        if tenant not in self._blocked:
            self._blocked[tenant] = self.budget_blocked(tenant)
        return self._blocked[tenant]

    # ------------------------------------------------------------------ queue
    def decisions(
        self, groups: Sequence[Group], others: Sequence[Item]
    ) -> tuple[PendingDecision, ...]:
        """Position and reason of every workload still pending, in queue order, then the
        inadmissible ones (no position) in the same order. ``groups`` are the
        (tenant, shape) groups of the cycle (each with all its members), ``others`` the workloads
        that never queued (unknown tenant or flavour); admitted ones are left out."""
        runs = self._ordered(groups, others)
        ranks = self.ranks
        by_seq = ranks.by_seq
        mask = ranks.size - 1
        # positions within each tenant, by workload node (one per tenant; work of an
        # unknown tenant has no position)
        tenant_positions = [0] * self._tree_size
        out: list[PendingDecision] = []
        aside: list[PendingDecision] = []  # inadmissible, listed after the queue
        outcomes = self.outcomes
        held = self.state.reservation_of
        # most workloads have neither a recorded outcome nor a reservation: one test
        holds = self.holds
        special = outcomes.keys() | held.keys() | holds.keys()
        verdicts: list[tuple[ReasonCode, str, str | None, int] | None] = [None] * len(groups)
        admitted_priority = self.admitted_priority
        names = self.names
        budgets = self.budget_blocked is not None
        waiting_priority: dict[int, str] = {}  # one wording per flavour, not per workload
        config = self.state.config
        # work inside its guarantee still in its reclaim wait (EngineConfig.reclaim_wait_s)
        wait_s = config.reclaim_wait_s if config.reclaim else 0.0
        now = self.state.now
        position = 0
        for cls, run in runs:
            for key in run:
                seq = key & mask
                found_item = by_seq[seq]
                assert found_item is not None
                item = found_item
                wl = item.wl
                tenant = wl.tenant_id
                wid = wl.id
                placed: tuple[Placement, ...] = ()
                recorded: Outcome | None = None
                if wid in special:
                    placed = holds.get(wid, ())
                    recorded = outcomes.get(wid)
                    if recorded is None and wid in held:
                        recorded = self._held(item, held[wid].option)
                if recorded is not None:
                    code, message, flavour = recorded
                else:
                    g = item.group
                    cached = verdicts[g]
                    if cached is None:  # (boxed once, for both)
                        cached = self._explain_shape(item.node, item.shape, cls)
                        verdicts[g] = cached
                    code, message, flavour, f = cached
                    if code is WAITING and admitted_priority.get(f, wl.priority) > wl.priority:
                        code = ReasonCode.WAITING_PRIORITY
                        worded = waiting_priority.get(f)
                        if worded is None:
                            worded = waiting_priority[f] = reasons.waiting_priority(names[f])
                        message = worded
                    if wait_s and cls == 0 and code not in INADMISSIBLE:
                        left = wl.submitted_at + wait_s - now
                        if left > 0:
                            message = reasons.with_reclaim_wait(message, wait_s, left)
                if code in INADMISSIBLE:
                    aside.append(
                        PendingDecision(
                            workload_id=wid,
                            tenant_id=tenant,
                            position=None,
                            tenant_position=None,
                            code=code,
                            message=message,
                            flavour=flavour,
                            held=placed,
                        )
                    )
                    continue
                if budgets and code is not ReasonCode.BUDGET:
                    spent = self._budget_spent(tenant)
                    if spent is not None:  # freeing GPUs would not start it: say so first
                        code, message = ReasonCode.BUDGET, reasons.budget(spent)
                if wl.fills_idle:
                    message = reasons.fills_idle(message)
                position += 1
                mine = tenant_positions[item.node] + 1
                tenant_positions[item.node] = mine
                # (positional: the hot loop of a deep queue; the fields in their order)
                out.append(
                    PendingDecision(wid, tenant, position, mine, code, message, flavour, placed)
                )
        return (*out, *aside)

    def _ordered(
        self, groups: Sequence[Group], others: Sequence[Item]
    ) -> list[tuple[int, list[int]]]:
        """The order the next cycle will try them in, with today's shares: by guarantee
        class, priority (highest first), share, submission and id. Returned as runs of
        one class and priority, each of one int per workload, ``share rank * size +
        Item.seq`` (ArrivalRanks): within a run the order is the share, then arrival, and
        ints sort far faster than tuples. Each item is told its group's index
        (Item.group)."""
        st = self.state
        admitted = self.admitted
        size = self.ranks.size
        # each tenant's share, once, by workload node (lists: no boxed key per group)
        seen = [False] * self._tree_size
        shares = [0.0] * self._tree_size
        nodes: list[int] = []
        for group in groups:
            node = group.node
            if not seen[node]:
                seen[node] = True
                shares[node] = st.share(node)
                nodes.append(node)
        # one rank per distinct share, in share order (equal shares: equal ranks); work
        # that never queued (unknown tenant or flavour) is placed as of share 0
        distinct = {shares[node] for node in nodes}
        if others:
            distinct.add(0.0)
        share_rank: dict[float, int] = {}
        for share in sorted(distinct):
            share_rank[share] = len(share_rank)
        node_offset = [0] * self._tree_size
        for node in nodes:
            node_offset[node] = share_rank[shares[node]] * size
        # runs by guarantee class (0, 1, 2 for elastic pods and work that never queued),
        # then by priority negated (ascending: highest priority first)
        runs: list[dict[int, list[int]]] = [{}, {}, {}]
        for g, group in enumerate(groups):
            node = group.node
            offset = node_offset[node]
            of_class = runs[st.guarantee_class(node, group.shape)]
            run: list[int] = []
            run_priority = 0
            for item in group.members:
                wl = item.wl
                if wl.id in admitted:
                    continue
                minus_priority = -wl.priority
                if not run or minus_priority != run_priority:  # (a group is in order)
                    run_priority = minus_priority
                    found = of_class.get(minus_priority)
                    if found is None:
                        found = of_class[minus_priority] = []
                    run = found
                item.group = g
                run.append(offset + item.seq)
        unqueued = share_rank[0.0] * size if others else 0
        for item in others:
            found = runs[2].get(-item.wl.priority)
            if found is None:
                found = runs[2][-item.wl.priority] = []
            found.append(unqueued + item.seq)
        ordered: list[tuple[int, list[int]]] = []
        for cls, of_class in enumerate(runs):
            for minus_priority in sorted(of_class):
                run = of_class[minus_priority]
                run.sort()
                ordered.append((cls, run))
        return ordered

    # ---------------------------------------------------------------- reasons
    def _held(self, item: Item, option_index: int) -> Outcome:
        st = self.state
        entry = st.reservation_of[item.wl.id]
        option = item.shape.options[option_index]
        quota = self._quota(item.node, option)
        if quota is not None:
            code, message, f = quota
            return code, message, self.names[f]
        nodes = sorted({st.pool.names[st.pool.flavours[f].members[j]] for f, j, _ in entry.plan})
        f0 = option.totals[0][0]
        message = reasons.reservation_held(
            item.shape.gpus, self.names[f0], nodes, entry.expected_start, st.now
        )
        return ReasonCode.RESERVATION_HELD, message, self.names[f0]

    def _explain_shape(
        self, node: int, shape: Shape, guarantee_class: int
    ) -> tuple[ReasonCode, str, str | None, int]:
        """The group's verdict, reused from an earlier cycle when nothing it read has
        changed: the usage along the tenant's path, its reclaims, what its work that
        cannot be preempted holds, and the node-side verdicts (the same for every
        tenant, worked out once a cycle) it used. Work inside its guarantee while
        reclaim protection is on is always worded afresh: its window moves."""
        st = self.state
        protecting = self._protecting
        cls = guarantee_class if self._class_matters else 1
        if protecting and cls == 0:  # its reason may carry a window that moves with the clock
            return self._explain_fresh(node, shape, cls, protecting)[0]
        key = shape.id * self._tree_size + node  # (_group_key)
        explained = st.static.explained_groups
        found = explained.get(key)
        stamp: tuple | None = None
        read_before = -1
        if found is not None:
            read_before = found[0]
            stamp = self._stamp(node, shape, cls, read_before)
            if found[1] == stamp and self._same_on_nodes(shape, found[6]):
                return found[2], found[3], found[4], found[5]
        # worked out afresh, or shared with a group whose tenant stands alike (_alike)
        read_all = stamp if read_before == READS_PATH else None
        if read_all is None:
            read_all = self._stamp(node, shape, cls, READS_PATH)
        alike_key = (shape.id, self._quota_classes[node], read_all)
        fresh = self._alike.get(alike_key)
        if fresh is None:
            fresh = self._explain_fresh(node, shape, cls, False)
            if not fresh[3]:  # (its words do not name its tenant)
                self._alike[alike_key] = fresh
        verdict, on_nodes, reads, _ = fresh
        if reads == READS_PATH:
            stamp = read_all
        elif stamp is None or reads != read_before:  # (what it read then was stamped)
            stamp = self._stamp(node, shape, cls, reads)
        if len(explained) >= EXPLAINED_GROUPS_KEPT:
            explained.clear()
        explained[key] = (reads, stamp, *verdict, on_nodes)
        return verdict

    def _stamp(self, node: int, shape: Shape, cls: int, reads: int) -> tuple:
        """What a group's verdict read, as one flat tuple (kept between cycles: few
        objects for the collector to walk). ``reads`` says how far: READS_NOTHING (it
        can never run, whatever the usage), READS_OWN (its own usage and limits, its
        tenant's reclaims, what its work that cannot be preempted holds) or READS_PATH
        (also what its quota verdict reads of the usage along the path - the room left,
        what the parent gives, the binding cohort: not the usage itself, so a change at
        a level that does not bind leaves it standing - and its guarantee class; of a
        tenant without a borrowing limit and without a reclaim of its own on the
        flavour, only the guarantee its usage leaves unused)."""
        if reads == READS_NOTHING:
            return ()
        # the same for a tenant's groups of one set of flavours: worked out once a cycle
        # (one int: node, flavours, may borrow, class as far as it is read, reads)
        key = shape.flavour_mask * self._tree_size + node
        key = key * 2 + (1 if shape.may_borrow else 0)
        key = (key * 4 + (cls + 1 if reads == READS_PATH else 0)) * 3 + reads
        found = self._stamps.get(key)
        if found is not None:
            return found
        st = self.state
        tree = st.tree
        parts: list[object] = [cls] if reads == READS_PATH else []
        for f in shape.flavours:
            parts.append(-1)  # separates flavours
            if reads == READS_PATH:
                used, free, from_parent, binding = self._quota_view(node, f)
                # Without a borrowing limit or a reclaim of its own, a quota verdict
                # reads the tenant's usage only as the guarantee it leaves unused:
                # tenants of one quota class that all hold at least their guarantee
                # stand alike, whatever each borrows
                guaranteed = tree.guaranteed[f][node]
                if (
                    used > guaranteed
                    and not st.reclaiming[f][node]
                    and tree.borrow_limit[f][node] == NO_LIMIT
                ):
                    used = guaranteed
                parts.append(used)
                parts.append(free)
                parts.append(from_parent)
                parts.append(binding)
            else:
                parts.append(st.usage[f][node])
            if st.reclaiming[f][node]:
                parts.extend(st.reclaimers[(f, node)])
            if not shape.may_borrow:
                parts.append(st.pinned[f][node])
        stamp = self._stamps[key] = tuple(parts)
        return stamp

    def _quota_view(self, node: int, f: int) -> tuple[int, int, int, int]:
        """What a quota verdict of ``node`` on flavour ``f`` reads of the usage (its
        own usage, what it may still take, what its parent may give and the cohort that
        binds it: QuotaTree.explain), once a cycle per tenant and flavour."""
        views = self._views[f]
        view = views[node]
        if view is None:
            view = views[node] = self.state.tree.view(f, node, self.state.usage[f])
        return view

    def _available(self, node: int, f: int) -> int:
        """Quota still available to ``node`` at the cycle's end (-1 without access)."""
        room = self._room[f]
        free = room[node]
        if free is None:
            tree = self.state.tree
            free = tree.available(f, node, self.state.usage[f]) if tree.access[f][node] else -1
            room[node] = free
        return free

    def _group_key(self, node: int, shape: Shape) -> int:
        """A (workload node, shape) group as one int, stable while the static state
        stands (ints are never walked by the cyclic collector)."""
        return shape.id * self.state.tree.size + node

    def _same_on_nodes(self, shape: Shape, on_nodes: tuple) -> bool:
        """Whether the node-side verdicts a remembered verdict used still stand (they
        are the same for every tenant, worked out once a cycle)."""
        for option_index, cls, verdict in on_nodes:
            if self._on_nodes(shape, shape.options[option_index], cls) != verdict:
                return False
        return True

    def _on_nodes(self, shape: Shape, option: Option, cls: int) -> tuple[ReasonCode, str, int]:
        nodes_key = (shape.id, option.index, cls)
        verdict = self._by_nodes.get(nodes_key)
        if verdict is None:
            verdict = self._by_nodes[nodes_key] = self._nodes(shape, option, cls)
        return verdict

    def _explain_fresh(
        self, node: int, shape: Shape, cls: int, protecting: bool
    ) -> tuple[tuple[ReasonCode, str, str | None, int], tuple, int, bool]:
        """The verdict, the node-side verdicts it used ((option, class, verdict)), how
        far it read (READS_NOTHING, READS_OWN or READS_PATH; see _stamp) and whether its
        words name the tenant. Only quota-side parts can: node-side ones are the same
        for every tenant, so the whole (options joined by their flavours' names) is not
        searched for the tenant's name."""
        st = self.state
        reads = READS_NOTHING
        tenant_label = st.tree.label[node]
        named = False
        parts: list[tuple[ReasonCode, str, int]] = []
        on_nodes: list[tuple[int, int, tuple[ReasonCode, str, int]]] = []
        by_nodes = self._by_nodes
        reachable = st.static.reachable
        group = shape.id * self._tree_size + node  # (_group_key)
        for option in shape.options:
            # Whether it could ever fit the nodes comes first: work no node layout can
            # hold has no place in line, whatever its quota says (a shortage would give
            # it one and promise a start that never comes). (Both memos read inline:
            # the calls are for their first time.)
            fits_idle = by_nodes.get((shape.id, option.index, -1))
            if fits_idle is None or fits_idle[2] >= 0:
                never = self._never_fits(shape, option)
                if never is not None:
                    parts.append(never)
                    continue
            if (group << 16) | option.index not in reachable:
                never = self._never_by_quota(node, shape, option)
                if never is not None:
                    parts.append(never)
                    named = named or _names(never[1], tenant_label)
                    if not shape.may_borrow:  # its words say what such work holds now
                        reads = max(reads, READS_OWN)
                    continue
            quota = self._quota(node, option) if shape.may_borrow else self._guarantee(node, option)
            if quota is None:
                verdict = self._on_nodes(shape, option, cls)
                parts.append(verdict)
                on_nodes.append((option.index, cls, verdict))
                reads = READS_PATH
            else:
                parts.append(quota)
                named = named or _names(quota[1], tenant_label)
                # a refusal by the tenant's own figures on the option's first flavour
                # read nothing further; on a later one, the earlier ones' room counted
                own = quota[0] in READ_OWN and quota[2] == option.totals[0][0]
                reads = max(reads, READS_OWN if own else READS_PATH)
        # the first option that could ever run decides the code (and so whether the
        # workload has a place in line); the message covers every option
        code, message, f = parts[0]
        if len(parts) > 1:
            for part in parts:
                if part[0] not in INADMISSIBLE:
                    code, message, f = part
                    break
            labelled = tuple(
                [(self._label(option), part[1]) for option, part in zip(shape.options, parts)]  # noqa: B905
            )
            worded = self.state.static.worded_options
            combined = worded.get(labelled)
            if combined is None:
                if len(worded) >= WORDED_KEPT:
                    worded.clear()
                combined = worded[labelled] = reasons.options(
                    labelled, [self._option_worded(label, part) for label, part in labelled]
                )
            message = combined
        if protecting and cls == 0:
            until = self._protected_until(node, shape)
            if until is not None:
                message = reasons.with_protection(
                    message, reasons.reclaim_protected(st.config.reclaim_min_run_s, until - st.now)
                )
        return (code, message, self.names[f], f), tuple(on_nodes), reads, named

    def _option_worded(self, label: str, message: str) -> str:
        """One option's reason, labelled with its flavours: worded once while the static
        state stands (the same part comes back in many combinations)."""
        worded = self.state.static.worded_options_parts
        found = worded.get((label, message))
        if found is None:
            if len(worded) >= WORDED_KEPT:
                worded.clear()
            found = worded[(label, message)] = reasons.option(label, message)
        return found

    def _protected_until(self, node: int, shape: Shape) -> float | None:
        """When the first borrowed workload the tenant could reclaim (other tenants' work
        in its tree, of a flavour of ``shape``) leaves its protection, if any is in it."""
        st = self.state
        root = st.tree.root[node]
        found: float | None = None
        for f in shape.flavours:
            key = (root, f)
            if key not in self._protection:
                guaranteed = st.tree.guaranteed[f]
                view, protected = st.victim_view[f], st.protected_usage[f]
                ends = [
                    run.protected_until
                    for run in st.runs_by_root.get(key, ())
                    if run.protected_until is not None
                    and run.wl.preemptible
                    and view[run.node] + protected[run.node] > guaranteed[run.node]
                ]
                self._protection[key] = min(ends) if ends else None
            until = self._protection[key]
            if until is not None and (found is None or until < found):
                found = until
        return found

    def _label(self, option: Option) -> str:
        label = self._labels.get(option.flavours)
        if label is None:
            names = dict.fromkeys(self.names[f] for f in option.flavours)
            label = self._labels[option.flavours] = "+".join(names)
        return label

    def _quota(self, node: int, option: Option) -> tuple[ReasonCode, str, int] | None:
        st = self.state
        tree = st.tree
        usage = st.usage
        room = self._room
        for f, need in option.totals:
            claimed = st.reclaiming[f][node]
            guaranteed = tree.guaranteed[f][node]
            if claimed and usage[f][node] + need > guaranteed:
                # inside the guarantee on its own, but not together with the tenant's
                # reclaimers of this cycle: it waits for them, it does not reclaim more;
                # nor does the tenant borrow the flavour while it reclaims it
                alone = usage[f][node] - claimed + need <= guaranteed
                waits = (node, f, need, alone)
                message = self._reclaim_waits.get(waits)
                if message is None:
                    who, tenant = st.reclaimers[(f, node)], tree.label[node]
                    if alone:
                        message = reasons.waiting_reclaim(
                            who, tenant, guaranteed, self.names[f], need
                        )
                    else:
                        message = reasons.borrowing_waits_for_reclaim(
                            who, tenant, guaranteed, self.names[f], need
                        )
                    self._reclaim_waits[waits] = message
                return ReasonCode.WAITING_RECLAIM, message, f
            free = room[f][node]
            if free is None:
                free = self._available(node, f)
            if free >= need:
                continue
            # quota shortages are reported as they stand, with numbers, even when work
            # admitted earlier in this cycle caused them: "used 8/8" says more than
            # "waiting behind" when the tenant's own jobs took the quota
            key = (node, f, need)
            found = self._by_quota.get(key)
            if found is None:
                found = self._by_quota[key] = tree.explain(
                    f, node, need, usage[f], self._quota_view(node, f)
                )
            return found[0], found[1], f
        return None

    def _guarantee(self, node: int, option: Option) -> tuple[ReasonCode, str, int] | None:
        """For work that cannot be preempted: the first flavour whose guarantee the
        tenant's other such work leaves too little of."""
        tree = self.state.tree
        pinned = self.state.pinned
        for f, need in option.totals:
            used, guaranteed = pinned[f][node], tree.guaranteed[f][node]
            if used + need > guaranteed:
                message = reasons.guarantee_only(
                    self.names[f], tree.label[node], used, guaranteed, need
                )
                # (more than the whole guarantee was said before: _never_by_quota)
                return ReasonCode.QUOTA_LIMIT, message, f
        return self._quota(node, option)

    def _never_by_quota(
        self, node: int, shape: Shape, option: Option
    ) -> tuple[ReasonCode, str, int] | None:
        """NO_QUOTA or NEVER_FITS when some flavour of the option is out of the tenant's
        reach with its whole tree idle: checked over every flavour before any shortage,
        so a flavour short for now cannot hide one the option could never have."""
        reachable = self.state.static.reachable
        key = (self._group_key(node, shape) << 16) | option.index
        if key in reachable:
            return None
        tree = self.state.tree
        for f, need in option.totals:
            if not tree.access[f][node]:
                code, message = self._beyond_reach(node, f, need)
                return code, message, f
            if not shape.may_borrow:
                if need > tree.guaranteed[f][node]:
                    message = reasons.guarantee_only(
                        self.names[f],
                        tree.label[node],
                        self.state.pinned[f][node],
                        tree.guaranteed[f][node],
                        need,
                    )
                    return ReasonCode.NEVER_FITS, message, f
            elif need > tree.ceiling(f, node):
                code, message = self._beyond_reach(node, f, need)
                return code, message, f
        reachable.add(key)  # quotas are part of the static state: true until they change
        return None

    def _beyond_reach(self, node: int, f: int, need: int) -> tuple[ReasonCode, str]:
        """Why ``need`` GPUs of ``f`` are out of ``node``'s reach with its tree idle, once a
        cycle per tenant, flavour and need (its groups of several shapes ask alike)."""
        key = (node, f, need)
        found = self._out_of_reach.get(key)
        if found is None:
            tree = self.state.tree
            found = self._out_of_reach[key] = tree.explain(f, node, need, tree.zero_usage)
        return found

    def _never_fits(self, shape: Shape, option: Option) -> tuple[ReasonCode, str, int] | None:
        """NEVER_FITS when no layout of the nodes, all GPUs free, holds the option."""
        key = (shape.id, option.index, -1)
        verdict = self._by_nodes.get(key)
        if verdict is None:
            pool = self.state.pool
            full = {f: list(pool.flavours[f].total) for f, _ in option.totals}
            if pool.plan_generic(option.needs, shape.topology, full) is None:
                verdict = (ReasonCode.NEVER_FITS, self._never(shape, option), option.needs[0][0])
            else:
                verdict = (ReasonCode.NODE_CAPACITY, "", -1)  # fits an idle cluster
            self._by_nodes[key] = verdict
        return None if verdict[2] < 0 else verdict

    def _nodes(self, shape: Shape, option: Option, cls: int) -> tuple[ReasonCode, str, int]:
        """Node-side verdict for a shape whose quota fits; ``cls`` 0 (inside the
        guarantee) may use GPUs held for borrowing gangs, as the cycle let it."""
        st = self.state
        pool = st.pool
        topology = shape.topology
        f0 = option.needs[0][0]
        full = {f: list(pool.flavours[f].total) for f, _ in option.totals}
        if pool.plan_generic(option.needs, topology, full) is None:
            return ReasonCode.NEVER_FITS, self._never(shape, option), f0
        now = pool.caps([f for f, _ in option.totals])
        if cls == 0:
            held = st.borrowing_holds()
            for f, cap in now.items():
                for j, gpus in held[f].items():
                    cap[j] += gpus
        if pool.plan_generic(option.needs, topology, now) is not None:
            # only possible when the cycle did not get to try it (budget refusals are
            # recorded separately): say so rather than invent a shortage
            return ReasonCode.NODE_CAPACITY, reasons.fits_now(), f0
        if st.released:
            with_released = {f: list(arr) for f, arr in now.items()}
            for (f, j), gpus in st.released.items():
                if f in with_released:
                    with_released[f][j] += gpus
            if pool.plan_generic(option.needs, topology, with_released) is not None:
                return ReasonCode.NODE_CAPACITY, reasons.released_reservation(), f0
        # reserved GPUs first: "reserved for job Y" tells what would change the answer
        reserved = self._reserved_by(shape, option, now, cls)
        if reserved is not None:
            return ReasonCode.RESERVED, reserved, f0
        start = {f: self.start_caps[f] for f, _ in option.totals if f in self.start_caps}
        if len(start) == len(option.totals) and pool.plan_generic(option.needs, topology, start):
            return WAITING, reasons.waiting_fair_share(self.names[f0]), f0
        code = ReasonCode.NODE_CAPACITY if topology is Topology.NONE else ReasonCode.TOPOLOGY
        return code, self._shortage(shape, option), f0

    def _reserved_by(
        self, shape: Shape, option: Option, now: dict[int, list[int]], cls: int
    ) -> str | None:
        st = self.state
        closed = [e for e in st.reservations if not (cls == 0 and e.cls > 0)]
        if not closed:
            return None
        caps = {f: list(arr) for f, arr in now.items()}
        for entry in closed:
            for (f, j), gpus in entry.blocked.items():
                if f in caps:
                    caps[f][j] += gpus
        plan = st.pool.plan_generic(option.needs, shape.topology, caps)
        if plan is None:
            return None
        used = {(f, j) for f, j, _ in plan}
        for entry in closed:
            if any(entry.blocked.get(key) for key in used):
                return reasons.reserved(entry.workload_id, entry.expected_start, st.now)
        return None  # pragma: no cover - the plan needed some blocked GPUs

    def _shortage(self, shape: Shape, option: Option) -> str:
        pool = self.state.pool
        if shape.simple:
            f, count, per_pod = option.needs[0]
            fn = pool.flavours[f]
            return reasons.node_shortage(
                self.names[f],
                count,
                per_pod,
                shape.topology,
                fn.largest_block(shape.topology),
                fn.pods_fit(per_pod),
            )
        return reasons.multi_shortage(self._pod_sets(option))

    def _never(self, shape: Shape, option: Option) -> str:
        pool = self.state.pool
        if shape.simple:
            f, count, per_pod = option.needs[0]
            fn = pool.flavours[f]
            largest = (
                fn.largest_domain_total
                if shape.topology is Topology.ONE_DOMAIN
                else fn.largest_node_total
            )
            return reasons.node_never(
                self.names[f], count, per_pod, shape.topology, largest, fn.pods_capacity(per_pod)
            )
        return reasons.multi_never(self._pod_sets(option))

    def _pod_sets(self, option: Option) -> list[str]:
        return [
            reasons.pod_set_shape(count, per_pod, self.names[f])
            for f, count, per_pod in option.needs
        ]


def _names(message: str, label: str) -> bool:
    """Whether ``message`` puts ``label`` (a tenant's) into its words: as a value of the
    wording or of a wording within it; in the text, for a plain string. (A wording's
    text holds each of its values - every template in reasons.py puts a string value in
    as ``%(name)s``, whole - so one whose text lacks the label does not name it.)"""
    if label not in message:
        return False
    if not isinstance(message, Wording):
        return True
    for value in message.params.values():
        if value == label or (isinstance(value, Wording) and _names(value, label)):
            return True
    return False
