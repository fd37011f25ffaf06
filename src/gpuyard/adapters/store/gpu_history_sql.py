"""The GpuHistoryStore port in SQL (`SqlJobStore` inherits it): one row per GPU per bucket in
`gpu_samples`, written once a minute by the GPU history's flush thread, never by the sampler."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, and_, delete, insert, or_, select

from gpuyard.adapters.store.tables import gpu_samples
from gpuyard.services.stores import GpuBucket


class SqlGpuHistory:
    """Implements GpuHistoryStore over `self._engine` (set by the store that inherits it)."""

    _engine: Engine
    _reader: Engine  # the same engine, its transactions read-only (sql.py `_make_engine`)

    def save_gpu_buckets(self, buckets: Sequence[GpuBucket]) -> None:
        if not buckets:
            return
        c = gpu_samples.c
        keys = [
            and_(c.gpu_uuid == b.gpu_uuid, c.resolution_s == b.resolution_s, c.at == b.at)
            for b in buckets
        ]
        with self._engine.begin() as conn:
            # Replace, not fail, on a key already saved (portable: no dialect's upsert).
            for start in range(0, len(keys), 200):
                conn.execute(delete(gpu_samples).where(or_(*keys[start : start + 200])))
            conn.execute(insert(gpu_samples), [_row(b) for b in buckets])

    def load_gpu_buckets(self, gpu_uuid: str, since: float, until: float) -> list[GpuBucket]:
        c = gpu_samples.c
        query = (
            select(gpu_samples)
            .where(c.gpu_uuid == gpu_uuid, c.at >= since, c.at < until)
            .order_by(c.at, c.resolution_s)
        )
        with self._reader.connect() as conn:
            return [_bucket(r) for r in conn.execute(query)]

    def prune_gpu_buckets(self, before: float) -> int:
        with self._engine.begin() as conn:
            result = conn.execute(delete(gpu_samples).where(gpu_samples.c.at < before))
            return int(result.rowcount or 0)


def _row(b: GpuBucket) -> dict[str, Any]:
    return {
        "gpu_uuid": b.gpu_uuid, "resolution_s": b.resolution_s, "at": b.at,
        "util_pct": b.util_pct, "util_peak_pct": b.util_peak_pct,
        "mem_used_mib": b.mem_used_mib, "mem_peak_mib": b.mem_peak_mib,
        "temp_c": b.temp_c, "power_w": b.power_w, "holders": json.dumps(list(b.holders)),
    }  # fmt: skip


def _bucket(r: Any) -> GpuBucket:
    return GpuBucket(
        r.gpu_uuid, r.at, r.resolution_s, r.util_pct, r.util_peak_pct, r.mem_used_mib,
        r.mem_peak_mib, r.temp_c, r.power_w, tuple(int(j) for j in json.loads(r.holders)),
    )  # fmt: skip
