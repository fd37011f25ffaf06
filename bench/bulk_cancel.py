"""How long cancelling 2,000 pending jobs takes, as a user types it (issue 26, item 9).

Starts its own `gpuyard server` (free loopback port, temporary state dir, `--gpus 8`), fills
the 8 GPUs with `sleep 3600` jobs (nothing else can start), then `--rounds` times: submits
`--jobs` single 1-GPU jobs (separate jobs, not an array: one id each, as a user's loop of
`sbatch` makes), and times, as a subprocess from start to exit:
- `gpuyard scancel -u USER -t PENDING` (Slurm's form: every pending job of USER), then, with
  as many jobs queued again,
- `gpuyard cancel ID ID ...` (every id on one command line),
checking after each that every one of them is CANCELLED.

    .venv/bin/python bench/bulk_cancel.py --json
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

from api_latency import GPUS, occupy
from machine import with_machine
from submit import LocalServer, gpuyard_argv


def queue_jobs(server: LocalServer, count: int) -> list[int]:
    """`count` pending 1-GPU jobs, submitted over one keep-alive connection."""
    api = server.api()
    try:
        body = {"command": ["true"], "gpus": 1, "workdir": str(server.workdir),
                "time_limit": "1d"}  # fmt: skip
        return [int(api.json("POST", "/api/v1/jobs", body)["id"]) for _ in range(count)]
    finally:
        api.close()


def timed_cli_s(server: LocalServer, *args: str) -> float:
    """Seconds from starting `gpuyard ARGS` to its exit (which must be 0)."""
    t0 = time.perf_counter()
    subprocess.run([*gpuyard_argv(), *args], capture_output=True, text=True,
                   env=server.cli_env(), cwd=server.workdir, check=True)  # fmt: skip
    return time.perf_counter() - t0


def all_cancelled(server: LocalServer, ids: list[int]) -> bool:
    api = server.api()
    try:
        jobs = api.json("GET", "/api/v1/jobs?all=true&state=CANCELLED&limit=10000")
        return set(ids) <= {int(job["id"]) for job in jobs}
    finally:
        api.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result: dict[str, Any] = {"benchmark": "bulk_cancel", "jobs": args.jobs, "gpus": GPUS}
    scancel, cancel = [], []
    with LocalServer(GPUS, cpus=64) as server:
        occupy(server)
        user = server.api().json("GET", "/api/v1/whoami")["user"]
        for _ in range(args.rounds):
            ids = queue_jobs(server, args.jobs)
            scancel.append(timed_cli_s(server, "scancel", "-u", user, "-t", "PENDING"))
            if not all_cancelled(server, ids):
                raise SystemExit("scancel left some of the jobs pending")
            ids = queue_jobs(server, args.jobs)
            cancel.append(timed_cli_s(server, "cancel", *map(str, ids)))
            if not all_cancelled(server, ids):
                raise SystemExit("cancel left some of the jobs pending")
    result["scancel_s"] = [round(s, 3) for s in scancel]
    result["scancel_median_s"] = round(statistics.median(scancel), 3)
    result["cancel_s"] = [round(s, 3) for s in cancel]
    result["cancel_median_s"] = round(statistics.median(cancel), 3)
    if args.json:
        print(json.dumps(with_machine(result)))
        return
    print(f"{args.jobs} pending jobs on {GPUS} busy GPUs, {args.rounds} rounds")
    print(f"  gpuyard scancel -u {user} -t PENDING  median {result['scancel_median_s']} s"
          f"  {result['scancel_s']}")  # fmt: skip
    print(f"  gpuyard cancel ID x{args.jobs}         median {result['cancel_median_s']} s"
          f"  {result['cancel_s']}")  # fmt: skip


if __name__ == "__main__":
    main()
