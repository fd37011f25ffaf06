"""How fast a dependency chain moves, and what an array's cap costs a scheduling pass.

1. Chain (a real `gpuyard server`, free loopback port, temporary state dir): N jobs (default
   1,000) of `true`, each `--dependency afterok:` the one before; the first waits for a file so
   every submit lands before the chain starts. Per link: the successor's start minus its
   predecessor's end, as the server recorded them (end: the supervisor's exit time; start: the
   start record) — what a user of `sbatch -d afterok` waits for. p50/p99/max.
2. Pass (in process, the server's `LiveScheduler`): 10,000 pending tasks of one array with
   `%8` on 8 GPUs; the pass after one task ends (the next task is let in and started), against
   the same pass with 10,000 plain pending jobs (no gate stage): the ratio holds on a noisy
   machine, the absolute times do not.

    .venv/bin/python bench/dependency_chain.py --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import with_machine
from submit import LocalServer, ms, percentile

from gpuyard.domain.job import Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler


def _at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def chain(links: int) -> dict[str, Any]:
    server = LocalServer(gpus=1, cpus=4).start()
    gate = server.workdir / "go"
    try:
        api = server.api()
        wait = f"while [ ! -e {gate} ]; do sleep 0.01; done"
        first = {"command": ["sh", "-c", wait], "gpus": 0, "workdir": str(server.workdir)}
        ids = [api.json("POST", "/api/v1/jobs", first)["id"]]
        for _ in range(links):
            ids.append(api.json("POST", "/api/v1/jobs", {
                "command": ["true"], "gpus": 0, "workdir": str(server.workdir),
                "dependency": f"afterok:{ids[-1]}",
            })["id"])  # fmt: skip
        began = time.monotonic()
        gate.touch()
        state = api.wait_ended(ids[-1], timeout_s=60.0 + links, poll_s=0.05)
        took = time.monotonic() - began
        jobs = [api.json("GET", f"/api/v1/jobs/{i}") for i in ids]
        api.close()
    finally:
        server.stop()
    if state != "COMPLETED":
        raise RuntimeError(f"the chain's last job ended {state}")
    gaps = [_at(b["started_at"]) - _at(a["ended_at"]) for a, b in itertools.pairwise(jobs)]
    return {
        "chain_links": links,
        "chain_link_p50_ms": ms(percentile(gaps, 50)),
        "chain_link_p99_ms": ms(percentile(gaps, 99)),
        "chain_link_max_ms": ms(max(gaps)),
        "chain_total_s": round(took, 2),
    }


class _Clock:
    now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _scheduler(clock: _Clock, gpus: int) -> LiveScheduler:
    node = NodeCapacity("node0", cpus=10_000, mem_mib=10**9)
    gpu_list = tuple(Gpu(i, f"GPU-{i}", "declared", None, False) for i in range(gpus))
    return LiveScheduler(make_policy("default", for_server=True), Inventory(gpu_list, node,
                         "declared"), clock, estimates_in_process=True)  # fmt: skip


def pass_ms(pending: int, capped: bool, passes: int) -> list[float]:
    """Times of the pass after one running job ends, `pending` jobs queued (an array's tasks
    with %8 if `capped`, else plain jobs of which 8 run at once as GPUs allow)."""
    clock, gpus = _Clock(), 8
    sched = _scheduler(clock, gpus)
    spec = JobSpec(argv=("t",), name="t", workdir="/", gpus=1,
                   array_max_running=8 if capped else 0)  # fmt: skip
    array_id = 1 if capped else None
    jobs = {
        i: Job(i, spec, "u", JobState.PENDING, clock.now, array_job_id=array_id,
               array_task_id=i - 1 if capped else None)
        for i in range(1, pending + 1)
    }  # fmt: skip
    for job in jobs.values():
        sched.submitted(job)
    times: list[float] = []
    running: dict[int, Job] = {}
    for _ in range(passes + 1):
        started = time.perf_counter()
        decided = sched.decide()
        times.append(time.perf_counter() - started)
        for launch in decided.launches:
            sched.launched(launch.job_id, launch.gpus)
            running[launch.job_id] = jobs[launch.job_id]
        clock.now += 1.0
        victim = min(running)
        done = (
            running.pop(victim)
            .transition(JobState.RUNNING)
            .transition(JobState.COMPLETED, exit_code=0, ended_at=clock.now)
        )
        sched.ended(done, clock.now)
    sched.close()
    return times[1:]  # the first pass takes the whole queue in


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", type=int, default=1_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--skip-chain", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict[str, Any] = {"benchmark": "dependency_chain"}
    capped = pass_ms(args.pending, True, args.passes)
    plain = pass_ms(args.pending, False, args.passes)
    out.update(
        pending=args.pending,
        capped_pass_p50_ms=ms(statistics.median(capped)),
        capped_pass_max_ms=ms(max(capped)),
        plain_pass_p50_ms=ms(statistics.median(plain)),
        plain_pass_max_ms=ms(max(plain)),
        capped_over_plain_p50=round(statistics.median(capped) / statistics.median(plain), 2),
    )
    if not args.skip_chain:
        out.update(chain(args.links))
    if args.json:
        print(json.dumps(with_machine(out)))
    else:
        for key, value in out.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
