"""Many machines (issue 21): what a machine agent costs against the server's own machine.

One `gpuyard server --backend ray` on a loopback cluster of three machines
(`GPUYARD_RAY_LOCAL_NODES=3x2xC`: the server's own and two more raylets, 2 declared GPUs each),
as in tests/raycluster/test_ray_machines.py. Figures:

- `submit_to_running_ms`: per machine kind, the server's `started_at - submitted_at` plus the
  time until the job's first output line reaches the server's log (its command ran, on its
  machine, through its agent; for another machine, through the log mirror too). A long job
  holds the server's own machine's GPUs while the "other machine" rounds run, so each of
  those `--gpus 2` jobs lands on another machine.
- `restart_readopt_s`: `--jobs` CPU-only jobs running over the three machines; the server is
  killed with SIGKILL and started again; the time from the new server's launch until it
  answers with all of them RUNNING (re-adopted through each machine's agent), and that every
  one then ends COMPLETED.
- `idle_cpu_share`: the share of one core the server and each agent process use over 20 s with
  nothing running (telemetry of declared GPUs: none to read), the floor of a machine's cost.

    .venv/bin/python bench/ray_machines.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import with_machine
from tests.e2e.server import ServerProcess, wait_for


def _job(server: ServerProcess, job_id: int) -> dict:  # type: ignore[type-arg]
    return json.loads(server.cli("show", str(job_id), "--json").stdout)  # type: ignore[no-any-return]


def _round(server: ServerProcess, where: Path) -> tuple[float, str]:
    t0 = time.time()
    out = server.cli("submit", "--gpus", "2", "--", "sh", "-c", "echo first-line; sleep 0.2")
    job_id = int(out.stdout)
    log = server.state_dir / "jobs" / str(job_id) / "output.log"
    wait_for(lambda: log.exists() and "first-line" in log.read_text(), timeout_s=120,
             interval_s=0.01)  # fmt: skip
    took = time.time() - t0
    job = wait_for(lambda: (j := _job(server, job_id))["state"] == "COMPLETED" and j, 60, 0.05)
    return took * 1000, job["node"]


def agent_processes() -> list[psutil.Process]:
    """Every machine agent's actor process on this machine (the server's own runs in it)."""
    return [p for p in psutil.process_iter(["cmdline"])
            if any("MachineAgent" in a for a in p.info["cmdline"] or ())]  # fmt: skip


def cpu_share(procs: list[psutil.Process], seconds: float) -> list[float]:
    """The share of one core each of `procs` used over the next `seconds`."""
    before = [p.cpu_times() for p in procs]
    time.sleep(seconds)
    after = [p.cpu_times() for p in procs]
    pairs = zip(after, before, strict=True)
    return [((a.user + a.system) - (b.user + b.system)) / seconds for a, b in pairs]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    place = Path(tempfile.mkdtemp(prefix="gybench-"))
    per = max(4, -(-args.jobs // 3) + 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "GPUYARD_"))}
    env.update(GPUYARD_BACKEND="ray", GPUYARD_RAY_LOCAL_NODES=f"3x2x{per}",
               GPUYARD_RAY_NODE_TIMEOUT_S="3")  # fmt: skip
    server = ServerProcess(place / "state", "--kill-grace", "2", env=env)
    started = time.monotonic()
    server.start(timeout_s=300)
    result: dict[str, object] = {
        "server_start_s": round(time.monotonic() - started, 1),
    }
    try:
        local = [_round(server, place) for _ in range(args.rounds)]
        hold = int(server.cli("submit", "--gpus", "2", "--", "sleep", "3600").stdout)
        wait_for(lambda: _job(server, hold)["state"] == "RUNNING", 60)
        remote = [_round(server, place) for _ in range(args.rounds)]
        server.cli("cancel", str(hold))

        def stats(rounds: list[tuple[float, str]]) -> dict[str, object]:
            ms = sorted(r[0] for r in rounds)
            return {"p50": round(statistics.median(ms), 1),
                    "p99": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
                    "machines": sorted({r[1] for r in rounds})}  # fmt: skip

        result["submit_to_running_ms"] = {
            "own_machine": stats(local), "other_machine": stats(remote),
        }
        me = psutil.Process(server.proc.pid)  # type: ignore[union-attr]
        shares = cpu_share([me, *agent_processes()], 20)
        result["idle_cpu_share"] = {"server": round(shares[0], 3),
                                    "agents": [round(s, 3) for s in shares[1:]]}  # fmt: skip
        flag = place / "finish"
        ids = [int(server.cli("submit", "--cpus", "1", "--", "sh", "-c",
                              f"while [ ! -e {flag} ]; do sleep 0.5; done").stdout)
               for _ in range(args.jobs)]  # fmt: skip
        wait_for(lambda: all(_job(server, j)["state"] == "RUNNING" for j in ids), 300, 0.5)
        spread = sorted({_job(server, j)["node"] for j in ids})
        server.kill9()
        t0 = time.monotonic()
        server.start(timeout_s=300)
        wait_for(lambda: all(_job(server, j)["state"] == "RUNNING" for j in ids), 300, 0.2)
        result["restart_readopt_s"] = {"jobs": args.jobs, "machines": spread,
                                       "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip
        flag.touch()
        ends = [wait_for(lambda j=j: (x := _job(server, j))["state"] != "RUNNING" and x, 120, 0.2)
                for j in ids]  # fmt: skip
        result["restart_all_completed"] = all(e["state"] == "COMPLETED" for e in ends)
    finally:
        server.stop()
        for orphan in psutil.process_iter(["ppid", "cmdline"]):
            cmd = " ".join(orphan.info["cmdline"] or ())
            if orphan.info["ppid"] == 1 and cmd.startswith("ray::"):
                orphan.kill()  # what a SIGKILLed Ray head leaves (see the test)
    out = with_machine(result, backend="ray")
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
