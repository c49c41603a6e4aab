"""Reading a real cluster without the client's models: raw JSON lists and watches.

The official client turns every object of a list into generated model classes, then
back into dicts (about 1.5 s per 500 pods measured); these helpers ask it for the raw
answer instead (``_preload_content=False``) and decode JSON once. On top of them,
:func:`cluster_cache` builds the watched collections the gateway reads from: every pod
(keeping GPU pods only), every node, Tidegate's own ResourceQuotas (by label) and the
ResourceSlices drivers publish (on clusters that serve DRA).
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
from kubernetes import client as k8s
from kubernetes.watch.watch import iter_resp_lines

from .base import LAST_APPLIED_ANNOTATION, MANAGED_BY_LABEL, POD_KIND, KindRef, NodeInfo, PodInfo
from .parsing import node_info, pod_info
from .pod_resources import may_hold_gpus
from .watch_cache import ClusterCache, WatchedCollection

PAGE = 500
QUOTA_SELECTOR = f"{MANAGED_BY_LABEL}=tidegate"


def decode(response: Any) -> dict[str, Any]:
    """The JSON body of a raw client response; the connection goes back to its pool."""
    try:
        return orjson.loads(response.data)
    finally:
        response.release_conn()


def list_raw(
    method: Callable[..., Any],
    *args: Any,
    timeout: tuple[float, float],
    continue_token: str | None = None,
    **selectors: str,
) -> dict[str, Any]:
    """One page (at most :data:`PAGE` objects) of a list call, as decoded JSON."""
    kwargs: dict[str, Any] = {k: v for k, v in selectors.items() if v}
    if continue_token:
        kwargs["_continue"] = continue_token
    return decode(
        method(*args, limit=PAGE, _preload_content=False, _request_timeout=timeout, **kwargs)
    )


class _Stream:
    """A watch answer read as events; ``close`` (from another thread) ends it."""

    def __init__(self, response: Any) -> None:
        self._response = response

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        for line in iter_resp_lines(self._response):
            yield orjson.loads(line)

    def close(self) -> None:
        # Shutting the socket down wakes a thread blocked reading it; close alone may not.
        connection = getattr(self._response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._response.close()


class ApiSource:
    """List and watch one collection through a list method of the official client
    (``list_pod_for_all_namespaces``, ``list_node``, ...)."""

    def __init__(
        self,
        method: Callable[..., Any],
        *,
        connect_timeout: float,
        read_timeout: float,
        label_selector: str = "",
        field_selector: str = "",
    ) -> None:
        self._method = method
        self._connect, self._read = connect_timeout, read_timeout
        self._selectors = {"label_selector": label_selector, "field_selector": field_selector}

    def list_page(self, continue_token: str | None) -> Mapping[str, Any]:
        return list_raw(
            self._method,
            timeout=(self._connect, self._read),
            continue_token=continue_token,
            **self._selectors,
        )

    @contextmanager
    def watch(self, resource_version: str, timeout_s: float) -> Iterator[_Stream]:
        selectors = {k: v for k, v in self._selectors.items() if v}
        response = self._method(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=int(timeout_s),
            _preload_content=False,
            # the server ends the watch after timeout_s; a read that waits well past
            # that means the connection died silently
            _request_timeout=(self._connect, timeout_s + self._read),
            **selectors,
        )
        try:
            yield _Stream(response)
        finally:
            response.close()
            response.release_conn()


def gpu_pod(obj: Mapping[str, Any]) -> PodInfo | None:
    """A pod that requests a GPU or MIG slice, or names ResourceClaims (which may hold
    some); None for every other pod (most of a cluster's), which is then not kept."""
    spec = obj.get("spec") or {}
    if not may_hold_gpus(spec):
        return None
    return pod_info(obj)


def claim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What Tidegate reads of a ResourceClaim: its owner and requests (a shared claim's
    demand, workloads/claims.py) and its allocation results (metering)."""
    meta = obj.get("metadata") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "ownerReferences": meta.get("ownerReferences") or [],
        },
        "spec": obj.get("spec") or {},
        "status": {"allocation": ((obj.get("status") or {}).get("allocation") or {})},
    }


def node(obj: Mapping[str, Any]) -> NodeInfo:
    return node_info(obj)


def quota(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What an idempotent apply compares (labels, Tidegate's last-applied record,
    ``spec.hard``); status, managedFields and the rest are dropped."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    kept = {k: v for k, v in annotations.items() if k == LAST_APPLIED_ANNOTATION}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": dict(meta.get("labels") or {}),
            "annotations": kept,
            "resourceVersion": meta.get("resourceVersion"),
        },
        "spec": {"hard": dict((obj.get("spec") or {}).get("hard") or {})},
    }


def cluster_cache(
    api_client: k8s.ApiClient,
    *,
    connect_timeout: float,
    read_timeout: float,
    watch_timeout_s: float = 300.0,
) -> ClusterCache:
    """The watched collections of one cluster: ``pods`` (GPU pods), ``nodes``,
    ``resourcequotas`` (Tidegate's, by its managed-by label), ``resourceslices``,
    ``deviceclasses`` and ``resourceclaims``. ``api_client`` is the
    cache's own: the gateways that read from it come and go."""
    core = k8s.CoreV1Api(api_client)

    def collection(
        name: str, method: Callable[..., Any], project: Callable[..., Any], label_selector: str = ""
    ) -> WatchedCollection[Any]:
        source = ApiSource(
            method,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            label_selector=label_selector,
        )
        # A quiet watch is not a stale one: the server may send no bookmark at all, and
        # only a read that outlasts the watch's own timeout means the connection died.
        return WatchedCollection(
            name,
            source,
            project,
            watch_timeout_s=watch_timeout_s,
            stale_after_s=watch_timeout_s + read_timeout + 30,
        )

    return ClusterCache(
        {
            "pods": collection("pods", core.list_pod_for_all_namespaces, gpu_pod),
            "nodes": collection("nodes", core.list_node, node),
            "resourcequotas": collection(
                "resourcequotas",
                core.list_resource_quota_for_all_namespaces,
                quota,
                label_selector=QUOTA_SELECTOR,
            ),
            # started on first read, by a gateway that found resource.k8s.io/v1 served
            "resourceslices": collection(
                "resourceslices", k8s.ResourceV1Api(api_client).list_resource_slice, dict
            ),
            # and once quota sync or a queued workload's claims need the classes
            "deviceclasses": collection(
                "deviceclasses", k8s.ResourceV1Api(api_client).list_device_class, dict
            ),
            # and once some GPU pod names claims
            "resourceclaims": collection(
                "resourceclaims",
                k8s.ResourceV1Api(api_client).list_resource_claim_for_all_namespaces,
                claim,
            ),
        }
    )


def labelled_collections(
    api_client: k8s.ApiClient,
    kinds: Sequence[KindRef],
    label_selector: str,
    project: Callable[[KindRef, Mapping[str, Any]], Any],
    on_change: Callable[[], None],
    *,
    connect_timeout: float,
    read_timeout: float,
    watch_timeout_s: float = 300.0,
) -> ClusterCache:
    """One watched collection per kind of the objects carrying ``label_selector`` in
    every namespace, each keeping ``project(kind, obj)`` and calling ``on_change``
    when what it keeps changed; started here."""
    core, custom = k8s.CoreV1Api(api_client), k8s.CustomObjectsApi(api_client)
    collections: dict[str, WatchedCollection[Any]] = {}
    for kind in kinds:
        method: Callable[..., Any] = (
            core.list_pod_for_all_namespaces
            if kind == POD_KIND
            else functools.partial(
                custom.list_cluster_custom_object, kind.group, kind.version, kind.plural
            )
        )
        name = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
        collections[name] = WatchedCollection(
            name,
            ApiSource(
                method,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                label_selector=label_selector,
            ),
            functools.partial(project, kind),
            watch_timeout_s=watch_timeout_s,
            stale_after_s=watch_timeout_s + read_timeout + 30,
            on_change=on_change,
        )
    cache = ClusterCache(collections, on_stop=api_client.close)
    for collection in collections.values():
        collection.start()
    return cache
