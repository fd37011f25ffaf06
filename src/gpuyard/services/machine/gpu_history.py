"""Per-GPU telemetry history, so a job's GPU charts exist while it runs and after it ended.

Two tiers:
- a ring in memory of every sample (at most one a second) for `ring_s` (24 h), fed by the
  telemetry thread (`GpuMonitor.history`): one shared column of sample times (float64) and,
  per GPU, five compact `array` columns (utilisation int8, memory MiB int32, temperature
  int16, power mW int32, holders: the id of the set of jobs on the GPU, int32): 15 bytes per
  GPU per sample and 8 shared, 14 MiB RSS for 8 GPUs x 86,400 samples, ~15 us to record a
  sample of 8 GPUs under a lock that readers hold only to copy (`bench/gpu_history.py`);
- 60 s buckets (means and peaks, the jobs that held the GPU) written to the store once a
  minute by this module's own thread (never by the sampler: a database write may wait), and
  pruned after `retention_s` (90 days): a past job's charts after the ring forgot its samples,
  and after a restart.

A query (`gpu_series`, `job_series`) reads the ring where it covers the window and the store
before that, and returns at most `max_points` points, each the mean of a bucket of time.

Example: job 7 ran on GPU 0 from 10:00 to 10:30, three days ago. The ring starts yesterday,
so its chart comes from the store's 30 one-minute buckets of GPU 0 between 10:00 and 10:30.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuyard.domain.job import Job
from gpuyard.services.machine.telemetry_ring import ColumnSums, TelemetryRing
from gpuyard.services.ports import GpuReading
from gpuyard.services.stores import GpuBucket, GpuHistoryStore

log = logging.getLogger("gpuyard.gpu_history")

RING_S = 24 * 3600.0
MIN_INTERVAL_S = 1.0  # the ring's finest resolution
BUCKET_S = 60  # the stored resolution
RETENTION_S = 90 * 86400.0
PRUNE_EVERY_S = 3600.0


@dataclass(frozen=True, slots=True)
class Point:
    """One point of a chart: the means over `[t, t + resolution)` (None: n/a throughout)."""

    t: float
    util_pct: float | None
    mem_used_mib: float | None
    temp_c: float | None
    power_w: float | None


@dataclass(frozen=True, slots=True)
class GpuSeries:
    """One GPU's history over a window, oldest first."""

    index: int
    uuid: str
    resolution_s: float
    points: tuple[Point, ...]


class GpuHistory:
    """The ring, the minute buckets' writer and the queries. `record` is the telemetry
    thread's hook; `start`/`stop` run the writer (a server's Background)."""

    def __init__(
        self,
        gpus: Mapping[int, str],
        store: GpuHistoryStore,
        *,
        ring_s: float = RING_S,
        period_s: float = 1.0,
        retention_s: float = RETENTION_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._indices = sorted(gpus)
        self._position = {index: i for i, index in enumerate(self._indices)}
        self.uuids = {index: gpus[index] for index in self._indices}
        # At most one sample a second is kept, whatever the sampling rate (a faster sampler,
        # GPUYARD_TELEMETRY_S below 1, would otherwise multiply the ring's memory).
        self.interval_s = max(period_s, MIN_INTERVAL_S)
        self._last_at: float | None = None
        self.ring = TelemetryRing(
            [gpus[i] for i in self._indices], math.ceil(ring_s / self.interval_s)
        )
        self._store = store
        self.retention_s = retention_s
        self._clock = clock
        self._flushed_to = float(math.floor(clock() / BUCKET_S) * BUCKET_S)
        self._pruned_at = 0.0
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add_gpus(self, gpus: Mapping[int, str]) -> None:
        """GPUs of a machine that joined (index -> UUID): kept from the next sample on. Called
        before the sampler reads them (`MachineJoins`), so a sample never lacks a column."""
        for index, uuid in sorted(gpus.items()):
            if index in self._position:
                continue
            self._position[index] = self.ring.add_gpu(uuid)
            self.uuids[index] = uuid
            self._indices = [*self._indices, index]

    # -- the telemetry thread's hook ------------------------------------------------------

    def record(
        self, taken_at: float, readings: Mapping[int, GpuReading], running: Iterable[Job]
    ) -> None:
        """One sample of every GPU; `running`: the jobs holding GPUs (their holders). Skipped
        when the last kept one is less than `interval_s` old (a step back of the clock: kept)."""
        last = self._last_at
        if last is not None and last <= taken_at < last + 0.9 * self.interval_s:
            return
        self._last_at = taken_at
        holders: dict[int, list[int]] = {}
        for job in running:
            for index in job.gpus:
                holders.setdefault(index, []).append(job.id)
        self.ring.append(
            taken_at,
            [readings.get(index) for index in self._indices],
            [tuple(sorted(holders.get(index, ()))) for index in self._indices],
        )

    # -- the writer -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpuyard-gpu-history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        try:
            self.flush(final=True)
        except Exception as exc:  # the server closes all the same; lost: this minute's samples
            log.warning("GPU history: the last minute's buckets were not written: %s", exc)

    def _run(self) -> None:
        while not self._stop.wait(BUCKET_S - self._clock() % BUCKET_S + 0.5):
            try:
                self.flush()
                self.prune()
            except Exception:  # a failed write is retried with the next minute's
                log.exception("GPU history: writing the minute's buckets failed")

    def flush(self, *, final: bool = False) -> int:
        """Write the ring's whole minutes not written yet (`final`: the current minute's
        samples too) to the store, one bucket per GPU per minute, in one write; how many."""
        with self._flush_lock:
            now = self._clock()
            until = now if final else float(math.floor(now / BUCKET_S) * BUCKET_S)
            start: float = self._flushed_to
            oldest, newest = self.ring.oldest_at, self.ring.newest_at
            if newest is not None and newest < start:  # the clock stepped back: ring emptied
                start = 0.0
            if oldest is not None and oldest > start:
                start = float(math.floor(oldest / BUCKET_S) * BUCKET_S)
            if until <= start:
                return 0
            buckets = [
                b for index in self._indices for b in self._minute_buckets(index, start, until)
            ]
            self._store.save_gpu_buckets(buckets)
            if not final:
                self._flushed_to = until
            return len(buckets)

    def prune(self) -> int:
        """Drop stored buckets older than the retention (at most once an hour)."""
        now = self._clock()
        if now - self._pruned_at < PRUNE_EVERY_S:
            return 0
        self._pruned_at = now
        return self._store.prune_gpu_buckets(now - self.retention_s)

    def _minute_buckets(self, index: int, since: float, until: float) -> list[GpuBucket]:
        window = self.ring.window(self._position[index], since, until)
        found = []
        edges = _edges(since, until, BUCKET_S)
        for k, (lo, hi) in enumerate(_cuts(window.times, edges)):
            if lo == hi:
                continue
            acc = ColumnSums.empty()
            window.add(acc, lo, hi)
            found.append(
                GpuBucket(
                    self.uuids[index], edges[k], BUCKET_S, acc.mean(0), acc.peaks[0], acc.mean(1),
                    acc.peaks[1], acc.mean(2), acc.mean(3), tuple(sorted(acc.holders)),
                )
            )  # fmt: skip
        return found

    # -- queries --------------------------------------------------------------------------

    def gpu_series(self, index: int, since: float, until: float, max_points: int) -> GpuSeries:
        """GPU `index` over `[since, until)` in at most `max_points` bucket means: the ring's
        samples where it covers the window, the store's buckets before that."""
        max_points = max(1, max_points)
        until = max(until, since)
        width = max((until - since) / max_points, 1e-9)
        oldest = self.ring.oldest_at
        ring_from = until if oldest is None else max(since, oldest)
        stored = (
            self._store.load_gpu_buckets(self.uuids[index], since - BUCKET_S, ring_from)
            if since < ring_from
            else []
        )
        stored = [b for b in stored if b.at + b.resolution_s > since]
        window = self.ring.window(self._position[index], ring_from, until)
        resolution = width
        if stored:
            resolution = max(width, max(b.resolution_s for b in stored))
        elif len(window.times) > 1:
            resolution = max(width, (window.times[-1] - window.times[0]) / (len(window.times) - 1))
        count = max(1, math.ceil((until - since) / resolution - 1e-9))
        edges = _edges(since, since + count * resolution, resolution)
        accs = [ColumnSums.empty() for _ in range(count)]
        for b in stored:
            k = min(count - 1, max(0, int((b.at - since) // resolution)))
            accs[k].add_bucket(b)
        for k, (lo, hi) in enumerate(_cuts(window.times, edges)):
            if lo < hi:
                window.add(accs[k], lo, hi)
        points = tuple(
            Point(edges[k], acc.mean(0), acc.mean(1), acc.mean(2), acc.mean(3))
            for k, acc in enumerate(accs)
            if acc.seen
        )
        return GpuSeries(index, self.uuids[index], resolution, points)

    def job_series(self, job: Job, max_points: int, now: float | None = None) -> list[GpuSeries]:
        """The job's GPUs over its runs (earlier attempts' too): one series per GPU it held,
        over the span from its first run's start to its last run's end (or now)."""
        now = self._clock() if now is None else now
        runs: list[tuple[float, float, tuple[int, ...]]] = [
            (a.started_at, a.ended_at, a.gpus) for a in job.attempts
        ]
        if job.started_at is not None:
            runs.append(
                (job.started_at, job.ended_at if job.ended_at is not None else now, job.gpus)
            )
        series = []
        for index in sorted({i for _, _, gpus in runs for i in gpus} & set(self._indices)):
            mine = [(s, e) for s, e, gpus in runs if index in gpus]
            since, until = min(s for s, _ in mine), max(e for _, e in mine)
            full = self.gpu_series(index, since, max(until, since + 1.0), max_points)
            kept = tuple(
                p for p in full.points if any(s - full.resolution_s < p.t < e for s, e in mine)
            )
            series.append(GpuSeries(index, full.uuid, full.resolution_s, kept))
        return series

    def knows(self, index: int) -> bool:
        return index in self._position


def _edges(since: float, until: float, width: float) -> list[float]:
    count = max(1, math.ceil((until - since) / width - 1e-9))
    return [since + k * width for k in range(count + 1)]


def _cuts(times: Sequence[float], edges: Sequence[float]) -> list[tuple[int, int]]:
    """For each pair of consecutive edges, the index range of `times` (sorted) inside."""
    marks = [bisect.bisect_left(times, edge) for edge in edges]
    return list(itertools.pairwise(marks))
