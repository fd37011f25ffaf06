"""The NotifyStore port in SQL: `SqlJobStore` inherits it. Settings change rarely (a user's
command); deliveries are written by the notifier's thread, a few rows per transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, delete, func, insert, select, update

from gpuyard.adapters.store.tables import notify_deliveries as deliveries
from gpuyard.adapters.store.tables import notify_settings
from gpuyard.domain.errors import NotFound
from gpuyard.domain.webhooks import Delivery, NotifyKind, NotifySettings


class SqlNotify:
    """Implements NotifyStore over `self._engine` (set by the store that inherits it)."""

    _engine: Engine
    _reader: Engine  # the same engine, its transactions read-only (sql.py `_make_engine`)

    def load_notify_settings(self) -> list[NotifySettings]:
        with self._reader.connect() as conn:
            rows = conn.execute(select(notify_settings))
            return sorted((_settings(r) for r in rows), key=lambda e: (e.kind, e.name))

    def save_notify_settings(self, entry: NotifySettings) -> None:
        row: dict[str, Any] = {
            "urls": json.dumps(list(entry.urls)), "events": json.dumps(list(entry.events)),
            "secret": entry.secret, "updated_at": entry.updated_at, "secret_at": entry.secret_at,
        }  # fmt: skip
        key = (notify_settings.c.kind == entry.kind) & (notify_settings.c.name == entry.name)
        with self._engine.begin() as conn:
            if conn.execute(update(notify_settings).where(key).values(**row)).rowcount == 0:
                conn.execute(
                    insert(notify_settings).values(kind=entry.kind, name=entry.name, **row)
                )

    def clear_notify_settings(self, kind: NotifyKind, name: str) -> None:
        key = (notify_settings.c.kind == kind) & (notify_settings.c.name == name)
        with self._engine.begin() as conn:
            if conn.execute(delete(notify_settings).where(key)).rowcount == 0:
                raise NotFound(f"{kind} {name} has no notification settings")

    def save_deliveries(self, items: Sequence[Delivery]) -> None:
        if not items:
            return
        with self._engine.begin() as conn:
            for d in items:
                row = _row(d)
                changed = conn.execute(
                    update(deliveries).where(deliveries.c.id == d.id).values(**row)
                ).rowcount
                if changed == 0:
                    conn.execute(insert(deliveries).values(id=d.id, **row))

    def load_deliveries(self, owner: str | None, limit: int) -> list[Delivery]:
        query = select(deliveries)
        if owner is not None:
            query = query.where(deliveries.c.owner == owner)
        query = query.order_by(deliveries.c.created_at.desc(), deliveries.c.id.desc())
        with self._reader.connect() as conn:
            return [_delivery(r) for r in conn.execute(query.limit(max(0, limit)))]

    def load_pending_deliveries(self) -> list[Delivery]:
        query = (
            select(deliveries)
            .where(deliveries.c.state == "pending")
            .order_by(deliveries.c.created_at, deliveries.c.id)
        )
        with self._reader.connect() as conn:
            return [_delivery(r) for r in conn.execute(query)]

    def prune_deliveries(self, before: float, keep_per_owner: int) -> int:
        done = deliveries.c.state != "pending"
        gone = 0
        with self._engine.begin() as conn:
            gone += conn.execute(
                delete(deliveries).where(done & (deliveries.c.created_at < before))
            ).rowcount
            counts = conn.execute(
                select(deliveries.c.owner, func.count())
                .group_by(deliveries.c.owner)
                .having(func.count() > keep_per_owner)
            ).all()
            for owner, _count in counts:
                # The owner's newest `keep_per_owner` stay; older finished ones go.
                cutoff = conn.execute(
                    select(deliveries.c.created_at)
                    .where(deliveries.c.owner == owner)
                    .order_by(deliveries.c.created_at.desc())
                    .offset(keep_per_owner)
                    .limit(1)
                ).scalar()
                if cutoff is not None:
                    gone += conn.execute(
                        delete(deliveries).where(
                            done & (deliveries.c.owner == owner)
                            & (deliveries.c.created_at <= cutoff)
                        )
                    ).rowcount  # fmt: skip
        return gone


def _row(d: Delivery) -> dict[str, Any]:
    return {
        "owner": d.owner, "job_id": d.job_id, "event": d.event, "url": d.url,
        "signer": d.signer, "job": json.dumps(d.job), "created_at": d.created_at,
        "state": d.state, "attempts": d.attempts, "next_at": d.next_at,
        "last_status": d.last_status, "last_error": d.last_error, "updated_at": d.updated_at,
    }  # fmt: skip


def _delivery(r: Any) -> Delivery:
    return Delivery(
        id=r.id, owner=r.owner, job_id=r.job_id, event=r.event, url=r.url, signer=r.signer,
        job=json.loads(r.job or "{}"), created_at=r.created_at, state=r.state,
        attempts=r.attempts, next_at=r.next_at, last_status=r.last_status,
        last_error=r.last_error or "", updated_at=r.updated_at,
    )  # fmt: skip


def _settings(r: Any) -> NotifySettings:
    return NotifySettings(
        kind=r.kind, name=r.name, urls=tuple(json.loads(r.urls or "[]")),
        events=tuple(json.loads(r.events or "[]")), secret=r.secret, updated_at=r.updated_at,
        secret_at=r.secret_at,
    )  # fmt: skip
