"""The SweepStore port in SQL (`SqlJobStore` inherits it): sweeps' definitions in table
`sweeps`, by their job array's id (a sweep is written once, when it is submitted)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from gpuyard.adapters.store.tables import sweeps
from gpuyard.domain.errors import Conflict
from gpuyard.domain.sweep import SweepRecord


class SqlSweeps:
    _engine: Engine
    _reader: Engine  # the same engine, its transactions read-only (sql.py `_make_engine`)

    def save_sweep(self, record: SweepRecord) -> None:
        sweep = record.sweep
        row: dict[str, Any] = {
            "id": record.id,
            "owner": record.owner,
            "name": record.name,
            "submitted_at": record.submitted_at,
            "metric": sweep.metric.name if sweep.metric else None,
            "goal": sweep.metric.goal if sweep.metric else None,
            "rule": sweep.early_stop.rule if sweep.early_stop else None,
            "definition": json.dumps(record.definition, separators=(",", ":")),
            "trials": json.dumps([dict(t) for t in record.trials], separators=(",", ":")),
        }
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(sweeps).values(row))
        except IntegrityError:
            raise Conflict(f"sweep {record.id} already exists") from None

    def load_sweeps(self) -> list[SweepRecord]:
        with self._reader.connect() as conn:
            rows = list(conn.execute(select(sweeps).order_by(sweeps.c.id)))
        return [
            SweepRecord(
                int(r.id),
                r.owner,
                r.name,
                float(r.submitted_at),
                json.loads(r.definition),
                tuple(json.loads(r.trials or "[]")),
            )
            for r in rows
        ]
