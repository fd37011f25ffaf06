"""A lock that remembers its longest hold, so "no pass stalls the API" is a measured figure.

Two `perf_counter` calls per hold (well under a microsecond); the figure is exported on
`/metrics` as `gpuyard_scheduler_lock_hold_max_seconds` and read by `bench/api_latency.py`.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType


class TimedLock:
    """A non-reentrant lock (`with lock:`) that records the longest time it was held."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since = 0.0
        self.hold_max_s = 0.0  # the longest hold since start (or `reset`)
        self.holds = 0

    def __enter__(self) -> TimedLock:
        self._lock.acquire()
        self._since = time.perf_counter()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        held_s = time.perf_counter() - self._since
        self.holds += 1
        if held_s > self.hold_max_s:
            self.hold_max_s = held_s
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def reset(self) -> None:
        """Forget the longest hold so far (a benchmark's warm-up)."""
        self.hold_max_s = 0.0
        self.holds = 0
