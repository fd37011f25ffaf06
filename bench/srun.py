"""What gpuyard's `srun` shim (`adapters/executor/srun.sh`) adds to a step, issue 13: the time
from `srun` to its exit for tasks that do nothing (`true`), against running `true` directly;
one task (srun execs it) and N tasks (each in its own session, its lines relayed whole by a
reader per stream), interleaved run by run so a noisy machine affects all alike; and the
step count (the step number is found from the last one's, not counted from 0).

    .venv/bin/python bench/srun.py --json [--runs 40] [--tasks 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid

from machine import with_machine

from gpuyard.adapters.executor.srun_shim import SHIM_SOURCE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="gpuyard-bench-srun-")
    env = {
        **os.environ, "TMPDIR": tmp, "SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "1",
        "GPUYARD_NTASKS_PER_NODE": str(args.tasks), "GPUYARD_LAUNCH_ID": uuid.uuid4().hex,
    }  # fmt: skip
    cases = {
        "direct": ["true"],
        "srun_1_task": ["sh", str(SHIM_SOURCE), "-n", "1", "true"],
        f"srun_{args.tasks}_tasks": ["sh", str(SHIM_SOURCE), "true"],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    try:
        for _ in range(args.runs):
            for name, argv in cases.items():
                start = time.perf_counter()
                subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
                times[name].append((time.perf_counter() - start) * 1000)
        steps = subprocess.run(
            ["sh", str(SHIM_SOURCE), "-n", "1", "sh", "-c", "echo $SLURM_STEP_ID"],
            env=env, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "runs": args.runs,
        "tasks": args.tasks,
        "p50_ms": {name: round(statistics.median(ts), 1) for name, ts in times.items()},
        "p95_ms": {
            name: round(statistics.quantiles(ts, n=20)[18], 1) for name, ts in times.items()
        },
        "step_id_after": int(steps),
    }
    if args.json:
        print(json.dumps(with_machine(result), indent=2))
    else:
        for name in cases:
            print(f"{name:>16}: p50 {result['p50_ms'][name]} ms, p95 {result['p95_ms'][name]} ms")


if __name__ == "__main__":
    main()
