"""Admission on events, its pure parts: which changes to a watched object matter to a Job
sync (Tidegate's own admitting writes do not), a watched collection that tells about
changes only, and the batcher that turns a burst of changes into one queued sync."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler_bridge.gateways.base import JOB_KIND, POD_KIND
from scheduler_bridge.gateways.watch_cache import WatchedCollection
from scheduler_bridge.workloads.queue_watch import Batcher, signature


def queued_job(**status: Any) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": "2"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "resnet",
            "namespace": "vision-train",
            "uid": "u-1",
            "labels": {"tidegate.io/queue": "vision"},
        },
        "spec": {
            "suspend": True,
            "parallelism": 2,
            "completions": 2,
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": gpu}}]}},
        },
        "status": dict(status),
    }


def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s}s"
        time.sleep(0.01)


def test_admitting_a_job_leaves_its_signature_as_it_was() -> None:
    queued = queued_job()
    admitted = copy.deepcopy(queued)
    admitted["spec"]["suspend"] = False
    admitted["metadata"]["annotations"] = {"tidegate.io/original-scheduling": "{}"}
    admitted["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "H100"}
    admitted["status"] = {"active": 2, "startTime": "2026-12-06T00:00:00Z"}
    assert signature(JOB_KIND, admitted) == signature(JOB_KIND, queued)


def test_a_job_that_ends_or_gives_back_pods_changes_its_signature() -> None:
    running = signature(JOB_KIND, queued_job(active=2))
    one_done = signature(JOB_KIND, queued_job(active=1, succeeded=1))
    complete = queued_job(succeeded=2)
    complete["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    assert len({running, one_done, signature(JOB_KIND, complete)}) == 3


def test_a_queued_pod_is_known_by_its_phase() -> None:
    pod = {"metadata": {"uid": "p-1"}, "status": {"phase": "Pending"}}
    done = {"metadata": {"uid": "p-1"}, "status": {"phase": "Succeeded"}}
    assert signature(POD_KIND, pod) != signature(POD_KIND, done)


class _Stream:
    def __init__(self, events: Sequence[Mapping[str, Any]], stop: threading.Event) -> None:
        self.events, self.stop = events, stop

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        yield from self.events
        self.stop.wait(5)

    def close(self) -> None:
        self.stop.set()


class _OneWatch:
    """Lists one Job, then a watch that sends ``events`` once and stays open."""

    def __init__(self, events: Sequence[Mapping[str, Any]]) -> None:
        self.events = list(events)
        self.stop = threading.Event()

    def list_page(self, continue_token: str | None) -> Mapping[str, Any]:
        job = queued_job()
        job["metadata"]["resourceVersion"] = "10"
        return {"items": [job], "metadata": {"resourceVersion": "10"}}

    @contextmanager
    def watch(self, resource_version: str, timeout_s: float) -> Iterator[_Stream]:
        events, self.events = self.events, []
        yield _Stream(events, self.stop)


def _event(kind: str, obj: dict[str, Any], version: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = version
    return {"type": kind, "object": obj}


def test_a_watched_collection_tells_of_changes_to_what_it_keeps_only() -> None:
    admitted = queued_job(active=2)
    admitted["spec"]["suspend"] = False
    ended = queued_job(succeeded=2)
    ended["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    events = [
        _event("MODIFIED", admitted, "11"),  # Tidegate admitted it: nothing to sync
        _event("MODIFIED", ended, "12"),  # it ended: a sync
        _event("DELETED", copy.deepcopy(ended), "13"),  # it was deleted: a sync
    ]
    told: list[float] = []
    source = _OneWatch(events)
    jobs = WatchedCollection(
        "jobs", source, lambda obj: signature(JOB_KIND, obj), on_change=lambda: told.append(1)
    )
    try:
        jobs.start()
        eventually(lambda: jobs.health.events == 3)
        assert len(told) == 3  # the list, the end and the deletion
        assert jobs.values() == []
    finally:
        jobs.stop()


def test_a_burst_of_changes_asks_for_one_sync() -> None:
    sends: list[float] = []
    batcher = Batcher(lambda: sends.append(time.monotonic()), settle_s=0.2, gap_s=0.0)
    batcher.start("test")
    try:
        for _ in range(50):
            batcher.changed()
        eventually(lambda: len(sends) == 1)
        time.sleep(0.4)
        assert len(sends) == 1
    finally:
        batcher.stop()


def test_changes_while_a_sync_is_asked_for_make_one_more_and_not_sooner_than_the_gap() -> None:
    sends: list[float] = []
    release = threading.Event()

    def send() -> None:
        sends.append(time.monotonic())
        if len(sends) == 1:
            release.wait(5)  # the first send is slow; changes arrive meanwhile

    batcher = Batcher(send, settle_s=0.0, gap_s=0.5)
    batcher.start("test")
    try:
        batcher.changed()
        eventually(lambda: len(sends) == 1)
        for _ in range(10):
            batcher.changed()
        release.set()
        eventually(lambda: len(sends) == 2)
        assert sends[1] - sends[0] >= 0.5
        time.sleep(0.7)
        assert len(sends) == 2  # the changes during the first send made one more, not ten
    finally:
        batcher.stop()


def test_a_failed_send_is_logged_and_the_next_change_asks_again() -> None:
    calls: list[int] = []

    def send() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("broker away")

    batcher = Batcher(send, settle_s=0.0, gap_s=0.0)
    batcher.start("test")
    try:
        batcher.changed()
        eventually(lambda: len(calls) == 1)
        batcher.changed()
        eventually(lambda: len(calls) == 2)
        assert batcher.sent == 1
    finally:
        batcher.stop()


def test_watch_queues_refuses_a_gap_that_is_not_seconds() -> None:
    with pytest.raises(CommandError, match="'soon' is not a number of seconds"):
        call_command("watch_queues", "--gap", "soon")
    with pytest.raises(CommandError, match="--refresh must be more than 0"):
        call_command("watch_queues", "--refresh", "0")
