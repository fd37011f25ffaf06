"""The EventStore port in memory: `MemoryJobStore` inherits it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuyard.services.stores import Event


@dataclass
class MemoryEventRows:
    """What a database holds of the events page (a `MemoryDatabase` field)."""

    events: dict[int, Event] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryEvents:
    """Implements EventStore over `self._events` (set by the store that inherits it)."""

    _events: MemoryEventRows

    def save_events(self, events: Sequence[Event]) -> None:
        with self._events.lock:
            self._events.events.update((e.id, e) for e in events)

    def load_events(self, limit: int) -> list[Event]:
        with self._events.lock:
            ids = sorted(self._events.events)[-limit:] if limit > 0 else []
            return [self._events.events[i] for i in ids]

    def prune_events(self, below_id: int) -> int:
        with self._events.lock:
            gone = [i for i in self._events.events if i < below_id]
            for i in gone:
                del self._events.events[i]
            return len(gone)
