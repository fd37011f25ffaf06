"""The GpuHistoryStore port in memory: `MemoryJobStore` inherits it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuyard.services.stores import GpuBucket


@dataclass
class MemoryGpuHistory:
    """What a database holds of GPU history (a `MemoryDatabase` field)."""

    rows: dict[tuple[str, int, float], GpuBucket] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryGpuHistoryStore:
    """Implements GpuHistoryStore over `self._gpu_history` (set by the store that inherits it)."""

    _gpu_history: MemoryGpuHistory

    def save_gpu_buckets(self, buckets: Sequence[GpuBucket]) -> None:
        with self._gpu_history.lock:
            for b in buckets:
                self._gpu_history.rows[(b.gpu_uuid, b.resolution_s, b.at)] = b

    def load_gpu_buckets(self, gpu_uuid: str, since: float, until: float) -> list[GpuBucket]:
        with self._gpu_history.lock:
            found = [
                b
                for (uuid, _, at), b in self._gpu_history.rows.items()
                if uuid == gpu_uuid and since <= at < until
            ]
        return sorted(found, key=lambda b: (b.at, b.resolution_s))

    def prune_gpu_buckets(self, before: float) -> int:
        with self._gpu_history.lock:
            old = [key for key in self._gpu_history.rows if key[2] < before]
            for key in old:
                del self._gpu_history.rows[key]
        return len(old)
