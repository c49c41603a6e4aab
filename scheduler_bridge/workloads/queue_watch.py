"""Admission on events: a change to queued work asks for a Job sync at once.

The queue tick (``TIDEGATE_QUEUE_TICK_S``, a beat task) reads every cluster's
queue-labelled objects on a timer, so new work waits up to a tick before it is even
seen. ``manage.py watch_queues`` runs beside beat and makes admission follow events:
for every Kubernetes cluster it watches the queue-labelled objects of each workload
kind the cluster serves (and queue-labelled pods, for pod groups), and when one is
created, ends, is deleted or gives back completed pods (or a queued pod changes
phase), it queues ``jobs_sync`` for that cluster, which picks the change up and runs an
admission cycle. Queuing goes through the outbox (tenants.outbox): one queued sync per
cluster however many events arrive before it starts, and a sync asked for while another
runs tries again half a second later (``TASK_MIN_INTERVAL_S``).

* A burst is one sync: the first change of a burst waits ``settle_s`` for the rest,
  and one cluster's syncs are queued at most every ``gap_s``.
* Tidegate's own writes (admitting, suspending, scaling elastic work) change nothing a
  sync acts on (:func:`signature`), so they queue nothing.
* The tick stays as the backstop: a change missed while a watch was down is picked up
  at the next tick, and every list (the first, and one after an expired watch) queues
  a sync anyway.
* Clusters are read again every ``refresh_s``: a new cluster is watched, a removed one
  is no longer, and changed connection settings reopen its watches. A cluster whose
  gateway cannot watch (the simulated one) is left to the tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections

from scheduler_bridge.followups import queue_jobs_sync_now
from scheduler_bridge.gateways import ClusterGateway, GatewayError
from scheduler_bridge.gateways.base import POD_KIND, QUEUE_LABEL, KindRef, Watching
from scheduler_bridge.integrations import BY_KIND, INTEGRATIONS
from scheduler_bridge.inventory.connection import cache_key, gateway_for_cluster
from scheduler_bridge.inventory.models import Cluster

logger = logging.getLogger(__name__)


def signature(kind: KindRef, obj: Mapping[str, Any]) -> Hashable:
    """What a Job sync acts on in one watched object: whether it ended and how many of
    its pods completed (a pod: its phase; a pod group's size is its pods). Fields
    Tidegate itself writes when it admits, stops or scales work are left out, and so is
    a pod set's count (read once, when the object is queued)."""
    meta = obj.get("metadata") or {}
    if kind == POD_KIND:
        return (meta.get("uid"), (obj.get("status") or {}).get("phase"))
    integration = BY_KIND.get(kind.kind)
    if integration is None:
        return meta.get("uid")
    try:
        read = integration.read(dict(obj))
    except Exception:  # noqa: BLE001 - an object the sync will refuse still changed
        return (meta.get("uid"), meta.get("generation"))
    return (read.uid, read.finished, read.failed, read.reclaimable_pods)


@dataclass
class Batcher:
    """Turns bursts of changes into few calls of ``send``: a call comes ``settle_s``
    after the first change of a burst, never sooner than ``gap_s`` after the previous
    call; changes while ``send`` runs make one more call. Runs on its own thread."""

    send: Callable[[], None]
    settle_s: float = 0.05
    gap_s: float = 0.5
    clock: Callable[[], float] = time.monotonic
    sent: int = 0
    _changed: threading.Event = field(default_factory=threading.Event)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _last_sent: float | None = None

    def changed(self) -> None:
        self._changed.set()

    def start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._changed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopping.is_set():
            if not self._changed.wait(1.0) or self._stopping.is_set():
                continue
            due = self.clock() + self.settle_s
            if self._last_sent is not None:
                due = max(due, self._last_sent + self.gap_s)
            if self._stopping.wait(max(0.0, due - self.clock())):
                return
            self._changed.clear()  # changes from here on make the next call
            try:
                self.send()
                self.sent += 1
            except Exception:  # noqa: BLE001 - the tick picks the change up instead
                logger.exception("queue watch: could not ask for a sync")
            self._last_sent = self.clock()


@dataclass
class _Watched:
    key: str  # the cluster's connection (inventory.connection.cache_key)
    gateway: ClusterGateway
    watching: Watching
    batcher: Batcher

    def stop(self) -> None:
        self.watching.stop()
        self.batcher.stop()
        self.gateway.close()


def _ask_for_sync(cluster_id: int) -> Callable[[], None]:
    def send() -> None:
        close_old_connections()  # a long-lived thread: drop a connection the server closed
        queue_jobs_sync_now(cluster_id)

    return send


@dataclass
class QueueWatcher:
    """The watches of every cluster this process follows, kept in step with the
    Cluster rows by :meth:`refresh`."""

    settle_s: float = 0.05
    gap_s: float = 0.5
    watched: dict[int, _Watched] = field(default_factory=dict)

    def refresh(self) -> None:
        """Watch new clusters, stop watching removed ones, reopen changed ones."""
        clusters = {c.pk: c for c in Cluster.objects.filter(gateway=Cluster.Gateway.KUBERNETES)}
        for cluster_id in list(self.watched):
            current = clusters.get(cluster_id)
            if current is None or cache_key(current) != self.watched[cluster_id].key:
                self.watched.pop(cluster_id).stop()
        for cluster_id, cluster in clusters.items():
            if cluster_id not in self.watched:
                self._watch(cluster)

    def _watch(self, cluster: Cluster) -> None:
        try:
            gateway = gateway_for_cluster(cluster)
            kinds = [i.ref for i in INTEGRATIONS if gateway.serves(i.ref)]
            kinds.append(POD_KIND)
        except GatewayError as error:
            logger.warning("queue watch: %s cannot be watched now (%s)", cluster.name, error)
            return
        batcher = Batcher(_ask_for_sync(cluster.pk), settle_s=self.settle_s, gap_s=self.gap_s)
        watching = gateway.watch_labelled(kinds, QUEUE_LABEL, signature, batcher.changed)
        if watching is None:
            gateway.close()
            return
        batcher.start(f"queue-watch-{cluster.name}")
        self.watched[cluster.pk] = _Watched(cache_key(cluster), gateway, watching, batcher)
        logger.info(
            "queue watch: following %s (%s)", cluster.name, ", ".join(k.plural for k in kinds)
        )

    def health(self) -> dict[int, dict[str, Any]]:
        return {
            cluster_id: {"syncs_asked": w.batcher.sent, "watches": w.watching.health()}
            for cluster_id, w in self.watched.items()
        }

    def stop(self) -> None:
        for watched in self.watched.values():
            watched.stop()
        self.watched.clear()

    def run(self, stopping: threading.Event, refresh_s: float = 30.0) -> None:
        """Follow every cluster until ``stopping`` is set."""
        try:
            while True:
                close_old_connections()
                try:
                    self.refresh()
                except Exception:  # noqa: BLE001 - the database may be away; try again
                    logger.exception("queue watch: could not read the clusters")
                if stopping.wait(refresh_s):
                    return
        finally:
            self.stop()
