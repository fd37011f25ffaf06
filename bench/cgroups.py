"""What a job's own cgroups cost its start (issue 11): launch-to-exec of a job with and without
per-job cgroups, alternating job by job on two `LocalExecutor`s (a ratio holds on a noisy
machine, an absolute time does not), and the executor's create/remove of one job's groups.

Needs root and a writable cgroup hierarchy (v1 here: memory, cpu, pids, devices).

    sudo .venv/bin/python bench/cgroups.py --json [--jobs 60] [--idle-s 0.3]

`--idle-s S`: each start after S seconds of nothing, as on a server that is not starting jobs
back to back (on cgroup v1 the first move into a group after an idle spell is the slow one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from machine import with_machine

from gpuyard.adapters.executor.cgroups import JobCgroups
from gpuyard.adapters.executor.local import LocalExecutor
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.launch.plan import launch_plan
from gpuyard.services.ports import ExitStatus


class _Bench:
    """One executor in its own folder; `start_s` times a `: > MARK` job from launch to exec."""

    def __init__(self, cgroups: JobCgroups | None) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="gpuyard-bench-"))
        self.ended: set[int] = set()
        self.cond = threading.Condition()
        self.executor = LocalExecutor(self.tmp / "jobs", self._ended, cgroups=cgroups)

    def _ended(self, job_id: int, status: ExitStatus) -> None:
        with self.cond:
            self.ended.add(job_id)
            self.cond.notify_all()

    def start_s(self, job_id: int) -> float:
        mark = self.tmp / f"mark-{job_id}"
        spec = JobSpec(argv=("sh", "-c", f": > {mark}"), name="b", workdir=str(self.tmp),
                       mem_mib=1024, cpus=1)  # fmt: skip
        job = Job(job_id, spec, "me", JobState.PENDING, time.time()).transition(
            JobState.RUNNING, started_at=time.time(), gpus=(0,)
        )
        plan = launch_plan(job, {"PATH": "/usr/bin:/bin"}, None, None,
                           self.executor.log_path(job_id))  # fmt: skip
        began = time.perf_counter()
        launched = self.executor.launch(job, plan)
        while not mark.exists():
            time.sleep(0.0001)
        took = time.perf_counter() - began
        self.executor.watch(job.with_changes(pid=launched.pid, pid_started_at=launched.started_at))
        with self.cond:
            self.cond.wait_for(lambda: job_id in self.ended, 20)
        return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--idle-s", type=float, default=0.0, help="idle before each start")
    args = parser.parse_args()
    groups = JobCgroups(f"bench-{uuid.uuid4().hex[:8]}", pids_max=16384, all_gpus=(0, 1, 2, 3))
    if os.geteuid() != 0 or not groups.available:
        sys.exit(f"bench/cgroups.py: no per-job cgroups here: {groups.describe()}")
    plain, held = _Bench(None), _Bench(groups)
    without, with_ = [], []
    for job_id in range(1, args.jobs + 1):  # alternating: drift hits both alike
        time.sleep(args.idle_s)
        without.append(plain.start_s(job_id))
        time.sleep(args.idle_s)
        with_.append(held.start_s(job_id))
    creates, removes = [], []
    for job_id in range(10_000, 10_050):
        began = time.perf_counter()
        groups.create(job_id, groups.limits(1024, 1, (0,)))
        creates.append(time.perf_counter() - began)
        began = time.perf_counter()
        groups.remove(job_id)
        removes.append(time.perf_counter() - began)
    for bench in (plain, held):
        bench.executor.close()
        shutil.rmtree(bench.tmp, ignore_errors=True)
    ms = {
        "start_p50_ms_without": statistics.median(without[5:]) * 1e3,
        "start_p50_ms_with": statistics.median(with_[5:]) * 1e3,
        "create_p50_ms": statistics.median(creates) * 1e3,
        "remove_p50_ms": statistics.median(removes) * 1e3,
    }
    figures = {k: round(v, 2) for k, v in ms.items()}
    figures.update(confinement=groups.describe(), jobs=args.jobs, idle_s=args.idle_s)
    if args.json:
        print(json.dumps(with_machine(figures)))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
