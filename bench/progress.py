"""What reading jobs' progress costs the server: one tick of the progress service (the new
bytes of every running job's `progress.jsonl` and log, parsed) over N running jobs, each of
which wrote one SDK line and a second of tqdm updates (10 `\\r` updates) since the last tick,
in ms per tick and % of one core at the 1 s period; and one flush of all their changed points
to SQLite.

    .venv/bin/python bench/progress.py --jobs 200 --json
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from machine import with_machine

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.workflows.progress import ProgressService


def _running(job_id: int) -> Job:
    spec = JobSpec(argv=("true",), name="t", workdir="/")
    job = Job(id=job_id, spec=spec, owner=getpass.getuser(), state=JobState.PENDING,
              submitted_at=1.0)  # fmt: skip
    return job.transition(JobState.RUNNING, gpus=(), started_at=1.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for job_id in range(1, args.jobs + 1):
            (root / str(job_id)).mkdir()
            (root / str(job_id) / "output.log").write_bytes(b"")
        store = SqlJobStore(sqlite_url(root / "gpuyard.db"))
        book = JobBook([_running(i) for i in range(1, args.jobs + 1)])
        service = ProgressService(book, store, lambda i: f"{root}/{i}/output.log")
        tick_s: list[float] = []
        step = 0
        for _ in range(args.ticks):
            for job_id in range(1, args.jobs + 1):
                with open(root / str(job_id) / "output.log", "a") as log:
                    for n in range(step, step + 10):
                        log.write(f"\r train: {n // 100:3d}%|###    | {n}/10000 "
                                  f"[00:01<00:10, 10.0it/s, loss={1 / (n + 1):.4f}]")  # fmt: skip
                with open(root / str(job_id) / "progress.jsonl", "a") as sdk:
                    record = {"t": time.time(), "step": step, "total": 10000,
                              "metrics": {"acc": 0.5}}  # fmt: skip
                    sdk.write(json.dumps(record) + "\n")
            step += 10
            start = time.perf_counter()
            service.tick()
            tick_s.append(time.perf_counter() - start)
            time.sleep(1.0)  # the next tick's reports land in a new 1 s bucket
        start = time.perf_counter()
        service.flush()
        flush_s = time.perf_counter() - start
        store.close()
    tick_s.sort()
    median = tick_s[len(tick_s) // 2]
    result = {
        "jobs": args.jobs,
        "tick_ms_median": round(median * 1000, 2),
        "tick_ms_max": round(tick_s[-1] * 1000, 2),
        "cpu_pct_of_core_at_1hz": round(median * 100, 2),
        "flush_ms": round(flush_s * 1000, 2),
        "points_flushed": args.jobs * args.ticks,
    }
    human = "\n".join(f"{k}: {v}" for k, v in result.items())
    print(json.dumps(with_machine(result)) if args.json else human)


if __name__ == "__main__":
    main()
