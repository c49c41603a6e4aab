"""The facts of every workload kind Tidegate queues, by kind name: an integration's
(``INTEGRATIONS``) or the pod groups' (``integrations/pods.py``)."""

from __future__ import annotations

from . import integration_for
from .base import KindFacts
from .pods import KIND as POD_GROUP
from .pods import POD_GROUPS


def kind_facts(kind: str) -> KindFacts:
    """KeyError for a kind Tidegate does not queue (an empty kind is a batch/v1 Job)."""
    return POD_GROUPS if kind == POD_GROUP else integration_for(kind)
