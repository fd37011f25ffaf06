"""What sweeps cost the server: (a) one early-stop tick of the sweep service over a sweep of
T trials, R of them running, every trial with P points of `val_loss` (the progress service's
most: 2,000), each running trial having reported once more since the last tick (a
`::gpuyard progress` line read by the real progress service between ticks, not timed), in ms
per tick and % of one core at the 2 s period (every running trial read again and judged
against every other: the median rule's running averages from prepared curves); (b) turning a
sweep file of N random trials into N job specs (parse, expand, the spec rules), in ms.

    .venv/bin/python bench/sweeps.py --trials 200 --running 100 --points 2000 --json
"""

from __future__ import annotations

import argparse
import getpass
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from machine import with_machine

from gpuyard.adapters.store.memory import MemoryJobStore
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.progress_series import ProgressPoint
from gpuyard.domain.spec_rules import decide_spec
from gpuyard.domain.states import JobState
from gpuyard.domain.sweep import SweepRecord, parse_sweep
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.workflows.progress import ProgressService
from gpuyard.services.workflows.sweeps import SweepService

DEFINITION: dict[str, Any] = {
    "command": "python3 train.py --lr {lr}",
    "method": "random",
    "trials": 1,
    "parameters": {"lr": {"distribution": "loguniform", "min": 1e-5, "max": 1e-1}},
    "metric": {"name": "val_loss"},
    "early_stop": {"rule": "median", "min_steps": 10, "min_trials": 3},
}


class _Jobs:
    """What the sweep service reads of the job use cases: the book, the store, stops (none
    granted here, so every tick judges every running trial again)."""

    preemptible_default = False

    def __init__(self, book: JobBook, store: MemoryJobStore) -> None:
        self.book, self.store, self.stops = book, store, self

    def request(self, *_: object) -> None:
        return None

    def wake(self) -> None:
        pass


def _trial(index: int, running: bool, now: float) -> Job:
    spec = JobSpec(argv=("true",), name="sweep", workdir="/")
    job = Job(id=1 + index, spec=spec, owner=getpass.getuser(), state=JobState.PENDING,
              submitted_at=now - 7200, array_job_id=1, array_task_id=index)  # fmt: skip
    job = job.transition(JobState.RUNNING, gpus=(), started_at=now - 3600)
    return job if running else job.transition(JobState.COMPLETED, ended_at=now - 60, exit_code=0)


def tick_cost(trials: int, running: int, points: int, ticks: int, root: Path) -> dict[str, float]:
    now = time.time()
    store = MemoryJobStore()
    jobs = [_trial(i, i >= trials - running, now) for i in range(trials)]
    for job in jobs:  # the good trials ended; the running ones are judged each tick
        x = job.id / trials
        store.save_progress([
            (job.id, ProgressPoint(now - 3600 + s, s, points, {"val_loss": x + 1 / s}))
            for s in range(1, points + 1)
        ])  # fmt: skip
    store.save_sweep(SweepRecord(1, getpass.getuser(), "bench", now, DEFINITION,
                                 tuple({"lr": 0.001} for _ in range(trials))))  # fmt: skip
    book = JobBook(jobs)
    for job in jobs:
        (root / str(job.id)).mkdir()
        (root / str(job.id) / "output.log").write_text("")
    progress = ProgressService(book, store, lambda i: f"{root}/{i}/output.log")
    progress.tick()  # the running trials' logs are read from their ends from now on
    jobs_side = _Jobs(book, store)  # as the submits, the verbs and the desk
    service = SweepService(jobs_side, jobs_side, jobs_side, store, progress)  # type: ignore[arg-type]
    started = time.perf_counter()
    service.tick()  # reads every series once; the ended trials' are kept from then on
    first_ms = (time.perf_counter() - started) * 1000
    times = []
    for n in range(ticks):
        for job in jobs[trials - running :]:
            with open(root / str(job.id) / "output.log", "a") as log:
                step = points + n + 1
                log.write(f"::gpuyard progress step={step} val_loss={job.id / trials:.4f}\n")
        progress.tick()
        started = time.perf_counter()
        service.tick()
        times.append((time.perf_counter() - started) * 1000)
    tick_ms = statistics.median(times)
    return {"first_tick_ms": round(first_ms, 1), "tick_ms": round(tick_ms, 1),
            "cpu_pct_at_2s": round(tick_ms / 2000 * 100, 2)}  # fmt: skip


def expand_cost(trials: int) -> float:
    doc = {**DEFINITION, "trials": trials, "resources": {"gpus": 1, "mem": "16G", "time": "2h"}}
    started = time.perf_counter()
    sweep = parse_sweep(doc)
    specs = [decide_spec(sweep.draft(i, p, None), default_workdir="/")
             for i, p in enumerate(sweep.expand())]  # fmt: skip
    assert len(specs) == trials
    return round((time.perf_counter() - started) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--running", type=int, default=100)
    parser.add_argument("--points", type=int, default=2000)
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--expand", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result: dict[str, Any] = {
            "trials": args.trials, "running": args.running, "points": args.points,
            **tick_cost(args.trials, args.running, args.points, args.ticks, Path(tmp)),
            "expand_trials": args.expand, "expand_ms": expand_cost(args.expand),
        }  # fmt: skip
    if args.json:
        print(json.dumps(with_machine(result)))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")


if __name__ == "__main__":
    main()
