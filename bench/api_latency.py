"""Does a deep queue stall the API? p99 of `GET /api/v1/jobs/{id}` and of submits while the
scheduler projects estimated start times for 10,000 pending jobs.

Starts its own `gpuyard server` (free loopback port, temporary state dir, `--gpus 8`), fills
the 8 GPUs with `sleep 3600` jobs, queues N pending 1-8 GPU jobs (default 10,000; several
client threads), then for `--duration-s` seconds at once:
- a reader asks `GET /api/v1/jobs/{id}` of random pending jobs (each such read asks for that
  job's estimated start, so projections keep refreshing);
- a submitter sends 1-GPU jobs (each one wakes a scheduling pass);
- a "dashboard" lists the whole queue (`GET /api/v1/jobs`) every `--list-every-s` seconds.
Latency is send to full response, one keep-alive connection per client. The longest
scheduler-lock hold is read from `/metrics` (`gpuyard_scheduler_lock_hold_max_seconds`), when
the server exports it. Prints one JSON line with `--json`.

    .venv/bin/python bench/api_latency.py --json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import with_machine
from submit import Api, LocalServer, ms, percentile

GPUS = 8
_LOCK_GAUGE = re.compile(rb"^gpuyard_scheduler_lock_hold_max_seconds\s+(\S+)$", re.M)


def occupy(server: LocalServer) -> None:
    """One `sleep 3600` per GPU, all running: nothing else can start during the run."""
    api = server.api()
    try:
        ids = [api.submit(["sleep", "3600"], 1, str(server.workdir))["id"] for _ in range(GPUS)]
        deadline = time.monotonic() + 60
        while any(api.json("GET", f"/api/v1/jobs/{i}")["state"] != "RUNNING" for i in ids):
            if time.monotonic() > deadline:
                raise TimeoutError("the GPU-holding jobs did not all start")
            time.sleep(0.05)
    finally:
        api.close()


def fill(server: LocalServer, pending: int, clients: int) -> list[int]:
    """Queue `pending` jobs of 1-8 GPUs with a one-day limit, from `clients` threads."""
    ids: list[int] = []
    lock = threading.Lock()

    def worker(count: int, seed: int) -> None:
        rng, api = random.Random(seed), server.api()
        try:
            for _ in range(count):
                body = {"command": ["true"], "gpus": rng.choice([1, 1, 1, 2, 4, 8]),
                        "workdir": str(server.workdir), "time_limit": "1d"}  # fmt: skip
                job_id = api.json("POST", "/api/v1/jobs", body)["id"]
                with lock:
                    ids.append(job_id)
        finally:
            api.close()

    shares = [pending // clients + (i < pending % clients) for i in range(clients)]
    threads = [threading.Thread(target=worker, args=(n, i)) for i, n in enumerate(shares)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ids


def _loop(
    server: LocalServer, stop: threading.Event, gap_s: float, request: Callable[[Api], None]
) -> list[float]:
    """Call `request` every `gap_s` until `stop`; the latency of each call, in seconds."""
    api, latencies = server.api(), []
    try:
        while not stop.is_set():
            t0 = time.perf_counter()
            request(api)
            latencies.append(time.perf_counter() - t0)
            stop.wait(max(0.0, gap_s - latencies[-1]))
    finally:
        api.close()
    return latencies


def measure(
    server: LocalServer, pending_ids: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    stop = threading.Event()
    rng = random.Random(2)
    workdir = str(server.workdir)

    readable = list(range(1, GPUS + 1)) if args.no_estimates else pending_ids

    def read(api: Api) -> None:
        api.json("GET", f"/api/v1/jobs/{rng.choice(readable)}")

    def submit(api: Api) -> None:
        api.submit(["true"], 1, workdir)

    def listing(api: Api) -> None:
        api.raw("GET", "/api/v1/jobs")

    plans = {"get": (1 / args.reads_per_s, read), "submit": (1 / args.submits_per_s, submit)}
    if args.list_every_s > 0:
        plans["list"] = (args.list_every_s, listing)
    results: dict[str, list[float]] = {}

    def run(name: str) -> None:
        gap_s, request = plans[name]
        results[name] = _loop(server, stop, gap_s, request)

    threads = [threading.Thread(target=run, args=(name,)) for name in plans]
    for thread in threads:
        thread.start()
    time.sleep(args.duration_s)
    stop.set()
    for thread in threads:
        thread.join()
    out: dict[str, Any] = {}
    for name, values in results.items():
        out[f"{name}_n"] = len(values)
        out[f"{name}_p50_ms"] = ms(percentile(values, 50))
        out[f"{name}_p99_ms"] = ms(percentile(values, 99))
        out[f"{name}_max_ms"] = ms(max(values))
    return out


def lock_hold_max_ms(server: LocalServer) -> float | None:
    """The server's longest scheduler-lock hold, if it exports one."""
    api = server.api()
    try:
        status, body = api.raw("GET", "/metrics")
    finally:
        api.close()
    found = _LOCK_GAUGE.search(body) if status == 200 else None
    return None if found is None else ms(float(found.group(1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=4, help="threads that fill the queue")
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--reads-per-s", type=float, default=50.0)
    parser.add_argument("--submits-per-s", type=float, default=20.0)
    parser.add_argument("--list-every-s", type=float, default=5.0, help="0: no dashboard")
    parser.add_argument("--keep", action="store_true", help="keep the state dir and server log")
    parser.add_argument(
        "--no-estimates",
        action="store_true",
        help="read running jobs only: no projection is ever made (a floor)",
    )
    args = parser.parse_args()
    result: dict[str, Any] = {"benchmark": "api_latency", "pending": args.pending, "gpus": GPUS}
    with LocalServer(GPUS, cpus=64, keep=args.keep) as server:
        occupy(server)
        t0 = time.perf_counter()
        ids = fill(server, args.pending, args.clients)
        result["fill_s"] = round(time.perf_counter() - t0, 1)
        result.update(measure(server, ids, args))
        result["lock_hold_max_ms"] = lock_hold_max_ms(server)
    if args.json:
        print(json.dumps(with_machine(result)))
    else:
        for key, value in result.items():
            print(f"{key:24s} {value}")


if __name__ == "__main__":
    main()
