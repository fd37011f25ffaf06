"""The queue's own numbers for /metrics: submits, scheduling pass time, submit-to-start time.

Plain counters and fixed-bucket histograms (no metrics library here): the API renders them in
Prometheus' format.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass

PASS_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
START_BUCKETS_S = (0.01, 0.05, 0.1, 0.5, 1, 5, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)


@dataclass(frozen=True, slots=True)
class HistogramView:
    """Cumulative bucket counts (`le` upper bounds, +Inf last), sum and count."""

    buckets: tuple[tuple[float, int], ...]
    sum: float
    count: int


class Histogram:
    """Observations counted in fixed buckets; safe from any thread."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = tuple(bounds)
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self._bounds, value)] += 1
            self._sum += value

    def view(self) -> HistogramView:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, running = [], 0
        for bound, count in zip((*self._bounds, float("inf")), counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return HistogramView(tuple(cumulative), total, running)


class QueueMetrics:
    """Counters the server keeps for Prometheus."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._submits = 0
        self.pass_s = Histogram(PASS_BUCKETS_S)
        self.submit_to_start_s = Histogram(START_BUCKETS_S)

    def submitted(self) -> None:
        with self._lock:
            self._submits += 1

    @property
    def submits(self) -> int:
        return self._submits
