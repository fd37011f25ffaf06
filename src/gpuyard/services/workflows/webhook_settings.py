"""The webhook settings cache: what `notify.py` changes and `webhook_sender.py` reads, locked.

Every user's and team's entry as stored, and who is in which team (whose defaults reach a job).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import replace

from gpuyard.domain.webhooks import NotifyKind, NotifySettings
from gpuyard.services.stores import NotifyStore


class SettingsCache:
    """The settings as stored, read without a query; each change stored, then cached."""

    def __init__(self, store: NotifyStore, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], NotifySettings] = {
            (e.kind, e.name): e for e in store.load_notify_settings()
        }
        # Whether any entry has URLs: read without the lock by the journal's observer.
        self.any_defaults = any(e.urls for e in self._entries.values())
        # Who is in which team (set by the server once accounts exist; None: no team).
        self.team_of: Callable[[str], str | None] = lambda _user: None

    def get(self, kind: str, name: str) -> NotifySettings | None:
        with self._lock:
            return self._entries.get((kind, name))

    def entries(self) -> list[NotifySettings]:
        with self._lock:
            return list(self._entries.values())

    def change(
        self,
        kind: NotifyKind,
        name: str,
        make: Callable[[NotifySettings | None], NotifySettings | None],
    ) -> tuple[NotifySettings | None, NotifySettings | None]:
        """Replace the entry of (kind, name) by `make(old)` (None: leave it), stored then
        cached, all under the lock; returns (old, new)."""
        with self._lock:
            old = self._entries.get((kind, name))
            new = make(old)
            if new is not None:
                self._store.save_notify_settings(new)
                self._entries[(kind, name)] = new
                self.any_defaults = any(e.urls for e in self._entries.values())
            return old, new

    def secret_of(self, signer: str) -> str:
        """The signer's secret, made (and stored) the first time a delivery needs it: the
        user learns it with `gpuyard notify secret --rotate`."""
        kind, _, name = signer.partition(":")
        with self._lock:
            entry = self._entries.get((kind, name))
            if entry is not None and entry.secret is not None:
                return entry.secret
            now = self._clock()
            base = entry or NotifySettings("team" if kind == "team" else "user", name)
            entry = replace(base, secret=new_secret(), secret_at=now, updated_at=now)
            self._store.save_notify_settings(entry)
            self._entries[(kind, name)] = entry
            assert entry.secret is not None
            return entry.secret


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)
