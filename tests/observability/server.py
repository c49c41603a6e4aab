"""The production web server (gunicorn) in a process of its own, for tests that point it
at a database or broker that does not answer (a closed port: nothing shared is stopped)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def gunicorn(tmp_path: Path, **env: str) -> Iterator[str]:
    """``gunicorn config.wsgi`` with test settings and ``env`` on top; yields its URL."""
    port = closed_port()
    log_path = tmp_path / f"gunicorn-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "1",
                "--timeout",
                "60",
                "--no-control-socket",  # one per user by default: tests run side by side
            ],
            cwd=ROOT,
            env=os.environ
            | {"DJANGO_SETTINGS_MODULE": "config.settings.test", "LOG_LEVEL": "INFO"}
            | env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_until_live(url, process, log_path)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def _wait_until_live(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited early:\n{log_path.read_text()}")
        try:
            if requests.get(f"{url}/healthz", timeout=10).status_code == 200:
                return
        except requests.RequestException:
            pass  # not listening yet, or still loading Django
        time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer within 60 s:\n{log_path.read_text()}")
