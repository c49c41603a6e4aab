"""Gauges read when Prometheus scrapes: the registry every app adds its own to.

Counters and histograms live in the process that counts (prometheus_client's own
objects, in each app's ``metrics`` module). A gauge whose truth is in the database (the
pending queue, how far usage is collected, the outbox) is instead read at scrape time by
a callable its app registers here, so it is right whichever process answers the scrape
and needs no app to import another: this module is in the lowest layer, and config
serves whatever is registered (config.metrics).

``read`` returns a number, or a mapping from label values (a tuple in ``labels`` order)
to numbers. A read that fails (the database down) leaves its gauge out of that scrape
and is logged; the other series are still served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

logger = logging.getLogger(__name__)

Reading = float | Mapping[tuple[str, ...], float]


@dataclass(frozen=True)
class ReadGauge:
    name: str
    help: str
    read: Callable[[], Reading]
    labels: tuple[str, ...] = ()

    def family(self) -> GaugeMetricFamily:
        value = self.read()
        if not isinstance(value, Mapping):
            return GaugeMetricFamily(self.name, self.help, value=float(value))
        family = GaugeMetricFamily(self.name, self.help, labels=list(self.labels))
        for label_values, number in sorted(value.items()):
            family.add_metric(list(label_values), float(number))
        return family


class ReadGauges:
    """A prometheus_client collector of every registered gauge."""

    def __init__(self) -> None:
        self._gauges: dict[str, ReadGauge] = {}

    def register(self, gauge: ReadGauge) -> None:
        # registering one name twice keeps the newer reader (module reloads, tests)
        self._gauges[gauge.name] = gauge

    def names(self) -> list[str]:
        return sorted(self._gauges)

    def describe(self) -> list[Metric]:
        # named without reading, so registering the collector touches no database
        return [GaugeMetricFamily(g.name, g.help, labels=list(g.labels)) for g in self._sorted()]

    def collect(self) -> Iterator[Metric]:
        for gauge in self._sorted():
            try:
                yield gauge.family()
            except Exception:  # one failing reader must not hide every other series
                logger.warning("metrics: reading %s failed", gauge.name, exc_info=True)

    def _sorted(self) -> list[ReadGauge]:
        return [self._gauges[name] for name in sorted(self._gauges)]


read_gauges = ReadGauges()


def register_gauge(
    name: str, help: str, read: Callable[[], Reading], *, labels: Sequence[str] = ()
) -> None:
    """Serve gauge ``name`` on /metrics, its value(s) read by ``read()`` at each scrape.

    ``labels`` names the label of each position of the tuples ``read`` returns as keys
    (none when it returns a single number)."""
    read_gauges.register(ReadGauge(name, help, read, tuple(labels)))
