"""Chaos, long form (issue 12): many short jobs, many SIGKILLs of the server, then the proof.

The rig is tests/chaos/rig.py (the same as the small form in `make test`): a real server with 4
declared GPUs and the default (preemptive) policy; jobs of 1, 2 and 4 GPUs, shared ones
(--gpu-mem), preemptible and urgent ones, failing ones (exit 7), cancelled ones; GPUs drained
and resumed; the server killed with SIGKILL `--kills` times, half of them at a named crash
point (services/jobs/crashpoints.py), and restarted on the same state dir each time. Then, from
the database and the jobs' own records: acknowledged, lost, duplicated, double-run,
double-booked, untrue final states, kills survived.

    .venv/bin/python bench/chaos.py --jobs 5000 --kills 100 --json

Exit status 1 if any guarantee broke (the problems are printed, with the jobs).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machine import with_machine  # noqa: E402
from tests.chaos.rig import ChaosRig, server_takes_idempotency_keys  # noqa: E402

FIGURES = ("jobs_planned", "acknowledged", "in_flight", "in_flight_committed", "replayed",
           "lost", "duplicated", "double_run", "double_booked", "wrong_state", "not_final",
           "runs", "preempted_or_requeued_runs", "cancels", "drains", "kills_survived",
           "kills_by_point", "idempotent_submits", "elapsed_s")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--rate", type=float, default=6.0, help="submits per second")
    parser.add_argument(
        "--idempotent",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send an Idempotency-Key and resend after a lost reply [when the server takes one]",
    )
    parser.add_argument("--keep", action="store_true", help="keep the state dir and records")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args()
    idempotent = server_takes_idempotency_keys() if args.idempotent is None else args.idempotent
    workdir = Path(tempfile.mkdtemp(prefix="gpuyard-chaos-"))
    say = (lambda m: None) if args.json else (lambda m: print(time.strftime("%T"), m, flush=True))
    rig = ChaosRig(workdir, jobs=args.jobs, kills=args.kills, seed=args.seed,
                   submit_rate_per_s=args.rate, idempotent=idempotent,
                   drain_timeout_s=max(180.0, args.jobs / 4), log=say)  # fmt: skip
    report = rig.run()
    out = {k: v for k, v in report.summary().items() if k in FIGURES}
    out["command"] = "bench/chaos.py " + " ".join(sys.argv[1:])
    if report.problems:
        out["problems"] = report.problems
    if args.json:
        print(json.dumps(with_machine(out)))
    else:
        for key, value in out.items():
            print(f"{key:>28}: {value}")
        print("\n".join(report.summary()["kills"]))
    if args.keep or report.problems:
        print(f"state dir and records kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
