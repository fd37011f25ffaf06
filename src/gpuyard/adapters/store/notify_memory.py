"""The NotifyStore port in memory: `MemoryJobStore` inherits it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuyard.domain.errors import NotFound
from gpuyard.domain.webhooks import Delivery, NotifyKind, NotifySettings


@dataclass
class MemoryNotifyRows:
    """What a database holds about webhooks (a `MemoryDatabase` field)."""

    settings: dict[tuple[str, str], NotifySettings] = field(default_factory=dict)
    deliveries: dict[str, Delivery] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryNotify:
    """Implements NotifyStore over `self._notify` (set by the store that inherits it)."""

    _notify: MemoryNotifyRows

    def load_notify_settings(self) -> list[NotifySettings]:
        with self._notify.lock:
            return [self._notify.settings[k] for k in sorted(self._notify.settings)]

    def save_notify_settings(self, entry: NotifySettings) -> None:
        with self._notify.lock:
            self._notify.settings[(entry.kind, entry.name)] = entry

    def clear_notify_settings(self, kind: NotifyKind, name: str) -> None:
        with self._notify.lock:
            if self._notify.settings.pop((kind, name), None) is None:
                raise NotFound(f"{kind} {name} has no notification settings")

    def save_deliveries(self, items: Sequence[Delivery]) -> None:
        with self._notify.lock:
            for d in items:
                self._notify.deliveries[d.id] = d

    def load_deliveries(self, owner: str | None, limit: int) -> list[Delivery]:
        with self._notify.lock:
            found = [d for d in self._notify.deliveries.values() if owner in (None, d.owner)]
        found.sort(key=lambda d: (d.created_at, d.id), reverse=True)
        return found[: max(0, limit)]

    def load_pending_deliveries(self) -> list[Delivery]:
        with self._notify.lock:
            found = [d for d in self._notify.deliveries.values() if d.state == "pending"]
        return sorted(found, key=lambda d: (d.created_at, d.id))

    def prune_deliveries(self, before: float, keep_per_owner: int) -> int:
        with self._notify.lock:
            rows = self._notify.deliveries
            newest: dict[str, list[Delivery]] = {}
            for d in sorted(rows.values(), key=lambda d: d.created_at, reverse=True):
                newest.setdefault(d.owner, []).append(d)
            gone = [
                d.id
                for kept in newest.values()
                for i, d in enumerate(kept)
                if d.state != "pending" and (d.created_at < before or i >= keep_per_owner)
            ]
            for key in gone:
                del rows[key]
            return len(gone)
