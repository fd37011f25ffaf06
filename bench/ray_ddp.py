"""2-machine DDP throughput under gpuyard against the same torchrun started by hand (issue 21:
target >= 99%).

The same training (`examples/train_ddp.py`: an MLP on synthetic data, DDP over gloo on this
CPU-only machine, 2 ranks per node, 2 nodes) run two ways on the same machine, alternately:
- by hand: two `torchrun --nnodes 2 --nproc-per-node 2 --node-rank R` on 127.0.0.1;
- under gpuyard: `submit --nodes 2 --gpus-per-node 2 --distributed torchrun` on a server with
  a local Ray cluster of two machines (`GPUYARD_RAY_LOCAL_NODES=2x2x4`): each rank through its
  machine's agent, under its supervisor and cgroups (`--cpus 4 --mem 8G`, the machine's own).
Each run's figure is the samples/s its rank 0 prints at the end; the result is the median of
gpuyard's over the median by hand. Both get OMP_NUM_THREADS=1 (4 ranks on the cores there are).

    .venv/bin/python bench/ray_ddp.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.ddp_overhead import DDP, throughput
from machine import with_machine
from tests.e2e.server import ServerProcess, free_port, wait_for
from tests.raycluster.conftest import cluster_processes, ray_orphans, wait_until_gone

TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def by_hand(steps: int) -> float:
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [
                TORCHRUN,
                "--nnodes",
                "2",
                "--nproc-per-node",
                "2",
                "--node-rank",
                str(rank),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                DDP,
                "--steps",
                str(steps),
                "--log-every",
                str(steps),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [proc.communicate(timeout=1200)[0] for proc in procs]
    return throughput(outputs[0])


def under_gpuyard(server: ServerProcess, steps: int) -> float:
    out = server.cli(
        "submit", "--nodes", "2", "--gpus-per-node", "2", "--cpus", "4", "--mem", "8G",
        "--distributed", "torchrun", "--export", "ALL,OMP_NUM_THREADS=1", "--",
        sys.executable, DDP, "--steps", str(steps), "--log-every", str(steps),
    )  # fmt: skip
    job_id = int(out.stdout)
    job = wait_for(
        lambda: (j := json.loads(server.cli("show", str(job_id), "--json").stdout))["state"]
        not in ("PENDING", "RUNNING") and j, timeout_s=1200, interval_s=0.5,
    )  # fmt: skip
    log = server.client().log(job_id).decode()
    assert job["state"] == "COMPLETED", log[-2000:]
    return throughput(log)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    place = Path(tempfile.mkdtemp(prefix="gyddp-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "GPUYARD_"))}
    env.update(GPUYARD_BACKEND="ray", GPUYARD_RAY_LOCAL_NODES="2x2x4")
    server = ServerProcess(place / "state", "--kill-grace", "2", env=env).start(timeout_s=240)
    hand: list[float] = []
    ours: list[float] = []
    try:
        for _ in range(args.rounds):
            hand.append(by_hand(args.steps))
            ours.append(under_gpuyard(server, args.steps))
    finally:
        server.stop()
        token = str(place / "state" / "ray_auth_token")
        for proc in wait_until_gone(lambda: cluster_processes(token) + ray_orphans(), 30):
            proc.kill()
    result = {
        "steps": args.steps,
        "by_hand_samples_s": hand,
        "gpuyard_samples_s": ours,
        "ratio_of_medians": round(statistics.median(ours) / statistics.median(hand), 4),
    }
    print(json.dumps(with_machine(result, backend="ray"), indent=1) if args.json else result)


if __name__ == "__main__":
    main()
