"""The ProgressStore port in memory (`MemoryJobStore` inherits it), for tests."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from gpuyard.domain.progress_series import ProgressPoint, copy_point


@dataclass
class MemoryProgressRows:
    """What a database holds of jobs' progress (a `MemoryDatabase` field): by job, then `at`."""

    rows: dict[int, dict[float, ProgressPoint]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def drop(self, job_ids: Iterable[int]) -> None:
        with self.lock:
            for job_id in job_ids:
                self.rows.pop(job_id, None)


class MemoryProgress:
    """Implements ProgressStore over `self._progress` (set by the store that inherits it)."""

    _progress: MemoryProgressRows

    def save_progress(
        self, points: Sequence[tuple[int, ProgressPoint]], replace: Collection[int] = ()
    ) -> None:
        with self._progress.lock:
            stored = self._progress.rows
            for job_id in replace:
                stored.pop(job_id, None)
            for job_id, point in points:
                stored.setdefault(job_id, {})[point.at] = copy_point(point)

    def load_progress(self, job_id: int) -> list[ProgressPoint]:
        with self._progress.lock:
            found = self._progress.rows.get(job_id, {})
            return [copy_point(found[at]) for at in sorted(found)]
