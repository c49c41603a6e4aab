"""Domain errors raised by cluster gateways.

Every gateway (Kubernetes or simulated) turns transport and API failures into these,
so services and Celery tasks handle one small set of errors. Messages are written for
the person who has to fix the problem: they name the cluster, object, path or context.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base class: something went wrong while talking to a cluster.

    ``retryable`` tells a Celery task whether trying again later can help (an
    unreachable API server) or not (a missing namespace, a rejected object).
    """

    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ClusterUnreachable(GatewayError):
    """The API server did not answer usefully (timeouts, refused connections, 5xx, 429)
    even after the bounded retries."""

    retryable = True


class JobStillStopping(GatewayError):
    """A suspended Job's pods are not counted stopped yet, so its template cannot change
    (Kubernetes refuses it while ``status.active`` > 0); trying again later helps."""

    retryable = True


class GatewayConfigError(GatewayError):
    """The connection settings are unusable: kubeconfig missing or unreadable, context
    not in the file, no in-cluster service account, unknown gateway kind."""


class NamespaceMissing(GatewayError):
    """A namespaced write targeted a namespace that does not exist on the cluster."""

    def __init__(self, namespace: str, message: str | None = None) -> None:
        super().__init__(
            message
            or f"namespace {namespace!r} does not exist on the cluster; create it or fix "
            "the tenant's namespace binding"
        )
        self.namespace = namespace


class ObjectMissing(GatewayError):
    """The object an operation needs (a Job to admit, a Node to label) does not exist."""

    def __init__(self, kind: str, name: str, namespace: str | None = None) -> None:
        where = f"{namespace}/{name}" if namespace else name
        super().__init__(f"{kind} {where} does not exist on the cluster")
        self.kind = kind
        self.name = name
        self.namespace = namespace


class ObjectConflict(GatewayError):
    """A write kept losing to concurrent writers (409 Conflict after every retry), or the
    object is in a state the operation cannot start from (then not ``retryable``)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable
