"""How long a 10,000-task job array takes to be accepted, and whether a scheduler pass with
those tasks pending stays within the bound of a deep queue (ARCHITECTURE.md, LOCKING).

Starts its own `gpuyard server` (free loopback port, temporary state dir, `--gpus 8`), fills
the 8 GPUs with `sleep 3600` jobs (nothing else can start), then:
- `--rounds` times: `gpuyard submit --array 0-9999 -- true` as a user types it (the CLI's
  process, start to the array's id printed: every task durable by then), and the same array by
  HTTP alone (`POST /api/v1/jobs` with `array`, send to the 201); each array is cancelled whole
  (`POST /api/v1/arrays/{id}/cancel`, timed too) before the next;
- then one array `0-9999%8` is left pending and, for `--duration-s` seconds, api_latency's mix
  runs against it (reads of random tasks, which ask for their estimated start; 1-GPU submits,
  each waking a pass; a listing of the queue every 5 s): the longest scheduler-lock hold is read
  from `/metrics`, with the p99s (that maximum includes the passes that took in each whole
  array and the cancels: see below);
- in process (the server's own objects, no HTTP), the scheduler lock's longest hold split by
  phase: the pass that takes in 10,000 new tasks at once (`digest_hold_max_ms`), then the
  passes with them pending, each woken by a 1-GPU submit (`pass_hold_max_ms`, the figure the
  LOCKING table bounds), and the cancel of the whole array (`cancel_hold_max_ms`).

    .venv/bin/python bench/array_submit.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from api_latency import GPUS, lock_hold_max_ms, measure, occupy
from machine import with_machine
from submit import LocalServer, gpuyard_argv, kill_supervisors, ms


def cli_submit_s(server: LocalServer, tasks: int) -> tuple[float, int]:
    """`gpuyard submit --array 0-(tasks-1) -- true`: seconds to the printed id, and the id."""
    argv = [*gpuyard_argv(), "submit", "--array", f"0-{tasks - 1}", "--time", "1d", "--", "true"]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=server.cli_env(),
                          cwd=server.workdir, check=True)  # fmt: skip
    return time.perf_counter() - t0, int(done.stdout.strip())


def http_submit_s(server: LocalServer, array: str) -> tuple[float, int]:
    api = server.api()
    body = {"command": ["true"], "gpus": 1, "workdir": str(server.workdir), "time_limit": "1d",
            "array": array}  # fmt: skip
    try:
        t0 = time.perf_counter()
        job = api.json("POST", "/api/v1/jobs", body)
        return time.perf_counter() - t0, int(job["array_job_id"])
    finally:
        api.close()


def cancel_s(server: LocalServer, array_id: int) -> float:
    api = server.api()
    try:
        t0 = time.perf_counter()
        api.json("POST", f"/api/v1/arrays/{array_id}/cancel")
        return time.perf_counter() - t0
    finally:
        api.close()


def in_process(tasks: int, passes: int) -> dict[str, Any]:
    """The scheduler lock's longest hold by phase, on the server's own objects: wall time (what
    a waiter sees; on a loaded 2-core machine it includes the holder waiting for the GIL or a
    core) and the holder's own CPU time (`*_cpu_max_ms`: what the hold costs)."""
    import dataclasses
    import shutil
    import tempfile

    from gpuyard.bootstrap import build_app
    from gpuyard.domain.job import JobSpec
    from gpuyard.services.scheduler.timed_lock import TimedLock
    from gpuyard.settings import Settings

    _count_cpu(TimedLock)

    root = Path(tempfile.mkdtemp(prefix="gpuyard-bench-"))
    settings = Settings(state_dir=root / "state", gpus=str(GPUS), cpus=64, kill_grace_s=1)
    server, _ = build_app(settings)
    server.start()
    out: dict[str, Any] = {}
    try:
        submits, reads, verbs = server.submits, server.reads, server.verbs
        admin = server.auth.principal
        lock = server.scheduler._lock  # the TimedLock the metric reads
        base = JobSpec(argv=("sleep", "3600"), name="sleep", gpus=1, workdir=str(root))
        holders = [submits.submit(base, admin) for _ in range(GPUS)]
        _until(lambda: all(reads.get(j.id, admin).state.value == "RUNNING" for j in holders))
        spec = dataclasses.replace(base, argv=("true",), name="true", time_limit_s=86_400)
        _quiet(lock)
        lock.reset()
        t0 = time.perf_counter()
        made = submits.submit_array([spec] * tasks, range(tasks), admin)
        out["inproc_submit_s"] = round(time.perf_counter() - t0, 3)
        _quiet(lock)
        out["digest_hold_max_ms"] = ms(lock.hold_max_s)
        out["digest_hold_cpu_max_ms"] = ms(lock.cpu_max_s)
        lock.reset()
        lock.cpu_max_s = 0.0
        for _ in range(passes):
            submits.submit(spec, admin)
            _quiet(lock, idle_s=0.05)
        out["passes"] = lock.holds
        out["pass_hold_max_ms"] = ms(lock.hold_max_s)
        out["pass_hold_cpu_max_ms"] = ms(lock.cpu_max_s)
        lock.reset()
        lock.cpu_max_s = 0.0
        t0 = time.perf_counter()
        verbs.cancel_array(made[0].id, admin)
        out["inproc_cancel_s"] = round(time.perf_counter() - t0, 3)
        _quiet(lock)
        out["cancel_hold_max_ms"] = ms(lock.hold_max_s)
        out["cancel_hold_cpu_max_ms"] = ms(lock.cpu_max_s)
        for job in holders:
            verbs.cancel(job.id, admin)
    finally:
        server.close()
        kill_supervisors(str(root / "state" / "jobs"))
        shutil.rmtree(root, ignore_errors=True)
    return out


def _count_cpu(cls: Any) -> None:
    """Make every TimedLock also keep its holders' longest CPU time (`cpu_max_s`)."""
    enter, leave = cls.__enter__, cls.__exit__

    def entered(self: Any) -> Any:
        held = enter(self)
        self._cpu_since = time.thread_time()
        return held

    def left(self: Any, *exc: Any) -> None:
        cpu = time.thread_time() - self._cpu_since
        self.cpu_max_s = max(getattr(self, "cpu_max_s", 0.0), cpu)
        leave(self, *exc)

    cls.__enter__, cls.__exit__ = entered, left


def _until(predicate: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the server did not get there in time")
        time.sleep(0.02)


def _quiet(lock: Any, idle_s: float = 0.5) -> None:
    """Wait until no pass has taken the lock for `idle_s` (the scheduler caught up)."""
    holds = -1
    while holds != lock.holds:
        holds = lock.holds
        time.sleep(idle_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--reads-per-s", type=float, default=50.0)
    parser.add_argument("--submits-per-s", type=float, default=20.0)
    parser.add_argument("--list-every-s", type=float, default=5.0, help="0: no dashboard")
    parser.add_argument("--no-estimates", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help="keep the state dir and server log")
    parser.add_argument("--passes", type=int, default=50, help="in process: passes measured")
    parser.add_argument(
        "--no-gc",
        action="store_true",
        help="in process: the garbage collector off (a full collection of 10,000 jobs' objects "
        "takes ~80 ms and lands in whichever hold is running)",
    )
    args = parser.parse_args()
    result: dict[str, Any] = {"benchmark": "array_submit", "tasks": args.tasks, "gpus": GPUS}
    cli, http, cancels = [], [], []
    with LocalServer(GPUS, cpus=64, keep=args.keep) as server:
        occupy(server)
        for _ in range(args.rounds):
            seconds, array_id = cli_submit_s(server, args.tasks)
            cli.append(seconds)
            cancels.append(cancel_s(server, array_id))
            seconds, array_id = http_submit_s(server, f"0-{args.tasks - 1}")
            http.append(seconds)
            cancels.append(cancel_s(server, array_id))
        result["cli_submit_s"] = [round(s, 3) for s in cli]
        result["cli_submit_median_s"] = round(statistics.median(cli), 3)
        result["http_submit_s"] = [round(s, 3) for s in http]
        result["http_submit_median_s"] = round(statistics.median(http), 3)
        result["cancel_array_median_ms"] = ms(statistics.median(cancels))
        _, array_id = http_submit_s(server, f"0-{args.tasks - 1}%8")
        api = server.api()
        try:
            tasks = api.json("GET", f"/api/v1/arrays/{array_id}")
        finally:
            api.close()
        pending = [t["id"] for t in tasks if t["state"] == "PENDING"]
        result["pending"] = len(pending)
        result.update(measure(server, pending, args))
        result["lock_hold_max_ms"] = lock_hold_max_ms(server)
    if args.no_gc:
        import gc

        gc.disable()
    result["gc"] = not args.no_gc
    result.update(in_process(args.tasks, args.passes))
    if args.json:
        print(json.dumps(with_machine(result)))
    else:
        for key, value in result.items():
            print(f"{key:24s} {value}")


if __name__ == "__main__":
    main()
