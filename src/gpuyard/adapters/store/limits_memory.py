"""The LimitStore port in memory: `MemoryJobStore` inherits it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from gpuyard.domain.errors import NotFound
from gpuyard.domain.limits import AccountLimits, LimitKind


@dataclass
class MemoryLimits:
    """What a database holds about limits (a `MemoryDatabase` field)."""

    rows: dict[tuple[str, str], AccountLimits] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryLimitStore:
    """Implements LimitStore over `self._limits` (set by the store that inherits it)."""

    _limits: MemoryLimits

    def load_limits(self) -> list[AccountLimits]:
        with self._limits.lock:
            return [self._limits.rows[key] for key in sorted(self._limits.rows)]

    def save_limits(self, entry: AccountLimits) -> None:
        with self._limits.lock:
            self._limits.rows[(entry.kind, entry.name)] = entry

    def clear_limits(self, kind: LimitKind, name: str) -> None:
        with self._limits.lock:
            if self._limits.rows.pop((kind, name), None) is None:
                raise NotFound(f"{kind} {name} has no limits set")
