"""A stopped job's processes get the stop signal once each (issue 15), and it is the one asked for.

Each process of the job counts, in a handler, the signals it receives: the main process, a
child in its process group, and a child that left the group with `setsid`. A second SIGTERM
~8 ms after the first re-entered a checkpoint handler mid-save. Real processes, real server.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.e2e.server import ServerProcess, wait_ended, wait_for

# Python, so a handler runs once per delivered signal (a shell's trap may merge two).
# Every process appends "<role> <signal>" per signal received to $OUT, then exits ~0.3 s after
# its first one (within the 1 s grace: no SIGKILL), so a second signal would be seen.
COUNTER = r"""
import os, signal, sys, time
out, roles = os.environ["OUT"], []
def handler(signum, frame):
    with open(out, "a") as f:
        f.write(f"{roles[-1]} {signum}\n")
    global deadline
    deadline = min(deadline, time.monotonic() + 0.3)
deadline = float("inf")
def run(role):
    roles.append(role)
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, handler)
    with open(out, "a") as f:
        f.write(f"{role} ready\n")
    while time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(0)
if os.fork() == 0:
    run("child")
if os.fork() == 0:
    os.setsid()
    run("escaped")
run("main")
"""


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _signals(path: Path) -> dict[str, list[int]]:
    got: dict[str, list[int]] = {"main": [], "child": [], "escaped": []}
    for line in _lines(path):
        role, what = line.split()
        if what != "ready":
            got[role].append(int(what))
    return got


def _start(server: ServerProcess, tmp_path: Path, *extra: str) -> tuple[str, Path]:
    out = tmp_path / "signals"
    job_id = server.cli(
        "submit", *extra, "--env", f"OUT={out}", "--", sys.executable, "-c", COUNTER
    ).stdout.strip()
    wait_for(lambda: sum(line.endswith("ready") for line in _lines(out)) == 3)
    return job_id, out


def _ended(server: ServerProcess, job_id: str) -> dict[str, object]:
    return wait_ended(server.client(), job_id)


def test_cancel_sends_sigterm_once_to_each_process(server: ServerProcess, tmp_path: Path):
    job_id, out = _start(server, tmp_path)
    server.cli("cancel", job_id)
    assert _ended(server, job_id)["state"] == "CANCELLED"
    time.sleep(0.3)  # a late second signal would have been recorded by now
    assert _signals(out) == {"main": [15], "child": [15], "escaped": [15]}


def test_time_limit_sends_the_stop_signal_once_to_each_process(
    server: ServerProcess, tmp_path: Path
):
    job_id, out = _start(server, tmp_path, "--time", "3s")
    assert _ended(server, job_id)["state"] == "TIMEOUT"
    time.sleep(0.3)
    assert _signals(out) == {"main": [15], "child": [15], "escaped": [15]}


def test_submit_signal_chooses_the_stop_signal(server: ServerProcess, tmp_path: Path):
    job_id, out = _start(server, tmp_path, "--signal", "USR1")
    assert server.client().job(int(job_id))["stop_signal"] == 10
    assert "SIGUSR1" in server.cli("show", job_id).stdout
    server.cli("cancel", job_id)
    assert _ended(server, job_id)["state"] == "CANCELLED"
    time.sleep(0.3)
    assert _signals(out) == {"main": [10], "child": [10], "escaped": [10]}


def test_cancel_signal_overrides_the_jobs_own(server: ServerProcess, tmp_path: Path):
    job_id, out = _start(server, tmp_path, "--signal", "USR1")
    server.cli("cancel", "--signal", "INT", job_id)
    assert _ended(server, job_id)["state"] == "CANCELLED"
    time.sleep(0.3)
    assert _signals(out) == {"main": [2], "child": [2], "escaped": [2]}


def test_a_signal_that_cannot_stop_a_job_is_refused_in_one_line(server: ServerProcess):
    submitted = server.cli("submit", "--signal", "STOP", "--", "true", check=False)
    assert submitted.returncode == 1
    assert submitted.stderr.count("\n") == 1 and "stop_signal STOP" in submitted.stderr
    slurm_form = server.cli("submit", "--signal", "B:USR1@60", "--", "true", check=False)
    assert slurm_form.returncode == 1 and "only the signal" in slurm_form.stderr
    job_id = server.cli("submit", "--", "sleep", "30").stdout.strip()
    refused = server.cli("cancel", "--signal", "NOPE", job_id, check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "gpuyard: signal 'NOPE' is not a signal: give a name (TERM, INT, USR1, USR2, HUP) or a "
        "number"
    )
    assert server.client().job(int(job_id))["state"] == "RUNNING"  # nothing was cancelled
    server.cli("cancel", job_id)
