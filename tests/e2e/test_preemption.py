"""Live preemption with real processes: stopped like a cancel, requeued, restarted with its count;
opt-in (`--preemptible`, the server's `--preemptible-default`), `--no-preempt`, estimated start
times (and what they assume) and `submit --dry-run` through the CLI."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.server import GPUYARD, ServerProcess, free_port, pid_alive, wait_for

# Records each run's restart count, then works until stopped; on SIGTERM it "saves a checkpoint"
# and exits 0, as a well-behaved training script does: it must be resumed, not marked done.
CHECKPOINTING = (
    'echo "$GPUYARD_RESTART_COUNT" >> "$RUNS"; echo $$ > "$PID"; '
    'trap "echo checkpointed >> $RUNS; exit 0" TERM; '
    'if [ "$GPUYARD_RESTART_COUNT" -ge 1 ]; then exit 0; fi; '
    "while :; do sleep 0.1; done"
)


def test_a_higher_priority_job_preempts_and_the_victim_resumes(
    server: ServerProcess, tmp_path: Path
) -> None:
    runs, pid = tmp_path / "runs", tmp_path / "pid"
    victim = server.cli(
        "submit", "--preemptible", "--gpus", "4", "--env", f"RUNS={runs}", "--env", f"PID={pid}",
        "--", "sh", "-c", CHECKPOINTING,
    ).stdout.strip()  # fmt: skip
    wait_for(lambda: pid.exists() and runs.exists())
    first_pid = int(pid.read_text())
    urgent = server.cli("submit", "--gpus", "2", "--priority", "10", "--", "sleep", "1")
    urgent_id = int(urgent.stdout)
    client = server.client()
    requeued = wait_for(lambda: (j := client.job(int(victim)))["restarts"] == 1 and j)
    assert not pid_alive(first_pid), "the preempted job's process survived"
    assert runs.read_text().split() == ["0", "checkpointed"]  # one SIGTERM first, like a cancel
    assert requeued["attained_gpu_s"] > 0
    assert wait_for(lambda: client.job(urgent_id)["state"] == "COMPLETED", timeout_s=20)
    done = wait_for(lambda: (j := client.job(int(victim)))["state"] == "COMPLETED" and j)
    assert runs.read_text().split() == ["0", "checkpointed", "1"]
    assert done["restarts"] == 1
    shown = server.cli("show", victim).stdout
    assert "Restarts: 1 (preempted and requeued 1 time)" in shown


def test_no_preempt_job_keeps_its_gpus_and_the_queue_shows_why_and_when(
    server: ServerProcess, tmp_path: Path
) -> None:
    keep = server.cli("submit", "--gpus", "4", "--no-preempt", "-t", "2h", "--", "sleep", "60")
    client = server.client()
    wait_for(lambda: client.job(int(keep.stdout))["state"] == "RUNNING")
    urgent = int(server.cli("submit", "--gpus", "1", "--priority", "10", "--", "true").stdout)
    behind = int(server.cli("submit", "--gpus", "1", "--", "true").stdout)
    wait_for(lambda: client.job(behind)["reason"] == "Priority")
    assert client.job(int(keep.stdout))["state"] == "RUNNING"
    job = client.job(urgent)
    assert (job["state"], job["reason"]) == ("PENDING", "Resources")
    assert job["estimated_start_at"] is not None  # when the 2 h limit of the blocker ends
    table = server.cli("queue").stdout.splitlines()
    assert "START" in table[0]
    row = next(line for line in table if line.startswith(str(urgent)))
    assert "~" in row and "(Resources)" in row
    assert "Preemptible: no (never stopped" in server.cli("show", keep.stdout.strip()).stdout
    assert row.split()[7] == "no"  # the PREEMPT column


def test_a_job_that_did_not_opt_in_is_not_preempted(server: ServerProcess) -> None:
    """Issue 15: a job without checkpoints, stopped to run another, starts over from zero."""
    client = server.client()
    keep = int(server.cli("submit", "--gpus", "4", "-t", "2h", "--", "sleep", "60").stdout)
    wait_for(lambda: client.job(keep)["state"] == "RUNNING")
    urgent = int(server.cli("submit", "--gpus", "1", "--priority", "10", "--", "true").stdout)
    wait_for(lambda: client.job(urgent)["reason"] == "Resources")
    assert client.job(keep)["state"] == "RUNNING" and client.job(keep)["restarts"] == 0
    assert client.job(keep)["preemptible"] is False
    assert "Preemptible: no" in server.cli("show", str(keep)).stdout


def test_an_admin_can_make_jobs_preemptible_by_default(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "state", "--gpus", "4", "--cpus", "32", "--kill-grace", "1",
                        "--preemptible-default")  # fmt: skip
    srv.start()
    try:
        client = srv.client()
        said_nothing = int(srv.cli("submit", "--gpus", "4", "--", "sleep", "60").stdout)
        kept = int(srv.cli("submit", "--no-preempt", "--", "true").stdout)
        assert client.job(said_nothing)["preemptible"] is True
        assert client.job(kept)["preemptible"] is False
        wait_for(lambda: client.job(said_nothing)["state"] == "RUNNING")
        srv.cli("submit", "--gpus", "1", "--priority", "10", "--", "true")
        wait_for(lambda: client.job(said_nothing)["restarts"] == 1)
    finally:
        srv.stop()
        srv.kill_jobs()


def test_an_estimate_behind_a_job_without_a_limit_says_what_it_assumes(
    server: ServerProcess,
) -> None:
    """Behind a job that is never preempted and has no limit: no estimate (`?`); behind a
    preemptible one: the time `default` would preempt it, marked as such."""
    client = server.client()
    blocker = int(server.cli("submit", "--gpus", "4", "--", "sleep", "60").stdout)
    wait_for(lambda: client.job(blocker)["state"] == "RUNNING")
    waiting = int(server.cli("submit", "--gpus", "1", "-t", "1m", "--", "true").stdout)
    job = wait_for(lambda: (j := client.job(waiting))["reason"] == "Resources" and j)
    assert (job["estimated_start_at"], job["estimate_assumes"]) == (None, None)
    row = next(r for r in server.cli("queue").stdout.splitlines() if r.startswith(str(waiting)))
    assert row.split()[8] == "?"
    server.cli("cancel", str(blocker), str(waiting))
    wait_for(lambda: client.job(blocker)["state"] == "CANCELLED")
    blocker = int(server.cli("submit", "--preemptible", "--gpus", "4", "--", "sleep", "60").stdout)
    wait_for(lambda: client.job(blocker)["state"] == "RUNNING")
    waiting = int(server.cli("submit", "--gpus", "1", "-t", "1m", "--", "true").stdout)
    job = wait_for(lambda: (j := client.job(waiting))["estimated_start_at"] and j)
    assert job["estimate_assumes"] == "preemption"
    row = next(r for r in server.cli("queue").stdout.splitlines() if r.startswith(str(waiting)))
    assert "(preemption)" in row
    assert "if the scheduler preempts a running job" in server.cli("show", str(waiting)).stdout


def test_dry_run_says_when_a_job_would_start_and_queues_nothing(
    server: ServerProcess, tmp_path: Path
) -> None:
    now = server.cli("submit", "--dry-run", "--gpus", "2", "--", "true").stdout
    assert "would start now" in now
    server.cli("submit", "--gpus", "4", "--no-preempt", "-t", "30m", "--", "sleep", "60")
    later = server.cli("submit", "--dry-run", "--gpus", "2", "--", "true").stdout
    assert "would start in about" in later and "nothing was queued" in later
    too_big = server.cli("submit", "--dry-run", "--gpus", "8", "--", "true", check=False)
    assert too_big.returncode != 0
    assert too_big.stderr.count("\n") == 1 and "has 4 GPUs" in too_big.stderr
    assert len(server.client().jobs(all=True)) == 1


def test_the_server_refuses_an_oracle_policy_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [GPUYARD, "server", "--state-dir", str(tmp_path), "--port", str(free_port()),
         "--policy", "srtf-oracle"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "unknown policy 'srtf-oracle'" in result.stderr and "default" in result.stderr
