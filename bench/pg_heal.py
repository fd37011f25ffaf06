"""A PostgreSQL restart under load (issue 22): one server on a database of this bench's own
PostgreSQL, `--clients` SDK clients submitting back to back (keyed, as the SDK does); the
database is stopped (`pg_ctl stop -m fast`), left down `--down-s` seconds, started again.
Figures: the longest time no submit was acknowledged (seconds without writes), the seconds
from the database's return to the server's `/healthz` 200, submits refused (failed after the
client's own retries; target 0: they wait and land), lost (acknowledged, not in the database;
target 0) and made twice (0), and whether the server process lived through it.

    .venv/bin/python bench/pg_heal.py [--down-s 3] [--clients 8] [--json]

Needs Debian's postgresql (the tests' `tests/postgres_server.py` runs it) and psycopg.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

from machine import with_machine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.server import ServerProcess, wait_for
from tests.e2e.test_postgres_heal import Submitters, health, rows
from tests.postgres_server import PostgresServer, find_bin_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--down-s", type=float, default=3.0, help="seconds the database is down")
    ap.add_argument("--clients", type=int, default=8, help="concurrent SDK clients")
    ap.add_argument("--json", action="store_true", help="one JSON line")
    args = ap.parse_args()
    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("pg_heal: PostgreSQL's server is not installed (apt-get install postgresql)")
    pg = PostgresServer(bin_dir)
    pg.start()
    with tempfile.TemporaryDirectory(prefix="gpuyard-pg-heal-") as tmp:
        db = pg.create_database("bench")
        server = ServerProcess(Path(tmp) / "state", "--gpus", "8", "--cpus", "8", "--db", db)
        server.start()
        load = None
        try:
            assert server.proc is not None
            pid = server.proc.pid
            load = Submitters(server, args.clients)
            wait_for(lambda: len(load.acknowledged) >= 100, 60)
            stopped = time.monotonic()
            pg.stop_keeping_data()
            time.sleep(args.down_s)
            pg.start_again()
            back = time.monotonic()
            wait_for(lambda: health(server)[0] == 200, 120, interval_s=0.02)
            healthy_at = time.monotonic()
            before = len(load.acknowledged)
            wait_for(lambda: len(load.acknowledged) >= before + 100, 60)
            load.stop()
            times = sorted(load.acknowledged_at)
            gap_s = max(b - a for a, b in itertools.pairwise(times))
            in_db = {int(row[0]) for row in rows(db, "SELECT id FROM jobs")}
            acked = load.acknowledged
            result = {
                "bench": "pg_heal",
                "database_down_s": args.down_s,
                "clients": args.clients,
                "submits_acknowledged": len(acked),
                "submits_refused": len(load.failed),
                "submits_lost": len(set(acked) - in_db),
                "submits_twice": len(acked) - len(set(acked)),
                "jobs_unacknowledged_in_db": len(in_db - set(acked)),
                "seconds_without_writes": round(gap_s, 2),
                "stop_to_healthy_s": round(healthy_at - stopped, 2),
                "back_to_healthy_s": round(healthy_at - back, 2),
                "same_process": server.proc.poll() is None and server.proc.pid == pid,
                "refusals": load.failed[:3],
            }
        finally:
            if load is not None:
                load.stop()
            server.stop()
            server.kill_jobs()
            pg.stop()
    result = with_machine(result)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
