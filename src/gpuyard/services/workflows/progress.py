"""Jobs' progress as the server sees it: read from what running jobs write, kept in memory,
persisted as bounded timelines.

A thread of its own ticks about once a second (`period_s`). For each running job it reads the
new bytes of two files in the job's folder, from the offset it reached, never through a link
(`job_files.open_job_file`) and at most `READ_CAP` bytes of each per tick:
- `progress.jsonl` (GPUYARD_PROGRESS_FILE), the SDK's lines (`gpuyard.progress()`), in order;
- `output.log`, the job's output, for the stdout protocol and the bars and logs of
  `domain/progress_lines.py`. A log that grew by more than the cap since the last tick is
  skipped to its last `READ_CAP` bytes: the latest progress is what matters, never reading
  the whole log.
Each job keeps its latest step, total and metrics, the rate over its recent steps (the last
`RATE_WINDOW_S` seconds; a step going back, a new epoch's bar or a new run, starts it again)
and the ETA from that rate and the total, plus its timeline (`domain/progress_series.py`: at
most 2,000 points, older ones merged as the job goes on). Changed points are written to the
store every `flush_s` seconds in one batch for all jobs. A job the service meets first with
points already stored (the server restarted under it) goes on from them, reading its files
from their ends; a finished job's progress is read from the store when asked.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuyard.domain.job import Job
from gpuyard.domain.progress_lines import OutputScanner, Report, parse_sdk_line
from gpuyard.domain.progress_series import ProgressPoint, Timeline
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.jobs.files import open_job_file
from gpuyard.services.launch.plan import progress_file
from gpuyard.services.stores import ProgressStore
from gpuyard.services.ticker import Ticker

log = logging.getLogger("gpuyard.progress")

READ_CAP = 256 * 1024  # bytes of each file read per job per tick
RATE_WINDOW_S = 60.0
KEEP_FINISHED = 256  # ended jobs kept in memory (others are read back from the store)


@dataclass(frozen=True, slots=True)
class ProgressView:
    """A job's latest progress, as the API shows it."""

    job_id: int
    step: int | None = None
    total: int | None = None
    fraction: float | None = None
    rate_per_s: float | None = None
    eta_s: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    updated_at: float | None = None
    source: str | None = None


@dataclass
class _Tracked:
    timeline: Timeline
    step: int | None = None
    total: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    updated_at: float | None = None
    source: str | None = None
    recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=256))
    sdk_offset: int | None = 0  # None: from the file's end (points were stored before)
    log_offset: int | None = 0
    sdk_rest: bytes = b""  # an unterminated SDK line, completed by the next read
    scanner: OutputScanner = field(default_factory=OutputScanner)
    running: bool = False

    def view(self, job_id: int, now: float) -> ProgressView:
        fraction = rate = eta = None
        if self.step is not None and self.total:
            fraction = min(1.0, self.step / self.total)
        rate = self._rate()
        if rate and self.step is not None and self.total and self.step <= self.total:
            since = max(0.0, now - (self.updated_at or now))
            eta = max(0.0, (self.total - self.step) / rate - since)
        return ProgressView(
            job_id, self.step, self.total, fraction, rate, eta, dict(self.metrics),
            self.updated_at, self.source,
        )  # fmt: skip

    def _rate(self) -> float | None:
        if len(self.recent) < 2:
            return None
        t_last, s_last = self.recent[-1]
        first = next((p for p in self.recent if p[0] >= t_last - RATE_WINDOW_S), self.recent[0])
        dt, ds = t_last - first[0], s_last - first[1]
        return ds / dt if dt > 0 and ds >= 0 else None


class ProgressService:
    """Reads, keeps and persists running jobs' progress (a server Background thread)."""

    def __init__(
        self,
        book: JobBook,
        store: ProgressStore,
        log_path: Callable[[int], str],
        *,
        period_s: float = 1.0,
        flush_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        keep_finished: int = KEEP_FINISHED,
    ) -> None:
        self._book = book
        self._store = store
        self._log_path = log_path
        self._period_s = period_s
        self._flush_s = flush_s
        self._clock = clock
        self._keep_finished = keep_finished
        self._lock = threading.Lock()
        self._jobs: OrderedDict[int, _Tracked] = OrderedDict()  # least recently used first
        self._ticker = Ticker(
            "gpuyard-progress", self._tick_and_flush, lambda: self._period_s, log,
            "progress tick failed",
        )  # fmt: skip
        self._last_flush = time.monotonic()

    # -- the thread ------------------------------------------------------------------------
    def start(self) -> None:
        self._ticker.start()

    def stop(self) -> None:
        self._ticker.stop()
        self.flush()

    def _tick_and_flush(self) -> None:
        self.tick()
        if time.monotonic() - self._last_flush >= self._flush_s:
            self.flush()

    def tick(self) -> None:
        """Read what every running job wrote since the last tick (and, once, what a job that
        just ended wrote last)."""
        running = {job.id: job for job in self._book.running()}
        with self._lock:
            ended = [i for i, t in self._jobs.items() if t.running and i not in running]
        for job_id in [*running, *ended]:
            tracked = self._tracked(job_id)
            tracked.running = job_id in running
            self._read(job_id, tracked)
        self._evict()

    def flush(self) -> None:
        """Write every changed point, all jobs in one batch; a failed write is tried again
        whole at the next flush."""
        self._last_flush = time.monotonic()
        points: list[tuple[int, ProgressPoint]] = []
        replace: list[int] = []
        with self._lock:
            taken = []
            for job_id, tracked in self._jobs.items():
                changed, whole = tracked.timeline.take_changes()
                if changed or whole:
                    taken.append(tracked)
                    points.extend((job_id, p) for p in changed)
                    if whole:
                        replace.append(job_id)
        if not points and not replace:
            return
        try:
            self._store.save_progress(points, replace)
        except Exception as exc:
            log.warning("progress not saved (tried again later): %s", exc)
            with self._lock:
                for tracked in taken:
                    tracked.timeline.rewritten = True

    # -- what the API asks -----------------------------------------------------------------
    def progress(self, job: Job) -> ProgressView:
        """`job`'s latest progress (nothing reported: all null)."""
        tracked = self._tracked(job.id)
        with self._lock:
            return tracked.view(job.id, self._clock())

    def series(
        self, job: Job, names: Sequence[str] | None, max_points: int
    ) -> dict[str, list[tuple[float, float]]]:
        """`job`'s series ("step" and each metric, or those `names`), each at most
        `max_points` points."""
        tracked = self._tracked(job.id)
        with self._lock:
            return tracked.timeline.series(names, max_points)

    def points_after(
        self, job: Job, name: str, after: float | None
    ) -> list[tuple[float, int | None, float | None]]:
        """`job`'s timeline points later than `after` (None: all), oldest first, as (time,
        step, metric `name`'s value), None where the point has none: for a reader that follows
        a job (the sweeps' early stop) and reads only what is new. The last point may still
        take in reports (its bucket is open) until the next one begins."""
        tracked = self._tracked(job.id)
        with self._lock:
            points = tracked.timeline.points
            i = len(points)
            while i > 0 and (after is None or points[i - 1].at > after):
                i -= 1
            return [(p.at, p.step, p.metrics.get(name)) for p in points[i:]]

    def running_views(self) -> list[tuple[Job, ProgressView]]:
        """Every running job that reported progress, with it (for `/metrics`)."""
        now = self._clock()
        jobs = {job.id: job for job in self._book.running()}
        with self._lock:
            return [
                (jobs[i], t.view(i, now))
                for i, t in self._jobs.items()
                if i in jobs and t.updated_at is not None
            ]

    # -- inside ------------------------------------------------------------------------------
    def _tracked(self, job_id: int) -> _Tracked:
        with self._lock:
            found = self._jobs.get(job_id)
            if found is not None:
                self._jobs.move_to_end(job_id)
                return found
        try:
            points = self._store.load_progress(job_id)
        except Exception as exc:
            log.warning("job %s: stored progress not read: %s", job_id, exc)
            points = []
        made = _Tracked(Timeline(points))
        if points:
            last = points[-1]
            made.step, made.total, made.updated_at = last.step, last.total, last.at
            for point in points:
                made.metrics.update(point.metrics)
            made.sdk_offset = made.log_offset = None  # read from here on
        with self._lock:
            found = self._jobs.setdefault(job_id, made)
            self._jobs.move_to_end(job_id)
            return found

    def _evict(self) -> None:
        with self._lock:
            idle = [i for i, t in self._jobs.items() if not t.running]
            for job_id in idle[: max(0, len(idle) - self._keep_finished)]:
                tracked = self._jobs[job_id]
                if not tracked.timeline.changed and not tracked.timeline.rewritten:
                    del self._jobs[job_id]

    def _read(self, job_id: int, tracked: _Tracked) -> None:
        log_path = self._log_path(job_id)
        sdk = _read_new(progress_file(log_path), tracked.sdk_offset, skip_ahead=False)
        out = _read_new(log_path, tracked.log_offset, skip_ahead=True)
        now = self._clock()
        with self._lock:
            # The log first: an SDK line, which has its own time, is the later word within a tick.
            if out is not None:
                tracked.log_offset, data, skipped = out
                if skipped:
                    tracked.scanner.reset()
                    data = data[min((data.find(c) for c in b"\r\n" if c in data), default=0) :]
                text = data.decode("utf-8", "replace")
                for report in tracked.scanner.feed(text):
                    self._ingest(tracked, report, now)
            if sdk is not None:
                tracked.sdk_offset, data, _ = sdk
                lines = (tracked.sdk_rest + data).split(b"\n")
                tracked.sdk_rest = lines.pop()[-READ_CAP:]
                for line in lines:
                    reported = parse_sdk_line(line)
                    if reported is not None:
                        self._ingest(tracked, reported, now)

    @staticmethod
    def _ingest(tracked: _Tracked, report: Report, now: float) -> None:
        """One report into the job's latest state and timeline. Its time: the SDK's (never
        ahead of now, never before the last report), else when it was read."""
        last = tracked.updated_at or 0.0
        at = now if report.at is None else min(now, max(report.at, last))
        if report.step is not None:
            if tracked.step is not None and report.step < tracked.step:
                tracked.recent.clear()  # a new epoch's bar, a new run: the rate starts again
            tracked.step = report.step
            if report.total is not None:
                tracked.total = report.total
            tracked.recent.append((at, report.step))
        tracked.metrics.update(report.metrics)
        tracked.updated_at, tracked.source = at, report.source
        step = report.step
        tracked.timeline.add(at, step, tracked.total if step is not None else None, report.metrics)


def _read_new(path: str, offset: int | None, *, skip_ahead: bool) -> tuple[int, bytes, bool] | None:
    """The bytes of `path` past `offset` (None: its end), at most READ_CAP: (new offset, data,
    whether bytes were skipped). A file that shrank is read from its start; None: nothing new,
    or no such file (yet)."""
    try:
        f = open_job_file(path)
    except OSError:
        return None
    with f:
        size = os.fstat(f.fileno()).st_size
        start = size if offset is None else (0 if offset > size else offset)
        if start == size:
            return (size, b"", False) if offset != size else None
        skipped = skip_ahead and size - start > READ_CAP
        if skipped:
            start = size - READ_CAP
        f.seek(start)
        data = f.read(min(READ_CAP, size - start))
    return start + len(data), data, skipped
