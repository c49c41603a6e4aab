"""The facts of every workload kind Tidegate queues, by kind name: an integration's
(``INTEGRATIONS``) or the pod groups' (``integrations/pods.py``)."""

from __future__ import annotations

from . import integration_for
from .base import KindFacts
from .pods import KIND as POD_GROUP
from .pods import POD_GROUPS


class _OneObject:
    """A kind no adapter serves any more (work recorded before it was removed): one
    object stood for it, as for every integration."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    held_by_gate = False
    follows_pod_count = False
    has_one_object = True


def kind_facts(kind: str) -> KindFacts:
    """The facts of ``kind`` (an empty kind is a batch/v1 Job, as workloads queued before
    other kinds were integrated are)."""
    if kind == POD_GROUP:
        return POD_GROUPS
    try:
        return integration_for(kind)
    except KeyError:
        return _OneObject(kind)
