"""Reasons and audit messages about workloads that are written outside the admission
cycle: how work ended, why a Job was refused, why admitted work went back to the queue.

Like the engine's reasons (``scheduler_bridge.admission.reasons``) each is a
:class:`~i18n.wording.Wording`: the English text Kubernetes
Events, the API and logs use, which also keeps its template and values so the portal
says it in the reader's language. Kinds, names and cluster errors are data.
"""

from __future__ import annotations

from i18n.wording import Param, Wording, gettext_noop, wording
from tenants.errors import TidegateError

# --- how work ended ----------------------------------------------------------------------


def cancelled() -> Wording:
    return wording(gettext_noop("cancelled"))


def finished() -> Wording:
    return wording(gettext_noop("finished"))


def overran(limit: Param) -> Wording:
    """Stopped at its declared max run time (``limit``: a duration)."""
    return wording(
        gettext_noop("stopped: ran past its declared max run time of %(limit)s"), limit=limit
    )


def object_ended(kind: str, *, failed: bool = False, deleted: bool = False) -> Wording:
    """The Job (or other object of ``kind``) behind the workload ended or went away."""
    if deleted:
        return wording(gettext_noop("the %(kind)s was deleted"), kind=kind)
    if failed:
        return wording(gettext_noop("the %(kind)s failed"), kind=kind)
    return wording(gettext_noop("the %(kind)s completed"), kind=kind)


def pods_gone() -> Wording:
    return wording(gettext_noop("its pods are gone"))


def could_not_start(error: str) -> Wording:
    """Admitted work the cluster would not start (``error``: what the cluster said)."""
    return wording(gettext_noop("could not start the Job: %(error)s"), error=error)


# --- why a Job was refused -----------------------------------------------------------------


def unknown_queue(slug: str) -> Wording:
    return wording(
        gettext_noop("the queue label names unknown tenant %(tenant)s"), tenant=repr(slug)
    )


def foreign_namespace(namespace: str, owner: str, tenant: str) -> Wording:
    return wording(
        gettext_noop("namespace %(namespace)s belongs to %(owner)s, not %(tenant)s"),
        namespace=namespace,
        owner=owner,
        tenant=tenant,
    )


def ungated_pods() -> Wording:
    return wording(
        gettext_noop(
            "its pods were created without Tidegate's scheduling gate (before the admission "
            "webhook was installed, or with it switched off); recreate them so the webhook "
            "gates them"
        )
    )


def created_running(kind: str, field: str) -> Wording:
    return wording(
        gettext_noop(
            "the %(kind)s was created running; create it suspended (%(field)s: true) so the "
            "queue can admit it"
        ),
        kind=kind,
        field=field,
    )


def cannot_pin(kind: str, annotation: str) -> Wording:
    return wording(
        gettext_noop(
            "a %(kind)s cannot be pinned to nodes (its pod templates' node affinity may not "
            "change); remove the annotation %(annotation)s"
        ),
        kind=kind,
        annotation=annotation,
    )


def refused(error: TidegateError) -> str:
    """A domain error's message kept as a Wording when its template is a plain
    gettext_lazy one or a Wording (the portal then says it in the reader's language);
    otherwise its English text."""
    template = error.template
    if isinstance(template, Wording):
        return template
    found = getattr(template, "_args", None)  # gettext_lazy's proxy keeps its msgid
    if not (isinstance(found, tuple) and len(found) == 1 and isinstance(found[0], str)):
        return str(error)
    params: dict[str, Param] = {
        name: value if isinstance(value, int | float | Wording) else str(value)
        for name, value in error.params.items()
    }
    return Wording(found[0], params)


def not_queued(error: str) -> Wording:
    return wording(gettext_noop("could not be queued: %(error)s"), error=error)


# --- audit messages of transitions ---------------------------------------------------------


def submitted(gpus: int) -> Wording:
    return wording(gettext_noop("submitted: %(gpus)s GPUs"), gpus=gpus)


def rejected(namespace: str, job: str, reason: str) -> Wording:
    return wording(
        gettext_noop("Job %(namespace)s/%(job)s not admitted: %(reason)s"),
        namespace=namespace,
        job=job,
        reason=reason,
    )


def admitted(flavour: str, nodes: str, reason: str) -> Wording:
    return wording(
        gettext_noop("admitted onto %(flavour)s (%(nodes)s): %(reason)s"),
        flavour=flavour,
        nodes=nodes,
        reason=reason,
    )


def started() -> Wording:
    return wording(gettext_noop("started on the cluster"))


def resized(grew: int, shrank: int, reason: str) -> Wording:
    """An elastic workload started ``grew`` and stopped ``shrank`` pods."""
    grown = wording(gettext_noop("grew by %(pods)s pod(s)"), pods=grew)
    shrunk = wording(gettext_noop("shrank by %(pods)s pod(s)"), pods=shrank)
    if grew and shrank:
        verb: Param = wording(gettext_noop("%(first)s, %(rest)s"), first=grown, rest=shrunk)
    else:
        verb = grown if grew else shrunk if shrank else ""
    return wording(gettext_noop("%(change)s: %(reason)s"), change=verb, reason=reason)


def pods_released(pods: int, gpus: int) -> Wording:
    return wording(
        gettext_noop(
            "%(pods)s completed pod(s) gave back %(gpus)s GPU(s); the Job runs on with the rest"
        ),
        pods=pods,
        gpus=gpus,
    )


def scaled_to(count: int) -> Wording:
    return wording(gettext_noop("its pods were scaled to %(count)s"), count=count)
