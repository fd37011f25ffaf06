"""How a server answers while its PostgreSQL is stalled (issue 22): `/healthz` and
`GET /jobs/{id}` (a running job, in the book) latencies during a SIGSTOP of the whole cluster
(postmaster and backends), while other clients keep sending what needs the database (a
history page, a job the book does not keep, keyed submits), which are answered 503 at the
request deadline.

    .venv/bin/python bench/db_stall.py               # a 20 s stall, JSON on stdout
    .venv/bin/python bench/db_stall.py --stall-s 10

A throw-away PostgreSQL (tests/postgres_server.py: Debian's binaries, loopback, fsync on) and a
real `gpuyard server` on it; both are stopped and removed at the end, the cluster always
continued (SIGCONT) first. Target (the issue): p99 of each probe <= 50 ms during the stall.
Needs psycopg and psutil (the test extra).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

from machine import with_machine  # noqa: E402
from tests.e2e.db_stall import request, stalled  # noqa: E402
from tests.e2e.server import ServerProcess, wait_for  # noqa: E402
from tests.postgres_server import PostgresServer, find_bin_dir  # noqa: E402

_PROBE_GAP_S = 0.02  # between two probes on one connection


def _percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    if not ms:
        return {}
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 2), "p99_ms": round(p99, 2),
            "max_ms": round(ms[-1], 2)}  # fmt: skip


def _probe(port: int, token: str, path: str, until: float, out: list[float]) -> None:
    """`path` asked again and again on one keep-alive connection until `until`. A probe still
    unanswered when the stall ends is counted as the time it waited (the stall lasts until
    every probe is done: a server that never answers would hold it for ever)."""
    headers = {"Authorization": f"Bearer {token}"}
    conn = http.client.HTTPConnection("127.0.0.1", port)
    while (now := time.monotonic()) < until:
        began = time.perf_counter()
        conn.timeout = until - now + 1
        try:
            if conn.sock is not None:
                conn.sock.settimeout(conn.timeout)
            conn.request("GET", path, headers=headers)
            answer = conn.getresponse()
            answer.read()
        except TimeoutError:
            out.append(time.perf_counter() - began)
            break
        out.append(time.perf_counter() - began)
        if answer.status != 200:
            raise SystemExit(f"{path} answered {answer.status} during the stall")
        time.sleep(_PROBE_GAP_S)
    conn.close()


def _needs_database(
    port: int, token: str, kind: str, until: float, out: list[tuple[int, float]]
) -> None:
    """Requests of one kind that need the database, one after the other, each on a fresh
    connection: a history page, a job the book does not keep, or a keyed submit."""
    while time.monotonic() < until:
        if kind == "submit":
            key = {"Idempotency-Key": str(uuid.uuid4())}
            answer = request(port, token, "POST", "/api/v1/jobs", timeout_s=120, headers=key,
                             body={"command": ["true"], "workdir": "/tmp"})  # fmt: skip
        else:
            path = "/api/v1/jobs?all=true&limit=200" if kind == "history" else "/api/v1/jobs/999999"
            answer = request(port, token, "GET", path, timeout_s=120)
        out.append((answer.status, answer.seconds))


def run(stall_s: float) -> dict[str, Any]:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL's server is not installed (apt-get install postgresql)")
    pg = PostgresServer(bin_dir)
    pg.start()
    root = Path(tempfile.mkdtemp(prefix="gpuyard-db-stall-"))
    server = ServerProcess(root / "state", "--gpus", "2", "--cpus", "8", "--kill-grace", "1",
                           "--db", pg.create_database("stall"))  # fmt: skip
    release = root / "release"
    try:
        server.start()
        token = (server.state_dir / "token").read_text().strip()
        script = f'echo started; while [ ! -e "{release}" ]; do sleep 0.1; done'
        job = int(server.cli("submit", "--", "sh", "-c", script).stdout)
        log = server.state_dir / "jobs" / str(job) / "output.log"
        wait_for(lambda: log.exists() and "started" in log.read_text(), 60)
        health: list[float] = []
        details: list[float] = []
        refused: list[tuple[int, float]] = []
        with stalled(pg.data):
            until = time.monotonic() + stall_s
            busy = [threading.Thread(target=_needs_database,
                                     args=(server.port, token, kind, until, refused))
                    for kind in ("history", "unknown", "submit")]  # fmt: skip
            probes = [
                threading.Thread(target=_probe, args=(server.port, token, "/healthz", until,
                                                      health)),
                threading.Thread(target=_probe, args=(server.port, token, f"/api/v1/jobs/{job}",
                                                      until, details)),
            ]  # fmt: skip
            for thread in busy:
                thread.start()
            for thread in probes:
                thread.start()
            for thread in probes:
                thread.join()
        for thread in busy:  # a request the stall held answers once the database is back
            thread.join()
        statuses: dict[str, int] = {}
        for status, _ in refused:
            statuses[str(status)] = statuses.get(str(status), 0) + 1
        return {
            "bench": "db_stall",
            "stall_s": stall_s,
            "healthz": _percentiles(health),
            "job_details": _percentiles(details),
            "needs_database": {"statuses": statuses, **_percentiles([s for _, s in refused])},
        }
    finally:
        release.touch()
        server.stop()
        server.kill_jobs()
        pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stall-s", type=float, default=20.0, help="how long the stall lasts")
    args = parser.parse_args()
    print(json.dumps(with_machine(run(args.stall_s))))


if __name__ == "__main__":
    main()
