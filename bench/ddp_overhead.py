"""Launch overhead of distributed jobs: examples/train_ddp.py through gpuyard vs torchrun directly.

Side by side in one run: rounds alternate between `python -m torch.distributed.run ...
train_ddp.py` started directly and the same job submitted with `gpuyard submit --distributed
torchrun` to a gpuyard server on loopback (declared GPUs; gloo on CPU without a GPU, NCCL with
one). The figure is the training throughput each run prints (samples/s over all ranks, measured
inside the training loop), median over rounds; gpuyard / direct must be >= 99%. Also reports
each path's wall time from start to exit (process start-up and torch import included).

    .venv/bin/python bench/ddp_overhead.py --json [--nproc 2] [--rounds 5] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import with_machine

REPO = Path(__file__).resolve().parents[1]
DDP = str(REPO / "examples" / "train_ddp.py")
GPUYARD = str(Path(sys.executable).parent / "gpuyard")
THROUGHPUT = re.compile(r"throughput ([0-9.]+) samples/s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _direct(nproc: int, steps: int) -> tuple[float, float]:
    began = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
         f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", f"--master-port={_free_port()}",
         "--max-restarts=0", DDP, "--steps", str(steps), "--log-every", str(steps)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return throughput(out.stdout), time.perf_counter() - began


def _through_gpuyard(env: dict[str, str], nproc: int, steps: int) -> tuple[float, float]:
    began = time.perf_counter()
    job = subprocess.run(
        [GPUYARD, "submit", "--gpus", str(nproc), "--distributed", "torchrun", "--",
         sys.executable, DDP, "--steps", str(steps), "--log-every", str(steps)],
        capture_output=True, text=True, check=True, env=env,
    ).stdout.strip()  # fmt: skip
    waited = subprocess.run([GPUYARD, "wait", job], env=env)
    wall = time.perf_counter() - began
    log = subprocess.run([GPUYARD, "logs", job], capture_output=True, text=True, env=env)
    if waited.returncode:
        raise RuntimeError(f"job {job} failed:\n{log.stdout[-4000:]}")
    return throughput(log.stdout), wall


def throughput(text: str) -> float:
    found = THROUGHPUT.search(text)
    if found is None:
        raise RuntimeError(f"no throughput line in:\n{text[-2000:]}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        port = _free_port()
        env = {**os.environ, "GPUYARD_URL": f"http://127.0.0.1:{port}", "GPUYARD_STATE_DIR": state}
        server = subprocess.Popen(
            [GPUYARD, "server", "--port", str(port), "--state-dir", state,
             "--gpus", str(args.nproc)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while subprocess.run([GPUYARD, "queue"], capture_output=True, env=env).returncode:
                if time.monotonic() > deadline:
                    raise RuntimeError("the gpuyard server did not start")
                time.sleep(0.2)
            direct, through, direct_wall, through_wall = [], [], [], []
            for _ in range(args.rounds):
                rate, wall = _direct(args.nproc, args.steps)
                direct.append(rate)
                direct_wall.append(wall)
                rate, wall = _through_gpuyard(env, args.nproc, args.steps)
                through.append(rate)
                through_wall.append(wall)
        finally:
            server.terminate()
            server.wait(timeout=30)
    result = {
        "benchmark": "ddp_overhead", "nproc": args.nproc, "rounds": args.rounds,
        "steps": args.steps, "cuda": bool(os.environ.get("CUDA_VISIBLE_DEVICES")),
        "direct_samples_per_s": round(statistics.median(direct), 1),
        "gpuyard_samples_per_s": round(statistics.median(through), 1),
        "gpuyard_vs_direct_pct": round(
            100 * statistics.median(through) / statistics.median(direct), 2
        ),
        "direct_wall_s": round(statistics.median(direct_wall), 2),
        "gpuyard_wall_s": round(statistics.median(through_wall), 2),
        "direct_all": direct, "gpuyard_all": through,
    }  # fmt: skip
    if args.json:
        print(json.dumps(with_machine(result)))
    else:
        for key, value in result.items():
            print(f"{key:26s} {value}")


if __name__ == "__main__":
    main()
