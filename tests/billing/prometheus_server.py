"""A real Prometheus for tests: DCGM-shaped series written as OpenMetrics, turned into TSDB
blocks by `promtool tsdb create-blocks-from openmetrics`, served by `/usr/bin/prometheus`
on a free port of 127.0.0.1.

OpenMetrics wants each metric family in one block, timestamps in seconds and a final
`# EOF`. The blocks hold past data only; retention is set very long so Prometheus keeps
them, and tests query at the series' own timestamps.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"


@dataclass
class Series:
    metric: str
    labels: dict[str, str]
    samples: list[tuple[float, float]] = field(default_factory=list)

    def every(self, start: datetime, end: datetime, value: float, step_s: int = 30) -> Series:
        """Samples of ``value`` every ``step_s`` from ``start`` + step/2 while < ``end``."""
        moment = start.timestamp() + step_s / 2
        while moment < end.timestamp():
            self.samples.append((moment, value))
            moment += step_s
        return self


def _labels(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def openmetrics(series: list[Series]) -> str:
    families: dict[str, list[Series]] = {}
    for item in series:
        families.setdefault(item.metric, []).append(item)
    lines = []
    for metric, items in families.items():
        lines.append(f"# TYPE {metric} gauge")
        for item in items:
            labels = _labels(item.labels)
            for timestamp, value in sorted(item.samples):
                lines.append(f"{metric}{labels} {value} {timestamp:.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def available() -> bool:
    return shutil.which(PROMETHEUS) is not None and shutil.which(PROMTOOL) is not None


@contextmanager
def prometheus_serving(
    series: list[Series], workdir: Path, *, max_samples: int | None = None
) -> Iterator[str]:
    """Start Prometheus over blocks made from ``series``; yields its base URL.
    ``max_samples``: Prometheus's ``--query.max-samples`` (a query loading more
    answers 422)."""
    data = workdir / "data"
    data.mkdir(parents=True)
    source = workdir / "series.om"
    source.write_text(openmetrics(series))
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
            *([f"--query.max-samples={max_samples}"] if max_samples else []),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:  # noqa: S310
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "Prometheus did not start: " + (workdir / "prometheus.log").read_text()[-2000:]
                )
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
