"""What each of Kueue's Workloads went through in a run of its performance runner, watched
from beside it (benchmarks/versus_kueue.py): the runner writes its API server's
kubeconfig into its output folder before it creates anything, and this watch follows
every Workload there from then on, recording (at the moment each event arrives, as the
runner's own recorder does) when it appeared, each admission's start, and its end
(evicted or finished). The figures come from benchmarks/_versus_figures.py, the same
definitions as Tidegate's side."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._versus_figures import Observed

GROUP, VERSION, PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"
CLASS_LABEL = "kueue.x-k8s.io/performance-scheduler-class"


def _condition(workload: dict[str, Any], kind: str) -> bool:
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition.get("status") == "True"
    return False


def is_running(workload: dict[str, Any]) -> bool:
    """Admitted, and neither evicted nor finished: holding its quota."""
    return (
        _condition(workload, "Admitted")
        and not _condition(workload, "Evicted")
        and not _condition(workload, "Finished")
    )


def requested(workload: dict[str, Any]) -> int:
    """The quota units it asks for: each pod set's count times its first container's
    request (the runner's workloads ask for ``cpu``; the scenarios read it as GPUs)."""
    total = 0
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        containers = pod_set["template"]["spec"].get("containers") or [{}]
        asked = ((containers[0].get("resources") or {}).get("requests") or {}).get("cpu", "0")
        total += int(pod_set.get("count", 1)) * int(float(str(asked)))
    return total


class WorkloadWatch:
    """Follows the Workloads of the runner whose output folder is ``out``, in a thread."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.seen: dict[str, Observed] = {}
        self._running_since: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self.error: str | None = None
        # whether any ClusterQueue reported a fair-sharing status (Kueue's fair sharing on)
        self.fair_sharing_seen = False

    def start(self) -> WorkloadWatch:
        self._thread.start()
        return self

    def stop(self) -> list[Observed]:
        """Stop watching; every workload seen, runs still open closed now."""
        self._stop.set()
        self._thread.join(timeout=30)
        now = time.time()
        for uid, since in self._running_since.items():
            self.seen[uid].runs.append((since, now))
        self._running_since.clear()
        if self.error:
            raise RuntimeError(f"watching Kueue's Workloads failed: {self.error}")
        return list(self.seen.values())

    def observe(self, workload: dict[str, Any], now: float) -> None:
        meta = workload["metadata"]
        uid = meta["uid"]
        if uid not in self.seen:
            self.seen[uid] = Observed(
                queue=meta["namespace"],
                class_name=(meta.get("labels") or {}).get(CLASS_LABEL, ""),
                gpus=requested(workload),
                created=now,
            )
        running = is_running(workload)
        since = self._running_since.get(uid)
        if running and since is None:
            self._running_since[uid] = now
        elif not running and since is not None:
            self.seen[uid].runs.append((since, now))
            del self._running_since[uid]

    def _follow(self) -> None:
        from kubernetes import client, config, watch

        kubeconfig = self.out / "kubeconfig"
        while not kubeconfig.exists():
            if self._stop.wait(0.05):
                return
        time.sleep(0.2)  # written whole
        api = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
        failures = 0
        version: str | None = None  # where the watch goes on from; None: list first
        while not self._stop.is_set():
            try:
                version = self._list_and_watch(api, watch, version)
                failures = 0
            except Exception as error:  # noqa: BLE001 - retried, then reported
                if self._stop.is_set() or (self.out / "summary.yaml").exists():
                    return  # the runner's API server stops at its end
                failures += 1
                if failures >= 5:
                    self.error = f"{type(error).__name__}: {error}"
                    return
                version = None  # too old, or the connection broke: list again
                time.sleep(0.2)

    def _list_and_watch(self, api: Any, watch: Any, version: str | None) -> str:
        """List (unless going on from ``version``), then watch until the watch times out
        (30 s) or is stopped; the resource version to go on from. Going on from the last
        version seen, rather than listing again, misses no change in between."""
        if version is None:
            queues = api.list_cluster_custom_object(GROUP, VERSION, "clusterqueues")
            self.fair_sharing_seen |= any(
                "fairSharing" in (q.get("status") or {}) for q in queues.get("items") or []
            )
            listed = api.list_cluster_custom_object(GROUP, VERSION, PLURAL)
            now = time.time()
            for workload in listed.get("items") or []:
                self.observe(workload, now)
            version = listed["metadata"]["resourceVersion"]
        stream = watch.Watch()
        for event in stream.stream(
            api.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            resource_version=version,
            timeout_seconds=30,
        ):
            if event["type"] == "ERROR":
                raise RuntimeError(f"watch ended: {event['object']}")
            if event["type"] in ("ADDED", "MODIFIED"):
                self.observe(event["object"], time.time())
                version = event["object"]["metadata"]["resourceVersion"]
            if self._stop.is_set():
                stream.stop()
                break
        if not self.fair_sharing_seen:
            queues = api.list_cluster_custom_object(GROUP, VERSION, "clusterqueues")
            self.fair_sharing_seen = any(
                "fairSharing" in (q.get("status") or {}) for q in queues.get("items") or []
            )
        return version
