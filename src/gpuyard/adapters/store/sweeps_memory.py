"""The SweepStore port in memory (`MemoryJobStore` inherits it), for tests."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field

from gpuyard.domain.errors import Conflict
from gpuyard.domain.sweep import SweepRecord


@dataclass
class MemorySweepRows:
    """What a database holds of sweeps (a `MemoryDatabase` field), by id."""

    rows: dict[int, SweepRecord] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemorySweeps:
    """Implements SweepStore over `self._sweeps` (set by the store that inherits it)."""

    _sweeps: MemorySweepRows

    def save_sweep(self, record: SweepRecord) -> None:
        with self._sweeps.lock:
            if record.id in self._sweeps.rows:
                raise Conflict(f"sweep {record.id} already exists")
            self._sweeps.rows[record.id] = copy.deepcopy(record)

    def load_sweeps(self) -> list[SweepRecord]:
        with self._sweeps.lock:
            return [copy.deepcopy(self._sweeps.rows[i]) for i in sorted(self._sweeps.rows)]
