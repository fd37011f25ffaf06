"""What the GPU history costs (issue 14): memory of a full 24 h ring of 8 GPUs at 1 Hz (RSS
before and after filling it, in a fresh process), the time to record one sample (what the
telemetry thread pays), to answer a 24 h chart at 600 points and a job's chart, and to write
one minute's buckets to SQLite (the writer thread's, once a minute).

    .venv/bin/python bench/gpu_history.py --json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from machine import with_machine

GPUS, SECONDS = 8, 86_400


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
    from gpuyard.domain.job import Job, JobSpec
    from gpuyard.domain.states import JobState
    from gpuyard.services.machine.gpu_history import GpuHistory
    from gpuyard.services.ports import GpuReading

    store = SqlJobStore(sqlite_url(Path(tempfile.mkdtemp()) / "gpuyard.db"))
    t0 = 1_800_000_000.0
    now = [t0]
    history = GpuHistory({i: f"GPU-bench-{i}" for i in range(GPUS)}, store, clock=lambda: now[0])
    # A new job every 10 minutes on each GPU: ~1,150 holder sets in a day.
    spec = JobSpec(("train",), "train", "/", gpus=1)
    before = rss_mib()
    record_s = 0.0
    for second in range(SECONDS):
        t = t0 + second
        readings = {
            i: GpuReading(i, util_pct=(second + i) % 101, memory_used_mib=40_000 + i,
                          temperature_c=60 + i, power_w=350.5)
            for i in range(GPUS)
        }  # fmt: skip
        jobs = [
            Job(1 + second // 600 * GPUS + i, spec, "u", JobState.RUNNING, t0, gpus=(i,))
            for i in range(GPUS)
        ]
        started = time.perf_counter()
        history.record(t, readings, jobs)
        record_s += time.perf_counter() - started
    filled = rss_mib()
    now[0] = t0 + SECONDS
    started = time.perf_counter()
    day = history.gpu_series(0, t0, t0 + SECONDS, 600)
    query_day_ms = 1000 * (time.perf_counter() - started)
    job = Job(5, spec, "u", JobState.COMPLETED, t0, gpus=(3,), started_at=t0 + 3600,
              ended_at=t0 + 7200)  # fmt: skip
    started = time.perf_counter()
    history.job_series(job, 600)
    query_job_ms = 1000 * (time.perf_counter() - started)
    history._flushed_to = t0 + SECONDS - 60  # the last minute only, as the writer does
    started = time.perf_counter()
    written = history.flush()
    flush_ms = 1000 * (time.perf_counter() - started)
    store.close()
    result = {
        "bench": "gpu_history", "gpus": GPUS, "samples_per_gpu": len(history.ring),
        "ring_rss_mib": round(filled - before, 1),
        "record_us_per_sample": round(1e6 * record_s / SECONDS, 2),
        "query_24h_600_points_ms": round(query_day_ms, 1), "points": len(day.points),
        "query_job_1h_ms": round(query_job_ms, 1),
        "flush_one_minute_ms": round(flush_ms, 1), "buckets_written": written,
    }  # fmt: skip
    if args.json:
        print(json.dumps(with_machine(result, backend=None)))
        return
    for key, value in result.items():
        print(f"{key:>26}: {value}")


if __name__ == "__main__":
    main()
