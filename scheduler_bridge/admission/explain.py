"""Queue positions and pending reasons, computed once at the end of a cycle.

Reasons describe the state the cycle ended in (what the user will see until the next
cycle): the exact quota shortage, with numbers, or the node shortage. A workload whose
pods would have fitted on the GPUs free at the start of the cycle, but which lost them
to work ahead of it, is "waiting behind higher priority" or "waiting behind fair share". Decisions made for one workload (budget refusal, preemption under way,
reservation) are recorded by the engine and passed in. Everything is cached per
(tenant, shape) and per shape, so 50,000 pending workloads cost a sort and a loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import reasons
from .model import PendingDecision, ReasonCode, Topology
from .pending import Item, Option, Shape
from .state import CycleState

Outcome = tuple[ReasonCode, str, str | None]
# Shape-level verdict "lost the GPUs to work ahead"; refined per workload to
# WAITING_PRIORITY when higher-priority work got that flavour this cycle.
WAITING = ReasonCode.WAITING_FAIR_SHARE


class Explainer:
    def __init__(
        self,
        state: CycleState,
        start_caps: dict[int, list[int]],
        admitted_priority: Mapping[int, int],
        outcomes: Mapping[str, Outcome],
    ) -> None:
        self.state = state
        self.start_caps = start_caps
        self.admitted_priority = admitted_priority
        self.outcomes = outcomes
        self.names = state.static.flavour_names
        self._by_group: dict[tuple[int, object], tuple[ReasonCode, str, str | None, int]] = {}
        self._by_nodes: dict[tuple[object, int], tuple[ReasonCode, str, int]] = {}

    # ------------------------------------------------------------------ queue
    def decisions(self, items: Sequence[Item]) -> tuple[PendingDecision, ...]:
        keyed = self._ordered(items)
        tenant_positions: dict[str, int] = {}
        out: list[PendingDecision] = []
        for position, (_, item) in enumerate(keyed, start=1):
            tenant = item.wl.tenant_id
            tenant_positions[tenant] = tenant_positions.get(tenant, 0) + 1
            code, message, flavour = self.reason(item)
            out.append(
                PendingDecision(
                    workload_id=item.wl.id,
                    tenant_id=tenant,
                    position=position,
                    tenant_position=tenant_positions[tenant],
                    code=code,
                    message=message,
                    flavour=flavour,
                )
            )
        return tuple(out)

    def _ordered(self, items: Sequence[Item]) -> list[tuple[tuple[object, ...], Item]]:
        """The order the next cycle will try them in, with today's shares."""
        st = self.state
        shares: dict[int, float] = {}
        classes: dict[tuple[int, object], int] = {}
        keyed: list[tuple[tuple[object, ...], Item]] = []
        for item in items:
            node = item.node
            if node < 0 or not item.shape.options:
                keyed.append(((2, *item.order), item))
                continue
            share = shares.get(node)
            if share is None:
                share = shares[node] = st.share(node)
            ckey = (node, item.shape.key)
            cls = classes.get(ckey)
            if cls is None:
                cls = classes[ckey] = st.guarantee_class(node, item.shape)
            order = item.order
            keyed.append(((cls, order[0], share, order[1], order[2]), item))
        keyed.sort(key=_first)
        return keyed

    # ---------------------------------------------------------------- reasons
    def reason(self, item: Item) -> Outcome:
        recorded = self.outcomes.get(item.wl.id)
        if recorded is not None:
            return recorded
        entry = self.state.reservation_of.get(item.wl.id)
        if entry is not None:
            return self._held(item, entry.option)
        key = (item.node, item.shape.key)
        cached = self._by_group.get(key)
        if cached is None:
            cached = self._by_group[key] = self._explain_shape(item.node, item.shape)
        code, message, flavour, f = cached
        if code is WAITING and self.admitted_priority.get(f, item.wl.priority) > item.wl.priority:
            return ReasonCode.WAITING_PRIORITY, reasons.waiting_priority(self.names[f]), flavour
        return code, message, flavour

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

    def _explain_shape(self, node: int, shape: Shape) -> tuple[ReasonCode, str, str | None, int]:
        parts: list[tuple[ReasonCode, str, int]] = []
        for option in shape.options:
            quota = self._quota(node, option)
            if quota is None:
                nodes_key = (shape.key, option.index)
                verdict = self._by_nodes.get(nodes_key)
                if verdict is None:
                    verdict = self._by_nodes[nodes_key] = self._nodes(shape, option)
                parts.append(verdict)
            else:
                parts.append(quota)
        code, _, f = parts[0]
        labelled = [
            (self._label(option), message)
            for option, (_, message, _) in zip(shape.options, parts, strict=True)
        ]
        return code, reasons.options(labelled), self.names[f], f

    def _label(self, option: Option) -> str:
        return "+".join(dict.fromkeys(self.names[f] for f in option.flavours))

    def _quota(self, node: int, option: Option) -> tuple[ReasonCode, str, int] | None:
        tree = self.state.tree
        usage = self.state.usage
        for f, need in option.totals:
            if not tree.access[f][node]:
                code, message = tree.explain(f, node, need, usage[f])
                return code, message, f
            if tree.available(f, node, usage[f]) >= need:
                continue
            # quota shortages are reported as they stand, with numbers, even when work
            # admitted earlier in this cycle caused them: "used 8/8" says more than
            # "waiting behind" when the tenant's own jobs took the quota
            code, message = tree.explain(f, node, need, usage[f])
            return code, message, f
        return None

    def _nodes(self, shape: Shape, option: Option) -> tuple[ReasonCode, str, int]:
        st = self.state
        pool = st.pool
        topology = shape.topology
        f0 = option.needs[0][0]
        full = {f: list(pool.flavours[f].total) for f, _ in option.totals}
        if pool.plan_generic(option.needs, topology, full) is None:
            return ReasonCode.NEVER_FITS, self._never(shape, option), f0
        now = pool.caps([f for f, _ in option.totals])
        if pool.plan_generic(option.needs, topology, now) is not None:
            # only possible when the cycle did not get to try it (budget refusals are
            # recorded separately): say so rather than invent a shortage
            return ReasonCode.NODE_CAPACITY, "fits now; will be tried in the next cycle", f0
        # reserved GPUs first: "reserved for job Y" tells what would change the answer
        reserved = self._reserved_by(shape, option, now)
        if reserved is not None:
            return ReasonCode.RESERVED, reserved, f0
        start = {f: self.start_caps[f] for f, _ in option.totals if f in self.start_caps}
        if len(start) == len(option.totals) and pool.plan_generic(option.needs, topology, start):
            return WAITING, reasons.waiting_fair_share(self.names[f0]), f0
        code = ReasonCode.NODE_CAPACITY if topology is Topology.NONE else ReasonCode.TOPOLOGY
        return code, self._shortage(shape, option), f0

    def _reserved_by(self, shape: Shape, option: Option, now: dict[int, list[int]]) -> str | None:
        st = self.state
        if not st.reservations:
            return None
        caps = {f: list(arr) for f, arr in now.items()}
        for entry in st.reservations:
            for (f, j), gpus in entry.blocked.items():
                if f in caps:
                    caps[f][j] += gpus
        plan = st.pool.plan_generic(option.needs, shape.topology, caps)
        if plan is None:
            return None
        used = {(f, j) for f, j, _ in plan}
        for entry in st.reservations:
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
        parts = [f"{count} x {per_pod} {self.names[f]}" for f, count, per_pod in option.needs]
        return reasons.multi_shortage(parts)

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
        parts = [f"{count} x {per_pod} {self.names[f]}" for f, count, per_pod in option.needs]
        return "needs " + " and ".join(parts) + " placed together; the cluster cannot hold it"


def _first(pair: tuple[tuple[object, ...], Item]) -> tuple[object, ...]:
    return pair[0]
