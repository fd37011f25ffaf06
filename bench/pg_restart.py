"""A standby through a PostgreSQL restart (issue 22): an active server and a `--standby` on
one database of a PostgreSQL server of this bench's own; the database is stopped (`pg_ctl stop
-m fast`), left down `--down-s` seconds and started again; then the active server is killed
(-9). Figures: whether the standby lived through the restart, and the seconds from the kill
to the standby's first accepted submit (target ≤ 5 s).

    .venv/bin/python bench/pg_restart.py [--down-s 3] [--json]   # --down-s 0: no restart

Needs Debian's postgresql (the tests' `tests/postgres_server.py` runs it) and psycopg.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from machine import with_machine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.server import ServerProcess, wait_for
from tests.e2e.test_postgres_takeover import _launch, _serves
from tests.postgres_server import PostgresServer, find_bin_dir


def wait_serves(server: ServerProcess, within_s: float) -> bool:
    """Whether `server` answers /healthz within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if _serves(server):
            return True
        time.sleep(0.05)
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--down-s", type=float, default=3.0, help="seconds the database is down")
    ap.add_argument("--json", action="store_true", help="one JSON line")
    args = ap.parse_args()
    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("pg_restart: PostgreSQL's server is not installed (apt-get install postgresql)")
    pg = PostgresServer(bin_dir)
    pg.start()
    with tempfile.TemporaryDirectory(prefix="gpuyard-pg-restart-") as tmp:
        state = Path(tmp) / "state"
        options = ("--gpus", "2", "--cpus", "8", "--db", pg.create_database("bench"))
        active = ServerProcess(state, *options).start()
        standby = ServerProcess(state, *options, "--standby")
        try:
            _launch(standby)
            wait_for(lambda: "waiting for it to stop" in standby.log.read_text(), 60)
            if args.down_s > 0:  # 0: no restart, the plain takeover after kill -9
                pg.stop_keeping_data()
                time.sleep(args.down_s)  # the outage itself: what is measured lives through it
                pg.start_again()
            assert standby.proc is not None
            survived = standby.proc.poll() is None
            # The restart ended the active server's session and its lock: the active server
            # and the standby both ask for it again, and the standby may win (the active one
            # then exits: bench/pg_heal.py measures the active server's side): said, not hidden.
            serving_before_kill = wait_serves(standby, 3.0)
            active.kill9()
            killed = time.monotonic()
            first_submit_s = None
            if survived:
                wait_for(lambda: _serves(standby), 60, interval_s=0.02)
                standby.cli("submit", "--", "true")
                first_submit_s = round(time.monotonic() - killed, 2)
        finally:
            for server in (active, standby):
                server.stop()
            active.kill_jobs()
            pg.stop()
    result = {
        "database_down_s": args.down_s,
        "standby_survived_restart": survived,
        "standby_serving_before_kill": serving_before_kill,
        "takeover_first_accepted_submit_s": first_submit_s,
    }
    if args.json:
        print(json.dumps(with_machine(result)))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
