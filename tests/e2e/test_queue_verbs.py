"""Slurm's and pueue's everyday verbs on a real server: what `queue` shows of a stopping job,
its filters, format and sort, and hold/release, requeue, update, restart, drain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_ended, wait_for

# Ignores SIGTERM (sleep inherits the ignored disposition): it exits only at SIGKILL.
STUBBORN = "trap '' TERM; echo $$ > {pidfile}; while true; do sleep 0.1; done"


@pytest.fixture
def slow_stop(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server whose jobs get 5 s between SIGTERM and SIGKILL: long enough to look at one."""
    srv = ServerProcess(tmp_path / "state", "--gpus", "2", "--cpus", "8", "--kill-grace", "5")
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def _row(server: ServerProcess, job_id: str) -> str:
    rows = server.cli("queue").stdout.splitlines()
    return next(r for r in rows if r.split()[0] == job_id)


def test_a_cancelled_job_still_exiting_shows_cancelling_while_stored_running(
    slow_stop: ServerProcess, tmp_path: Path
):
    pidfile = tmp_path / "pid"
    job_id = slow_stop.cli("submit", "--", "sh", "-c", STUBBORN.format(pidfile=pidfile)).stdout
    job_id = job_id.strip()
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
    slow_stop.cli("cancel", job_id)
    shown = json.loads(slow_stop.cli("show", job_id, "--json").stdout)
    assert (shown["state"], shown["display_state"]) == ("RUNNING", "CANCELLING")
    assert _row(slow_stop, job_id).split()[3] == "CANCELLING"
    assert "State: CANCELLING" in slow_stop.cli("show", job_id).stdout
    job = wait_ended(slow_stop.client(), job_id)
    assert (job["state"], job["display_state"]) == ("CANCELLED", "CANCELLED")


def _ids(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[1:]]


def test_queue_filters_apply_to_the_live_queue_and_me_is_the_tokens_user(server: ServerProcess):
    first = server.cli("submit", "--gpus", "4", "--name", "big", "--", "sleep", "30").stdout
    second = server.cli("submit", "--gpus", "1", "--name", "small", "--", "sleep", "30").stdout
    first, second = first.strip(), second.strip()
    wait_for(lambda: server.client().job(int(first))["state"] == "RUNNING")
    me = server.client().whoami()["user"]
    assert _ids(server.cli("queue", "--name", "small").stdout) == [second]
    assert _ids(server.cli("queue", "-t", "running").stdout) == [first]
    assert _ids(server.cli("queue", "--state", "PENDING").stdout) == [second]
    assert _ids(server.cli("queue", "-u", "nobody-here").stdout) == []
    assert _ids(server.cli("queue", "--me").stdout) == [first, second]
    assert _ids(server.cli("queue", "-u", me).stdout) == [first, second]
    both = server.cli("queue", "--me", "-u", me, check=False)
    assert both.returncode == 1 and both.stderr.count("\n") == 1 and "give one" in both.stderr


def test_queue_format_and_sort_in_squeues_style(server: ServerProcess):
    low = server.cli("submit", "--gpus", "4", "--name", "low", "--", "sleep", "30").stdout.strip()
    wait_for(lambda: server.client().job(int(low))["state"] == "RUNNING")
    high = server.cli("submit", "--gpus", "1", "--priority", "5", "--name", "high", "--",
                      "sleep", "30").stdout.strip()  # fmt: skip
    out = server.cli("queue", "--format", "%.5i|%j|%T|%b|%l|%R", "--sort", "-p").stdout
    header, *rows = out.splitlines()
    assert [c.strip() for c in header.split("|")] == [
        "JOBID", "NAME", "STATE", "GPUS", "TIME_LIMIT", "NODE:GPUS(REASON)",
    ]  # fmt: skip
    first, second = (row.split("|") for row in rows)
    assert first[0] == high.rjust(5) and second[0] == low.rjust(5)  # %.5i: right-justified
    assert [c.rstrip() for c in first[1:5]] == ["high", "PENDING", "1", "UNLIMITED"]
    assert first[5].rstrip() == "(Resources)" and second[5].endswith(":0,1,2,3")
    assert [c.rstrip() for c in second[1:3]] == ["low", "RUNNING"]
    assert _ids(server.cli("queue", "--sort", "i").stdout) == [low, high]
    assert _ids(server.cli("queue", "-S", "-i").stdout) == [high, low]
    bad = server.cli("queue", "--format", "%Z", check=False)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "%Z" in bad.stderr
    bad = server.cli("queue", "--sort", "q", check=False)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "--sort" in bad.stderr


def test_hold_release_update_requeue_and_restart_from_the_cli(server: ServerProcess):
    blocker = server.cli("submit", "--gpus", "4", "--", "sleep", "30").stdout.strip()
    wait_for(lambda: server.client().job(int(blocker))["state"] == "RUNNING")
    waiting = server.cli("submit", "--gpus", "4", "--", "sleep", "0.1").stdout.strip()
    assert "held" in server.cli("hold", waiting).stdout
    job = server.client().job(int(waiting))
    assert (job["held"], job["reason"]) == (True, "JobHeldUser")
    assert "(JobHeldUser)" in _row(server, waiting)

    out = server.cli("update", waiting, "--time", "10", "--priority", "7", "--gpus", "2").stdout
    assert out == f"job {waiting} updated: 2 GPUs, time limit 10:00, priority 7\n"
    refused = server.cli("update", blocker, "--priority", "1", check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "only a pending job can be updated" in refused.stderr

    server.cli("requeue", blocker)
    requeued = wait_for(lambda: (j := server.client().job(int(blocker)))["restarts"] == 1 and j)
    assert requeued["state"] in ("PENDING", "RUNNING")
    assert server.client().job(int(waiting))["state"] == "PENDING"  # held: not started
    server.cli("cancel", blocker)
    server.cli("release", waiting)
    server.cli("wait", waiting)

    again = server.cli("restart", waiting).stdout
    assert again.strip().isdigit() and again.count("\n") == 1
    new = server.client().job(int(again))
    assert new["restart_of"] == int(waiting) and new["num_gpus"] == 2
    assert new["command"] == ["sleep", "0.1"]
    assert f"RestartOf: {waiting}" in server.cli("show", again.strip()).stdout
    server.cli("wait", again.strip())
    running = server.cli("restart", blocker, check=False)  # cancelled: may run again
    assert running.returncode == 0
    not_done = server.cli("restart", str(int(again) + 5), check=False)
    assert not_done.returncode == 1 and not_done.stderr.count("\n") == 1


def test_admin_drain_lets_the_running_job_finish_unless_now(server: ServerProcess):
    job_id = server.cli("submit", "--gpus", "4", "--", "sleep", "30").stdout.strip()
    job = wait_for(lambda: (j := server.client().job(int(job_id)))["state"] == "RUNNING" and j)
    gpu = str(job["gpus"][0])
    out = server.cli("admin", "drain", gpu).stdout
    assert f"job(s) {job_id} on it finish there" in out
    assert server.client().job(int(job_id))["display_state"] == "RUNNING"
    server.cli("admin", "resume", gpu)
    out = server.cli("admin", "drain", gpu, "--now").stdout
    assert f"job(s) {job_id} on it are stopped and requeued" in out
    requeued = wait_for(lambda: (j := server.client().job(int(job_id)))["restarts"] == 1 and j)
    assert requeued["state"] == "PENDING"  # 4 GPUs wanted, 3 in service
