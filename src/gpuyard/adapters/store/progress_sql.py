"""The ProgressStore port in SQL (`SqlJobStore` inherits it): jobs' progress timelines in
table `job_progress`, a batch per transaction (the progress service writes every few seconds,
never a row per report)."""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import Engine, delete, select

from gpuyard.adapters.store.tables import job_progress
from gpuyard.domain.progress_series import ProgressPoint

_CHUNK = 500  # rows per INSERT (SQLite's bound parameters)


class SqlProgress:
    _engine: Engine
    _reader: Engine  # the same engine, its transactions read-only (sql.py `_make_engine`)

    def save_progress(
        self, points: Sequence[tuple[int, ProgressPoint]], replace: Collection[int] = ()
    ) -> None:
        if not points and not replace:
            return
        # The dialect's module on first use: PostgreSQL's costs a SQLite server's start ~45 ms.
        dialect = importlib.import_module(f"sqlalchemy.dialects.{self._engine.dialect.name}")
        rows = [_row(job_id, point) for job_id, point in points]
        with self._engine.begin() as conn:
            if replace:
                ids = sorted(set(replace))
                for i in range(0, len(ids), _CHUNK):
                    conn.execute(
                        delete(job_progress).where(job_progress.c.job_id.in_(ids[i : i + _CHUNK]))
                    )
            for i in range(0, len(rows), _CHUNK):
                insert = dialect.insert(job_progress).values(rows[i : i + _CHUNK])
                conn.execute(
                    insert.on_conflict_do_update(
                        index_elements=[job_progress.c.job_id, job_progress.c.at],
                        set_={
                            "step": insert.excluded.step,
                            "total": insert.excluded.total,
                            "metrics": insert.excluded.metrics,
                        },
                    )
                )

    def load_progress(self, job_id: int) -> list[ProgressPoint]:
        query = (
            select(job_progress).where(job_progress.c.job_id == job_id).order_by(job_progress.c.at)
        )
        with self._reader.connect() as conn:
            rows = list(conn.execute(query))
        return [ProgressPoint(r.at, r.step, r.total, _metrics(r.metrics)) for r in rows]


def _row(job_id: int, point: ProgressPoint) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "at": point.at,
        "step": point.step,
        "total": point.total,
        "metrics": json.dumps(point.metrics, separators=(",", ":")),
    }


def _metrics(text: str | None) -> dict[str, float]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {
        k: float(v)
        for k, v in value.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }
