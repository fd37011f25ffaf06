"""`gpuyard logs` on a big log: the CLI against curl, and against the CLI of an older tree.

Issue 15: `gpuyard logs J` on a 200 MB log took 7 min 22 s where curl took 0.5 s (the CLI's
HTTP reader copied its buffer on every receive). What it does:
1. a real `gpuyard server` on a free loopback port, one job writing `--mb` MiB of log lines;
2. `curl -o /dev/null` of the log (the baseline: same server, same bytes), then
   `gpuyard logs J > /dev/null` and `gpuyard logs -n 100 J`, each `--runs` times (median), and
   the CLI's peak RSS (getrusage of the child);
3. with `--before REV`: the CLI of that git revision (`git archive`, run with PYTHONPATH) on a
   second job of `--before-mb` MiB (quadratic: 200 MiB would take minutes), and the current
   CLI on the same job, so the ratio is of one run on one machine.

    .venv/bin/python bench/logs.py --json [--mb 200] [--runs 3] [--before REV --before-mb 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from machine import with_machine

ROOT = Path(__file__).resolve().parent.parent
GPUYARD = str(Path(sys.executable).parent / "gpuyard")
LINE = "epoch 12 step 3456 loss 0.123456 lr 0.000300 grad_norm 1.2345 tokens/s 123456.7\n"

# Times one command with its stdout to /dev/null; prints "SECONDS PEAK_RSS_KIB EXIT".
_TIMED = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, state: Path, env: dict[str, str] | None = None) -> None:
        self.state = state
        state.mkdir(parents=True)
        base = env or dict(os.environ)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [GPUYARD, "server", "--port", str(self.port), "--state-dir", str(state),
                "--gpus", "1", "--cpus", "4"]  # fmt: skip
        self.log = open(state.parent / f"server-{self.port}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=base)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.1)
        self.token = (state / "token").read_text().strip()
        self.env = {**base, "GPUYARD_URL": self.url, "GPUYARD_TOKEN": self.token}

    def job_writing(self, mib: int) -> int:
        count = (mib << 20) // len(LINE)
        script = f"yes '{LINE.rstrip()}' | head -n {count}"
        out = subprocess.run([GPUYARD, "submit", "--", "sh", "-c", script], env=self.env,
                             capture_output=True, text=True, check=True)  # fmt: skip
        job_id = int(out.stdout)
        subprocess.run([GPUYARD, "wait", str(job_id)], env=self.env, check=True)
        return job_id

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def timed(argv: list[str], env: dict[str, str], runs: int) -> dict[str, float]:
    """Median wall seconds of `runs` runs, and the largest peak RSS (MiB)."""
    walls, peaks = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _TIMED, *argv], env=env, check=True,
                             capture_output=True, text=True).stdout.split()  # fmt: skip
        if out[2] != "0":
            raise RuntimeError(f"{argv} exited {out[2]}")
        walls.append(float(out[0]))
        peaks.append(int(out[1]) / 1024)
    return {"s": round(statistics.median(walls), 3), "peak_rss_mib": round(max(peaks), 1)}


def old_tree(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True,
                             capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def before_and_after(rev: str, mib: int, server: Server, tmp: Path, runs: int) -> dict[str, Any]:
    """`gpuyard logs` of a `mib` MiB log with the server and CLI of `rev`, then of this tree."""
    old = Server(tmp / "old-state", {**os.environ, "PYTHONPATH": str(old_tree(rev, tmp))})
    try:
        before = timed([GPUYARD, "logs", str(old.job_writing(mib))], old.env, 1)
    finally:
        old.stop()
    after = timed([GPUYARD, "logs", str(server.job_writing(mib))], server.env, runs)
    return {"rev": rev, "mb": mib, "old": before, "new": after,
            "speedup": round(before["s"] / after["s"], 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="MiB of log")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", metavar="REV", help="also time the CLI of this revision")
    parser.add_argument("--before-mb", type=int, default=20, help="MiB of log for --before")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    figures: dict[str, Any] = {"bench": "logs", "mb": args.mb,
                               "cpus": os.cpu_count(), "at": at}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gpuyard-bench-logs-") as tmp:
        server = Server(Path(tmp) / "state")
        try:
            job = server.job_writing(args.mb)
            url = f"{server.url}/api/v1/jobs/{job}/log"
            if shutil.which("curl"):
                auth = f"Authorization: Bearer {server.token}"
                figures["curl"] = timed(["curl", "-sf", "-H", auth, "-o", "/dev/null", url],
                                        server.env, args.runs)  # fmt: skip
            figures["cli"] = timed([GPUYARD, "logs", str(job)], server.env, args.runs)
            figures["cli_tail_100"] = timed([GPUYARD, "logs", "-n", "100", str(job)],
                                            server.env, args.runs)  # fmt: skip
            if "curl" in figures:
                figures["cli_over_curl"] = round(figures["cli"]["s"] / figures["curl"]["s"], 2)
            if args.before:
                figures["before"] = before_and_after(args.before, args.before_mb, server,
                                                     Path(tmp), args.runs)  # fmt: skip
        finally:
            server.stop()
    if args.json:
        print(json.dumps(with_machine(figures)))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
