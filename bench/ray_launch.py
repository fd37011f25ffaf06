"""Ray launch benchmark: submit-to-all-ranks-running latency of a 2-node job.

Starts a loopback-only local Ray cluster through gpuyard's adapter (this process is the head,
plus one more raylet; 2 logical GPUs and 2 CPUs each, token auth on), then, interleaved round
by round so that load from elsewhere hits both alike:

- ``gpuyard``: `RayConnection.launch()` of a job with one command per node, timed until the
  job's log holds the first line of both nodes' commands (what `gpuyard logs -f` would show);
- ``ray``: the same with plain Ray calls, the floor gpuyard's adapter sits on: a STRICT_SPREAD
  placement group pinned to the same nodes, `ray.get(pg.ready())`, one actor per bundle that
  `Popen`s the command and returns once it has read its first line.

Each command is `python -c "print('running'); sleep"`; both sides stop and clean up (untimed)
after every round. Reports median/min/max milliseconds of each.

    .venv/bin/python bench/ray_launch.py              # human-readable
    .venv/bin/python bench/ray_launch.py --json       # one JSON line
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ray

from gpuyard.adapters.ray import LocalNodeSpec, RayConnection

COMMAND = [sys.executable, "-c", "import time; print('running', flush=True); time.sleep(600)"]


class PlainRunner:
    """The baseline's actor: start the command, return once it printed its first line."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self, argv: list[str]) -> str:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode().strip()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def gpuyard_round(conn: RayConnection, nodes: list[str], job_id: int, folder: Path) -> float:
    log = folder / f"job{job_id}.log"
    started = time.perf_counter()
    handle = conn.launch(
        job_id, [(node, 1, 1) for node in nodes], lambda r, a, p: COMMAND, {}, log, grace_s=1
    )
    while True:
        text = log.read_text()
        if "[node0] running" in text and "[node1] running" in text:
            break
        time.sleep(0.001)
    took = time.perf_counter() - started
    handle.stop("benchmark round over")
    return took


def ray_round(nodes: list[str], remote_runner: Any) -> float:
    started = time.perf_counter()
    pg = ray.util.placement_group(
        [{"GPU": 1.0, "CPU": 1.0}] * len(nodes),
        strategy="STRICT_SPREAD",
        bundle_label_selector=[{"ray.io/node-id": node} for node in nodes],
    )
    ray.get(pg.ready())
    actors = [
        remote_runner.options(
            num_gpus=1,
            num_cpus=1,
            scheduling_strategy=ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=i
            ),
        ).remote()
        for i in range(len(nodes))
    ]
    lines = ray.get([actor.run.remote(COMMAND) for actor in actors])
    took = time.perf_counter() - started
    assert lines == ["running"] * len(nodes), lines
    ray.get([actor.stop.remote() for actor in actors])
    for actor in actors:
        ray.kill(actor)
    ray.util.remove_placement_group(pg)
    return took


def wait_free(gpus: float, timeout_s: float = 30) -> None:
    """Ray frees a removed group's resources asynchronously: start each round from idle."""
    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("GPU", 0) < gpus and time.monotonic() < deadline:
        time.sleep(0.01)


def summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {
        "median_ms": round(statistics.median(ms), 1),
        "min_ms": round(min(ms), 1),
        "max_ms": round(max(ms), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    args = ap.parse_args()
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    node = LocalNodeSpec(gpus=2, cpus=2)
    with tempfile.TemporaryDirectory(prefix="gpuyard-bench-ray-") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        conn = RayConnection.start_local(folder, nodes=[node, node])
        cluster_s = time.perf_counter() - started
        say(f"local 2-node cluster up in {cluster_s:.1f}s")
        try:
            nodes = [n.node_id for n in conn.nodes()]
            runner = ray.remote(PlainRunner)
            gpuyard_round(conn, nodes, 0, folder)  # warm-up (imports, first actors)
            wait_free(4)
            ray_round(nodes, runner)
            ours, theirs = [], []
            for i in range(args.rounds):
                wait_free(4)
                ours.append(gpuyard_round(conn, nodes, i + 1, folder))
                wait_free(4)
                theirs.append(ray_round(nodes, runner))
                say(f"round {i + 1}: gpuyard {ours[-1]:.3f} s, ray {theirs[-1]:.3f} s")
        finally:
            conn.close()
    result = {
        "bench": "ray_launch",
        "nodes": 2,
        "rounds": args.rounds,
        "cluster_start_s": round(cluster_s, 2),
        "gpuyard": summary(ours),
        "ray_baseline": summary(theirs),
        "overhead_ms": round((statistics.median(ours) - statistics.median(theirs)) * 1000, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "ray": ray.__version__,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        },
    }
    if args.json:
        print(json.dumps(result), flush=True)
    else:
        for name in ("gpuyard", "ray_baseline"):
            s = result[name]
            print(f"{name:13} median {s['median_ms']:7.1f} ms  min {s['min_ms']:7.1f}  "
                  f"max {s['max_ms']:7.1f}")  # fmt: skip
        print(f"overhead      {result['overhead_ms']:+.1f} ms (median gpuyard - median ray)")


if __name__ == "__main__":
    main()
