"""The EventStore port in SQL: `SqlJobStore` inherits it. A few rows a second at most, written
in batches by the events ring's saver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, delete, insert, select

from gpuyard.adapters.store.tables import events as table
from gpuyard.services.stores import Event


class SqlEvents:
    """Implements EventStore over `self._engine` (set by the store that inherits it)."""

    _engine: Engine
    _reader: Engine  # the same engine, its transactions read-only (sql.py `_make_engine`)

    def save_events(self, events: Sequence[Event]) -> None:
        if not events:
            return
        with self._engine.begin() as conn:
            conn.execute(delete(table).where(table.c.id.in_([e.id for e in events])))
            conn.execute(insert(table), [_row(e) for e in events])

    def load_events(self, limit: int) -> list[Event]:
        query = select(table).order_by(table.c.id.desc()).limit(max(0, limit))
        with self._reader.connect() as conn:
            rows = list(conn.execute(query))
        return [
            Event(r.id, r.at, r.kind, r.message, r.job_id, r.owner, r.name, r.gpu)
            for r in reversed(rows)
        ]

    def prune_events(self, below_id: int) -> int:
        with self._engine.begin() as conn:
            return int(conn.execute(delete(table).where(table.c.id < below_id)).rowcount)


def _row(event: Event) -> dict[str, Any]:
    return {
        "id": event.id, "at": event.at, "kind": event.kind, "message": event.message,
        "job_id": event.job_id, "owner": event.owner, "name": event.name, "gpu": event.gpu,
    }  # fmt: skip
