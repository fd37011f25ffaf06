"""Machines that join (issue 21): how long a new machine takes to run its first job, and what
each machine costs, with detected GPUs (fake NVML, read every second as on a real machine).

A cluster as a lab runs one (tests/raycluster/test_ray_join.py's `Lab`): a Ray head started
with `ray start --head`, the server connected by address, workers added with `ray start
--address` while the server runs. Each worker has 2 fake NVML GPUs of its own.

- `join_to_running_s`: a job waits for GPUs (every machine's are taken); from the `ray start`
  of a new machine until that job is RUNNING on it (the raylet's start, the agent's start and
  hello, the numbering, the next pass, the launch through the agent), per machine added.
- `idle_cpu_share`: the share of one core used over 20 s, nothing running, by the server and
  by each worker's agent (its NVML reads of its GPUs every second included), with 1 and with
  `--machines` workers: the server's cost per extra machine is the difference over the count.

    .venv/bin/python bench/ray_join.py --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.ray_machines import agent_processes, cpu_share
from machine import with_machine
from tests.e2e.server import wait_for
from tests.fakenvml import build_fake_nvml, write_fake_nvml_state
from tests.raycluster.conftest import cluster_processes, ray_orphans, wait_until_gone
from tests.raycluster.test_ray_join import Lab


def _job(lab: Lab, job_id: int) -> dict:  # type: ignore[type-arg]
    assert lab.server is not None
    return json.loads(lab.server.cli("show", str(job_id), "--json").stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--machines", type=int, default=3, help="workers that join")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    place = Path(tempfile.mkdtemp(prefix="gyjoin-bench-"))
    place.chmod(0o755)
    lab = Lab(place, build_fake_nvml(place / "nvml"))
    write_fake_nvml_state(place / "nvml-head", {})
    result: dict[str, object] = {}
    try:
        lab.start_head()
        server = lab.start_server(GPUYARD_TELEMETRY_S="1")
        joins: list[float] = []
        idle: dict[str, object] = {}
        for k in range(args.machines):
            # Every GPU there is taken: the waiting job can only run on the machine that joins.
            flag = place / f"finish-{uuid.uuid4().hex[:8]}"
            script = f"while [ ! -e {flag} ]; do sleep 0.5; done"
            holders = [int(server.cli("submit", "--gpus", "2", "--", "sh", "-c", script).stdout)
                       for _ in range(k + 1)]  # fmt: skip
            wait_for(lambda h=holders: all(_job(lab, j)["state"] == "RUNNING" for j in h), 120, 0.2)
            waiting = int(server.cli("submit", "--gpus", "2", "--", "sh", "-c", script).stdout)
            name = f"gy-w{k}"
            gpus = [("NVIDIA H100 80GB HBM3", 81559,
                     f"GPU-{k:08x}-0000-0000-0000-00000000000{i}") for i in range(2)]  # fmt: skip
            t0 = time.monotonic()
            lab.join(name, gpus)
            wait_for(lambda w=waiting: _job(lab, w)["state"] == "RUNNING", 240, 0.05)
            joins.append(round(time.monotonic() - t0, 2))
            assert _job(lab, waiting)["node"] == name
            flag.touch()
            every = (*holders, waiting)
            wait_for(lambda e=every: all(_job(lab, j)["state"] == "COMPLETED" for j in e),
                     120, 0.2)  # fmt: skip
            if k == 0 or k == args.machines - 1:
                time.sleep(2)
                assert lab.server is not None and lab.server.proc is not None
                agents = agent_processes()
                assert len(agents) == k + 1, agents
                procs = [psutil.Process(lab.server.proc.pid), *agents]
                idle[f"with_{k + 1}_workers"] = [round(x, 4) for x in cpu_share(procs, args.idle_s)]
        result = {
            "join_to_running_s": joins,
            "idle_cpu_share": idle,
            "note": "idle shares: [server, agent of each worker]; each worker: 2 fake NVML GPUs "
            "read every second",
        }
    finally:
        lab.close()
        left = wait_until_gone(lambda: cluster_processes(str(lab.token)) + ray_orphans(), 30)
        for proc in left:
            proc.kill()
        shutil.rmtree(place, ignore_errors=True)
    print(json.dumps(with_machine(result, backend="ray"), indent=1) if args.json else result)


if __name__ == "__main__":
    main()
