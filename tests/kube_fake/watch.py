"""Watches of the fake API server: a chunked stream of JSON events, as the API server
serves them (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go)."""

from __future__ import annotations

import json
import random
import socket
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from .store import ApiError, Change, Resource, selected


@dataclass(frozen=True)
class WatchRequest:
    """A watch request, answered as a stream rather than one body."""

    resource: Resource
    namespace: str | None
    label_selector: str
    field_selector: str
    since: int | None  # None: the current state first, as synthetic ADDED events
    bookmarks: bool
    timeout_s: float


def watch_request(resource: Resource, namespace: str | None, query: dict[str, str]) -> WatchRequest:
    labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
    selected({"metadata": {}}, labels, fields)  # a selector that does not parse is a 400
    if "sendInitialEvents" in query:
        raise ApiError(400, "BadRequest", "the fake does not serve sendInitialEvents (WatchList)")
    version = query.get("resourceVersion", "")
    if version and not version.isdigit():
        raise ApiError(400, "BadRequest", f"invalid resource version: {version!r}")
    timeout = query.get("timeoutSeconds")
    return WatchRequest(
        resource,
        namespace,
        labels,
        fields,
        # "" and "0": start with the current state (api-concepts, "Semantics for watch")
        int(version) if version not in ("", "0") else None,
        query.get("allowWatchBookmarks") == "true",
        # no timeoutSeconds: the server picks one between --min-request-timeout (1800 s)
        # and twice that (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go)
        float(timeout) if timeout else random.uniform(1800, 3600),  # noqa: S311
    )


def watch_event(change: Change, watch: WatchRequest) -> dict[str, Any] | None:
    """What a watch with selectors sees of one change (``convertToWatchEvent`` in
    staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go): an object that
    starts to match is ADDED, one that stops matching is DELETED (as it was, at the
    change's resourceVersion)."""
    if change.plural != watch.resource.plural:
        return None
    if watch.namespace is not None and change.namespace != watch.namespace:
        return None
    labels, fields = watch.label_selector, watch.field_selector
    passes = change.type != "DELETED" and selected(change.obj, labels, fields)
    passed = change.previous is not None and selected(change.previous, labels, fields)
    if passes:
        return {"type": "MODIFIED" if passed else "ADDED", "object": change.obj}
    if not passed:
        return None
    previous = change.previous
    assert previous is not None
    gone = {**previous, "metadata": {**previous["metadata"]}}
    gone["metadata"]["resourceVersion"] = str(change.version)
    return {"type": "DELETED", "object": gone}


def _too_large(asked: int, current: int) -> ApiError:
    # A watch from a resourceVersion the server has not reached: the cacher waits a
    # little, then answers "Too large resource version" (storage.NewTooLargeResource
    # VersionError in staging/src/k8s.io/apiserver/pkg/storage/errors.go).
    return ApiError(
        504,
        "Timeout",
        f"Too large resource version: {asked}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def stream_watch(handler: BaseHTTPRequestHandler, watch: WatchRequest, api: Any) -> None:
    """``api`` is the FakeKubeApi serving it (its store, ``stopping``,
    ``watch_generation`` and ``bookmark_interval_s``).

    Serve a watch as the API server does (staging/src/k8s.io/apiserver/pkg/
    endpoints/handlers/watch.go): 200 with a chunked stream of JSON events, one per
    line, until ``timeoutSeconds`` or the server stops. An error found once the
    watch has started (a resourceVersion older than the history) is an ERROR event
    carrying the Status, not an HTTP error (``newErrWatcher`` in cacher.go)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()

    def send(event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def bookmark(version: int) -> dict[str, Any]:
        kind, group_version = watch.resource.kind, watch.resource.group_version
        meta = {"resourceVersion": str(version)}
        return {
            "type": "BOOKMARK",
            "object": {"kind": kind, "apiVersion": group_version, "metadata": meta},
        }

    store = api.store
    generation = api.watch_generation
    deadline = time.monotonic() + watch.timeout_s
    next_bookmark = time.monotonic() + api.bookmark_interval_s
    try:
        with store.lock:
            if watch.since is None:
                plural = watch.resource.plural
                initial = [
                    o
                    for o in store.of(plural, watch.namespace)
                    if selected(o, watch.label_selector, watch.field_selector)
                ]
                since = store.version
            else:
                initial, since = [], watch.since
                if since > store.version:
                    raise _too_large(since, store.version)
                store.changes_after(since)  # 410 when too old
        for obj in initial:
            send({"type": "ADDED", "object": obj})
        while not api.stopping.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            with store.changed:
                changes = store.changes_after(since)
                if not changes:
                    store.changed.wait(min(deadline, next_bookmark, now + 0.2) - now)
                    changes = store.changes_after(since)
                newest = store.version
                dropped = generation != api.watch_generation
            if dropped:
                # the connection breaks off without the stream's last chunk
                handler.close_connection = True
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
            for change in changes:
                event = watch_event(change, watch)
                if event is not None:
                    send(event)
            since = newest
            if watch.bookmarks and time.monotonic() >= next_bookmark:
                send(bookmark(since))
                next_bookmark = time.monotonic() + api.bookmark_interval_s
        if watch.bookmarks and not api.stopping.is_set():
            send(bookmark(since))
    except ApiError as exc:
        send({"type": "ERROR", "object": exc.status()})
    handler.wfile.write(b"0\r\n\r\n")
