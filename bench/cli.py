"""CLI benchmark: wall time of the commands people type all day.

Starts its own gpuyard server (free port, temporary state dir, 2 declared GPUs, both held by
`sleep 600` jobs, ~50 jobs in the queue), then runs each command as a subprocess, interleaved
round by round so that load from elsewhere hits them all alike:

- ``gpuyard submit --gpus 1 -- true``   (the job pends)
- ``gpuyard cancel JOB``                  (that job: the queue stays at its size)
- ``gpuyard queue``                       (~50 jobs listed)
- ``gpuyard show JOB``                    (a pending job)
- ``gpuyard --help``                      (the typer app: the slow path)
- the Slurm-named commands (issues 24, 27): ``squeue``, ``squeue -j JOB``, ``sacct -j JOB``,
  ``sbatch job.sh`` (a two-line script with ``#SBATCH`` directives; the job pends),
  ``scancel JOB`` (that job), ``sinfo``, ``scontrol show job JOB``; each one's ratio to
  ``python -c pass`` is reported (target: <= 2.5x, issue 27)
- baselines with the same interpreter: ``python -c pass``, ``python -c "import
  gpuyard.cli.main"`` (the entry point) and ``python -c "import gpuyard.cli.app"`` (typer's app,
  what every command paid before the fast start path); and the floor of any Python client of a
  JSON API: ``python -c "import socket, json"`` and one GET of ``/healthz`` with them alone

The hot commands (submit, cancel, queue, show) must answer in <= 60 ms p50 (`target_ms`).

Reports p50/p90 wall milliseconds of each.  The server and its jobs are killed at the end.

    .venv/bin/python bench/cli.py            # human-readable
    .venv/bin/python bench/cli.py --json     # one JSON line
    sudo .venv/bin/python bench/cli.py --socket /tmp/gy-bench.sock   # over a root server's socket

Standard library + gpuyard only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import with_machine
from submit import (
    LocalServer,
    _signals_raise,
    gpuyard_argv,
    ms,
    occupy_gpus,
    percentile,
)

TARGET_MS = 60  # p50 of each hot command (issue 10)
SLURM_RATIO_TARGET = 2.5  # each Slurm-named command's p50 / python -c pass's (issue 27)
SLURM_COMMANDS = ("squeue", "squeue_job", "sacct_job", "sbatch", "scancel", "sinfo",
                  "scontrol_show_job")  # fmt: skip
# One HTTP GET of /healthz with the standard library's socket and json, nothing else.
FLOOR_GET = (
    "import socket, json, sys\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
    "s.sendall(b'GET /healthz HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')\n"
    "data = b''.join(iter(lambda: s.recv(65536), b''))\n"
    "json.loads(data.split(b'\\r\\n\\r\\n', 1)[1])\n"
)
BATCH_SCRIPT = "#!/bin/sh\n#SBATCH --gpus=1\n#SBATCH -J bench\ntrue\n"


def fill_queue(server: LocalServer, total: int) -> int:
    """Occupy every GPU, then add pending jobs until `total` jobs are queued."""
    holders = occupy_gpus(server)
    api = server.api()
    try:
        for _ in range(max(total - len(holders), 0)):
            api.submit(["true"], 1, str(server.workdir))
        return len(api.json("GET", "/api/v1/jobs"))
    finally:
        api.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    result: dict[str, Any] = {
        "benchmark": "cli",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "n": args.n,
    }
    cli = gpuyard_argv()
    commands = {
        "python_startup": [sys.executable, "-c", "pass"],
        "import_cli": [sys.executable, "-c", "import gpuyard.cli.main"],
        "import_typer_app": [sys.executable, "-c", "import gpuyard.cli.app"],
        # The floor of any Python client of a JSON API: the two stdlib modules it cannot do
        # without (socket pulls enum, json pulls re), and one GET of /healthz over them.
        "import_socket_json": [sys.executable, "-c", "import socket, json"],
        "floor_get": [sys.executable, "-c", FLOOR_GET, "{port}"],
        "help": [*cli, "--help"],
        "queue": [*cli, "queue"],
        "show": [*cli, "show", "{shown}"],
        "submit": [*cli, "submit", "--gpus", "1", "--", "true"],
        "cancel": [*cli, "cancel", "{submitted}"],
        "squeue": [*cli, "squeue"],
        "squeue_job": [*cli, "squeue", "-j", "{shown}"],
        "sacct_job": [*cli, "sacct", "-j", "{shown}"],
        "sbatch": [*cli, "sbatch", "job.sh"],
        "scancel": [*cli, "scancel", "{batched}"],
        "sinfo": [*cli, "sinfo"],
        "scontrol_show_job": [*cli, "scontrol", "show", "job", "{shown}"],
    }
    walls: dict[str, list[float]] = {name: [] for name in commands}
    if args.socket:  # the server inherits it
        os.environ["GPUYARD_SOCKET"] = args.socket
    server = LocalServer(gpus=2, cpus=4, keep=args.keep)
    try:
        server.start()
        result["queue_jobs"] = fill_queue(server, args.queue_jobs)
        (Path(server.workdir) / "job.sh").write_text(BATCH_SCRIPT)
        log(f"server up at {server.url}; {result['queue_jobs']} jobs queued; "
            f"{args.warmup} warm-up + {args.n} rounds ...")  # fmt: skip
        env = server.cli_env()
        if args.socket:  # found, not pointed at: the socket the CLI prefers, no token
            env = {k: v for k, v in env.items() if k not in ("GPUYARD_URL", "GPUYARD_TOKEN")}
            result["transport"] = f"unix socket {args.socket}"
        api = server.api()
        try:
            shown = str(api.json("GET", "/api/v1/jobs")[-1]["id"])
            ids = {"shown": shown, "submitted": "", "batched": "", "port": str(server.port)}
        finally:
            api.close()
        for round_no in range(args.warmup + args.n):
            for name, template in commands.items():
                argv = [arg.format(**ids) for arg in template]
                t0 = time.perf_counter()
                proc = subprocess.run(
                    argv, cwd=server.workdir, env=env, capture_output=True, text=True,
                    check=False,
                )  # fmt: skip
                wall = time.perf_counter() - t0
                if proc.returncode != 0:
                    raise RuntimeError(f"{argv} failed: {proc.stderr.strip()[-500:]}")
                if name == "submit":  # cancelled next, so the queue stays at its size
                    ids["submitted"] = proc.stdout.strip()
                if name == "sbatch":  # `Submitted batch job N`: scancel'd next
                    ids["batched"] = proc.stdout.split()[-1]
                if round_no >= args.warmup:
                    walls[name].append(wall)
    finally:
        server.stop()
    for name, values in walls.items():
        result[f"{name}_p50_ms"] = ms(percentile(values, 50))
        result[f"{name}_p90_ms"] = ms(percentile(values, 90))
    base = result["python_startup_p50_ms"]
    for name in ("submit", "cancel", "queue", "show", "help"):
        result[f"{name}_over_python_startup"] = round(result[f"{name}_p50_ms"] / base, 1)
    for name in (*SLURM_COMMANDS, "import_socket_json", "floor_get"):
        result[f"{name}_over_python_startup"] = round(result[f"{name}_p50_ms"] / base, 2)
    result["target_ms"] = TARGET_MS
    result["slurm_ratio_target"] = SLURM_RATIO_TARGET
    result["slurm_commands_met"] = all(
        result[f"{name}_over_python_startup"] <= SLURM_RATIO_TARGET for name in SLURM_COMMANDS
    )
    result["hot_commands_met"] = all(
        result[f"{name}_p50_ms"] <= TARGET_MS for name in ("submit", "cancel", "queue", "show")
    )
    return result


def human(r: dict[str, Any]) -> str:
    rows = [
        ("gpuyard submit --gpus 1 -- true", "submit"),
        ("gpuyard cancel JOB", "cancel"),
        (f"gpuyard queue ({r['queue_jobs']} jobs)", "queue"),
        ("gpuyard show JOB", "show"),
        ("gpuyard --help", "help"),
        ("gpuyard squeue", "squeue"),
        ("gpuyard squeue -j JOB", "squeue_job"),
        ("gpuyard sacct -j JOB", "sacct_job"),
        ("gpuyard sbatch job.sh", "sbatch"),
        ("gpuyard scancel JOB", "scancel"),
        ("gpuyard sinfo", "sinfo"),
        ("gpuyard scontrol show job JOB", "scontrol_show_job"),
        ("python -c 'import gpuyard.cli.main'", "import_cli"),
        ("python -c 'import gpuyard.cli.app'", "import_typer_app"),
        ("python -c 'import socket, json'", "import_socket_json"),
        ("python: one GET /healthz, socket+json", "floor_get"),
        ("python -c pass", "python_startup"),
    ]
    m = r["machine"]  # with_machine's record of what it ran on
    lines = [
        f"gpuyard CLI wall time, {r['date']}, {m['cpus']} CPUs ({m['cpu_model']}), "
        f"Python {m['python']}, load {m['loadavg_1m_at_start']}, {r['n']} runs each",
        f"  {'command':<40} {'p50 ms':>8} {'p90 ms':>8} {'/ pass':>7}",
    ]
    base = r["python_startup_p50_ms"]
    for label, key in rows:
        lines.append(f"  {label:<40} {r[key + '_p50_ms']:>8.1f} {r[key + '_p90_ms']:>8.1f}"
                     f" {r[key + '_p50_ms'] / base:>7.2f}")  # fmt: skip
    met = "met" if r["hot_commands_met"] else "NOT met"
    lines.append(f"  target: submit, cancel, queue, show <= {r['target_ms']} ms p50: {met}")
    met = "met" if r["slurm_commands_met"] else "NOT met"
    lines.append(f"  target: each Slurm-named command <= {r['slurm_ratio_target']}x "
                 f"python -c pass (p50): {met}")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Wall time of gpuyard CLI commands.")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument("-n", "--n", type=int, default=20, help="timed runs of each (default 20)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    ap.add_argument("--queue-jobs", type=int, default=50, help="jobs in the queue (default 50)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary state dir")
    ap.add_argument(
        "--socket", metavar="PATH",
        help="a root server also listens on this Unix socket; the CLI talks over it, no token",
    )  # fmt: skip
    args = ap.parse_args(argv)
    with _signals_raise():
        result = run(args)
    result = with_machine(result)
    print(json.dumps(result) if args.json else human(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
