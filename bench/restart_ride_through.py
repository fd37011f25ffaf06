"""How a command typed during a server restart fares (issue 22, part 4): it waits and is done
how soon after the server is back.

Starts its own `gpuyard server` (free loopback port, temporary state dir, `--gpus 4`), fills
the 4 GPUs with a `sleep 3600` job, then `--rounds` times: queues `--jobs` pending 1-GPU jobs,
stops the server (SIGTERM, as `systemctl restart` does), starts `gpuyard cancel ID ...` (every
id on one line), waits `--down-s` seconds, starts the server again on the same port and state
dir, and notes: the cancel's exit status, whether every job is CANCELLED, the lines on its
stderr, how long the server was down (stop to /healthz answering again) and how long after
/healthz answered the cancel exited (the client's backoff: at most 2 s between tries).

    .venv/bin/python bench/restart_ride_through.py --json
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

from bulk_cancel import all_cancelled, queue_jobs
from machine import with_machine
from submit import LocalServer, gpuyard_argv


def one_round(server: LocalServer, jobs: int, down_s: float) -> dict[str, Any]:
    ids = queue_jobs(server, jobs)
    assert server.proc is not None
    stopped_at = time.perf_counter()
    server.proc.terminate()
    server.proc.wait(timeout=60)
    cancel = subprocess.Popen([*gpuyard_argv(), "cancel", *map(str, ids)], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=server.cli_env(), cwd=server.workdir)  # fmt: skip
    time.sleep(down_s)
    server.start()
    back_at = time.perf_counter()
    _, err = cancel.communicate(timeout=120)
    done_at = time.perf_counter()
    return {
        "exit": cancel.returncode,
        "all_cancelled": all_cancelled(server, ids),
        "stderr_lines": err.count("\n"),
        "down_s": round(back_at - stopped_at, 2),
        "done_after_back_s": round(done_at - back_at, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--down-s", type=float, default=3.0, help="seconds the server is off")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with LocalServer(gpus=4, cpus=8) as server:
        api = server.api()
        try:
            api.json("POST", "/api/v1/jobs", {"command": ["sleep", "3600"], "gpus": 4,
                                              "workdir": str(server.workdir)})  # fmt: skip
        finally:
            api.close()
        rounds = [one_round(server, args.jobs, args.down_s) for _ in range(args.rounds)]
    after = [r["done_after_back_s"] for r in rounds]
    result = with_machine({
        "jobs": args.jobs, "down_s_asked": args.down_s, "rounds": rounds,
        "done_after_back_s_median": statistics.median(after),
    })  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for r in rounds:
            print(r)


if __name__ == "__main__":
    main()
