"""The UsageStore port in SQL (`SqlJobStore` inherits it): the jobs that held GPUs since a
time, each with its saved GPU stats, in one query."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, or_, select

from gpuyard.adapters.store.codec import rows_to_jobs
from gpuyard.adapters.store.tables import job_gpu_stats, jobs
from gpuyard.domain.job import Job


class SqlUsage:
    _engine: Engine
    _reader: Engine  # the same engine, its transactions read-only (sql.py `_make_engine`)

    def usage_jobs(
        self, since: float, owner: str | None = None
    ) -> list[tuple[Job, dict[str, Any] | None]]:
        query = (
            select(jobs, job_gpu_stats.c.stats.label("gpu_stats"))
            .outerjoin(job_gpu_stats, job_gpu_stats.c.job_id == jobs.c.id)
            .where(or_(jobs.c.started_at.is_not(None), jobs.c.attained_gpu_s > 0))
            .where(or_(jobs.c.ended_at.is_(None), jobs.c.ended_at >= since))
            .order_by(jobs.c.id)
        )
        if owner is not None:
            query = query.where(jobs.c.owner == owner)
        with self._reader.connect() as conn:
            result = conn.execute(query)
            keys = list(result.keys())
            rows = list(result)
        stats = [r.gpu_stats for r in rows]
        return [
            (job, json.loads(text) if text is not None else None)
            for job, text in zip(rows_to_jobs(keys, rows), stats, strict=True)
        ]
