"""What services' health checks cost, and how long a killed service is away.

1. Round (in process, `services/launch/service_check.py`'s `ServiceHealth`): N (default 50) running
   services, each a real stdlib HTTP server on its own loopback port in this process; one check
   round (`check_once`: every service asked `GET /health` once, 8 at a time) timed 20 times.
   A round runs on the health thread every `GPUYARD_SERVICE_CHECK_S` (3 s): its time is what
   the thread spends out of those seconds.
2. Recovery (a real `gpuyard server` with the default check period and back-off, 3 s and 2 s):
   a service (`gpuyard serve --health /health`) is killed with SIGKILL K times (default 5); from
   each kill, the time until it answers again on the same port (a new pid), and until the
   server reports it `healthy` again (what `serve --wait` and `show` see). The kills come
   after short runs, so the back-off doubles each time (2, 4, 8, ... s): `over_backoff` is
   what the restart adds to it (the requeue, the start, the first healthy check).

    .venv/bin/python bench/services.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import with_machine
from submit import LocalServer, ms

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.launch.service_check import ServiceHealth

SERVICE = """
import os
from http.server import BaseHTTPRequestHandler, HTTPServer
class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        body = str(os.getpid()).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Health).serve_forever()
"""


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def round_cost(services: int, rounds: int = 20) -> dict[str, Any]:
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _Ok) for _ in range(services)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    jobs = [
        Job(
            id=i + 1, owner="ada", state=JobState.RUNNING, submitted_at=0.0,
            started_at=time.time(), gpus=(),
            spec=JobSpec(argv=("serve",), name="s", workdir="/", kind="service",
                         service_port=server.server_address[1], health_path="/health"),
        )
        for i, server in enumerate(servers)
    ]  # fmt: skip
    health = ServiceHealth(JobBook(jobs), lambda job, why: None)
    health.check_once()  # the pool's threads started
    took = []
    for _ in range(rounds):
        began = time.perf_counter()
        health.check_once()
        took.append(time.perf_counter() - began)
    healthy = sum(1 for job in jobs if (h := health.of(job)) is not None and h.state == "healthy")
    health.stop()
    for server in servers:
        server.shutdown()
    assert healthy == services, f"{healthy} of {services} healthy"
    return {
        "services": services,
        "round_p50_ms": ms(statistics.median(took)),
        "round_max_ms": ms(max(took)),
        "per_service_p50_ms": ms(statistics.median(took) / services),
    }


def _pid_at(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return int(answer.read())
    except (OSError, ValueError):
        return None


def _healthy_run(record: dict[str, Any], earlier_runs: int) -> bool:
    """The service runs its run number `earlier_runs + 1` and the server calls it healthy."""
    health = (record.get("service_health") or {}).get("state")
    return (
        record["state"] == "RUNNING"
        and len(record["attempts"]) == earlier_runs
        and (health == "healthy")
    )


def recovery(kills: int) -> dict[str, Any]:
    server = LocalServer(gpus=1, cpus=4).start()
    try:
        (server.workdir / "svc.py").write_text(SERVICE)
        api = server.api()
        job = api.json("POST", "/api/v1/jobs", {
            "command": [sys.executable, "svc.py"], "gpus": 0, "workdir": str(server.workdir),
            "kind": "service", "health_path": "/health",
        })  # fmt: skip
        url = f"{job['service_url']}/health"
        answered, healthy = [], []
        for _ in range(kills):
            while not _healthy_run(api.json("GET", f"/api/v1/jobs/{job['id']}"), len(answered)):
                time.sleep(0.05)
            pid = _pid_at(url)
            assert pid is not None
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            while (again := _pid_at(url)) is None or again == pid:
                time.sleep(0.01)
            answered.append(time.monotonic() - killed)
            while not _healthy_run(api.json("GET", f"/api/v1/jobs/{job['id']}"), len(answered)):
                time.sleep(0.02)
            healthy.append(time.monotonic() - killed)
        return {
            "kills": kills,
            # Kill n comes after n - 1 short runs in a row: back-off 2, 4, 8, ... s.
            "answers_again_s": [round(t, 2) for t in answered],
            "healthy_again_s": [round(t, 2) for t in healthy],
            "over_backoff_p50_s": round(
                statistics.median(t - 2.0 * 2**i for i, t in enumerate(healthy)), 2
            ),
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {
        "bench": "services",
        "round": round_cost(args.services),
        "recovery": recovery(args.kills),
    }
    print(json.dumps(with_machine(result)) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
