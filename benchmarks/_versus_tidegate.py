"""Tidegate on Kueue's scheduler performance scenario, as a platform would run it.

The scenario (Kueue's ``generator.yaml``) becomes Tidegate's terms: every cohort a
parent tenant, every ClusterQueue a tenant below it with its nominal quota as guarantee
and its borrowing limit, on one GPU flavour whose nodes hold the sum of the nominal
quotas (KWOK nodes of 40 GPUs); cohorts lend nothing to each other, as Kueue's separate
cohorts do not. Workloads are queue-labelled Jobs of one pod asking for the workload's
request in GPUs, created through the real API server on the scenario's schedule, with
the workload class's priority as a Tidegate priority class. Admission runs as in
production: a Celery worker and beat on Redis and PostgreSQL, nothing called in this
process. Execution is mimicked as Kueue's runner does: a workload ends its runtime after
it was admitted (this driver deletes the Job then).

Figures by the definitions of Kueue's checker: time to admission from a Job's creation
to its first admission; a queue's usage its GPUs held over the run (first creation to
last end) against its nominal quota, summed over the queue class; wall time from the
first creation to the last end; CPU time and peak memory of the worker and beat.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks._support import ROOT, bench_database, progress

GPUS_PER_NODE = 40
FLAVOUR = "h100-80gb"


@dataclass
class Submitted:
    namespace: str
    name: str
    team: str
    class_name: str
    runtime_s: float
    gpus: int
    created: float  # time.time() when the API server took it
    admitted: float | None = None
    ended: float | None = None


@dataclass
class Run:
    jobs: dict[tuple[str, str], Submitted] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    generated: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)


def _queues(config: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(cohort, queue, queue set) per ClusterQueue, named as Kueue's generator names them."""
    found = []
    for cohort_set in config.get("cohorts") or []:
        for c in range(cohort_set["count"]):
            cohort = f"{cohort_set['className']}-{c}"
            for s, queue_set in enumerate(cohort_set.get("queuesSets") or []):
                for q in range(queue_set["count"]):
                    found.append((cohort, f"{queue_set['className']}-{s}-{q}-{cohort}", queue_set))
    return found


def _node(name: str) -> dict[str, Any]:
    resources = {"cpu": "256", "memory": "2Ti", "pods": "500", "nvidia.com/gpu": str(GPUS_PER_NODE)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "type": "kwok",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": str(GPUS_PER_NODE),
                "nvidia.com/gpu.memory": "81559",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def _job(namespace: str, name: str, class_name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"tidegate.io/queue": namespace, "tidegate.io/priority-class": class_name},
        },
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "annotations": {
                        # runs until this driver ends it (Kueue's runner does the same)
                        "pod-complete.stage.kwok.x-k8s.io/delay": "24h",
                        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "24h",
                    }
                },
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "work",
                            "image": "registry.example/work:1",
                            "resources": {
                                "requests": {"nvidia.com/gpu": str(gpus)},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


def _send(admin: Any, method: str, path: str, body: Any = None) -> Any:
    from toolchain.admin import RETRIED_STATUSES

    for _ in range(40):
        answer = admin.request(method, path, json=body, timeout_s=60)
        if answer.status_code in RETRIED_STATUSES:
            time.sleep(0.25)
            continue
        if answer.status_code >= 400 and answer.status_code not in (404, 409):
            raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text[:300]}")
        return answer
    raise RuntimeError(f"{method} {path}: the API server kept refusing")


def _set_up_tenants(config: dict[str, Any], cluster: Any) -> None:
    """Cohorts as parent tenants, ClusterQueues as their teams, on one flavour."""
    from scheduler_bridge.inventory.models import Flavour
    from scheduler_bridge.quotas.models import Quota
    from scheduler_bridge.workloads.models import PriorityClass
    from tenants.models import NamespaceBinding, Tenant

    flavour = Flavour.objects.get(cluster=cluster, name=FLAVOUR)
    org = Tenant.objects.create(slug="org", name="Org", path="/0/")
    org.path = f"/{org.pk}/"
    org.save(update_fields=["path"])
    cohorts: dict[str, Any] = {}
    totals: dict[str, int] = defaultdict(int)
    for cohort, queue, queue_set in _queues(config):
        if cohort not in cohorts:
            parent = Tenant.objects.create(slug=cohort, name=cohort, parent=org, depth=1, path="")
            parent.path = f"{org.path}{parent.pk}/"
            parent.save(update_fields=["path"])
            cohorts[cohort] = parent
        team = Tenant.objects.create(
            slug=queue, name=queue, parent=cohorts[cohort], depth=2, path=""
        )
        team.path = f"{cohorts[cohort].path}{team.pk}/"
        team.save(update_fields=["path"])
        nominal = int(queue_set["nominalQuota"])
        totals[cohort] += nominal
        Quota.objects.create(
            tenant=team,
            flavour=flavour,
            guaranteed=nominal,
            borrow_limit=int(queue_set["borrowingLimit"]),
        )
        NamespaceBinding.objects.create(tenant=team, cluster_name=cluster.name, namespace=queue)
    for cohort, parent in cohorts.items():
        # a cohort lends nothing outside itself, as Kueue's separate cohorts
        Quota.objects.create(
            tenant=parent, flavour=flavour, guaranteed=totals[cohort], borrow_limit=0, lend_limit=0
        )
    Quota.objects.create(tenant=org, flavour=flavour, guaranteed=sum(totals.values()))
    classes = {
        w["className"]: w["priority"]
        for _, _, queue_set in _queues(config)
        for workloads in queue_set["workloadsSets"]
        for w in workloads["workloads"]
    }
    for name, value in classes.items():
        PriorityClass.objects.get_or_create(name=name, defaults={"value": value})


def _generate(admin: Any, config: dict[str, Any], run: Run) -> None:
    """Each queue's workload sets, each on its own schedule, as Kueue's generator."""

    def one_set(namespace: str, team: str, index: int, workloads: dict[str, Any]) -> None:
        delay = workloads["creationIntervalMs"] / 1000
        for s in range(workloads["count"]):
            for i, workload in enumerate(workloads["workloads"]):
                time.sleep(delay)
                name = f"{workload['className']}-{index}-{s}-{i}"
                body = _job(namespace, name, workload["className"], int(workload["request"]))
                try:
                    _send(admin, "POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)
                except RuntimeError as error:
                    run.errors.append(str(error))
                    continue
                with run.lock:
                    run.jobs[(namespace, name)] = Submitted(
                        namespace,
                        name,
                        team,
                        workload["className"],
                        workload["runtimeMs"] / 1000,
                        int(workload["request"]),
                        time.time(),
                    )

    threads = [
        threading.Thread(target=one_set, args=(queue, queue, index, workloads), daemon=True)
        for _, queue, queue_set in _queues(config)
        for index, workloads in enumerate(queue_set["workloadsSets"])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.generated.set()


def _execute(admin: Any, cluster: Any, run: Run, total: int, timeout_s: float) -> None:
    """Watch admissions in Tidegate's database; end each workload its runtime after its
    admission, as Kueue's runner does, until every workload ended."""
    from django.db import close_old_connections

    from scheduler_bridge.workloads.models import Workload

    deadline = time.monotonic() + timeout_s
    ends: dict[tuple[str, str], float] = {}
    while time.monotonic() < deadline:
        close_old_connections()
        running = Workload.objects.filter(
            cluster=cluster, state__in=Workload.ACTIVE_STATES, admitted_at__isnull=False
        ).values_list("namespace", "job_name", "admitted_at")
        now = time.time()
        with run.lock:
            for namespace, name, admitted_at in running:
                job = run.jobs.get((namespace, name))
                if job is None or job.ended is not None or admitted_at is None:
                    continue
                if job.admitted is None:
                    job.admitted = admitted_at.timestamp()
                ends.setdefault((namespace, name), admitted_at.timestamp() + job.runtime_s)
            due = [key for key, at in ends.items() if at <= now]
        for namespace, name in due:
            _send(
                admin,
                "DELETE",
                f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                {"propagationPolicy": "Background"},
            )
            with run.lock:
                run.jobs[(namespace, name)].ended = time.time()
            del ends[(namespace, name)]
        with run.lock:
            finished = sum(1 for job in run.jobs.values() if job.ended is not None)
        if run.generated.is_set() and finished >= total - len(run.errors):
            return
        time.sleep(0.1)
    raise RuntimeError(f"not every workload ended within {timeout_s:.0f} s")


def _proc_usage(pid: int) -> tuple[float, float]:
    """(CPU seconds, peak RSS MB) of a process and its children so far, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = 0.0
    rss = 0.0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for one in pids:
        try:
            stat = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(stat[11]) + int(stat[12])) / ticks
            for line in Path(f"/proc/{one}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    rss += int(line.split()[1]) / 1024
        except (FileNotFoundError, IndexError, ValueError):
            continue
    return cpu, rss


def _start_celery(
    workdir: Path, database: str, queue_tick_s: float | None
) -> list[subprocess.Popen[bytes]]:
    tick = {"TIDEGATE_QUEUE_TICK_S": str(queue_tick_s)} if queue_tick_s else {}
    env = (
        os.environ
        | tick
        | {
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{database}",
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/14",
            "CELERY_RESULT_BACKEND": "redis://127.0.0.1:6379/14",
            "CELERY_TASK_DEFAULT_QUEUE": "versus-kueue",
            "LOG_LEVEL": "WARNING",
        }
    )
    import redis

    redis.Redis.from_url("redis://127.0.0.1:6379/14").flushdb()
    commands = {
        "worker": ["worker", "--concurrency", "2", "--queues", "versus-kueue", "--without-gossip"],
        "beat": ["beat", "--schedule", str(workdir / "beat-schedule")],
    }
    processes = []
    for name, args in commands.items():
        log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "config", *args, "--loglevel", "WARNING"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    return processes


def run_tidegate(
    scenario: dict[str, Any], timeout_s: int, queue_tick_s: float | None = None
) -> dict[str, Any]:
    """Tidegate's figures on ``scenario`` (Kueue's generator config, already scaled);
    ``queue_tick_s`` sets the beat's queue tick (TIDEGATE_QUEUE_TICK_S), else its default."""
    import tempfile

    from toolchain.control_plane import ControlPlane

    with tempfile.TemporaryDirectory(prefix="versus-tidegate-") as tmp:
        workdir = Path(tmp)
        progress("starting the real control plane ...")
        plane = ControlPlane.prepare(workdir / "plane")
        plane.start()
        try:
            with bench_database("versus_kueue"):
                return _run(plane, scenario, workdir, timeout_s, queue_tick_s)
        finally:
            plane.stop()


def _run(
    plane: Any,
    scenario: dict[str, Any],
    workdir: Path,
    timeout_s: int,
    queue_tick_s: float | None,
) -> dict[str, Any]:
    from django.db import connection

    from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
    from scheduler_bridge.inventory.models import Cluster
    from scheduler_bridge.inventory.services import inventory_sync
    from scheduler_bridge.quotas.sync import quota_sync

    admin = plane.admin
    queues = _queues(scenario)
    nominal = sum(int(queue_set["nominalQuota"]) for _, _, queue_set in queues)
    for n in range(math.ceil(nominal / GPUS_PER_NODE)):
        _send(admin, "POST", "/api/v1/nodes", _node(f"gpu-{n:03d}"))
    for _, queue, _ in queues:
        _send(admin, "POST", "/api/v1/namespaces", {"metadata": {"name": queue}})
    for _, queue, _ in queues:
        plane.wait_for_default_service_account(queue)
    cluster = Cluster.objects.create(
        name="versus-kueue",
        gateway="kubernetes",
        kubeconfig_path=str(plane.gateway_kubeconfig),
        kube_context="tidegate",
    )
    gateway = KubernetesGateway.from_kubeconfig(
        str(plane.gateway_kubeconfig), "tidegate", retry=RetryPolicy(attempts=5, base_delay=0.2)
    )
    inventory_sync(cluster, gateway)
    _set_up_tenants(scenario, cluster)
    quota_sync(cluster, gateway)
    gateway.close()
    total = sum(
        cohort["count"] * queues_set["count"] * workloads["count"] * len(workloads["workloads"])
        for cohort in scenario["cohorts"]
        for queues_set in cohort["queuesSets"]
        for workloads in queues_set["workloadsSets"]
    )
    processes = _start_celery(workdir, connection.settings_dict["NAME"], queue_tick_s)
    run = Run()
    try:
        time.sleep(5)  # the worker and beat up
        progress(f"running the scenario on Tidegate ({total:,} workloads) ...")
        started = time.time()
        generator = threading.Thread(target=_generate, args=(admin, scenario, run), daemon=True)
        generator.start()
        _execute(admin, cluster, run, total, timeout_s)
        ended = max(job.ended or 0.0 for job in run.jobs.values())
        usage = [_proc_usage(p.pid) for p in processes]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    if run.errors:
        progress(f"{len(run.errors)} Jobs could not be created, e.g. {run.errors[0]}")
    window = ended - started
    held = sum(
        (job.ended - job.admitted) * job.gpus
        for job in run.jobs.values()
        if job.admitted is not None and job.ended is not None
    )
    waits: dict[str, list[float]] = defaultdict(list)
    for job in run.jobs.values():
        if job.admitted is not None:
            waits[job.class_name].append(max(0.0, job.admitted - job.created))
    from django.conf import settings

    schedule = settings.CELERY_BEAT_SCHEDULE["queue-tick"]["schedule"]
    default_tick = schedule.total_seconds() if isinstance(schedule, timedelta) else 0.0
    figures: dict[str, Any] = {
        "queue_tick_s": queue_tick_s or default_tick,
        "workloads": len(run.jobs),
        "wall_s": round(window, 3),
        "min_usage": round(held / (window * nominal), 4) if window > 0 else 0.0,
        "cpu_s": round(sum(cpu for cpu, _ in usage), 3),
        "peak_rss_mb": round(sum(rss for _, rss in usage), 1),
    }
    for name, values in sorted(waits.items()):
        figures[f"mean_admission_s_{name}"] = round(sum(values) / len(values), 3)
    return figures
