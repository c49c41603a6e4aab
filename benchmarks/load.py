"""Load test of the production shape: 50 API clients for 60 s against gunicorn.

Builds the demo organisation (``tenants.demo.seed_demo``: a simulated cluster, every
role's login, a month of billing) in a throw-away PostgreSQL database, then starts, on
loopback only: gunicorn with ``config.settings.production`` (the chart's worker class and
count: ``GUNICORN_*`` below) and one Celery worker (Redis database 14, a queue of its own).
Locust (headless, ``benchmarks/_load_users.py``) runs 50 users for 60 s: eight in nine
requests list something (workloads, quotas, tenants, flavours, clusters, priority classes,
statements, periods, budgets, me), one in nine submits a one-GPU workload and cancels it.

Prints one line: ``requests_per_s``, ``p50_ms``, ``p95_ms``, ``p99_ms`` (every request),
``failures`` (non-2xx or refused), ``cycles_run`` (admission cycles the worker ran
during the run) and ``cycles_allowed`` (one per cycle interval plus one for the burst). ``LOAD_USERS``, ``LOAD_SECONDS`` change the size; ``LOAD_PROFILE=1``
also writes the web workers' CPU profile (cProfile, top functions) to stderr.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._support import ROOT, bench_database, emit, progress  # noqa: E402

USERS = int(os.environ.get("LOAD_USERS", "50"))
SECONDS = int(os.environ.get("LOAD_SECONDS", "60"))
BROKER = "redis://127.0.0.1:6379/14"
CYCLE_INTERVAL_S = float(os.environ.get("TIDEGATE_ADMISSION_CYCLE_INTERVAL_S", "5"))
# the chart's defaults (platform/helm/tidegate/values.yaml, web.gunicorn)
GUNICORN = {
    "worker-class": os.environ.get("GUNICORN_WORKER_CLASS", "sync"),
    "workers": os.environ.get("GUNICORN_WORKERS", "4"),
    "threads": os.environ.get("GUNICORN_THREADS", "1"),
}
BIN = Path(sys.executable).parent


def main() -> None:
    with bench_database("load"), tempfile.TemporaryDirectory() as folder:
        from django.db import connection

        tmp = Path(folder)
        plan = _seed()
        (tmp / "plan.json").write_text(json.dumps(plan))
        port = _free_port()
        env = os.environ | {
            "DJANGO_SETTINGS_MODULE": "config.settings.production",
            "SECRET_KEY": uuid.uuid4().hex,
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "CELERY_BROKER_URL": BROKER,
            "CELERY_TASK_DEFAULT_QUEUE": f"bench-load-{uuid.uuid4().hex[:8]}",
            "LOG_LEVEL": "WARNING",
            # the rate limits stay on (their cost is measured) but far above the load
            "TIDEGATE_THROTTLE_USER": "1000000/min",
            "LOAD_PLAN": str(tmp / "plan.json"),
            # compiled once, as in the image (platform/Dockerfile), not by every process
            "PYTHONPYCACHEPREFIX": str(tmp / "pycache"),
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        with _served(env, port, tmp) as worker_log:
            progress(f"locust: {USERS} users for {SECONDS} s against 127.0.0.1:{port}")
            before = _cycles(worker_log)
            stats = _locust(env, port, tmp)
            time.sleep(2)  # the cycles queued by the last cancels
            cycles = _cycles(worker_log) - before
    emit(
        bench="load",
        scenario="load",
        users=USERS,
        seconds=SECONDS,
        requests_per_s=round(float(stats["Requests/s"]), 1),
        p50_ms=float(stats["50%"]),
        p95_ms=float(stats["95%"]),
        p99_ms=float(stats["99%"]),
        failures=int(stats["Failure Count"]),
        requests=int(stats["Request Count"]),
        cycles_run=cycles,
        # the target: one cycle per interval, plus one for the burst (the whole run)
        cycles_allowed=math.ceil(SECONDS / CYCLE_INTERVAL_S) + 1,
        gunicorn_workers=int(GUNICORN["workers"]),
        gunicorn_threads=int(GUNICORN["threads"]),
    )


def _seed() -> dict[str, Any]:
    """The demo organisation, and an API token for each demo login with a tenant."""
    from scheduler_bridge.inventory.models import Cluster, Flavour
    from tenants.demo import seed_demo
    from tenants.models import Membership, Role

    progress("seeding the demo organisation")
    logins = seed_demo().logins
    cluster = Cluster.objects.order_by("pk").first()
    assert cluster is not None
    flavour = Flavour.objects.filter(cluster=cluster, mig_profile="").order_by("pk").first()
    assert flavour is not None
    clients = []
    for login in logins:
        # those who may submit work: leads and members, on their team
        membership = (
            Membership.objects.filter(
                user__username=login.username, role__in=[Role.LEAD, Role.MEMBER]
            )
            .select_related("tenant", "user")
            .order_by("-tenant__depth")
            .first()
        )
        if membership is not None:
            scheme, token = _token(membership.user)
            clients.append({"token": token, "tenant": membership.tenant.slug})
    return {"cluster": cluster.name, "flavour": flavour.name, "clients": clients, "scheme": scheme}


def _token(user: Any) -> tuple[str, str]:
    """An API token for ``user``: (Authorization scheme, token)."""
    from tenants.tokens import token_create

    return "Token", token_create(user=user, name="load test")[1]


@contextmanager
def _served(env: dict[str, str], port: int, tmp: Path) -> Iterator[Path]:
    """gunicorn and a Celery worker, until the block ends; yields the worker's log."""
    web_log, worker_log = tmp / "web.log", tmp / "worker.log"
    web_env = env | ({"TIDEGATE_PROFILE_DIR": str(tmp)} if os.environ.get("LOAD_PROFILE") else {})
    command = [str(BIN / "gunicorn"), "config.wsgi", "--bind", f"127.0.0.1:{port}"]
    for option, value in GUNICORN.items():
        command += [f"--{option}", value]
    if os.environ.get("LOAD_PROFILE"):
        command += ["--config", str(ROOT / "benchmarks" / "_load_profile.py")]
    processes = [
        subprocess.Popen(
            command, cwd=ROOT, env=web_env, stdout=web_log.open("wb"), stderr=subprocess.STDOUT
        ),
        subprocess.Popen(
            [
                str(BIN / "celery"),
                "-A",
                "config",
                "worker",
                "--pool",
                "solo",
                "--loglevel",
                "INFO",
                "--queues",
                env["CELERY_TASK_DEFAULT_QUEUE"],
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=ROOT,
            env=env | {"LOG_LEVEL": "INFO"},
            stdout=worker_log.open("wb"),
            stderr=subprocess.STDOUT,
        ),
    ]
    try:
        _wait_for(lambda: _answers(port), "gunicorn", web_log)
        _wait_for(lambda: "ready." in worker_log.read_text(errors="replace"), "celery", worker_log)
        yield worker_log
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        if os.environ.get("LOAD_PROFILE"):
            for found in sorted(tmp.glob("profile-*.txt")):
                progress(found.read_text())


def _locust(env: dict[str, str], port: int, tmp: Path) -> dict[str, str]:
    """Run locust headless; the "Aggregated" row of its statistics."""
    subprocess.run(
        [
            str(BIN / "locust"),
            "-f",
            str(ROOT / "benchmarks" / "_load_users.py"),
            "--headless",
            "--users",
            str(USERS),
            "--spawn-rate",
            str(USERS),
            "--run-time",
            f"{SECONDS}s",
            "--host",
            f"http://127.0.0.1:{port}",
            "--csv",
            str(tmp / "locust"),
            "--only-summary",
            "--loglevel",
            "WARNING",
            "--stop-timeout",
            "10",
        ],
        cwd=ROOT,
        env=env,
        stdout=sys.stderr,
        check=False,
    )
    with open(tmp / "locust_stats.csv", newline="") as file:
        return next(row for row in csv.DictReader(file) if row["Name"] == "Aggregated")


def _cycles(worker_log: Path) -> int:
    """Admission cycles the worker finished (its log says so for every task)."""
    text = worker_log.read_text(errors="replace")
    return len(re.findall(r"scheduler_bridge\.tasks\.admission_cycle\[[^\]]+\] succeeded", text))


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return b" 200 " in conn.recv(64)
    except OSError:
        return False


def _wait_for(check: Any, what: str, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not start within 120 s:\n{log.read_text(errors='replace')}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


if __name__ == "__main__":
    main()
