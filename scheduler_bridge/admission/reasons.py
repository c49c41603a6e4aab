"""Human-readable reasons, one function per situation.

The engine decides; these functions only word the decision, so that the portal, the API
and logs say the same thing. Keep numbers in the message (who holds what, how much is
missing): "why is my job pending" is the question users of Kueue ask most (kueue
issues #1657, #2833, #4046, #5622), and a reason without numbers does not answer it.
Codes live in model.ReasonCode; wording may change, codes may not.

Each function returns a :class:`~.wording.Wording`: the English text, which also keeps
its template and values so that the portal can say it in the reader's language.
"""

from __future__ import annotations

from collections.abc import Sequence

from i18n.wording import Param, Wording, chain, gettext_noop, ngettext, wording

from .model import Topology


def duration(seconds: float) -> Wording:
    """Short human duration: 45 s, 12 min, 3.5 h, 2.0 d."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return wording(gettext_noop("%(seconds).0f s"), seconds=seconds)
    if seconds < 90 * 60:
        return wording(gettext_noop("%(minutes).0f min"), minutes=seconds / 60)
    if seconds < 48 * 3600:
        return wording(gettext_noop("%(hours).1f h"), hours=seconds / 3600)
    return wording(gettext_noop("%(days).1f d"), days=seconds / 86400)


class QuotaReasons:
    """Wordings for quota refusals (see quota.QuotaTree.explain)."""

    @staticmethod
    def no_quota(flavour: str, tenant: str) -> Wording:
        return wording(
            gettext_noop("no quota for %(flavour)s: neither %(tenant)s nor its parents have one"),
            flavour=flavour,
            tenant=tenant,
        )

    @staticmethod
    def never(flavour: str, tenant: str, need: int, ceiling: int) -> Wording:
        return wording(
            gettext_noop(
                "needs %(need)s %(flavour)s but quota lets %(tenant)s hold at most "
                "%(ceiling)s even with its whole cohort idle"
            ),
            need=need,
            flavour=flavour,
            tenant=tenant,
            ceiling=ceiling,
        )

    @staticmethod
    def own_limit(flavour: str, used: int, guaranteed: int, limit: int, need: int) -> Wording:
        return wording(
            gettext_noop(
                "quota of %(flavour)s used %(used)s/%(ceiling)s (guaranteed %(guaranteed)s, "
                "borrowing limit %(limit)s); needs %(need)s"
            ),
            flavour=flavour,
            used=used,
            ceiling=guaranteed + limit,
            guaranteed=guaranteed,
            limit=limit,
            need=need,
        )

    @staticmethod
    def cohort_limit(flavour: str, cohort: str, room: int, need: int) -> Wording:
        return wording(
            gettext_noop(
                "cohort %(cohort)s is at its borrowing limit for %(flavour)s: %(room)s left "
                "to borrow, needs %(need)s"
            ),
            cohort=cohort,
            flavour=flavour,
            room=room,
            need=need,
        )

    @staticmethod
    def cohort_exhausted(
        flavour: str, root: str, guaranteed: int, unused: int, total: int, need: int
    ) -> Wording:
        """The cohort has too little to lend. Worded of the workload's own tenant without
        naming it (the decision names it): one wording serves every tenant that stands
        alike, and the explainer shares it between them (explain.Explainer._alike)."""
        if total <= 0:
            if unused > 0:
                detail = wording(
                    gettext_noop("its tenant's %(unused)s unused guaranteed are lent out"),
                    unused=unused,
                )
            else:
                detail = wording(
                    gettext_noop("its tenant's %(guaranteed)s guaranteed are in use"),
                    guaranteed=guaranteed,
                )
            return wording(
                gettext_noop(
                    "cohort %(root)s has nothing to lend for %(flavour)s (%(detail)s; "
                    "needs %(need)s)"
                ),
                root=root,
                flavour=flavour,
                detail=detail,
                need=need,
            )
        if total < unused:
            return wording(
                gettext_noop(
                    "needs %(need)s %(flavour)s: %(lent)s of its tenant's %(unused)s unused "
                    "guaranteed are lent out and cohort %(root)s has nothing more to lend"
                ),
                need=need,
                flavour=flavour,
                lent=unused - total,
                unused=unused,
                root=root,
            )
        return wording(
            gettext_noop(
                "cohort %(root)s can lend only %(room)s %(flavour)s (its tenant has "
                "%(unused)s guaranteed unused); needs %(need)s"
            ),
            root=root,
            room=total - unused,
            flavour=flavour,
            unused=unused,
            need=need,
        )


def _shape(count: int, per_pod: int, flavour: str, topology: Topology) -> Wording:
    if topology is Topology.ONE_NODE:
        return wording(
            gettext_noop("%(gpus)s %(flavour)s on one node"),
            gpus=count * per_pod,
            flavour=flavour,
        )
    if topology is Topology.ONE_DOMAIN:
        return wording(
            gettext_noop("%(gpus)s %(flavour)s in one NVLink domain"),
            gpus=count * per_pod,
            flavour=flavour,
        )
    return wording(
        gettext_noop("%(pods)s x %(per_pod)s %(flavour)s"),
        pods=ngettext("%(count)s pod", "%(count)s pods", count),
        per_pod=per_pod,
        flavour=flavour,
    )


def _such_pods(count: int) -> Wording:
    return ngettext("%(count)s such pod", "%(count)s such pods", count)


def node_shortage(
    flavour: str, count: int, per_pod: int, topology: Topology, largest: int, pods_fit: int
) -> Wording:
    """The shape does not fit the GPUs free right now."""
    shape = _shape(count, per_pod, flavour, topology)
    if topology is Topology.NONE and count > 1:
        return wording(
            gettext_noop(
                "needs %(shape)s; free %(flavour)s holds %(pods)s (largest free block is "
                "%(largest)s)"
            ),
            shape=shape,
            flavour=flavour,
            pods=_such_pods(pods_fit),
            largest=largest,
        )
    return wording(
        gettext_noop("needs %(shape)s; largest free block is %(largest)s"),
        shape=shape,
        largest=largest,
    )


def node_never(
    flavour: str, count: int, per_pod: int, topology: Topology, largest: int, pods_cap: int
) -> Wording:
    """The shape does not fit even an empty cluster."""
    shape = _shape(count, per_pod, flavour, topology)
    if topology is Topology.ONE_DOMAIN:
        return wording(
            gettext_noop("needs %(shape)s; the largest domain has %(largest)s"),
            shape=shape,
            largest=largest,
        )
    if topology is Topology.NONE and count > 1:
        return wording(
            gettext_noop("needs %(shape)s; the whole cluster holds %(pods)s"),
            shape=shape,
            pods=_such_pods(pods_cap),
        )
    return wording(
        gettext_noop("needs %(shape)s; the largest node has %(largest)s"),
        shape=shape,
        largest=largest,
    )


def pod_set_shape(count: int, per_pod: int, flavour: str) -> Wording:
    """One pod set of work that asks for several flavours together: 2 x 4 h100."""
    return wording(
        gettext_noop("%(count)s x %(per_pod)s %(flavour)s"),
        count=count,
        per_pod=per_pod,
        flavour=flavour,
    )


def _together(parts: Sequence[str]) -> str:
    return chain(gettext_noop("%(first)s and %(rest)s"), parts)


def multi_shortage(parts: Sequence[str]) -> Wording:
    return wording(
        gettext_noop("needs %(parts)s placed together; not enough free GPUs"),
        parts=_together(parts),
    )


def multi_never(parts: Sequence[str]) -> Wording:
    return wording(
        gettext_noop("needs %(parts)s placed together; the cluster cannot hold it"),
        parts=_together(parts),
    )


def fits_now() -> Wording:
    return wording(gettext_noop("fits now; will be tried in the next cycle"))


def waiting_priority(flavour: str) -> Wording:
    return wording(
        gettext_noop(
            "waiting behind higher priority: the %(flavour)s free at the start of this "
            "cycle went to higher-priority work"
        ),
        flavour=flavour,
    )


def waiting_fair_share(flavour: str) -> Wording:
    return wording(
        gettext_noop(
            "waiting behind fair share: the %(flavour)s free at the start of this cycle "
            "went to work ahead of it in the queue (within its guarantee or with a lower "
            "share)"
        ),
        flavour=flavour,
    )


def reserved(job: str, start: float | None, now: float) -> Wording:
    if start is None:
        return wording(gettext_noop("reserved for job %(job)s"), job=job)
    return wording(
        gettext_noop(
            "reserved for job %(job)s (expected start in ~%(wait)s); a declared max run "
            "time under %(wait)s would let it backfill"
        ),
        job=job,
        wait=duration(start - now),
    )


def guarantee_only(flavour: str, tenant: str, pinned: int, guaranteed: int, need: int) -> Wording:
    return wording(
        gettext_noop(
            "cannot be preempted, so it runs only within %(tenant)s's guarantee of "
            "%(flavour)s: %(pinned)s/%(guaranteed)s held by work that cannot be preempted, "
            "needs %(need)s; choose a preemptible priority class to borrow"
        ),
        tenant=tenant,
        flavour=flavour,
        pinned=pinned,
        guaranteed=guaranteed,
        need=need,
    )


def reclaim_protected(min_run_s: float, left_s: float) -> Wording:
    return wording(
        gettext_noop(
            "borrowed work is not reclaimed in its first %(min_run)s: the guarantee can be "
            "reclaimed in ~%(left)s"
        ),
        min_run=duration(min_run_s),
        left=duration(max(left_s, 0.0)),
    )


def with_protection(reason: str, protection: Wording) -> Wording:
    """A reason followed by when reclaiming becomes possible (reclaim_protected)."""
    return wording(gettext_noop("%(reason)s; %(protection)s"), reason=reason, protection=protection)


def with_reclaim_wait(reason: str, wait_s: float, left_s: float) -> Wording:
    """A reason of work inside its guarantee that waits for GPUs to free before it
    reclaims (EngineConfig.reclaim_wait_s)."""
    return wording(
        gettext_noop(
            "%(reason)s; inside its guarantee, it waits up to %(wait)s for GPUs to free "
            "before it preempts borrowed work (~%(left)s left)"
        ),
        reason=reason,
        wait=duration(wait_s),
        left=duration(left_s),
    )


def released_reservation() -> Wording:
    return wording(
        gettext_noop(
            "fits on GPUs held for a job that started this cycle; they are free again in "
            "the next cycle, which will try it"
        )
    )


def reservation_held(
    gpus: int, flavour: str, nodes: Sequence[str], start: float | None, now: float
) -> Wording:
    shown: Param = ", ".join(nodes[:4])
    if len(nodes) > 4:
        shown = wording(
            gettext_noop("%(nodes)s and %(more)s more"), nodes=shown, more=len(nodes) - 4
        )
    if start is None:
        when = wording(gettext_noop("unknown"))
    else:
        when = wording(gettext_noop("in ~%(wait)s"), wait=duration(start - now))
    return wording(
        gettext_noop(
            "holding a reservation for %(gpus)s %(flavour)s on %(nodes)s; expected start %(when)s"
        ),
        gpus=gpus,
        flavour=flavour,
        nodes=shown,
        when=when,
    )


def waiting_reclaim(
    reclaimers: Sequence[str], tenant: str, guaranteed: int, flavour: str, need: int
) -> Wording:
    return wording(
        gettext_noop(
            "waits for %(who)s's reclaim: together they would pass %(tenant)s's guarantee "
            "of %(guaranteed)s %(flavour)s (it needs %(need)s)"
        ),
        who=", ".join(reclaimers),
        tenant=tenant,
        guaranteed=guaranteed,
        flavour=flavour,
        need=need,
    )


def borrowing_waits_for_reclaim(
    reclaimers: Sequence[str], tenant: str, guaranteed: int, flavour: str, need: int
) -> Wording:
    return wording(
        gettext_noop(
            "waits for %(who)s's reclaim: %(tenant)s borrows no %(flavour)s beyond its "
            "guarantee of %(guaranteed)s while it reclaims it (it needs %(need)s)"
        ),
        who=", ".join(reclaimers),
        tenant=tenant,
        flavour=flavour,
        guaranteed=guaranteed,
        need=need,
    )


def preempting(count: int, tenants: Sequence[str], flavour: str, reclaim: bool) -> Wording:
    who = ", ".join(tenants)
    if count == 0:
        if not tenants:
            return wording(
                gettext_noop("waiting for %(flavour)s being released by this cycle's preemptions"),
                flavour=flavour,
            )
        return wording(
            gettext_noop("waiting for preempted workloads of %(who)s to release %(flavour)s"),
            who=who,
            flavour=flavour,
        )
    if reclaim:
        return wording(
            gettext_noop(
                "preempting %(workloads)s of %(who)s to reclaim guaranteed %(flavour)s; "
                "starts when they stop"
            ),
            workloads=ngettext("%(count)s workload", "%(count)s workloads", count),
            who=who,
            flavour=flavour,
        )
    return wording(
        gettext_noop("preempting %(workloads)s of %(who)s for %(flavour)s; starts when they stop"),
        workloads=ngettext(
            "%(count)s lower-priority workload", "%(count)s lower-priority workloads", count
        ),
        who=who,
        flavour=flavour,
    )


def budget(reason: str | None) -> Wording:
    return wording(
        gettext_noop("budget: %(reason)s"),
        reason=reason or wording(gettext_noop("refused by the budget gate")),
    )


def unknown_tenant(tenant: str) -> Wording:
    return wording(gettext_noop("tenant %(tenant)s is not known to this cluster"), tenant=tenant)


def unknown_flavour(flavours: Sequence[str]) -> Wording:
    return wording(
        gettext_noop("no such flavour on this cluster: %(flavours)s"),
        flavours=", ".join(flavours),
    )


def options(parts: Sequence[tuple[str, str]], labelled: Sequence[str] | None = None) -> str:
    """Join the reasons of each acceptable flavour, in the order they were tried;
    ``labelled``, when given, is each part already worded by ``option``."""
    if len(parts) == 1:
        return parts[0][1]
    if labelled is None:
        labelled = [option(flavour, message) for flavour, message in parts]
    return chain(gettext_noop("%(first)s; %(rest)s"), labelled)


def option(flavour: str, message: str) -> Wording:
    """One flavour's reason among several (``options``)."""
    return wording(gettext_noop("%(flavour)s: %(reason)s"), flavour=flavour, reason=message)


def admitted_within(flavour: str, used: int, guaranteed: int) -> Wording:
    return wording(
        gettext_noop("within guarantee: %(used)s/%(guaranteed)s %(flavour)s in use"),
        used=used,
        guaranteed=guaranteed,
        flavour=flavour,
    )


def admitted_borrowing(
    flavour: str, borrowed: int, used: int, guaranteed: int, root: str
) -> Wording:
    return wording(
        gettext_noop(
            "borrows %(borrowed)s %(flavour)s from cohort %(root)s (%(used)s in use, "
            "%(guaranteed)s guaranteed)"
        ),
        borrowed=borrowed,
        flavour=flavour,
        root=root,
        used=used,
        guaranteed=guaranteed,
    )


def admitted_pinned(flavour: str, pinned: int, guaranteed: int) -> Wording:
    return wording(
        gettext_noop(
            "within guarantee (cannot be preempted): %(pinned)s/%(guaranteed)s %(flavour)s "
            "held by such work"
        ),
        pinned=pinned,
        guaranteed=guaranteed,
        flavour=flavour,
    )


def admitted_backfill(job: str) -> Wording:
    return wording(
        gettext_noop("backfill on GPUs reserved for job %(job)s: ends before its expected start"),
        job=job,
    )


def admitted_reservation(reason: str) -> Wording:
    """An admission's reason when the work started on GPUs held for it."""
    return wording(gettext_noop("%(reason)s; started on the GPUs reserved for it"), reason=reason)


def preempted_reclaim(
    preemptor: str, preemptor_tenant: str, victim_tenant: str, flavour: str, borrowed: int
) -> Wording:
    return wording(
        gettext_noop(
            "reclaim: %(tenant)s needs its guaranteed %(flavour)s for %(preemptor)s; "
            "%(victim_tenant)s borrows %(borrowed)s"
        ),
        tenant=preemptor_tenant,
        flavour=flavour,
        preemptor=preemptor,
        victim_tenant=victim_tenant,
        borrowed=borrowed,
    )


def preempted_priority(preemptor: str, preemptor_priority: int, priority: int) -> Wording:
    return wording(
        gettext_noop(
            "priority: %(preemptor)s (priority %(preemptor_priority)s) of the same tenant "
            "needs the GPUs; this workload has priority %(priority)s"
        ),
        preemptor=preemptor,
        preemptor_priority=preemptor_priority,
        priority=priority,
    )


def borrowing_now(borrowed: int, gpus: int) -> Wording:
    """Running work whose borrowing changed because its tenant's other work did."""
    return wording(
        gettext_noop("borrows %(borrowed)s of its %(gpus)s GPUs now (its tenant's work changed)"),
        borrowed=borrowed,
        gpus=gpus,
    )


def within_guarantee_now() -> Wording:
    return wording(gettext_noop("within its tenant's guarantee now (its tenant's work changed)"))


def preempted(reason: str) -> Wording:
    """Work put back in the queue by a preemption (``reason``: preempted_reclaim or
    preempted_priority)."""
    return wording(gettext_noop("preempted: %(reason)s"), reason=reason)


def preempted_after_grace(at: str, grace_s: int, reason: str) -> Wording:
    """Running work told it will be preempted at ``at``, after its grace."""
    return wording(
        gettext_noop("preempted at %(at)s (a %(grace)s s grace to save a checkpoint): %(reason)s"),
        at=at,
        grace=grace_s,
        reason=reason,
    )


def fills_idle(reason: Param) -> Wording:
    """Why work that only fills idle GPUs waits (PendingWorkload.fills_idle)."""
    return wording(
        gettext_noop(
            "fills idle GPUs only (it never preempts and is the first taken back), and none "
            "it fits is idle now: %(reason)s"
        ),
        reason=reason,
    )
