"""The LimitStore port in SQL: `SqlJobStore` inherits it. Limits change rarely (an admin's
command): each change is its own short transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, delete, insert, select, update

from gpuyard.adapters.store.tables import limits
from gpuyard.domain.errors import NotFound
from gpuyard.domain.limits import AccountLimits, LimitKind


class SqlLimits:
    """Implements LimitStore over `self._engine` (set by the store that inherits it)."""

    _engine: Engine
    _reader: Engine  # the same engine, its transactions read-only (sql.py `_make_engine`)

    def load_limits(self) -> list[AccountLimits]:
        with self._reader.connect() as conn:
            rows = conn.execute(select(limits))
            # By (kind, name) in code point order, whatever the database's collation.
            return sorted((_entry(r) for r in rows), key=lambda e: (e.kind, e.name))

    def save_limits(self, entry: AccountLimits) -> None:
        row: dict[str, Any] = {
            "max_gpus": entry.max_gpus, "max_pending": entry.max_pending,
            "max_gpu_hours": entry.max_gpu_hours, "window_s": entry.window_s,
            "shares": entry.shares, "updated_at": entry.updated_at,
        }  # fmt: skip
        key = (limits.c.kind == entry.kind) & (limits.c.name == entry.name)
        with self._engine.begin() as conn:
            if conn.execute(update(limits).where(key).values(**row)).rowcount == 0:
                conn.execute(insert(limits).values(kind=entry.kind, name=entry.name, **row))

    def clear_limits(self, kind: LimitKind, name: str) -> None:
        key = (limits.c.kind == kind) & (limits.c.name == name)
        with self._engine.begin() as conn:
            if conn.execute(delete(limits).where(key)).rowcount == 0:
                raise NotFound(f"{kind} {name} has no limits set")


def _entry(r: Any) -> AccountLimits:
    return AccountLimits(
        r.kind,
        r.name,
        r.max_gpus,
        r.max_pending,
        r.max_gpu_hours,
        r.window_s,
        r.shares,
        r.updated_at,
    )
