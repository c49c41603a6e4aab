"""Collections of cluster objects kept current by a watch: list once, then watch.

Tidegate reads every pod, every node and its own ResourceQuotas of a cluster every few
minutes. Listing them each time costs the API server and the worker time and memory
that grow with the cluster; a :class:`WatchedCollection` lists once, then follows a
watch from the list's resourceVersion (the pattern of client-go's reflector,
``staging/src/k8s.io/client-go/tools/cache/reflector.go``):

* bookmarks are asked for, so a quiet collection still learns how far it has got and
  resumes a closed watch without listing again;
* a watch closed by its timeout or a dropped connection resumes from the last
  resourceVersion seen; an ERROR event (410 Gone once the server's history no longer
  reaches back that far) means listing again;
* only a projection of each object is kept (``project`` returns None for objects not
  worth keeping, e.g. pods that request no GPU), so memory grows with what Tidegate
  uses, not with the size of the cluster's objects.

Pure Python: how to list and watch is handed in (:class:`Source`), so the collection
can be tested and measured without a cluster. One thread per collection follows the
watch; readers get a consistent copy under a lock.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)


class CacheUnavailable(Exception):
    """The collection cannot answer now (never listed, or out of touch too long); the
    caller reads the API server directly instead."""


class Stream(Protocol):
    """An open watch: its events, and a way to end it from another thread."""

    def __iter__(self) -> Iterator[Mapping[str, Any]]: ...

    def close(self) -> None: ...


class Source(Protocol):
    """How one collection is listed and watched (the Kubernetes gateway's part)."""

    def list_page(self, continue_token: str | None) -> Mapping[str, Any]:
        """One page of the list (decoded JSON: ``items``, ``metadata.continue`` and
        ``metadata.resourceVersion``)."""

    def watch(self, resource_version: str, timeout_s: float) -> AbstractContextManager[Stream]:
        """The events of a watch from ``resource_version`` with bookmarks on, closed
        by the server after ``timeout_s``; leaving the context closes the stream."""


@dataclass
class CollectionHealth:
    """What the collection has done, for sync health and benchmarks."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    expired: int = 0  # watches answered 410 Gone (or another ERROR): listed again
    errors: int = 0
    last_error: str = ""
    synced_at: float | None = None  # monotonic time of the last list
    in_touch_at: float | None = None  # monotonic time the server last answered

    def as_dict(self) -> dict[str, Any]:
        return {
            "lists": self.lists,
            "watches": self.watches,
            "events": self.events,
            "bookmarks": self.bookmarks,
            "expired": self.expired,
            "errors": self.errors,
            "last_error": self.last_error,
        }


@dataclass
class _Entry(Generic[T]):
    version: int | None
    value: T


@dataclass
class WatchedCollection(Generic[T]):
    """One collection (``name``, e.g. ``pods``) followed by a background watch.

    ``project(obj)`` turns a raw object into what is kept, or None to keep nothing.
    ``watch_timeout_s`` is asked of the server for each watch (it closes the stream
    then and the collection resumes); ``stale_after_s``: how long without a word from
    the server (an event, a bookmark, a watch opened or closed) before reads give up
    (:class:`CacheUnavailable`); it must outlast a quiet watch. ``on_change``, when
    given, is called from the watch thread after each list and after each event that
    changed what is kept (a projection that stayed the same, such as Tidegate's own
    write seen again, calls nothing).
    """

    name: str
    source: Source
    project: Callable[[Mapping[str, Any]], T | None]
    watch_timeout_s: float = 300.0
    stale_after_s: float = 120.0
    max_backoff_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    health: CollectionHealth = field(default_factory=CollectionHealth)
    on_change: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        self._entries: dict[str, _Entry[T]] = {}
        self._version: str | None = None
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: Stream | None = None  # the open watch, closed by stop()

    # --- reading ---------------------------------------------------------------------

    def values(self, *, wait_s: float = 60.0) -> list[T]:
        """Everything kept, as of the newest event applied. Starts the collection on
        first use and waits up to ``wait_s`` for its first list. Raises
        CacheUnavailable when it has no list yet or has been out of touch with the
        server longer than ``stale_after_s``."""
        self._check(wait_s)
        with self._lock:
            return [entry.value for entry in self._entries.values()]

    def get(self, key: str, *, wait_s: float = 60.0) -> T | None:
        """The kept value of ``namespace/name`` (or ``name``), None when absent."""
        self._check(wait_s)
        with self._lock:
            entry = self._entries.get(key)
            return entry.value if entry is not None else None

    def _check(self, wait_s: float) -> None:
        self.start()
        # The first list of a big cluster takes a while, and listing beside it would
        # only double the work: wait for it, unless it has failed.
        errors = self.health.errors
        deadline = self.clock() + wait_s
        while not self._synced.wait(min(0.5, wait_s)):
            if self.health.errors > errors or self.clock() >= deadline:
                raise CacheUnavailable(
                    f"{self.name}: no complete list yet ({self.health.last_error or 'listing'})"
                )
        touched = self.health.in_touch_at
        if touched is None or self.clock() - touched > self.stale_after_s:
            raise CacheUnavailable(
                f"{self.name}: out of touch with the API server for more than "
                f"{self.stale_after_s:.0f}s ({self.health.last_error or 'no answer'})"
            )

    # --- writing through -------------------------------------------------------------

    def observe(self, obj: Mapping[str, Any]) -> None:
        """Take in an object Tidegate itself just wrote (the API server's answer), so
        the next read sees it before its watch event arrives."""
        self._apply("MODIFIED", obj)

    def forget(self, key: str) -> None:
        """Drop an object Tidegate itself just deleted."""
        with self._lock:
            self._entries.pop(key, None)

    # --- the watch thread ------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping.clear()
            self._thread = threading.Thread(
                target=self._follow, name=f"watch-{self.name}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - closing a stream that broke already
                logger.debug("closing the %s watch failed", self.name, exc_info=True)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _follow(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                if self._version is None:
                    self._relist()
                self._watch_once()
                failures = 0
            except _Relist as reason:
                self.health.expired += 1
                logger.info("%s: listing again (%s)", self.name, reason)
                self._version = None
            except Exception as exc:  # noqa: BLE001 - any failure: back off, try again
                if self._stopping.is_set():
                    return
                failures += 1
                self.health.errors += 1
                self.health.last_error = f"{type(exc).__name__}: {exc}"[:500]
                wait = min(self.max_backoff_s, 0.5 * 2 ** min(failures - 1, 10))
                logger.warning("%s watch failed (%s); again in %.1fs", self.name, exc, wait)
                self._stopping.wait(wait)

    def _relist(self) -> None:
        fresh: dict[str, _Entry[T]] = {}
        token: str | None = None
        while True:
            page = self.source.list_page(token)
            for obj in page.get("items") or []:
                value = self.project(obj)
                if value is not None:
                    meta = obj.get("metadata") or {}
                    fresh[_key(meta)] = _Entry(_number(meta.get("resourceVersion")), value)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                break
        with self._lock:
            self._entries = fresh
            self._version = str(meta.get("resourceVersion") or "") or None
        if self._version is None:
            raise RuntimeError(f"{self.name}: the list carried no resourceVersion")
        self.health.lists += 1
        self.health.synced_at = self.health.in_touch_at = self.clock()
        self._synced.set()
        self._changed()

    def _watch_once(self) -> None:
        assert self._version is not None
        with self.source.watch(self._version, self.watch_timeout_s) as events:
            self._stream = events
            if self._stopping.is_set():  # stop() came before the stream could be closed
                return
            self.health.watches += 1
            self.health.in_touch_at = self.clock()
            try:
                for event in events:
                    if self._stopping.is_set():
                        return
                    self._handle(event)
            finally:
                self._stream = None
        self.health.in_touch_at = self.clock()

    def _handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        self.health.in_touch_at = self.clock()
        if kind == "ERROR":
            raise _Relist(f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}")
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if kind == "BOOKMARK":
            self.health.bookmarks += 1
        elif kind in ("ADDED", "MODIFIED", "DELETED"):
            self.health.events += 1
            if self._apply(kind, obj):
                self._changed()
        if version:
            self._version = version

    def _changed(self) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change()
        except Exception:  # noqa: BLE001 - a listener's failure must not stop the watch
            logger.exception("%s: the change listener failed", self.name)

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """Keep what ``obj`` projects to (drop it when deleted or projected to None);
        True when what is kept changed."""
        meta = obj.get("metadata") or {}
        key = _key(meta)
        version = _number(meta.get("resourceVersion"))
        value = None if kind == "DELETED" else self.project(obj)
        with self._lock:
            held = self._entries.get(key)
            # Tidegate's own writes are taken in before their events arrive: an older
            # event must not undo them (etcd's resourceVersions are increasing numbers).
            if (
                held is not None
                and held.version is not None
                and version is not None
                and version < held.version
            ):
                return False
            if value is None:
                return self._entries.pop(key, None) is not None
            self._entries[key] = _Entry(version, value)
            return held is None or held.value != value


class _Relist(Exception):
    """The watch cannot go on from where it is; list again."""


def _key(meta: Mapping[str, Any]) -> str:
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _number(version: Any) -> int | None:
    text = str(version or "")
    return int(text) if text.isdigit() else None


# --- the caches of this process ------------------------------------------------------


class ClusterCache:
    """The watched collections of one cluster, by name, started on first read."""

    def __init__(
        self,
        collections: Mapping[str, WatchedCollection[Any]],
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.collections = dict(collections)
        self._on_stop = on_stop  # e.g. closing the client the watches used

    def __getitem__(self, name: str) -> WatchedCollection[Any]:
        return self.collections[name]

    def health(self) -> dict[str, dict[str, Any]]:
        return {name: c.health.as_dict() for name, c in self.collections.items()}

    def stop(self) -> None:
        for collection in self.collections.values():
            collection.stop()
        if self._on_stop is not None:
            self._on_stop()


_shared: dict[str, ClusterCache] = {}
_shared_lock = threading.Lock()
_owner_pid = os.getpid()


def shared_cache(
    key: str, build: Callable[[], ClusterCache], *, replacing: str = ""
) -> ClusterCache:
    """The process's cache for ``key`` (a cluster and its connection), built on first
    use; building it stops the caches whose key starts with ``replacing`` (the same
    cluster under connection settings that changed). A forked child (a Celery pool
    process) starts with none: threads do not survive a fork, so the parent's caches
    would never move again."""
    global _owner_pid
    replaced: list[ClusterCache] = []
    with _shared_lock:
        if os.getpid() != _owner_pid:
            _shared.clear()
            _owner_pid = os.getpid()
        cache = _shared.get(key)
        if cache is None:
            if replacing:
                stale = [k for k in _shared if k.startswith(replacing)]
                replaced = [_shared.pop(k) for k in stale]
            cache = _shared[key] = build()
    for old in replaced:
        old.stop()
    return cache


def drop_shared_caches(prefix: str = "") -> None:
    """Stop and forget the caches whose key starts with ``prefix`` (all by default):
    a cluster's connection changed, or the process shuts down."""
    with _shared_lock:
        keys = [k for k in _shared if k.startswith(prefix)]
        dropped = [_shared.pop(k) for k in keys]
    for cache in dropped:
        cache.stop()
