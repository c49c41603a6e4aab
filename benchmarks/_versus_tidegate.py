"""Tidegate on Kueue's scheduler performance scenario, as a platform would run it.

The scenario (Kueue's ``generator.yaml``) becomes Tidegate's terms: every cohort a
parent tenant, every ClusterQueue a tenant below it with its nominal quota as guarantee
and its borrowing limit, on one GPU flavour whose nodes hold the sum of the nominal
quotas; cohorts lend nothing to each other, as Kueue's separate
cohorts do not. Workloads are queue-labelled Jobs of one pod asking for the workload's
request in GPUs, created through the real API server on the scenario's schedule
(``creation_schedule``: Kueue's generator's offsets, sent by a pool of threads), with
the workload class's priority as a Tidegate priority class. Admission runs as in
production: a Celery worker and beat on Redis and PostgreSQL and the queue watch
(``manage.py watch_queues``), nothing called in this process. Execution is mimicked
as Kueue's runner does: a workload ends its runtime after it
started (this driver deletes the Job then); a preempted run ends there, and the runtime
starts again at the next admission.

Figures as Kueue's checker defines them, with these differences, each against
Tidegate: a workload counts as admitted when its Job was told to run (``started_at``,
unsuspended), not when it was decided; time to admission runs from just before its Job
was sent to its last admission; a queue class's usage is the GPU-seconds its runs held
over the run (first creation to last end) against its nominal quota; wall time is first
creation to last end (Kueue's is minimalkueue's whole life, start and exit included:
this difference favours Tidegate by a few seconds); CPU time is the worker's, beat's and
the queue watch's, their ended children included (PostgreSQL's and Redis' are not);
memory the largest sum of their proportional set sizes. Where the scenario's queues
preempt lower priority (``withinClusterQueue: LowerPriority``), Tidegate's priority
preemption within a team is on (``TIDEGATE_PRIORITY_PREEMPTION``). Kueue's scenario
counts quota only; Tidegate also places every pod on a node, so the GPUs are one node
that holds them all (``gpus_per_node`` smaller splits them, and fragments them).
"""

from __future__ import annotations

import math
import os
import shutil
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
from benchmarks._versus_figures import Observed, measured_figures
from benchmarks._versus_scenarios import (
    creation_schedule,
    queues_of,
    scenario_queues,
    workload_count,
)

# GPUs of one node; None: one node holds them all (Kueue's scenario counts quota only)
GPUS_PER_NODE: int | None = None
FLAVOUR = "h100-80gb"


@dataclass
class Submitted:
    namespace: str
    name: str
    team: str
    class_name: str
    runtime_s: float
    gpus: int
    queue_class: str
    created: float  # time.time() just before it was sent to the API server
    admitted: float | None = None  # its last run's start (Kueue counts the last admission)
    due: float | None = None  # when the current run ends (its start + runtime)
    run_start: float | None = None  # the current run's start, None while not running
    runs: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of each

    @property
    def held_s(self) -> float:
        """Seconds its runs held their GPUs."""
        return sum(end - start for start, end in self.runs)

    evictions: int = 0
    ended: float | None = None


@dataclass
class Run:
    jobs: dict[tuple[str, str], Submitted] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    generated: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    peak_pss_mb: float = 0.0


def preempts_lower_priority(config: dict[str, Any]) -> bool:
    """Whether the scenario's ClusterQueues let higher priority preempt lower within the
    queue (``withinClusterQueue: LowerPriority``, every queue set): Tidegate's
    ``TIDEGATE_PRIORITY_PREEMPTION`` then does the same within each team."""
    sets = [queue_set for _, _, queue_set in scenario_queues(config)]
    return bool(sets) and all(s.get("withinClusterQueue") == "LowerPriority" for s in sets)


def _node(name: str, gpus: int) -> dict[str, Any]:
    resources = {"cpu": "4096", "memory": "32Ti", "pods": "5000", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "type": "kwok",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": str(gpus),
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
    for cohort, queue, queue_set in scenario_queues(config):
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
        for _, _, queue_set in scenario_queues(config)
        for workloads in queue_set["workloadsSets"]
        for w in workloads["workloads"]
    }
    for name, value in classes.items():
        PriorityClass.objects.get_or_create(name=name, defaults={"value": value})


def _generate(admin: Any, config: dict[str, Any], run: Run, senders: int = 8) -> None:
    """Each workload created on its schedule (``creation_schedule``) by a pool of
    ``senders`` threads, as Kueue's generator creates each set on its own."""
    import queue as queues

    due: queues.Queue[tuple[str, str, str, dict[str, Any]] | None] = queues.Queue()

    def send() -> None:
        while (entry := due.get()) is not None:
            namespace, queue_class, name, workload = entry
            body = _job(namespace, name, workload["className"], int(workload["request"]))
            submitted = Submitted(
                namespace,
                name,
                namespace,
                workload["className"],
                workload["runtimeMs"] / 1000,
                int(workload["request"]),
                queue_class,
                time.time(),
            )
            try:
                _send(admin, "POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)
            except Exception as error:  # noqa: BLE001 - counted and reported, never lost
                with run.lock:
                    run.errors.append(f"{namespace}/{name}: {error}")
                continue
            with run.lock:
                run.jobs[(namespace, name)] = submitted

    threads = [threading.Thread(target=send, daemon=True) for _ in range(senders)]
    for thread in threads:
        thread.start()
    start = time.monotonic()
    for offset, namespace, queue_class, name, workload in creation_schedule(config):
        wait = start + offset - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        due.put((namespace, queue_class, name, workload))
    for _ in threads:
        due.put(None)
    for thread in threads:
        thread.join()
    run.generated.set()


def _execute(admin: Any, cluster: Any, run: Run, total: int, timeout_s: float) -> None:
    """Follow Tidegate's database: a workload runs from the moment its Job was told to run
    (``started_at``: unsuspended) and ends its runtime later (this driver deletes the
    Job), as Kueue's runner ends an admitted workload; a run preempted before then ends
    there, and a new admission starts the runtime again, as in Kueue's runner."""
    from scheduler_bridge.workloads.models import Workload

    # one connection for the whole run (a new one per look, 20 a second, cost the
    # machine PostgreSQL forks that the systems measured would otherwise have had)
    deadline = time.monotonic() + timeout_s
    running: set[tuple[str, str]] = set()  # what has a run open
    finished = 0
    while time.monotonic() < deadline:
        started = list(
            Workload.objects.filter(
                cluster=cluster, state=Workload.State.RUNNING, started_at__isnull=False
            ).values_list("namespace", "job_name", "started_at")
        )
        now = time.time()
        with run.lock:
            seen = set()
            for namespace, name, started_at in started:
                job = run.jobs.get((namespace, name))
                if job is None or job.ended is not None or started_at is None:
                    continue
                seen.add((namespace, name))
                start = started_at.timestamp()
                if job.run_start is not None and start > job.run_start:
                    # preempted and started again between two looks: the old run
                    # counted to the new one's start
                    job.runs.append((job.run_start, start))
                    job.evictions += 1
                    job.run_start = None
                if job.run_start is None:
                    job.run_start = job.admitted = start
                    job.due = start + job.runtime_s
                    running.add((namespace, name))
            for key in running - seen:
                job = run.jobs[key]
                if job.run_start is not None:
                    job.runs.append((job.run_start, now))  # preempted before its end
                    job.evictions += 1
                job.run_start = job.due = None
            running &= seen
            due = [key for key in running if (run.jobs[key].due or now + 1) <= now]
        for namespace, name in due:
            _send(
                admin,
                "DELETE",
                f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                {"propagationPolicy": "Background"},
            )
            ended = time.time()
            with run.lock:
                job = run.jobs[(namespace, name)]
                if job.run_start is not None:
                    job.runs.append((job.run_start, ended))
                job.ended, job.run_start, job.due = ended, None, None
                running.discard((namespace, name))
                finished += 1
        with run.lock:
            failed = len(run.errors)
        if run.generated.is_set() and finished + failed >= total:
            return
        time.sleep(0.05)
    raise RuntimeError(f"not every workload ended within {timeout_s:.0f} s")


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        one = todo.pop()
        found.append(one)
        for task in Path(f"/proc/{one}/task").glob("*/children"):
            try:
                todo += [int(p) for p in task.read_text().split()]
            except (FileNotFoundError, ValueError):
                continue
    return found


def _sample_memory(pids: list[int], run: Run, stop: threading.Event) -> None:
    """The largest sum of proportional set sizes (shared pages split between the
    processes sharing them, so prefork children are not counted twice) seen."""
    while not stop.wait(1.0):
        total = 0.0
        for pid in pids:
            for one in _descendants(pid):
                try:
                    for line in Path(f"/proc/{one}/smaps_rollup").read_text().splitlines():
                        if line.startswith("Pss:"):
                            total += int(line.split()[1]) / 1024
                except (FileNotFoundError, ProcessLookupError, ValueError):
                    continue
        run.peak_pss_mb = max(run.peak_pss_mb, total)


def _cpu_seconds(pid: int) -> float:
    """CPU time of a process and every descendant, those already reaped included."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = 0.0
    for one in _descendants(pid):
        try:
            stat = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
            # utime, stime, and cutime, cstime of its children that ended
            cpu += sum(int(stat[k]) for k in (11, 12, 13, 14)) / ticks
        except (FileNotFoundError, IndexError, ValueError):
            continue
    return cpu


def _start_tidegate(
    workdir: Path,
    database: str,
    queue_tick_s: float | None,
    watch: bool,
    priority_preemption: bool,
) -> list[subprocess.Popen[bytes]]:
    """Celery's worker and beat, and the queue watch (``manage.py watch_queues``) unless
    ``watch`` is off (admission then follows the queue tick alone)."""
    tick = {"TIDEGATE_QUEUE_TICK_S": str(queue_tick_s)} if queue_tick_s else {}
    # VERSUS_KUEUE_LOG_LEVEL=INFO keeps every task's run time in worker.log for profiling
    level = os.environ.get("VERSUS_KUEUE_LOG_LEVEL", "WARNING")
    env = (
        os.environ
        | tick
        | {
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{database}",
            # connections kept between tasks, as production keeps them (CONN_MAX_AGE)
            "CONN_MAX_AGE": "60",
            # pods, nodes and quotas read from watched caches, as production does
            "TIDEGATE_WATCH_CACHE": "true",
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/14",
            "CELERY_RESULT_BACKEND": "redis://127.0.0.1:6379/14",
            "CELERY_TASK_DEFAULT_QUEUE": "versus-kueue",
            # the scenario's queues preempt lower priority (withinClusterQueue: LowerPriority)
            "TIDEGATE_PRIORITY_PREEMPTION": str(priority_preemption).lower(),
            "LOG_LEVEL": level,
        }
    )
    import redis

    redis.Redis.from_url("redis://127.0.0.1:6379/14").flushdb()
    celery = [sys.executable, "-m", "celery", "-A", "config"]
    commands = {
        "worker": [
            *celery,
            "worker",
            "--concurrency",
            "2",
            "--queues",
            "versus-kueue",
            "--without-gossip",
            "--loglevel",
            level,
        ],
        "beat": [
            *celery,
            "beat",
            "--schedule",
            str(workdir / "beat-schedule"),
            "--loglevel",
            level,
        ],
    }
    if watch:
        commands["watch"] = [sys.executable, "manage.py", "watch_queues"]
    processes = []
    for name, command in commands.items():
        log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        processes.append(
            subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        )
    return processes


def run_tidegate(
    scenario: dict[str, Any],
    timeout_s: int,
    queue_tick_s: float | None = None,
    watch: bool = True,
    pods: bool = False,
    detailed: bool = False,
) -> dict[str, Any]:
    """Tidegate's figures on ``scenario`` (Kueue's generator config, already scaled);
    ``queue_tick_s`` sets the beat's queue tick (TIDEGATE_QUEUE_TICK_S), else its default;
    ``watch`` runs the queue watch beside them, as production does; ``pods`` runs the
    whole control plane (the Job controller creates each started Job's pod, the
    scheduler binds it, KWOK runs it), where by default only the API server and etcd
    run, as in Kueue's test; ``detailed`` adds the figures of
    benchmarks/_versus_figures.py (waits, preemptions, share fairness, utilisation)."""
    import tempfile

    from toolchain.control_plane import ControlPlane

    with tempfile.TemporaryDirectory(prefix="versus-tidegate-") as tmp:
        workdir = Path(tmp)
        progress("starting the real control plane ...")
        plane = ControlPlane.prepare(workdir / "plane")
        plane.start(pods=pods)
        try:
            with bench_database("versus_kueue"):
                figures = _run(plane, scenario, workdir, timeout_s, queue_tick_s, watch, detailed)
                return {"pods": int(pods)} | figures
        finally:
            plane.stop()
            kept = os.environ.get("VERSUS_KUEUE_LOGS")  # a folder to keep the logs in
            if kept:
                Path(kept).mkdir(parents=True, exist_ok=True)
                for log in workdir.glob("*.log"):
                    shutil.copy(log, Path(kept) / log.name)


def _run(
    plane: Any,
    scenario: dict[str, Any],
    workdir: Path,
    timeout_s: int,
    queue_tick_s: float | None,
    watch: bool,
    detailed: bool,
) -> dict[str, Any]:
    from django.db import connection

    from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
    from scheduler_bridge.inventory.models import Cluster
    from scheduler_bridge.inventory.services import inventory_sync
    from scheduler_bridge.quotas.sync import quota_sync
    from scheduler_bridge.workloads.selectors import admitted_jobs, queue_holdings

    admin = plane.admin
    queues = scenario_queues(scenario)
    nominal = sum(int(queue_set["nominalQuota"]) for _, _, queue_set in queues)
    per_node = GPUS_PER_NODE or nominal
    for n in range(math.ceil(nominal / per_node)):
        _send(admin, "POST", "/api/v1/nodes", _node(f"gpu-{n:03d}", per_node))
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
    inventory_sync(cluster, gateway, admitted=admitted_jobs)
    _set_up_tenants(scenario, cluster)
    quota_sync(cluster, gateway, queue=queue_holdings(cluster))
    gateway.close()
    total = workload_count(scenario)
    processes = _start_tidegate(
        workdir,
        connection.settings_dict["NAME"],
        queue_tick_s,
        watch,
        preempts_lower_priority(scenario),
    )
    run = Run()
    stop = threading.Event()
    sampler = threading.Thread(
        target=_sample_memory, args=([p.pid for p in processes], run, stop), daemon=True
    )
    sampler.start()
    try:
        time.sleep(5)  # the worker and beat up
        progress(f"running the scenario on Tidegate ({total:,} workloads) ...")
        started = time.time()
        generator = threading.Thread(target=_generate, args=(admin, scenario, run), daemon=True)
        generator.start()
        _execute(admin, cluster, run, total, timeout_s)
        ended = max(job.ended or 0.0 for job in run.jobs.values())
        cpu_s = sum(_cpu_seconds(p.pid) for p in processes)
    finally:
        stop.set()
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
    nominal_by_class: dict[str, int] = defaultdict(int)
    for _, _, queue_set in queues:
        nominal_by_class[queue_set["className"]] += int(queue_set["nominalQuota"])
    held_by_class: dict[str, float] = defaultdict(float)
    for job in run.jobs.values():
        held_by_class[job.queue_class] += job.held_s * job.gpus
    usages = [
        held_by_class[name] / (window * nominal)
        for name, nominal in nominal_by_class.items()
        if window > 0 and nominal
    ]
    waits: dict[str, list[float]] = defaultdict(list)
    for job in run.jobs.values():
        if job.admitted is not None:
            waits[job.class_name].append(job.admitted - job.created)
    from django.conf import settings

    schedule = settings.CELERY_BEAT_SCHEDULE["queue-tick"]["schedule"]
    default_tick = schedule.total_seconds() if isinstance(schedule, timedelta) else 0.0
    figures: dict[str, Any] = {
        "queue_tick_s": queue_tick_s or default_tick,
        "queue_watch": int(watch),
        "priority_preemption": int(preempts_lower_priority(scenario)),
        "workloads": len(run.jobs),
        "creation_errors": len(run.errors),
        "evictions": sum(job.evictions for job in run.jobs.values()),
        "wall_s": round(window, 3),
        "min_usage": round(min(usages), 4) if usages else 0.0,
        "cpu_s": round(cpu_s, 3),
        "peak_rss_mb": round(run.peak_pss_mb, 1),
    }
    for name, values in sorted(waits.items()):
        figures[f"mean_admission_s_{name}"] = round(sum(values) / len(values), 3)
    if detailed:
        figures |= measured_figures(observed(run.jobs.values()), queues_of(scenario))
    return figures


def observed(run_jobs: Any) -> list[Observed]:
    """Each workload of a run as benchmarks/_versus_figures.py measures it."""
    return [
        Observed(job.namespace, job.class_name, job.gpus, job.created, list(job.runs))
        for job in run_jobs
    ]
